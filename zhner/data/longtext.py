"""Long text: cut it into pieces a model can take, and stitch the pieces' spans back into document offsets.

A text longer than max_len is cut at every sentence end (each sentence a piece of its own, the way a text split into
lines by sentence would be tagged: attention costs grow with the square of a piece's length, so packing sentences into
pieces of max_len made one 20,000-character line ~30x slower than its sentences); a single sentence longer than max_len
is cut into windows of max_len that overlap by `overlap` characters, so an entity near a window edge is seen whole by the
neighbouring window. Stitching keeps, among overlapping candidate spans, the one seen farthest from a window edge
(a span cut by an edge touches it: margin 0), so each entity comes out once, from the window that saw it whole.
"""
from __future__ import annotations

import bisect
import math
import re

# Longest piece `Tagger.predict` tags whole: a longer text is cut at its sentence ends (its over-long sentences into
# windows of this size). The cost per character grows with a piece's length (attention is quadratic): MSRA test text as
# pieces of ~45 / 512 / 2,033 characters took 0.58 / 4.49 / 16.8 CPU s per 20,000 characters with the shipped FLAT model;
# zh-accurate's exported graph took 1.78 / 1.07 / 0.67 CPU s for 20,480 characters as windows of 512 / 256 / 128, 44.5 /
# 13.4 / 4.2 ms a window (benchmarks/speed/window_cost.py, quiet). 512 made a call that carried one window last 54-105
# ms in the service, so every request queued behind it waited that long; 256 keeps such a call near a batch of short
# sentences, and F1 did not fall (benchmarks/accuracy/window_pairs.py).
PIECE_CHARS = 256
LEGACY_PIECE_CHARS = 512  # what a graph exported before its metadata recorded the piece size was cut at
OVERLAP = 32  # characters shared by neighbouring windows inside an over-long sentence (at most a quarter of a window)
# Chinese sentence marks, line breaks, and an English full stop before a space ("Mr. Smith" is cut too: a piece
# boundary inside a sentence only matters for long text, and the stitched spans keep their offsets)
SENTENCE_END = re.compile(r"[。！？!?；;\n]+|…+|\.(?=\s)")


def split_long_text(text: str, max_len: int, overlap: int = 0) -> list[tuple[int, str]]:
    """(offset, chunk) pieces of at most max_len characters covering the text in order: the text itself if it fits,
    else one piece per sentence; a sentence longer than max_len becomes windows of max_len (the last one may be
    shorter) overlapping by `overlap` (< max_len) characters. With overlap 0 the pieces partition the text."""
    if not 0 <= overlap < max_len:
        raise ValueError(f"overlap {overlap} must be in [0, max_len={max_len})")
    if len(text) <= max_len:
        return [(0, text)]
    cuts = [m.end() for m in SENTENCE_END.finditer(text) if m.end() < len(text)] + [len(text)]
    pieces: list[tuple[int, str]] = []
    start = 0
    for cut in cuts:
        if cut - start > max_len:  # one sentence longer than max_len: overlapping windows over it
            pieces.extend((s, text[s:e]) for s, e in _windows(start, cut, max_len, overlap))
        else:
            pieces.append((start, text[start:cut]))
        start = cut
    return pieces


def _windows(start: int, end: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) as windows of `size` characters, each starting `size - overlap` after the previous one."""
    windows = [(start, min(start + size, end))]
    while windows[-1][1] < end:
        s = windows[-1][1] - overlap
        windows.append((s, min(s + size, end)))
    return windows


def stitch(pieces: list[tuple[int, str]], piece_spans: list[list[tuple]]) -> list[tuple]:
    """Spans (start, end, label, *extra) of each piece, in piece offsets -> non-overlapping document spans, sorted, with
    their extra fields (e.g. a confidence) carried along. An edge of a piece counts only where it overlaps a neighbour
    (a window edge inside a sentence); a sentence cut or the text's ends are real boundaries."""
    candidates = []  # (-margin, start, end, label, extra) in document offsets
    for k, ((offset, chunk), spans) in enumerate(zip(pieces, piece_spans)):
        end = offset + len(chunk)
        cut_left = k > 0 and pieces[k - 1][0] + len(pieces[k - 1][1]) > offset
        cut_right = k + 1 < len(pieces) and pieces[k + 1][0] < end
        for s, e, label, *extra in spans:
            s, e = s + offset, e + offset
            margin = min(s - offset if cut_left else math.inf, end - e if cut_right else math.inf)
            candidates.append((-margin, s, e, label, tuple(extra)))
    kept_starts: list[int] = []
    kept: list[tuple] = []  # sorted by start, non-overlapping
    for _, s, e, label, extra in sorted(candidates):
        i = bisect.bisect_left(kept_starts, s)
        if (i > 0 and kept[i - 1][1] > s) or (i < len(kept) and kept[i][0] < e):
            continue  # overlaps a span seen farther from an edge
        kept_starts.insert(i, s)
        kept.insert(i, (s, e, label, *extra))
    return kept


def token_parts(tokens: list[str], sizes: list[int], max_size: int, spaces: list[bool] | None = None) -> list[tuple[int, int]]:
    """[start, end) ranges partitioning a token sequence into parts of at most `max_size` (summing `sizes`, e.g. each
    token's word pieces): the whole sequence if it fits; else one part per sentence, cut where `split_long_text` cuts
    the tokens' text (`spaces`: whether a space follows each token; None: none does), and a sentence still too long
    cut into consecutive parts. A single token larger than max_size is a part of its own (the model names the problem)."""
    if sum(sizes) <= max_size:
        return [(0, len(tokens))]
    text, token_end = "", {}  # token_end: text offset -> the number of tokens ending there
    for i, token in enumerate(tokens):
        text += token
        token_end[len(text)] = i + 1
        text += " " if spaces is not None and spaces[i] else ""
    ends = sorted({token_end[m.end()] for m in SENTENCE_END.finditer(text) if m.end() in token_end} - {len(tokens)})
    parts: list[tuple[int, int]] = []
    start = 0
    for end in ends + [len(tokens)]:
        used = 0
        for i in range(start, end):
            if used + sizes[i] > max_size and used > 0:
                parts.append((start, i))
                start, used = i, 0
            used += sizes[i]
        parts.append((start, end))
        start = end
    return parts

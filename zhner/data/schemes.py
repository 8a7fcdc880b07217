"""Tag schemes (BIO, BIOES, BMES) and the conversion between tags and entity spans.

A span is `(start, end, type)` with `end` exclusive, in character offsets of the sentence.

Two decoders, because the corpora contain malformed sequences (orphan I-/M-/E- in Weibo):
- strict: only well-formed entities count (`B I*` in BIO; `B (I|M)* E | S` in BIOES/BMES), as seqeval's strict mode;
- lenient: fastNLP's reading, where a tag that cannot continue the open entity starts a new one.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

from zhner.errors import ZhnerError

SCHEMES = ("bio", "bioes", "bmes")
Span = tuple[int, int, str]

# The prefix that continues an entity inside it, per scheme.
_INSIDE = {"bio": "I", "bioes": "I", "bmes": "M"}
_PREFIXES = {"bio": {"B", "I"}, "bioes": {"B", "I", "E", "S"}, "bmes": {"B", "M", "E", "S"}}


def split_tag(tag: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''). Accepts '-' or '_' as the separator."""
    if tag == "O":
        return "O", ""
    if len(tag) < 3 or tag[1] not in "-_" or not tag[2:]:
        raise ValueError(f"malformed tag {tag!r} (expected O or PREFIX-TYPE)")
    prefix = tag[0].upper()
    if prefix not in "BIMES":
        raise ValueError(f"unknown tag {tag!r} (prefixes are B, I, M, E, S, or the tag O)")
    return prefix, tag[2:]


def detect_scheme(tags: Iterable[str]) -> str:
    """Guess the scheme from the prefixes that occur. Defaults to BMES when nothing tells them apart."""
    prefixes = {split_tag(t)[0] for t in tags}
    if "M" in prefixes:
        return "bmes"
    if "I" in prefixes:
        return "bioes" if prefixes & {"E", "S"} else "bio"
    if prefixes & {"E", "S"}:
        return "bmes"
    return "bio" if "B" in prefixes else "bmes"


def check_tag(tag: str, scheme: str) -> None:
    """Raise ValueError when `tag` is not a tag of `scheme`."""
    prefix, _ = split_tag(tag)
    if prefix != "O" and prefix not in _PREFIXES[scheme]:
        raise ValueError(f"tag {tag!r} is not a {scheme.upper()} tag")


def tags_to_spans(tags: Sequence[str], scheme: str, strict: bool = True) -> list[Span]:
    """Decode a tag sequence into spans (see the module docstring for strict vs lenient)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tag scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    return _strict_spans(tags, scheme) if strict else _lenient_spans(tags, scheme)


def _lenient_spans(tags: Sequence[str], scheme: str) -> list[Span]:
    inside = _INSIDE[scheme]
    spans: list[list] = []
    prev = "O"
    for i, tag in enumerate(tags):
        prefix, label = split_tag(tag)
        if prefix == "O":
            pass
        elif prefix in ("B", "S"):
            spans.append([i, i + 1, label])
        elif prefix in (inside, "E") and prev in ("B", inside) and spans and spans[-1][2] == label and spans[-1][1] == i:
            spans[-1][1] = i + 1
        else:  # an orphan I-/M-/E- starts a new entity
            spans.append([i, i + 1, label])
        prev = prefix
    return [tuple(s) for s in spans]


def _strict_spans(tags: Sequence[str], scheme: str) -> list[Span]:
    inside = _INSIDE[scheme]
    closes_with_e = scheme != "bio"
    spans: list[Span] = []
    start, label = -1, ""  # the open, so-far well-formed entity; start = -1 when none
    for i, tag in enumerate(tags):
        prefix, lab = split_tag(tag)
        if prefix == inside and start >= 0 and lab == label:
            continue
        if prefix == "E" and start >= 0 and lab == label:
            spans.append((start, i + 1, label))
            start = -1
            continue
        # Anything else ends the open entity; in BIO it was complete, in BIOES/BMES it lacked its E.
        if start >= 0 and not closes_with_e:
            spans.append((start, i, label))
        start = -1
        if prefix == "B":
            start, label = i, lab
        elif prefix == "S":
            spans.append((i, i + 1, lab))
    if start >= 0 and not closes_with_e:
        spans.append((start, len(tags), label))
    return spans


def spans_to_tags(length: int, spans: Iterable[Span], scheme: str) -> list[str]:
    """Encode spans as tags. Overlapping spans are an error (flat NER only)."""
    tags = ["O"] * length
    inside = _INSIDE[scheme]
    for start, end, label in sorted(spans):
        if not 0 <= start < end <= length:
            raise ValueError(f"span ({start}, {end}) is outside a sentence of length {length}")
        if any(t != "O" for t in tags[start:end]):
            raise ValueError(f"span ({start}, {end}, {label}) overlaps another span")
        if scheme == "bio":
            tags[start] = f"B-{label}"
            for i in range(start + 1, end):
                tags[i] = f"I-{label}"
        elif end - start == 1:
            tags[start] = f"S-{label}"
        else:
            tags[start] = f"B-{label}"
            for i in range(start + 1, end - 1):
                tags[i] = f"{inside}-{label}"
            tags[end - 1] = f"E-{label}"
    return tags


def first_violation(tags: Sequence[str], scheme: str) -> int | None:
    """Index of the first tag that breaks the scheme's grammar, or None if the sequence is well-formed."""
    inside = _INSIDE[scheme]
    open_label = None  # label of the entity that must be continued or closed
    for i, tag in enumerate(tags):
        prefix, label = split_tag(tag)
        if prefix in (inside, "E"):
            if open_label != label:
                return i
            if prefix == "E":
                open_label = None
            continue
        if open_label is not None and scheme != "bio":
            return i  # a BIOES/BMES entity was left without its E
        open_label = label if prefix == "B" else None
    if open_label is not None and scheme != "bio":
        return len(tags) - 1
    return None


def convert_tags(tags: Sequence[str], source: str, target: str) -> list[str]:
    """Re-encode a tag sequence in another scheme (through lenient spans, so nothing is dropped)."""
    return spans_to_tags(len(tags), tags_to_spans(tags, source, strict=False), target)


def all_tags(types: Iterable[str], scheme: str) -> list[str]:
    """Every tag of `scheme` over `types`, 'O' first."""
    order = {"bio": "BI", "bioes": "BIES", "bmes": "BMES"}[scheme]
    return ["O"] + [f"{p}-{t}" for t in sorted(set(types)) for p in order]


def validate_tag(tag: str, scheme: str, where: str, line: int) -> None:
    """check_tag, and a type a tag file can carry (`type_problem`), raising ZhnerError with the file and line."""
    try:
        check_tag(tag, scheme)
    except ValueError as exc:
        raise ZhnerError(str(exc), where, line) from None
    problem = type_problem(split_tag(tag)[1]) if tag != "O" else None
    if problem:
        raise ZhnerError(f"tag {tag!r}: its type {problem}", where, line)


@lru_cache(maxsize=4096)  # a corpus has few types, read once per tag
def type_problem(label: str) -> str | None:
    """Why `label` cannot be an entity type, or None: a tag file (CoNLL, BMES) splits its columns at whitespace and
    shows no control or invisible format character, so a type holding one would not read back as written."""
    if not label:
        return "is empty"
    bad = next((c for c in label if c.isspace() or unicodedata.category(c).startswith("C")), None)
    if bad is not None:
        return f"holds U+{ord(bad):04X} ({unicodedata.name(bad, 'a control character')}); a tag file cannot carry it"
    return None


@lru_cache(maxsize=65536)  # called for every token of every prediction; characters repeat
def is_edge_junk(token: str) -> bool:
    """Whether an entity may not begin or end on this token: it is whitespace, control or invisible format characters
    and emoji only. No gold entity of Resume, Weibo, MSRA or CoNLL-2003 begins or ends on one (docs/metrics.md).
    Other symbols are not junk: MSRA writes the zero of years as U+25CB (二○○八), at the end of entities too."""
    return all(c.isspace() or unicodedata.category(c)[0] == "C" or _is_emoji(c) for c in token)


def _is_emoji(char: str) -> bool:
    """Pictographs (U+1F000 and up, U+2600-27BF), their variation selectors and the keycap mark."""
    cp = ord(char)
    if 0xFE00 <= cp <= 0xFE0F or cp == 0x20E3:
        return True
    return unicodedata.category(char) in ("So", "Sk") and (cp >= 0x1F000 or 0x2600 <= cp <= 0x27BF)


def _has_word_character(tokens: Sequence[str]) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for token in tokens for c in token)


def trim_spans(tokens: Sequence[str], spans: Iterable[tuple]) -> list[tuple]:
    """Spans (start, end, type, ...) with the edge tokens that `is_edge_junk` trimmed off; a span left without a letter
    or a digit (nothing, emoji, punctuation only) is dropped: an entity names something. What follows the type (a
    score) is kept as it is."""
    out = []
    for start, end, *rest in spans:
        while start < end and is_edge_junk(tokens[start]):
            start += 1
        while end > start and is_edge_junk(tokens[end - 1]):
            end -= 1
        if _has_word_character(tokens[start:end]):
            out.append((start, end, *rest))
    return out


def trim_tags(tokens: Sequence[str], tags: Sequence[str], scheme: str) -> list[str]:
    """`tags` whose strictly decoded entities are trimmed as `trim_spans` trims them, and whose tags on edge tokens
    outside any entity are O (so no lenient reading starts an entity there); other malformed tags are kept."""
    spans = tags_to_spans(tags, scheme, strict=True)
    kept = trim_spans(tokens, spans)
    out = list(tags)
    for start, end, _ in spans:
        out[start:end] = ["O"] * (end - start)
    for i, token in enumerate(tokens):
        if out[i] != "O" and is_edge_junk(token):
            out[i] = "O"
    for start, end, label in kept:
        out[start:end] = spans_to_tags(end - start, [(0, end - start, label)], scheme)
    return out

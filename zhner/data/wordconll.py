"""English (or any word-level) CoNLL files: `WORD ... TAG`, one word per line, the tag in the LAST column.

This is the layout of CoNLL-2003 (`TOKEN POS CHUNK NER`) and of most English tagging data: any number of
whitespace-separated columns >= 2, the same number on every line of a file, a blank line between sentences.
`-DOCSTART-` lines mark document boundaries; they are no sentence, but they do end the sentence before them.

A file in IOB1 (an entity may begin with I-; B- only separates two adjacent entities of one type, as in the original
CoNLL-2003 release) is converted to BIO (IOB2) on reading: every I-X that begins an entity becomes B-X. Whether a file
is IOB1 is decided once for the whole file (`is_iob1`): in IOB1 most entities begin with I-, in IOB2 every well-formed
one begins with B-. An IOB2 file is read as it is, so its stray I- tags stay malformed and strict decoding drops them,
as seqeval's strict mode does (the copy in shared/data is IOB2). A file scored against a gold file is read in the
gold's encoding, never detected on its own (zhner.evaluate.metrics.file_scorer). The number of tags converted is logged.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from zhner.data.example import Example
from zhner.data.schemes import convert_tags, split_tag
from zhner.errors import ZhnerError

log = logging.getLogger(__name__)

DOCSTART = "-DOCSTART-"


def is_docstart(line: str) -> bool:
    """Whether a line is a CoNLL document marker (`-DOCSTART- -X- -X- O`)."""
    return line.split(maxsplit=1)[:1] == [DOCSTART]


def parse_word_columns(path: Path, lines: list[str], labelled: bool = True) -> list[Example]:
    """The sentences of a word-level CoNLL file, tags as written (see `iob1_to_bio` for an IOB1 file).

    Every line of a file must have the number of columns its first line has, so that a shifted or missing column is
    caught at its line rather than silently read as a tag.
    """
    sentences: list[Example] = []
    words: list[str] = []
    tags: list[str] = []
    start, width, width_line = 0, None, 0
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        if not line.strip() or is_docstart(line):
            if words:
                sentences.append(_sentence(words, tags if labelled else None, start))
            words, tags = [], []
            continue
        fields = line.split()
        if width is None:
            width, width_line = len(fields), lineno
            if labelled and width < 2:
                raise ZhnerError(f"malformed line {line[:40]!r}: expected WORD ... TAG (2 or more columns)", path, lineno)
        elif len(fields) != width:
            raise ZhnerError(
                f"malformed line {line[:40]!r}: {len(fields)} columns, but line {width_line} has {width}", path, lineno
            )
        if not words:
            start = lineno
        words.append(fields[0])
        if labelled:
            tags.append(_checked_tag(fields[-1], path, lineno))
    if words:
        sentences.append(_sentence(words, tags if labelled else None, start))
    return sentences


def _checked_tag(tag: str, path: Path, lineno: int) -> str:
    try:
        prefix, _ = split_tag(tag)
    except ValueError as exc:
        raise ZhnerError(str(exc), path, lineno) from None
    if prefix not in "BIO":
        raise ZhnerError(f"tag {tag!r} is not a BIO/IOB1 tag (word-level CoNLL files use B-, I- and O)", path, lineno)
    return tag


def _sentence(words: list[str], tags: list[str] | None, line: int) -> Example:
    """Words are separated by one space in the text an example stands for (CoNLL keeps no original spacing)."""
    spaces = [True] * (len(words) - 1) + [False]
    return Example(words, tags, spaces=spaces, line=line)


def is_iob1(sentences: list[Example]) -> bool:
    """Whether labelled sentences are IOB1: more entities begin with I- (after O or another type) than with B-.
    In IOB1, B- marks only the second of two adjacent entities of one type; in IOB2 every entity begins with B-, and an
    I- that begins one is an error (a prediction's, typically), too rare to outnumber the B- tags."""
    begins_inside = begins = 0
    for sent in sentences:
        previous = ""  # the type of the previous tag; "" after O
        for tag in sent.tags or []:
            prefix, label = split_tag(tag)
            begins += prefix == "B"
            begins_inside += prefix == "I" and label != previous
            previous = label
    return begins_inside > begins


def iob1_to_bio(sentences: list[Example], path: Path) -> list[Example]:
    """Re-encode IOB1 sentences as BIO: the lenient BIO reading of IOB1 tags gives exactly its entities."""
    out, changed = [], 0
    for sent in sentences:
        tags = convert_tags(sent.tags, "bio", "bio")
        diff = sum(a != b for a, b in zip(tags, sent.tags))
        if diff:
            changed += diff
            sent = replace(sent, tags=tags)
        out.append(sent)
    if changed:
        log.info("%s: %d I- tags begin an entity (IOB1); converted to B- (BIO)", path, changed)
    return out

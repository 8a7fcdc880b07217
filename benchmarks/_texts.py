"""Texts the benchmarks share (imported as `_texts`: a benchmark's own directory is on sys.path when it runs)."""
from __future__ import annotations


def long_text(chars: int) -> str:
    """MSRA test sentences joined until `chars` characters, cut there: one long text of real sentences."""
    from zhner.data.corpus import read_corpus  # imported here: load_test.py's client needs zhner only for this text
    from zhner.data.registry import find_file

    text = ""
    for sentence in read_corpus(find_file("msra", "test")).sentences:
        text += sentence.text
        if len(text) >= chars:
            break
    return text[:chars]

"""Lexicon matching without pyahocorasick: every occurrence of every word, as zhner.lexicon.Lexicon.match finds them.

A set of the words and a set of their proper prefixes: from each start position the match grows one character at a time
while the text so far is a prefix of some word, so the work per character is the length of the longest word that starts
there, not the lexicon's longest word.
"""
from __future__ import annotations

from pathlib import Path

from zhner.fileio import LEXICON_FILE, read_text

Match = tuple[int, int, str]  # (start, end exclusive, word)


class WordMatcher:
    def __init__(self, words: list[str]):
        self.ordered = list(words)  # as lexicon.txt lists them: the order vocab.json's word type codes follow
        self.words = frozenset(words)
        self.prefixes = frozenset(w[:k] for w in self.words for k in range(1, len(w)))

    @classmethod
    def load(cls, path: Path) -> "WordMatcher":
        """A model directory's lexicon.txt (one word per line, as Lexicon.save writes it)."""
        text = read_text(path, LEXICON_FILE, missing="missing lexicon file of a lattice model")
        return cls([w for w in (line.strip() for line in text.split("\n")) if w])

    def match(self, text: str) -> list[Match]:
        """Every occurrence of a word in `text` as (start, end_exclusive, word), sorted by (start, end)."""
        found = []
        words, prefixes = self.words, self.prefixes
        for start in range(len(text)):
            end = start + 1
            while end <= len(text):
                piece = text[start:end]
                if piece in words:
                    found.append((start, end, piece))
                if piece not in prefixes:
                    break
                end += 1
        return found

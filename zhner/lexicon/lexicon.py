"""A word lexicon and fast matching of its words in sentences (for lattice models such as FLAT).

Matching uses an Aho-Corasick automaton (pyahocorasick): one pass over the text finds every occurrence of every
word, overlapping and nested ones included, in time linear in the text length plus the number of matches.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from pathlib import Path

import ahocorasick

from zhner.errors import ZhnerError
from zhner.fileio import atomic_open
from zhner.lexicon.vectors import is_word2vec_header, iter_lines, jieba_dir

Match = tuple[int, int, str]  # (start, end exclusive, word)

_WHITESPACE = re.compile(r"\s")
_FIRST_COLUMN = re.compile(r"[ \t]")


class Lexicon:
    """A set of words (deduplicated, sorted) that can be matched in text.

    Words shorter than `min_len` are dropped (FLAT uses words of >= 2 characters; single characters are already
    the model's tokens). Words containing whitespace are dropped too: the file formats hold one word per line.
    """

    def __init__(self, words: Iterable[str], min_len: int = 2, name: str = "custom"):
        self.min_len = min_len
        self.name = name
        kept = {w.strip() for w in words}
        self.words: list[str] = sorted(w for w in kept if len(w) >= max(min_len, 1) and not _WHITESPACE.search(w))
        self._set = frozenset(self.words)
        self._automaton: ahocorasick.Automaton | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._set

    def __iter__(self):
        return iter(self.words)

    def __repr__(self) -> str:
        return f"Lexicon(name={self.name!r}, words={len(self.words)}, min_len={self.min_len})"

    # the automaton is rebuilt lazily after unpickling (e.g. in DataLoader workers) instead of being copied
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_automaton"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def max_len(self) -> int:
        return max(map(len, self.words), default=0)

    # -- matching ------------------------------------------------------------------------------------------------
    def _get_automaton(self) -> ahocorasick.Automaton:
        if self._automaton is None:
            with self._lock:  # build once even if several threads match at the same time
                if self._automaton is None:
                    automaton = ahocorasick.Automaton()
                    for word in self.words:
                        automaton.add_word(word, (len(word), word))
                    automaton.make_automaton()
                    self._automaton = automaton
        return self._automaton

    def match(self, text: str) -> list[Match]:
        """Every occurrence of a lexicon word in `text` as (start, end_exclusive, word), sorted by (start, end)."""
        if not text or not self.words:
            return []
        # pyahocorasick reports the index of a match's last character
        found = [(end + 1 - n, end + 1, word) for end, (n, word) in self._get_automaton().iter(text)]
        found.sort()
        return found

    def match_many(self, texts: Iterable[str]) -> list[list[Match]]:
        return [self.match(text) for text in texts]

    def restrict(self, texts: Iterable[str]) -> "Lexicon":
        """The lexicon of only the words that occur in `texts` (small enough to ship inside a model directory)."""
        found = {word for text in texts for _, _, word in self.match(text)}
        return Lexicon(found, min_len=self.min_len, name=self.name)

    # -- files ---------------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """One word per line, UTF-8, written atomically."""
        with atomic_open(path) as handle:
            handle.write("".join(f"{w}\n" for w in self.words))

    @classmethod
    def load(cls, path: str | Path) -> "Lexicon":
        """Read a lexicon written by `save` (every word kept, whatever its length; an empty file is an empty lexicon)."""
        path = Path(path)
        words = [line.strip() for _, line in iter_lines(path)]
        return cls((w for w in words if w), min_len=1, name=path.stem)

    @classmethod
    def from_file(cls, path: str | Path, min_len: int = 2, name: str | None = None) -> "Lexicon":
        """A word list (the first space/tab-separated column of each line; blank lines skipped), e.g. jieba's dict.txt,
        or a word2vec text file (its "N D" header line is detected and skipped; the tokens are the words)."""
        path = Path(path)
        words: list[str] = []
        first: tuple[int, str] | None = None
        header_checked = False
        for lineno, line in iter_lines(path):
            if not line.strip():
                continue
            if not header_checked:
                if first is None:
                    first = (lineno, line)
                    continue
                header_checked = True
                if is_word2vec_header(first[1], line) is None:
                    words.append(_first_column(first[1]))
            words.append(_first_column(line))
        if not header_checked and first is not None and is_word2vec_header(first[1], None) is None:
            words.append(_first_column(first[1]))  # a one-line word list
        if first is None:
            raise ZhnerError("the lexicon file is empty", path)
        lexicon = cls(words, min_len=min_len, name=name or path.name)
        if not lexicon.words:
            raise ZhnerError(f"the lexicon file has no words of length >= {min_len}", path)
        return lexicon

    @classmethod
    def from_jieba(cls, min_len: int = 2) -> "Lexicon":
        """The dictionary of the installed jieba package (`jieba/dict.txt`, 349k words; 337k of length >= 2)."""
        path = jieba_dir() / "dict.txt"
        if not path.is_file():
            raise ZhnerError("the installed jieba package has no dict.txt", path)
        return cls.from_file(path, min_len=min_len, name="jieba")


def _first_column(line: str) -> str:
    # split on ASCII space/tab only, so a token such as U+3000 stays a (dropped) whitespace word, not a number
    return _FIRST_COLUMN.split(line.strip(" \t"), maxsplit=1)[0]

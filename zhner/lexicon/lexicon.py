"""A word lexicon and fast matching of its words in sentences (for lattice models such as FLAT).

Matching uses an Aho-Corasick automaton (pyahocorasick): one pass over the text finds every occurrence of every
word, overlapping and nested ones included, in time linear in the text length plus the number of matches.
Building it for the shipped model's 337k words takes seconds, so a built automaton is kept in the user cache
(`$ZHNER_CACHE/automata` or `~/.cache/zhner/automata`), named by a hash of the words, and read back in a fraction of
that; a cache that cannot be read or written is skipped, never an error.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path
from typing import IO

import ahocorasick

from zhner.errors import ZhnerError
from zhner.fileio import LEXICON_FILE, atomic_open, read_bytes
from zhner.lexicon.lac import jieba_dir
from zhner.lexicon.word2vec import is_word2vec_header, iter_lines

Match = tuple[int, int, str]  # (start, end exclusive, word)

_WHITESPACE = re.compile(r"\s")
_FIRST_COLUMN = re.compile(r"[ \t]")
_SPACE_BUT_NEWLINE = re.compile(r"[^\S\n]")
CACHE_MIN_WORDS = 20_000  # smaller lexicons build in well under 0.1 s: not worth a cache file


class Lexicon:
    """A set of words (deduplicated, sorted) that can be matched in text.

    Words shorter than `min_len` are dropped (FLAT uses words of >= 2 characters; single characters are already
    the model's tokens). Words containing whitespace are dropped too: the file formats hold one word per line.
    """

    def __init__(self, words: Iterable[str], min_len: int = 2, name: str = "custom", max_word_len: int | None = None):
        self.min_len = min_len
        self.name = name
        longest = max_word_len or float("inf")
        kept = {w.strip() for w in words}
        self.words: list[str] = sorted(
            w for w in kept if max(min_len, 1) <= len(w) <= longest and not _WHITESPACE.search(w)
        )
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
                    self._automaton = cached_automaton(self.words)
        return self._automaton

    def match(self, text: str) -> list[Match]:
        """Every occurrence of a lexicon word in `text` as (start, end_exclusive, word), sorted by (start, end)."""
        if not text or not self.words:
            return []
        # pyahocorasick reports the index of a match's last character, and the word's length (STORE_LENGTH)
        found = [(end + 1 - n, end + 1, text[end + 1 - n : end + 1]) for end, n in self._get_automaton().iter(text)]
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
            self.write(handle)

    def write(self, handle: IO[str]) -> None:
        """One word per line, to an open text file."""
        handle.write("".join(f"{w}\n" for w in self.words))

    @classmethod
    def load(cls, path: str | Path) -> "Lexicon":
        """Read a lexicon written by `save` (every word kept, whatever its length; an empty file is an empty lexicon)."""
        path = Path(path)
        fast = _read_saved(path)
        if fast is not None:
            return fast
        words = [line.strip() for _, line in iter_lines(path)]
        return cls((w for w in words if w), min_len=1, name=path.stem)

    @classmethod
    def _from_sorted(cls, words: list[str], name: str) -> "Lexicon":
        """A lexicon of words already sorted, unique, non-empty and without whitespace (what `save` writes)."""
        lexicon = cls.__new__(cls)
        lexicon.min_len, lexicon.name, lexicon.words, lexicon._set = 1, name, words, frozenset(words)
        lexicon._automaton, lexicon._lock = None, threading.Lock()
        return lexicon

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        min_len: int = 2,
        name: str | None = None,
        max_word_len: int | None = None,
        min_freq: int | None = None,
    ) -> "Lexicon":
        """A word list (the first space/tab-separated column of each line; blank lines skipped), e.g. jieba's dict.txt,
        or a word2vec text file (its "N D" header line is detected and skipped; the tokens are the words).
        `max_word_len` drops longer words; `min_freq` keeps words whose count (the second column, as in jieba's
        "WORD COUNT TAG" lines) is at least that: a list without counts is then an error naming its line."""
        path = Path(path)
        rows: list[tuple[int, str]] = []
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
                    rows.append(first)
                elif min_freq is not None:
                    raise ZhnerError("embeddings.lexicon_min_freq needs a word list with counts; this is a word2vec "
                                     "file", path, first[0])
            rows.append((lineno, line))
        if not header_checked and first is not None and is_word2vec_header(first[1], None) is None:
            rows.append(first)  # a one-line word list
        if first is None:
            raise ZhnerError("the lexicon file is empty", path)
        if min_freq is not None:
            rows = [(lineno, line) for lineno, line in rows if _count(line, path, lineno) >= min_freq]
        words = [_first_column(line) for _, line in rows]
        lexicon = cls(words, min_len=min_len, name=name or path.name, max_word_len=max_word_len)
        if not lexicon.words:
            kept = f"of length {min_len} to {max_word_len}" if max_word_len else f"of length >= {min_len}"
            raise ZhnerError(f"the lexicon file has no words {kept}" + (f" and count >= {min_freq}" if min_freq else ""), path)
        return lexicon

    @classmethod
    def from_jieba(cls, min_len: int = 2, max_word_len: int | None = None, min_freq: int | None = None) -> "Lexicon":
        """The dictionary of the installed jieba package (`jieba/dict.txt`, 349k words; 337k of length >= 2)."""
        path = jieba_dir() / "dict.txt"
        if not path.is_file():
            raise ZhnerError("the installed jieba package has no dict.txt", path)
        return cls.from_file(path, min_len=min_len, name="jieba", max_word_len=max_word_len, min_freq=min_freq)


def _read_saved(path: Path) -> Lexicon | None:
    """The lexicon of a file exactly as `save` writes it (plain UTF-8, sorted unique words, one per line), read in one
    piece: 8x faster than line by line on the shipped 337k words. None for anything else (compressed, CRLF, a BOM,
    whitespace, unsorted): the general reader takes those, with its line-numbered errors."""
    try:
        text = read_bytes(path, LEXICON_FILE).decode("utf-8")  # a FIFO, a device or an oversized file: an error
    except UnicodeDecodeError:
        return None
    if not text or not text.endswith("\n") or _SPACE_BUT_NEWLINE.search(text) or text.startswith("\ufeff"):
        return None
    words = text[:-1].split("\n")
    if "" in words or any(a >= b for a, b in zip(words, words[1:])):
        return None
    return Lexicon._from_sorted(words, path.stem)


def automaton_cache_dir() -> Path:
    env = os.environ.get("ZHNER_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "zhner") / "automata"


def _build(words: list[str]) -> ahocorasick.Automaton:
    automaton = ahocorasick.Automaton(ahocorasick.STORE_LENGTH)  # a match's word is the text's slice: store its length
    for word in words:
        automaton.add_word(word)
    automaton.make_automaton()
    return automaton


def _no_objects(_: bytes) -> None:
    raise ValueError("an automaton of word lengths holds no objects")  # so loading a cache file never unpickles


def cached_automaton(words: list[str]) -> ahocorasick.Automaton:
    """The automaton of `words` (sorted), read from the user cache when a matching one is there, else built and stored."""
    if len(words) < CACHE_MIN_WORDS:
        return _build(words)
    digest = hashlib.sha256("\n".join(words).encode("utf-8")).hexdigest()[:32]
    path = automaton_cache_dir() / f"{digest}-pyahocorasick{version('pyahocorasick')}.ac"
    try:
        if not path.is_file():  # nothing there, or a FIFO or device planted in the cache (pyahocorasick would read it)
            raise FileNotFoundError(path)
        automaton = ahocorasick.load(str(path), _no_objects)
        if automaton.kind == ahocorasick.AHOCORASICK and len(automaton) == len(words):
            return automaton
    except (OSError, ValueError, EOFError, MemoryError):
        pass
    automaton = _build(words)
    try:  # written to a temporary name and renamed, so a reader never sees half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".partial")
        os.close(handle)
        try:
            automaton.save(partial)
            os.replace(partial, path)
        finally:
            Path(partial).unlink(missing_ok=True)
    except OSError:
        pass  # a read-only or full home: match without a cache
    return automaton


def _count(line: str, path: Path, lineno: int) -> int:
    """The second column of a "WORD COUNT ..." line."""
    columns = _FIRST_COLUMN.split(line.strip(" \t"))
    columns = [c for c in columns if c]
    if len(columns) < 2 or not columns[1].isdigit():
        raise ZhnerError("embeddings.lexicon_min_freq needs a count after each word (WORD COUNT ...)", path, lineno)
    return int(columns[1])


def _first_column(line: str) -> str:
    # split on ASCII space/tab only, so a token such as U+3000 stays a (dropped) whitespace word, not a number
    return _FIRST_COLUMN.split(line.strip(" \t"), maxsplit=1)[0]

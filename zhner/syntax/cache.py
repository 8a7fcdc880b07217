"""Parse once: `add_heads` fills `Example.heads` through a parser and a `ParseCache`, and reports how long parsing took.

The cache is a directory holding `heads.jsonl`: one {"key", "heads"} record per sentence, keyed by a SHA-1 of the
parser's name, the text and the token boundaries (the same text tokenised differently needs other heads). New
records are appended, so a rerun -- or a second run on the same data -- parses nothing again.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from zhner.data.example import Example
from zhner.errors import ZhnerError
from zhner.fileio import append_jsonl, read_jsonl_cache
from zhner.syntax.distance import check_heads
from zhner.syntax.parsers import Parser

FILE = "heads.jsonl"


def parse_cache_dir() -> Path:
    """The default parse cache: `$ZHNER_PARSE_CACHE` or `~/.cache/zhner/parses`."""
    env = os.environ.get("ZHNER_PARSE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "zhner" / "parses"


def parse_key(parser_name: str, example: Example) -> str:
    payload = "\x1e".join([parser_name, example.text, "\x1f".join(example.tokens)])
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()


class ParseCache:
    """heads per sentence in `directory/heads.jsonl` (created on the first `save`)."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / FILE
        self.heads: dict[str, list[int]] = {}
        self.new: dict[str, list[int]] = {}
        read_jsonl_cache(self.path, self._add, "not a parse-cache record (delete the file to parse again)")

    def _add(self, record: dict) -> None:
        self.heads[record["key"]] = [int(h) for h in record["heads"]]

    def get(self, key: str) -> list[int] | None:
        return self.heads.get(key)

    def put(self, key: str, heads: list[int]) -> None:
        self.heads[key] = self.new[key] = list(heads)

    def save(self) -> None:
        if not self.new:
            return
        append_jsonl(self.path, ({"key": key, "heads": heads} for key, heads in self.new.items()))
        self.new = {}

    def __len__(self) -> int:
        return len(self.heads)


@dataclass
class ParseStats:
    sentences: int = 0  # examples seen
    kept: int = 0  # already had heads
    cached: int = 0  # heads from the cache
    parsed: int = 0  # parsed now
    seconds: float = 0.0  # parsing time (the parser's load not included)

    @property
    def seconds_per_1000(self) -> float:
        return 1000 * self.seconds / self.parsed if self.parsed else 0.0


def parse_report(stats: ParseStats, parser_name: str = "parser") -> str:
    """One log line: e.g. "parse spacy: 1,000 sentences: 900 parsed (2.1 s per 1,000), 100 cached, 0 given"."""
    return (
        f"parse {parser_name}: {stats.sentences:,} sentences: {stats.parsed:,} parsed"
        + (f" ({stats.seconds_per_1000:.1f} s per 1,000)" if stats.parsed else "")
        + f", {stats.cached:,} cached, {stats.kept:,} given"
    )


def add_heads(examples: Iterable[Example], parser: Parser, cache: ParseCache | None = None, batch: int = 1000) -> ParseStats:
    """Fill `heads` of every example that lacks them (examples with heads are kept), from the cache when it has the
    sentence and else by parsing in batches of `batch`; new parses go into the cache, which is saved after each batch.
    An iterable of corpora (each iterating over examples) works too."""
    stats = ParseStats()
    todo: list[tuple[Example, str]] = []
    for ex in _flatten(examples):
        stats.sentences += 1
        if ex.heads is not None:
            if len(ex.heads) != len(ex.tokens):
                raise ZhnerError(f"{len(ex.heads)} heads for {len(ex.tokens)} tokens", f"line {ex.line}")
            stats.kept += 1
            continue
        key = parse_key(parser.name, ex)
        heads = cache.get(key) if cache is not None else None
        if heads is not None and len(heads) == len(ex.tokens):
            ex.heads = list(heads)
            stats.cached += 1
        else:
            todo.append((ex, key))
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        t0 = time.perf_counter()
        parsed = parser.parse([ex for ex, _ in chunk])
        stats.seconds += time.perf_counter() - t0
        for (ex, key), heads in zip(chunk, parsed):
            check_heads(heads, f"{parser.name} (line {ex.line})")
            ex.heads = list(heads)
            if cache is not None:
                cache.put(key, heads)
        stats.parsed += len(chunk)
        if cache is not None:
            cache.save()
    return stats


def _flatten(items: Iterable) -> Iterable[Example]:
    for item in items:
        if isinstance(item, Example):
            yield item
        else:  # a corpus (or any iterable of examples)
            yield from item

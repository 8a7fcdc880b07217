"""Translate once: `fill_translations` fills `Example.translation` through a translator and a `TranslationCache`.

The cache is a JSONL file of {"translator", "text", "translation"} records, keyed by (translator name, text); new records
are appended, so a rerun translates nothing again. Default location: `$ZHNER_TRANSLATION_CACHE` (a file) or
`~/.cache/zhner/translations.jsonl`; a run may keep its own beside it.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from zhner.data.example import Example
from zhner.fileio import append_jsonl, read_jsonl_cache
from zhner.translate.base import Translator


def translation_cache_path() -> Path:
    env = os.environ.get("ZHNER_TRANSLATION_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "zhner" / "translations.jsonl"


class TranslationCache:
    """(translator name, text) -> translation, read from and appended to one JSONL file (created on the first save)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.table: dict[tuple[str, str], str] = {}
        self.new: dict[tuple[str, str], str] = {}
        read_jsonl_cache(self.path, self._add, "not a translation-cache record (delete the file to translate again)")

    def _add(self, r: dict) -> None:
        if not all(isinstance(r[k], str) for k in ("translator", "text", "translation")):
            raise TypeError
        self.table[(r["translator"], r["text"])] = r["translation"]

    def get(self, translator: str, text: str) -> str | None:
        return self.table.get((translator, text))

    def put(self, translator: str, text: str, translation: str) -> None:
        self.table[(translator, text)] = self.new[(translator, text)] = translation

    def save(self) -> None:
        if not self.new:
            return
        records = ({"translator": n, "text": t, "translation": tr} for (n, t), tr in self.new.items())
        append_jsonl(self.path, records)
        self.new = {}

    def __len__(self) -> int:
        return len(self.table)


@dataclass
class TranslationStats:
    count: int = 0  # examples seen
    kept: int = 0  # already had a translation
    cached: int = 0  # from the cache
    translated: int = 0  # translated now
    empty: int = 0  # examples whose translation (whatever its source) is ""
    seconds: float = 0.0  # translating time (the translator's load not included)

    @property
    def per_second(self) -> float:
        return self.translated / self.seconds if self.seconds else 0.0

    @property
    def coverage(self) -> float:
        """The share of examples with a non-empty translation."""
        return (self.count - self.empty) / self.count if self.count else 0.0


def translation_report(stats: TranslationStats, name: str = "translator") -> str:
    """One log line: "translate cedict: 1,000 sentences: 900 translated (350.2/s), 100 cached, 0 given; coverage 99.8%"."""
    return (
        f"translate {name}: {stats.count:,} sentences: {stats.translated:,} translated"
        + (f" ({stats.per_second:.1f}/s)" if stats.translated else "")
        + f", {stats.cached:,} cached, {stats.kept:,} given; coverage {100 * stats.coverage:.1f}%"
    )


def fill_translations(
    examples: Iterable, translator: Translator, cache: TranslationCache | None = None, batch: int = 256
) -> TranslationStats:
    """Fill `translation` of every example that lacks one (None; "" counts as given: known to be missing), from the
    cache when it has the text and else by translating in batches of `batch`, saving the cache after each batch.
    An iterable of corpora (each iterating over examples) works too."""
    stats = TranslationStats()
    todo: list[Example] = []
    for ex in _flatten(examples):
        stats.count += 1
        if ex.translation is not None:
            stats.kept += 1
            continue
        found = cache.get(translator.name, ex.text) if cache is not None else None
        if found is not None:
            ex.translation = found
            stats.cached += 1
        else:
            todo.append(ex)
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        texts = list(dict.fromkeys(ex.text for ex in chunk))  # each distinct text once
        t0 = time.perf_counter()
        made = dict(zip(texts, translator.translate(texts)))
        stats.seconds += time.perf_counter() - t0
        for ex in chunk:
            ex.translation = made[ex.text]
        if cache is not None:
            for text, translation in made.items():
                cache.put(translator.name, text, translation)
            cache.save()
        stats.translated += len(chunk)
    stats.empty = sum(1 for ex in _flatten(examples) if not ex.translation)
    return stats


def _flatten(items: Iterable) -> Iterable[Example]:
    for item in items:
        if isinstance(item, Example):
            yield item
        else:  # a corpus (or any iterable of examples)
            yield from item

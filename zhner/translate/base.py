"""The translator interface, the precomputed-file translator and the spec parser."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from zhner.errors import ZhnerError
from zhner.fileio import json_value, utf8_lines

SPECS = "file:PATH, cedict or model:DIR"


@runtime_checkable
class Translator(Protocol):
    """Chinese texts -> English texts, one per input, "" where none can be made. `name` keys the cache: two translators
    with the same name must give the same translations."""

    name: str

    def translate(self, texts: list[str]) -> list[str]: ...


def read_translations(path: str | Path) -> dict[str, str]:
    """A JSONL file of {"text": str, "translation": str} records -> text -> translation (a repeated text: the last record
    wins). Blank lines are skipped; anything else that is not such a record is a ZhnerError naming file:line."""
    path = Path(path)
    table: dict[str, str] = {}
    for lineno, line in utf8_lines(path, "a JSONL file of translations"):
        if not line.strip():
            continue
        record = json_value(line, path, lineno)
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ZhnerError('a record must be {"text": str, "translation": str}', path, lineno)
        translation = record.get("translation")
        if not isinstance(translation, str):
            raise ZhnerError('"translation" must be a string ("" for a missing one)', path, lineno)
        table[record["text"]] = translation
    return table


class FileTranslator:
    """Translations read from a JSONL file of {"text", "translation"} records (as `zhner translate` writes, or an MT
    API's output saved once, as the paper's were). A text missing from the file gets "" -- the paper's Fig. 4 case."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.table = read_translations(self.path)
        self.name = f"file:{self.path.resolve()}"

    def translate(self, texts: list[str]) -> list[str]:
        return [self.table.get(text, "") for text in texts]

    def coverage(self, texts: list[str]) -> float:
        """The share of `texts` the file translates (non-empty)."""
        return sum(bool(self.table.get(t)) for t in texts) / len(texts) if texts else 0.0


def make_translator(spec: str, where: str = "--translator") -> Translator:
    """"file:PATH" | "cedict" | "model:DIR" -> a Translator; anything else is a ZhnerError naming `where`."""
    kind, sep, arg = spec.partition(":")
    if kind == "cedict" and not sep:
        from zhner.translate.cedict import CedictTranslator

        return CedictTranslator()
    if kind == "file" and arg:
        return FileTranslator(arg)
    if kind == "model" and arg:
        from zhner.translate.model import ModelTranslator

        return ModelTranslator(arg)
    raise ZhnerError(f"unknown translator {spec!r}: expected {SPECS}", where)

"""Sentence-classification files: `TEXT<TAB>LABEL` (tsv) and GLUE CoLA's 4-column layout (cola).

- `tsv`: one `TEXT<TAB>LABEL` per line; or a header line naming the columns (`text`/`sentence`/`text_a` and `label`,
  e.g. GLUE SST-2's `sentence<TAB>label` or PaddleNLP's `label<TAB>text_a`), detected by its column names.
- `cola`: no header, `SOURCE<TAB>LABEL<TAB>ORIGINAL_JUDGEMENT<TAB>SENTENCE`; the sentence may hold quotes, so lines
  are split on tabs only.

The text is kept as it is in the file and cut into tokens by `example_from_text` with the corpus's unit: characters
for Chinese, words for English (their offsets into the file's text are in `meta["offsets"]`). Labels are kept as
strings ("0", "1", "acceptable", ...): only the task knows what they mean. Every example is one line, so errors and
`Corpus.token_line` name the record's line.
"""
from __future__ import annotations

from pathlib import Path

from zhner.data.example import Example, example_from_text
from zhner.errors import ZhnerError

UNITS = ("char", "word")
TEXT_COLUMNS = ("text", "sentence", "text_a")
LABEL_COLUMN = "label"
_HEADER_NAMES = {*TEXT_COLUMNS, LABEL_COLUMN, "index", "id", "qid"}
_COLA_TEXT, _COLA_LABEL, _COLA_WIDTH = 3, 1, 4


def check_unit(unit: str) -> None:
    if unit not in UNITS:
        raise ZhnerError(f"unknown token unit {unit!r}; expected one of {', '.join(UNITS)}")


def header_columns(line: str) -> list[str] | None:
    """The lower-cased column names if `line` is a header (every name known, one of them a text column), else None."""
    names = [name.strip().lower() for name in line.rstrip("\r").split("\t")]
    if len(names) >= 2 and set(names) <= _HEADER_NAMES and set(names) & set(TEXT_COLUMNS):
        return names
    return None


def classification_example(text: str, label: str | None, unit: str, path: Path, lineno: int) -> Example:
    """One example of a text and its label; an empty text or label is an error at `lineno`."""
    if not text.strip():
        raise ZhnerError("empty text", path, lineno)
    if label is not None and not label.strip():
        raise ZhnerError("empty label", path, lineno)
    example = example_from_text(text, unit)
    if not example.tokens:
        raise ZhnerError("no words in the text", path, lineno)
    example.label = None if label is None else label.strip()
    example.line = lineno
    example.meta["record"] = True
    return example


def parse_tsv(path: Path, lines: list[str], unit: str = "char", labelled: bool = True) -> list[Example]:
    """A `TEXT<TAB>LABEL` file, with or without a header (unlabelled: the text column only is needed)."""
    first = next(i for i, line in enumerate(lines) if line.strip())
    names = header_columns(lines[first])
    if names is not None:
        text_col = next(names.index(c) for c in TEXT_COLUMNS if c in names)
        label_col = names.index(LABEL_COLUMN) if LABEL_COLUMN in names else None
        if labelled and label_col is None:
            raise ZhnerError(f"the header names no {LABEL_COLUMN!r} column (an unlabelled file?)", path, first + 1)
        width, body = len(names), first + 1
    else:
        text_col, label_col, width, body = 0, 1, 2, first
    return _parse_rows(path, lines, body, width, text_col, label_col if labelled else None, unit, _tsv_hint)


def parse_cola(path: Path, lines: list[str], unit: str = "word", labelled: bool = True) -> list[Example]:
    """GLUE CoLA's train/dev layout: `SOURCE LABEL ORIGINAL_JUDGEMENT SENTENCE`, tab-separated, no header."""
    label_col = _COLA_LABEL if labelled else None
    return _parse_rows(path, lines, 0, _COLA_WIDTH, _COLA_TEXT, label_col, unit, _cola_hint)


def _tsv_hint(width: int) -> str:
    return "expected TEXT<TAB>LABEL" + ("; for GLUE CoLA's 4 columns use the format 'cola'" if width == 4 else "")


def _cola_hint(width: int) -> str:
    return "expected GLUE CoLA's SOURCE<TAB>LABEL<TAB>JUDGEMENT<TAB>SENTENCE"


def _parse_rows(
    path: Path, lines: list[str], body: int, width: int, text_col: int, label_col: int | None, unit: str, hint
) -> list[Example]:
    """The examples of lines[body:], each with exactly `width` tab-separated columns."""
    check_unit(unit)
    examples = []
    for lineno, raw in enumerate(lines[body:], start=body + 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != width:
            raise ZhnerError(f"malformed line {line[:40]!r}: {len(fields)} tab-separated columns; {hint(len(fields))}",
                             path, lineno)
        label = fields[label_col] if label_col is not None else None
        examples.append(classification_example(fields[text_col], label, unit, path, lineno))
    return examples


def record_label(record: dict, path: Path, lineno: int) -> str:
    """The label of a JSONL record as a string (an integer label such as 1 becomes "1")."""
    label = record["label"]
    if isinstance(label, bool) or not isinstance(label, (str, int)):
        raise ZhnerError(f'field "label" must be a string or an integer, not {label!r}', path, lineno)
    if not str(label).strip():
        raise ZhnerError("empty label", path, lineno)
    return str(label)

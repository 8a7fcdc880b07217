"""Batch prediction over files and streams (entities, or a label with its scores): constant memory, one output record
per input line."""
from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from tqdm import tqdm

from zhner.data.corpus import conll_token, text_record
from zhner.data.schemes import spans_to_tags
from zhner.errors import ZhnerError
from zhner.fileio import atomic_open

CHUNK_LINES = 512  # lines tagged together: sorted by length inside a chunk, so batches carry little padding
CHUNK_CHARS = 200_000  # ... and at most this many characters, so a chunk of long documents stays small too


def _lines(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) pairs from a file or stdin ('-'), decoded strictly so a bad byte names its line."""
    if source == "-":
        stream: IO[bytes] = sys.stdin.buffer
        name = "<stdin>"
    else:
        try:
            stream = open(source, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ZhnerError(f"cannot open: {exc.strerror}", source) from None
        name = source
    try:
        for lineno, raw in enumerate(stream, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield lineno, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise ZhnerError("not valid UTF-8", name, lineno) from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _records(source: str, jsonl: bool, reads_translations: bool = False) -> Iterator[dict]:
    """Input records: {"text": line} per line of text, or with `jsonl` one JSON object per line ({"id", "text", ...};
    blank lines skipped) whose other fields go through to the output record. `reads_translations` (an ACT-S model):
    a record's "translation" must be a string, or null / absent (the model translates), as in the service."""
    name = "<stdin>" if source == "-" else source
    for lineno, line in _lines(source):
        if not jsonl:
            yield {"text": line}
            continue
        if not line.strip():
            continue
        record = text_record(line, name, lineno)
        if reads_translations and not isinstance(record.get("translation"), (str, type(None))):
            raise ZhnerError('"translation" must be a string, or null (or left out) to have the model translate the text', name, lineno)
        yield record


def format_record(text: str, entities: list[dict], fmt: str, scheme: str = "bio", record: dict | None = None) -> str:
    """One tagger's output record: JSONL {"text", "entities"} (after the input record's other fields, when given), or
    CoNLL `CHAR<TAB>TAG` lines and a blank line (whitespace characters as <U+XXXX>, which the corpus reader reads back)."""
    if fmt == "jsonl":
        return json.dumps({**(record or {}), "text": text, "entities": entities}, ensure_ascii=False) + "\n"
    spans = [(e["start"], e["end"], e["type"]) for e in entities]
    tags = spans_to_tags(len(text), spans, scheme)
    return "".join(f"{conll_token(ch)}\t{tag}\n" for ch, tag in zip(text, tags)) + "\n"


def predict_stream(
    tagger,
    source: str,
    output: Path | None,
    fmt: str = "jsonl",
    batch_size: int = 32,
    memory_mb: float | None = None,
    confidence: bool = False,
    jsonl_input: bool = False,
    texts: list[str] | None = None,
    nbest: int = 0,
) -> int:
    """Tag every line of `source` and write records to `output` (atomically) or stdout. Returns the number of lines.
    memory_mb: the budget of one model call (longer lines are cut and stitched, see Tagger.predict); None = the default.
    confidence: each entity gets "score", its probability under the CRF (jsonl; conll has no place for it).
    jsonl_input: `source` holds {"text", ...} records (see `_records`); texts: tag these instead of reading `source`.
    A record's "translation" is the text's English translation for a model that reads one (ACT-S; without it the model's
    translator translates the text); other models keep it as an ordinary field.
    nbest: > 0 adds "nbest", the k most probable tag paths as [{"probability", "entities"}] (jsonl), to each record of a
    text of one piece (Tagger.nbest); a longer text gets "nbest": null."""
    options = {"batch_size": batch_size} | ({"memory_mb": memory_mb} if memory_mb is not None else {})
    if confidence:
        options["confidence"] = True
    if tagger.task.kind == "classification":  # {"text", "label", "scores"} per line
        asked = [name for name, on in (("--confidence", confidence), ("--nbest", nbest), ("--format conll", fmt == "conll"),
                                      ("--memory-mb", memory_mb is not None)) if on]
        if asked:
            raise ZhnerError(f"{', '.join(asked)}: for taggers; this model is a sentence classifier")
        options = {"batch_size": batch_size}
    total = None
    if source != "-" and Path(source).is_file():
        total = Path(source).stat().st_size
    show = total is not None and sys.stderr.isatty()
    scheme = getattr(tagger.task, "scheme", None)
    sink = atomic_open(output) if output is not None else contextlib.nullcontext(_stdout())
    count = 0
    with sink as out, tqdm(total=total, unit="B", unit_scale=True, disable=not show) as bar:
        reads_translations = "translation" in tagger.featurizer.fields
        records = ({"text": t} for t in texts) if texts is not None else _records(source, jsonl_input, reads_translations)
        for chunk in chunks(records, CHUNK_LINES, CHUNK_CHARS):
            count += _flush(tagger, chunk, out, fmt, scheme, options, bar, nbest, reads_translations)
    return count


def chunks(texts: Iterable, max_lines: int, max_chars: int) -> Iterator[list]:
    """Consecutive groups of at most max_lines texts and about max_chars characters (a longer single text is a
    group of its own). Only one group is in memory at a time, whatever the input size."""
    chunk: list = []
    size = 0
    for item in texts:  # a text, or a record {"text", ...}
        length = len(item["text"] if isinstance(item, dict) else item)
        if chunk and (len(chunk) == max_lines or size + length > max_chars):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += length
    if chunk:
        yield chunk


def _stdout() -> IO[str]:
    return io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", line_buffering=False, write_through=True)


def _flush(
    tagger, records: list[dict], out: IO[str], fmt: str, scheme: str, options: dict, bar, nbest: int = 0,
    reads_translations: bool = False,
) -> int:
    texts = [r["text"] for r in records]
    given = [r.get("translation") for r in records] if reads_translations else None  # None: the model's translator
    if nbest:
        short = [i for i, t in enumerate(texts) if len(t) <= tagger.piece_chars()]
        short_given = [given[i] for i in short] if given is not None else None
        ranked = dict(zip(short, tagger.nbest([texts[i] for i in short], nbest, options["batch_size"], short_given)))
        records = [{**r, "nbest": ranked.get(i)} for i, r in enumerate(records)]
    if given is not None:
        options = {**options, "translations": given}
    for record, text, prediction in zip(records, texts, tagger.predict(texts, **options)):
        if fmt == "conll":
            out.write(format_record(text, prediction, fmt, scheme, record))
        else:
            out.write(json.dumps({**record, **tagger.record(text, prediction)}, ensure_ascii=False) + "\n")
    bar.update(sum(len(t.encode("utf-8")) + 1 for t in texts))
    out.flush()
    return len(texts)

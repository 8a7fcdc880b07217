"""Batch prediction over files and streams (entities, or a label with its scores): constant memory, one output record
per input line."""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from tqdm import tqdm

from zhner.data.corpus import conll_token, text_record
from zhner.data.schemes import spans_to_tags
from zhner.errors import ZhnerError
from zhner.fileio import FileKind, atomic_open, bounded_lines, open_regular, parse_json

CHUNK_LINES = 512  # lines tagged together: sorted by length inside a chunk, so batches carry little padding
CHUNK_CHARS = 200_000  # ... and at most this many characters, so a chunk of long documents stays small too


BadRecord = ZhnerError  # a record that cannot be tagged, naming its line: skipped or fatal as --on-error says
ON_ERROR = ("fail", "skip")


def _lines(source: str) -> Iterator[tuple[int, str | BadRecord]]:
    """(line number, text) pairs from a file or stdin ('-'), decoded strictly: a bad byte gives its line a BadRecord."""
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
        # readline (in bounded_lines), not iteration: on a terminal each line is answered as it is typed
        for lineno, raw in bounded_lines(stream, name):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield lineno, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                yield lineno, BadRecord("not valid UTF-8", name, lineno)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def scan_file(source: str, what: str) -> bool:
    """Read a file through this engine's bounded reader without keeping its lines, for an engine that reads it again
    itself (--engine ray): a line over MAX_LINE_BYTES is the error it is here, and only a regular file is read (a FIFO
    cannot be read twice). Returns whether its first non-blank line is a JSON object (JSONL input, as detected here)."""
    jsonl = None
    with open_regular(source, FileKind(what, 2**50)) as stream:
        for lineno, raw in bounded_lines(stream, source):
            if jsonl is None and raw.strip():
                line = raw[3:] if lineno == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
                jsonl = is_json_object(line.decode("utf-8", errors="replace").rstrip("\r\n"))
    return bool(jsonl)


def is_json_object(line: str) -> bool:
    """Whether a line is one JSON object: the sign of a JSONL stream (text lines are not, even one starting "{")."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        return isinstance(parse_json(line), dict)
    except ValueError:  # not JSON, or nested too deeply (TooDeep)
        return False


def _detect_jsonl(lines: Iterator[tuple[int, str | BadRecord]]) -> tuple[bool, Iterator[tuple[int, str | BadRecord]]]:
    """Whether a stream is JSONL (its first non-blank line is a JSON object), and its lines, none lost to the look."""
    seen = []
    for item in lines:
        seen.append(item)
        line = item[1]
        if isinstance(line, str) and not line.strip():
            continue
        return isinstance(line, str) and is_json_object(line), itertools.chain(seen, lines)
    return False, iter(seen)


def _records(source: str, jsonl: bool | None, reads_translations: bool = False) -> Iterator[dict | BadRecord]:
    """Input records: {"text": line} per line of text, or with `jsonl` one JSON object per line ({"id", "text", ...};
    blank lines skipped) whose other fields go through to the output record; `jsonl=None`: JSONL when the first
    non-blank line is a JSON object. `reads_translations` (an ACT-S model): a record's "translation" must be a string,
    or null / absent (the model translates), as in the service. A line that cannot be read is a BadRecord."""
    name = "<stdin>" if source == "-" else source
    lines = _lines(source)
    if jsonl is None:
        jsonl, lines = _detect_jsonl(lines)
    for lineno, line in lines:
        if isinstance(line, BadRecord) or not jsonl:
            yield line if isinstance(line, BadRecord) else {"text": line}
            continue
        if not line.strip():
            continue
        try:
            record = text_record(line, name, lineno)
        except ZhnerError as exc:
            yield exc
            continue
        if reads_translations and not isinstance(record.get("translation"), (str, type(None))):
            yield BadRecord('"translation" must be a string, or null (or left out) to have the model translate the text', name, lineno)
            continue
        yield record


def _good_records(records: Iterable[dict | BadRecord], on_error: str, report: Callable[[str], None], bad: list[int]) -> Iterator[dict]:
    """The records that can be tagged. A bad one stops the run (fail) or is reported on its own line and counted in
    `bad` (skip), the run going on with the next."""
    for record in records:
        if not isinstance(record, BadRecord):
            yield record
        elif on_error == "fail":
            raise record
        else:
            report(f"warning: {record} (skipped)")
            bad.append(record.line or 0)


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
    jsonl_input: bool | None = False,
    texts: list[str] | None = None,
    nbest: int = 0,
    on_error: str = "fail",
    report: Callable[[str], None] | None = None,
) -> int:
    """Tag every line of `source` and write records to `output` (atomically) or stdout. Returns the number of lines.
    memory_mb: the budget of one model call (longer lines are cut and stitched, see Tagger.predict); None = the default.
    confidence: each entity gets "score", its probability under the CRF (jsonl; conll has no place for it).
    jsonl_input: `source` holds {"text", ...} records (see `_records`); None: JSONL when its first non-blank line is a
    JSON object. texts: tag these instead of reading `source`.
    on_error: a record that cannot be read (not UTF-8, not a JSON object with "text") stops the run, nothing written
    ("fail"), or is reported on stderr (`report`) with its line and the run goes on ("skip"; the count at the end).
    From a terminal (stdin a TTY) each line is tagged and written as soon as it is read.
    A record's "translation" is the text's English translation for a model that reads one (ACT-S; without it the model's
    translator translates the text); other models keep it as an ordinary field.
    nbest: > 0 adds "nbest", the k most probable tag paths as [{"probability", "entities"}] (jsonl), to each record of a
    text of one piece (Tagger.nbest); a longer text gets "nbest": null."""
    options = {"batch_size": batch_size} | ({"memory_mb": memory_mb} if memory_mb is not None else {})
    options["confidence"] = confidence  # explicit: Tagger.predict scores by default, the JSONL record has no score unasked
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
    if on_error not in ON_ERROR:
        raise ZhnerError(f"--on-error must be fail or skip, not {on_error!r}")
    report = report or _to_stderr
    interactive = texts is None and source == "-" and sys.stdin.isatty()
    count, bad = 0, []
    with sink as out, tqdm(total=total, unit="B", unit_scale=True, disable=not show) as bar:
        reads_translations = "translation" in tagger.featurizer.fields
        records = ({"text": t} for t in texts) if texts is not None else _records(source, jsonl_input, reads_translations)
        good = _good_records(records, on_error, report, bad)
        for chunk in chunks(good, 1 if interactive else CHUNK_LINES, CHUNK_CHARS):
            count += _flush(tagger, chunk, out, fmt, scheme, options, bar, nbest, reads_translations)
    if bad:
        name = "<stdin>" if source == "-" else source
        report(f"{name}: {len(bad)} bad record{'s' if len(bad) > 1 else ''} skipped (line{'s' if len(bad) > 1 else ''} "
               f"{', '.join(map(str, bad[:10]))}{', ...' if len(bad) > 10 else ''}); {count} tagged")
    return count


def _to_stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def chunks(texts: Iterable, max_lines: int, max_chars: int) -> Iterator[list]:
    """Consecutive groups of at most max_lines texts and about max_chars characters (a longer single text is a
    group of its own). Only one group is in memory at a time, whatever the input size."""
    chunk: list = []
    size = 0
    for item in texts:  # a text, or a record {"text", ...}
        length = len(item["text"] if isinstance(item, dict) else item)
        if chunk and size + length > max_chars:
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += length
        if len(chunk) == max_lines:  # at once, not when the next item comes: a terminal's line is answered as typed
            yield chunk
            chunk, size = [], 0
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

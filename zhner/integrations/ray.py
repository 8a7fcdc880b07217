"""Batch tagging on Ray Data: the same records as `zhner predict`, spread over the cores of one machine or a cluster.

    import ray
    from zhner.integrations.ray import Predictor, read_lines

    lines = read_lines("s3://bucket/texts/")                    # or ray.data.read_json(...): rows with a "text" column
    tagged = lines.map_batches(Predictor, fn_constructor_kwargs={"model_dir": "/models/msra"}, concurrency=8,
                               batch_size=1024, batch_format="pyarrow")
    tagged.write_json("s3://bucket/entities/")                 # columns: the input's, "zhner" (a JSON record), "error"

Ray does the scheduling (actor pool, back-pressure, retries); zhner adds a reader and an actor:
- `read_lines` reads text or JSONL files as `zhner predict` does -- split at "\\n" only, a BOM dropped from the first
  line, "\\r" stripped -- keeping each line's file and number and its raw bytes, so a line that is not UTF-8 or not a
  JSON record fails (or is skipped) alone, named by its line.
- `Predictor` loads the model once per actor and turns each row into the record `zhner predict` writes for it, as a
  JSON string in the column "zhner" (null for a blank JSONL line, which predict skips too), or a message in "error".
  Long texts are cut and stitched as in `Tagger.predict`.
- `predict_file` (`zhner predict --engine ray`) runs both on a local Ray instance (or the one `ray.init` joined), keeps
  the input order, and writes the output file atomically; `on_error="skip"` reports each bad line on stderr and the count
  at the end, `"fail"` stops at the first with an error naming its file and line.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray.data.datasource.file_based_datasource import FileBasedDatasource

from zhner.data.corpus import lone_surrogate, text_record
from zhner.errors import ZhnerError
from zhner.fileio import MAX_LINE_BYTES

LINES_PER_BLOCK = 8192  # lines per block read: a large file streams through the pool instead of sitting in one block
CHUNK_BYTES = 1 << 20  # read at a time by a read task
ON_ERROR = ("fail", "skip")
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"  # "Token authentication is enabled ..." at start


class LinesDatasource(FileBasedDatasource):
    """Lines of text files with their file and line number, split as `zhner predict` splits its input."""

    def _read_stream(self, f: Any, path: str) -> Iterator[pa.Table]:
        """Blocks of LINES_PER_BLOCK lines, the file read a chunk at a time (`predict_file` has checked every line
        against the local engine's bound before Ray started; a line over it here is cut off, not held whole)."""
        lines: list[bytes] = []
        start, pending = 1, bytearray()
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            *done, rest = chunk.split(b"\n")
            if done:
                lines += [bytes(pending + done[0]), *done[1:]]
                pending = bytearray()
            pending += rest
            del pending[MAX_LINE_BYTES + 1 :]  # a file that grew a longer line since the check: refused by the actor
            while len(lines) >= LINES_PER_BLOCK:
                yield _block(path, start, lines[:LINES_PER_BLOCK])
                start, lines = start + LINES_PER_BLOCK, lines[LINES_PER_BLOCK:]
        if pending:  # a last line without its newline; the newline that ends the last line opens no line of its own
            lines.append(bytes(pending))
        if lines:
            yield _block(path, start, lines)


def _block(path: str, start: int, lines: list[bytes]) -> pa.Table:
    return pa.table({
        "path": pa.array([path] * len(lines), pa.string()),
        "line": pa.array(range(start, start + len(lines)), pa.int64()),
        "raw": pa.array(lines, pa.binary()),
    })


def read_lines(paths: str | list[str], **read_args: Any) -> ray.data.Dataset:
    """A Dataset of the lines of `paths` (files or folders, local or any filesystem Ray reads): columns path, line, raw."""
    return ray.data.read_datasource(LinesDatasource(paths, **read_args))


def decode_line(raw: bytes, line: int) -> str:
    """A raw input line as `zhner predict` reads it: UTF-8, a BOM dropped on line 1, the line end stripped."""
    if len(raw) > MAX_LINE_BYTES:
        raise ZhnerError(f"a line longer than {MAX_LINE_BYTES:,} bytes (zhner's limit): not a text file?")
    if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ZhnerError("not valid UTF-8") from None


class Predictor:
    """Ray Data's callable class for `map_batches(..., batch_format="pyarrow")`: one model per actor, one zhner
    record (or error) per row. Rows are `read_lines` rows (path, line, raw) or any rows with a string "text"."""

    def __init__(
        self, model_dir: str, jsonl: bool = False, batch_size: int = 32, memory_mb: float | None = None,
        confidence: bool = False, device: str = "cpu",
    ):
        import zhner
        from zhner.device import resolve_device

        self.pipeline = zhner.load(model_dir)
        self.pipeline.model.to(resolve_device(device))
        self.jsonl = jsonl
        self.reads_translations = "translation" in self.pipeline.featurizer.fields
        self.options: dict[str, Any] = {"batch_size": batch_size}
        if self.pipeline.task.kind == "tagging":
            # confidence always explicit: Tagger.predict scores by default, `zhner predict` only with --confidence
            self.options |= ({"memory_mb": memory_mb} if memory_mb is not None else {}) | {"confidence": confidence}

    def __call__(self, batch: pa.Table) -> pa.Table:
        records: list[dict | None] = []
        errors: list[str | None] = []
        for row in batch.to_pylist():
            try:
                records.append(self.record(row))
                errors.append(None)
            except ZhnerError as exc:
                records.append(None)
                errors.append(exc.message)
        outputs = self.tag([r for r in records if r is not None])
        tagged = iter(outputs)
        column = [next(tagged) if r is not None else None for r in records]
        return batch.append_column("zhner", pa.array(column, pa.string())).append_column("error", pa.array(errors, pa.string()))

    def record(self, row: dict) -> dict | None:
        """The input record of a row: {"text": line} (text), the line's JSON object (jsonl; None for a blank line), or
        the row itself when it has no raw line (a Dataset of records); ZhnerError when it is not one."""
        if "raw" not in row:
            record = {k: v for k, v in row.items() if k not in ("zhner", "error")}
            if not isinstance(record.get("text"), str) or lone_surrogate(record["text"]) is not None:
                raise ZhnerError('expected a string field "text"')
        else:
            line = decode_line(row["raw"], row["line"])
            if not self.jsonl:
                return {"text": line}
            if not line.strip():
                return None
            try:
                record = text_record(line, row.get("path", "-"), row["line"])
            except ZhnerError as exc:
                raise ZhnerError(exc.message) from None
        if self.reads_translations and not isinstance(record.get("translation"), (str, type(None))):
            raise ZhnerError('"translation" must be a string, or null (or left out) to have the model translate the text')
        return record

    def tag(self, records: list[dict]) -> list[str]:
        """The JSON line `zhner predict` writes for each record (without its newline)."""
        texts = [r["text"] for r in records]
        options = dict(self.options)
        if self.reads_translations:
            options["translations"] = [r.get("translation") for r in records]
        predictions = self.pipeline.predict(texts, **options)
        return [json.dumps({**r, **self.pipeline.record(t, p)}, ensure_ascii=False) for r, t, p in zip(records, texts, predictions)]


def start_ray(workers: int, address: str | None = None) -> None:
    """ray.init as `zhner predict --engine ray` needs it, quietly: join the cluster at `address` (or $RAY_ADDRESS), or
    start a local instance with one CPU more than the `workers` actors take (the read tasks need one too, or they wait
    for ever behind the pool). Ray's own messages stay out of the user's terminal: its workers' output is not sent to
    the driver, its loggers keep Python's default (warnings only), and the notice that a new local instance uses token
    authentication (Ray's default, announced as a warning at every start) is not shown: its logger is set to ERROR
    while Ray starts."""
    quiet = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": False}
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:  # join the cluster it names (its own authentication settings apply)
        ray.init(address=address, **quiet)
        return
    notices = logging.getLogger(AUTH_LOGGER)
    level = notices.level
    notices.setLevel(logging.ERROR)
    try:
        ray.init(num_cpus=workers + 1, include_dashboard=False, **quiet)
    finally:
        notices.setLevel(level)


def tag_lines(
    paths: str | list[str], model_dir: str | Path, workers: int = 2, jsonl: bool = False, lines_per_call: int = 512,
    **predictor: Any,
) -> ray.data.Dataset:
    """read_lines(paths) tagged by a pool of `workers` Predictor actors (one CPU each), `lines_per_call` lines a call."""
    kwargs = {"model_dir": str(model_dir), "jsonl": jsonl, **predictor}
    # max_restarts=0: an actor that dies (out of memory on a long text, say) stops the run with Ray's error, where a
    # restarted one would be given the same input again, for ever (Ray Data retries its tasks without limit). It also
    # keeps Ray's core worker from printing, through the CLI's quiet settings, its notice about restartable actors whose
    # arguments live in the object store (ray-project/ray#53727). Ray 2.60 (the pinned version) takes it as one of the
    # `**ray_remote_args` that it announces it will stop taking in 2.64: that notice is not the user's business either.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return read_lines(paths).map_batches(
            Predictor, fn_constructor_kwargs=kwargs, batch_size=lines_per_call, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=1, max_restarts=0,
        )


def predict_file(
    source: str, output: Path | None, model_dir: str | Path, workers: int = 2, jsonl: bool | None = False,
    on_error: str = "fail", log: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    address: str | None = None, **predictor: Any,
) -> tuple[int, int]:
    """`zhner predict --engine ray`: tag `source` into `output` (atomically; None: stdout) in input order. Returns
    (records written, lines skipped). `source` is first read through the local engine's bounded reader
    (zhner.serve.predict.scan_file: the same line limit and error, before Ray starts); `jsonl=None` is decided there,
    from its first non-blank line, as the local engine decides it. `address`: the Ray cluster to join (default:
    $RAY_ADDRESS; neither: a local instance of `workers + 1` CPUs)."""
    import contextlib

    from zhner.fileio import atomic_open
    from zhner.serve.predict import scan_file

    if on_error not in ON_ERROR:
        raise ZhnerError(f"--on-error must be fail or skip, not {on_error!r}")
    if source == "-":
        raise ZhnerError("--engine ray reads a file (not stdin)")
    first_is_json = scan_file(source, "a file of texts (--engine ray reads a regular file twice)")
    jsonl = first_is_json if jsonl is None else jsonl
    started_here = not ray.is_initialized()
    if started_here:
        start_ray(workers, address)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # records come back in input order
    context.enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # its INFO lines would bury the skipped-line reports
    written = skipped = 0
    try:
        tagged = tag_lines(str(Path(source).resolve()), model_dir, workers, jsonl, **predictor)
        sink = atomic_open(output) if output is not None else contextlib.nullcontext(sys.stdout)
        with sink as out:
            for batch in tagged.iter_batches(batch_format="pyarrow", batch_size=None):
                for line, record, error in zip(*(batch[c].to_pylist() for c in ("line", "zhner", "error"))):
                    if error is not None:
                        if on_error == "fail":
                            raise ZhnerError(error, source, line)
                        log(f"skipped {source}:{line}: {error}")
                        skipped += 1
                    elif record is not None:
                        out.write(record + "\n")
                        written += 1
    finally:
        if started_here:
            ray.shutdown()
    if skipped:
        log(f"skipped {skipped} bad line(s) of {source}")
    return written, skipped

"""`zhner info MODEL_DIR`: what a model directory holds, read from its files without building the model."""
from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from pathlib import Path

from zhner.errors import ZhnerError
from zhner.evaluate.metrics import test_scores_by_corpus
from zhner.fileio import (
    LEXICON_FILE, VOCAB_FILE, FileKind, bounded_lines, model_directory, open_regular, parse_json,
    read_committed, read_model_mapping, require_mapping,
)
from zhner.shipped import resolve_model

# the file names of zhner.tagger (not imported from there: that would load torch for a few names)
CONFIG, VOCAB, WEIGHTS, METRICS, LEXICON = "config.yaml", "vocab.json", "model.safetensors", "metrics.json", "lexicon.txt"


def task_kind(directory: str | Path) -> str:
    """The task a model directory (or shipped model) was trained for, "tagging" or "classification", from its
    vocab.json alone: no torch (`zhner serve --workers` checks the model in a supervisor that never loads it). A
    format-1 vocabulary (one flat dict, before classifiers) is a tagger's."""
    directory = model_directory(resolve_model(directory))
    vocab = read_committed(directory, lambda path: read_model_mapping(path(VOCAB), "json", VOCAB_FILE))
    task = vocab.get("task") if vocab.get("format") == 2 else {"kind": "tagging"}
    kind = task.get("kind") if isinstance(task, dict) else None
    if kind not in ("tagging", "classification"):
        raise ZhnerError(f"malformed vocabulary (task kind: {kind!r})", directory / VOCAB)
    return kind


def model_info(directory: str | Path) -> dict:
    """Model and dataset, labels, headline metrics, parameters, size on disk, lexicon size of a model directory (or of
    a shipped model, by name)."""
    directory = model_directory(resolve_model(directory))
    return read_committed(directory, lambda path: _info(directory, path))  # the files of one save


def _info(directory: Path, path: Callable[[str], Path]) -> dict:
    config = read_model_mapping(path(CONFIG), "yaml")
    vocab = read_model_mapping(path(VOCAB), "json", VOCAB_FILE)
    has_metrics = os.path.lexists(path(METRICS))
    metrics = read_model_mapping(path(METRICS), "json") if has_metrics else {}
    model, data = _section(config, "model", path(CONFIG)), _section(config, "data", path(CONFIG))
    # format 2; older directories are one flat dict
    fields, task = _section(vocab, "fields", path(VOCAB)), _section(vocab, "task", path(VOCAB))
    kind = task.get("kind", "tagging")
    tags = task.get("labels") or vocab.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ZhnerError("task.labels: expected a list of strings", path(VOCAB))
    labels = sorted({t[2:] for t in tags if t != "O" and len(t) > 2}) if kind == "tagging" else list(tags)
    chars = _section(fields, "chars", path(VOCAB)).get("vocab") if fields else vocab.get("chars")
    if chars is not None and not isinstance(chars, (list, dict)):
        raise ZhnerError("the character vocabulary: expected a list", path(VOCAB))
    lexicon = path(LEXICON)
    corpora = trained_on(data)
    parameters, problem = _weights(path(WEIGHTS))
    return {
        "model": model.get("name"),
        "dataset": " + ".join(map(str, corpora)) or None,
        "task": kind,
        "scheme": task.get("scheme", vocab.get("scheme")),
        "labels": labels,
        "dev": _headline(metrics.get("dev")),
        "test": _headline(metrics.get("test")),  # a union model's: the union of its corpora's test sets
        "test_per_corpus": test_scores_by_corpus(metrics, corpora),
        "status": f"unusable: {WEIGHTS} {problem}" if problem else metrics.get("status"),
        "best_epoch": metrics.get("best_epoch"),
        "seed": metrics.get("seed"),
        "parameters": parameters,
        "size_bytes": sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()),
        "chars": len(chars or []),
        "lexicon_words": _count_lines(lexicon) if os.path.lexists(lexicon) else None,
    }


def trained_on(data: dict) -> list[str]:
    """The corpora a model was trained on, as its config's data section names them: data.dataset, then data.union's."""
    union = data.get("union") if isinstance(data.get("union"), list) else []
    names = [data.get("dataset")] + [part.get("dataset") for part in union if isinstance(part, dict)]
    return [name for name in names if name]


def _section(owner: dict, key: str, path: Path) -> dict:
    value = owner.get(key)
    return {} if value is None else require_mapping(value, path, key)


def _headline(result: dict | None) -> dict | None:
    if not isinstance(result, dict):
        return None
    if "strict" not in result:  # a classifier's
        return {k: result.get(k) for k in ("accuracy", "mcc", "macro_f1")} if "accuracy" in result else None
    strict, lenient = result.get("strict"), result.get("lenient")
    return {
        "f1_strict": strict.get("f1") if isinstance(strict, dict) else None,
        "f1_lenient": lenient.get("f1") if isinstance(lenient, dict) else None,
    }


MAX_HEADER = 100_000_000  # safetensors' own limit on its header
HEADER = FileKind("a safetensors file", 2**62)  # its header is bounded below; the data is never read here


def _weights(path: Path) -> tuple[int | None, str | None]:
    """(the number of weights, None) from the safetensors header (8-byte length, then JSON {name: {shape, data_offsets},
    ...}), or (None, what is wrong) when the file is missing, its header is not one, or its data is not what the header
    says (a truncated copy, a hole, a tensor of the wrong size): the model would not load, whatever metrics.json says.
    The header is checked by safetensors itself, as loading the model checks it."""
    try:
        with open_regular(path, HEADER, missing="is missing") as fh:
            (size,) = struct.unpack("<Q", fh.read(8).ljust(8, b"\xff"))
            if size > min(MAX_HEADER, os.fstat(fh.fileno()).st_size - 8):  # a random length: an allocation of that size
                return None, "is truncated or corrupt (no complete header)"
            header = parse_json(fh.read(size).decode("utf-8"))
    except ZhnerError as exc:
        return None, "is missing" if exc.message == "is missing" else f"is unreadable ({exc.message})"
    except (UnicodeDecodeError, ValueError):  # TooDeep and JSONDecodeError are ValueErrors
        return None, "is corrupt (no readable header)"
    if not isinstance(header, dict):
        return None, "is corrupt (no readable header)"
    total, data_end = 0, 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            return None, "is corrupt (a tensor without a shape)"
        if isinstance(offsets, list) and len(offsets) == 2 and isinstance(offsets[1], int):
            data_end = max(data_end, offsets[1])
        total += math.prod(shape)
    file_size = path.stat().st_size
    if 8 + size + data_end > file_size:
        return None, f"is truncated ({file_size:,} bytes of {8 + size + data_end:,})"
    problem = _safetensors_problem(path)  # offsets, dtypes, sizes: what loading the model checks
    return (None, f"is corrupt ({problem})") if problem else (total, None)


def _safetensors_problem(path: Path) -> str | None:
    """What safetensors finds wrong with the file's header and layout (None: it would load)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy"):
            return None
    except (SafetensorError, OSError) as exc:
        return str(exc).removeprefix("Error while deserializing header: ").splitlines()[0][:200]


def _count_lines(path: Path) -> int:
    with open_regular(path, LEXICON_FILE) as fh:
        return sum(1 for _, line in bounded_lines(fh, path) if line.strip())

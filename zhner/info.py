"""`zhner info MODEL_DIR`: what a model directory holds, read from its files without building the model."""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import yaml

from zhner.errors import ZhnerError
from zhner.evaluate.metrics import test_scores_by_corpus
from zhner.fileio import model_directory, parse_yaml, read_model_mapping, reading, require_mapping
from zhner.shipped import resolve_model

# the file names of zhner.tagger (not imported from there: that would load torch for a few names)
CONFIG, VOCAB, WEIGHTS, METRICS, LEXICON = "config.yaml", "vocab.json", "model.safetensors", "metrics.json", "lexicon.txt"


def task_kind(directory: str | Path) -> str:
    """The task a model directory (or shipped model) was trained for, "tagging" or "classification", from its
    vocab.json alone: no torch (`zhner serve --workers` checks the model in a supervisor that never loads it). A
    format-1 vocabulary (one flat dict, before classifiers) is a tagger's."""
    directory = model_directory(resolve_model(directory))
    vocab = read_model_mapping(directory / VOCAB, json.loads, (ValueError,))
    task = vocab.get("task") if vocab.get("format") == 2 else {"kind": "tagging"}
    kind = task.get("kind") if isinstance(task, dict) else None
    if kind not in ("tagging", "classification"):
        raise ZhnerError(f"malformed vocabulary (task kind: {kind!r})", directory / VOCAB)
    return kind


def model_info(directory: str | Path) -> dict:
    """Model and dataset, labels, headline metrics, parameters, size on disk, lexicon size of a model directory (or of
    a shipped model, by name)."""
    directory = model_directory(resolve_model(directory))
    config = read_model_mapping(directory / CONFIG, parse_yaml, (yaml.YAMLError,))
    vocab = read_model_mapping(directory / VOCAB, json.loads, (ValueError,))
    has_metrics = (directory / METRICS).exists()
    metrics = read_model_mapping(directory / METRICS, json.loads, (ValueError,)) if has_metrics else {}
    model, data = _section(config, "model", directory / CONFIG), _section(config, "data", directory / CONFIG)
    # format 2; older directories are one flat dict
    fields, task = _section(vocab, "fields", directory / VOCAB), _section(vocab, "task", directory / VOCAB)
    kind = task.get("kind", "tagging")
    tags = task.get("labels") or vocab.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ZhnerError("task.labels: expected a list of strings", directory / VOCAB)
    labels = sorted({t[2:] for t in tags if t != "O" and len(t) > 2}) if kind == "tagging" else list(tags)
    chars = _section(fields, "chars", directory / VOCAB).get("vocab") if fields else vocab.get("chars")
    if chars is not None and not isinstance(chars, (list, dict)):
        raise ZhnerError("the character vocabulary: expected a list", directory / VOCAB)
    lexicon = directory / LEXICON
    corpora = trained_on(data)
    parameters, problem = _weights(directory / WEIGHTS)
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
        "lexicon_words": _count_lines(lexicon) if lexicon.exists() else None,
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


def _weights(path: Path) -> tuple[int | None, str | None]:
    """(the number of weights, None) from the safetensors header (8-byte length, then JSON {name: {shape, data_offsets},
    ...}), or (None, what is wrong) when the file is missing, its header is not one, or its data is shorter than the
    header says (a truncated copy): the model would not load, whatever metrics.json says."""
    try:
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            file_size = path.stat().st_size
            if size > file_size - 8:  # a random length would ask for an allocation of that size
                return None, "is truncated or corrupt (no complete header)"
            header = json.loads(fh.read(size))
    except FileNotFoundError:
        return None, "is missing"
    except (OSError, struct.error, ValueError):
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
    if 8 + size + data_end > file_size:
        return None, f"is truncated ({file_size:,} bytes of {8 + size + data_end:,})"
    return total, None


def _count_lines(path: Path) -> int:
    with reading(path, "the lexicon file"):
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip())

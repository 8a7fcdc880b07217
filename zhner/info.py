"""`zhner info MODEL_DIR`: what a model directory holds, read from its files without building the model."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import yaml

from zhner.errors import ZhnerError
from zhner.fileio import reading

# the file names of zhner.tagger (not imported from there: that would load torch for a few names)
CONFIG, VOCAB, WEIGHTS, METRICS, LEXICON = "config.yaml", "vocab.json", "model.safetensors", "metrics.json", "lexicon.txt"


def model_info(directory: str | Path) -> dict:
    """Model and dataset, labels, headline metrics, parameters, size on disk, lexicon size of a model directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ZhnerError("no such model directory", directory)
    config = _load(directory / CONFIG, yaml.safe_load)
    vocab = _load(directory / VOCAB, json.loads)
    metrics = _load(directory / METRICS, json.loads) if (directory / METRICS).exists() else {}
    if not isinstance(config, dict) or not isinstance(vocab, dict) or not isinstance(metrics, dict):
        raise ZhnerError("not a model directory (config.yaml / vocab.json are not mappings)", directory)
    model, data = config.get("model") or {}, config.get("data") or {}
    fields, task = vocab.get("fields") or {}, vocab.get("task") or {}  # format 2; older directories are one flat dict
    kind = task.get("kind", "tagging")
    tags = task.get("labels") or vocab.get("tags") or []
    labels = sorted({t[2:] for t in tags if t != "O" and len(t) > 2}) if kind == "tagging" else list(tags)
    chars = (fields.get("chars") or {}).get("vocab") if fields else vocab.get("chars")
    lexicon = directory / LEXICON
    return {
        "model": model.get("name"),
        "dataset": data.get("dataset"),
        "task": kind,
        "scheme": task.get("scheme", vocab.get("scheme")),
        "labels": labels,
        "dev": _headline(metrics.get("dev")),
        "test": _headline(metrics.get("test")),
        "status": metrics.get("status"),
        "best_epoch": metrics.get("best_epoch"),
        "seed": metrics.get("seed"),
        "parameters": _parameters(directory / WEIGHTS),
        "size_bytes": sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()),
        "chars": len(chars or []),
        "lexicon_words": _count_lines(lexicon) if lexicon.exists() else None,
    }


def _load(path: Path, parse):
    with reading(path, "a file of the model directory"):
        text = path.read_text(encoding="utf-8")
    try:
        return parse(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ZhnerError(f"corrupt file ({type(exc).__name__})", path) from None


def _headline(result: dict | None) -> dict | None:
    if not isinstance(result, dict):
        return None
    if "strict" not in result:  # a classifier's
        return {k: result.get(k) for k in ("accuracy", "mcc", "macro_f1")} if "accuracy" in result else None
    return {"f1_strict": result["strict"].get("f1"), "f1_lenient": (result.get("lenient") or {}).get("f1")}


def _parameters(path: Path) -> int | None:
    """The number of weights, from the safetensors header (8-byte length, then JSON {name: {shape, ...}})."""
    try:
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
    except (OSError, struct.error, ValueError):
        return None
    total = 0
    for name, entry in header.items():
        if name != "__metadata__":
            count = 1
            for dim in entry.get("shape", []):
                count *= dim
            total += count
    return total


def _count_lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())

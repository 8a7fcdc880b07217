"""The exported graph of a model that carries none (the shipped models, a directory never exported), made once on first
use into the user cache and read from there afterwards.

    zhner.export.cache_graph("zh-small")  # ~/.cache/zhner/onnx/zh-small-<key>/model.onnx, exported now if not there yet

A model directory's own DIR/model.onnx (what `zhner export DIR` writes) is used as it is. Otherwise the graph lives in
`$ZHNER_CACHE/onnx` (or `~/.cache/zhner/onnx`) under a key hashed from the files that make it (config.yaml,
vocab.json, model.safetensors, lexicon.txt) and the exporter's version (`EXPORT_FORMAT`), so a retrained model or a new
zhner gets a new graph, never a stale one. The export needs torch (zhner.export, a layer above this package, passes
its exporter in: `graph_path(model, export)`; it takes ~10-20 s); the file is
written under a temporary name and renamed into place, so concurrent first uses (a service's workers) each see a
whole graph or none, and the last rename wins with identical bytes. Reading a cached graph needs no torch.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

from zhner.data.longtext import PIECE_CHARS
from zhner.errors import ZhnerError
from zhner.fileio import model_directory
from zhner.shipped import SHIPPED, resolve_model

ONNX_FILE = "model.onnx"
# bump when the exported graph changes for the same model files (v2: FLAT's character-query position table; v3: its
# key lengths an input, K from the batch's longest word; v4: the key mask inside FLAT's q . k product)
EXPORT_FORMAT = "4"
_KEYED_FILES = ("config.yaml", "vocab.json", "model.safetensors", "lexicon.txt")


def cache_root() -> Path:
    env = os.environ.get("ZHNER_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "zhner") / "onnx"


def model_key(directory: Path) -> str:
    """A digest of the model's files, the export format and the piece size (the graph's metadata records where the
    tagger cuts long text): what the cached graph was made from."""
    digest = hashlib.sha256(f"zhner-onnx-{EXPORT_FORMAT}-{PIECE_CHARS}\0".encode())
    for name in _KEYED_FILES:
        path = directory / name
        if path.is_file():
            digest.update(name.encode() + b"\0")
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:20]


def cached_graph(model: str | Path) -> tuple[Path, Path]:
    """(the model directory, where its graph is or will be): DIR/model.onnx when the directory has one, else the
    cache's file for it."""
    directory = model_directory(resolve_model(model))
    own = directory / ONNX_FILE
    if own.is_file():
        return directory, own
    name = str(model) if isinstance(model, str) and model in SHIPPED else re.sub(r"[^\w.-]+", "_", directory.name)
    return directory, cache_root() / f"{name}-{model_key(directory)}" / ONNX_FILE


def graph_path(model: str | Path | None, export: Callable[[Path, Path], None] | None = None) -> tuple[Path, Path]:
    """(the model directory, its graph). When neither the directory nor the cache has the graph, `export(directory,
    path)` makes it (zhner.export.cache_graph passes the exporter: it needs torch, which this package never imports);
    without one that is an error saying how to make it."""
    directory, path = cached_graph(model)
    if path.is_file():
        return directory, path
    if export is None:
        raise ZhnerError(f"no exported graph for this model in the cache yet ({path}): make it once with "
                         "`zhner predict --runtime onnx -m MODEL` or zhner.export.cache_graph(MODEL), where torch is "
                         "installed", directory)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZhnerError(f"cannot create the graph cache ({exc.strerror}); set $ZHNER_CACHE to a writable folder",
                         path.parent) from None
    export(directory, path)  # written to a temporary file and renamed into place
    return directory, path

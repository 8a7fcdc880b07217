"""The models shipped inside the package, by name: `zhner.load("zh-small")`, `zhner.load("zh-accurate")`, and
`zhner.load()` for the default (zh-small, the faster one).

A name maps to a model directory under zhner/resources/. A model that is not trained yet in this checkout (a fresh
clone before configs/flat_general.yaml is run) is named but absent: loading it is an error that says so.
"""
from __future__ import annotations

from pathlib import Path

from zhner.errors import ZhnerError

RESOURCES = Path(__file__).resolve().parent / "resources"
# name -> (directory under resources/, one line for the user)
SHIPPED = {
    "zh-small": ("default_model", "FLAT, PER/LOC/ORG, trained on MSRA + Weibo + Resume"),
    "zh-accurate": ("accurate_model", "FLAT + LAC's frozen BiGRU features, PER/LOC/ORG, trained on MSRA + Weibo + Resume"),
}
DEFAULT_NAME = "zh-small"
WEIGHTS = "model.safetensors"  # = zhner.pipeline.WEIGHTS (not imported: that loads torch)
ONNX_FILE = "model.onnx"  # = zhner.runtime.tagger.ONNX_FILE (not imported: the runtime imports numpy)


# the general PER/LOC/ORG tagger shipped inside the package (trained with configs/flat_general.yaml); absent in a fresh clone
DEFAULT_MODEL = RESOURCES / SHIPPED[DEFAULT_NAME][0]


def default_model_dir() -> Path | None:
    """The shipped default model directory, or None when this installation has none (e.g. a clone before it is trained)."""
    return DEFAULT_MODEL if (DEFAULT_MODEL / WEIGHTS).is_file() else None


def shipped_names() -> list[str]:
    return list(SHIPPED)


def shipped_dir(name: str) -> Path:
    """The directory of a shipped model; a ZhnerError when the name is unknown or this installation lacks its files."""
    if name not in SHIPPED:
        raise ZhnerError(f"unknown model name {name!r}; shipped models: {', '.join(SHIPPED)} (or give a model directory)")
    directory = RESOURCES / SHIPPED[name][0]
    if not (directory / WEIGHTS).is_file():
        raise ZhnerError(f"the shipped model {name} is not in this installation (no {directory / WEIGHTS}): pass a model directory")
    return directory


def resolve_model(name_or_path: str | Path | None = None) -> str | Path:
    """The model directory of `zhner.load`'s argument: None -> the default shipped model; a shipped name -> its
    directory; anything else is a path (a string without a path separator that is no directory: an unknown name)."""
    if name_or_path is None:
        return shipped_dir(DEFAULT_NAME)
    if isinstance(name_or_path, str) and name_or_path in SHIPPED:
        return shipped_dir(name_or_path)
    text = str(name_or_path)
    looks_like_name = isinstance(name_or_path, str) and "/" not in text and "\\" not in text and text.strip() != ""
    if not looks_like_name:
        return name_or_path  # as given: Path("") would be ".", and an empty name is an error of its own
    try:
        exists = Path(text).exists()
    except OSError:  # e.g. a name too long for the file system: the loader names the problem
        return name_or_path
    if not exists:
        raise ZhnerError(
            f"unknown model {text!r}: neither a shipped model ({', '.join(SHIPPED)}) nor a model directory"
        )
    return name_or_path


def shipped_name(directory: str | Path) -> str | None:
    """The name of the shipped model whose directory this is; None for any other directory."""
    try:
        resolved = Path(directory).resolve()
    except (OSError, RuntimeError):
        return None
    return next((name for name, (folder, _) in SHIPPED.items() if resolved == RESOURCES / folder), None)


def onnx_file(directory: str | Path, onnx_path: str | Path | None = None) -> Path:
    """The exported graph of a model directory: `onnx_path`, else DIRECTORY/model.onnx. A shipped model carries none
    (its directory belongs to the installed package): asking for it is an error that says how to export one."""
    if onnx_path is not None:
        return Path(onnx_path)
    path = Path(directory) / ONNX_FILE
    name = shipped_name(directory)
    if name is not None and not path.is_file():
        raise ZhnerError(f"the shipped model {name} carries no {ONNX_FILE}: export one with `zhner export {name} -o "
                         f"FILE.onnx` and give that file (zhner predict --onnx FILE.onnx, RuntimeTagger.load({name!r}, "
                         "'FILE.onnx'))")
    return path

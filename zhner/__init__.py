"""zhner: Chinese named entity recognition with knowledge-shaped Transformer taggers.

    import zhner
    tagger = zhner.load()                    # the shipped model, "zh-small"
    for ent in tagger.predict("张三在北京大学工作。"):   # or tagger("...")
        print(ent.text, ent.type, ent.start, ent.end, round(ent.score, 2))
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not imported at run time: `import zhner` stays light (torch is imported by load)
    import torch

    from zhner.classifier import Classifier
    from zhner.tagger import Tagger

__version__ = "0.1.0"

__all__ = ["Classifier", "Entity", "Tagger", "ZhnerError", "__version__", "load", "shipped_models"]


def __getattr__(name: str):
    # Keep `import zhner` light: torch is imported only when the tagger is asked for.
    if name == "Tagger":
        from zhner.tagger import Tagger

        return Tagger
    if name == "Classifier":
        from zhner.classifier import Classifier

        return Classifier
    if name == "Entity":
        from zhner.entity import Entity

        return Entity
    if name == "ZhnerError":
        from zhner.errors import ZhnerError

        return ZhnerError
    raise AttributeError(name)


def shipped_models() -> list[str]:
    """The names `zhner.load` takes for the models shipped inside the package (the first is the default)."""
    from zhner.shipped import shipped_names

    return shipped_names()


def load(model: str | Path | None = None, device: str | torch.device = "cpu", threads: int | None = 1) -> Tagger | Classifier:
    """A trained model, ready to call: a Tagger (finds entities) or a Classifier (labels sentences), whichever the
    model was trained for.

    model: None for the default shipped model ("zh-small"), the name of a shipped model (`shipped_models()`), or the
        path of a model directory (what `zhner train -o DIR` writes).
    device: "cpu", "cuda" (or "cuda:N"), "auto" (the GPU when CUDA is available), or a torch.device.
    threads: the torch threads each prediction runs with: 1 (the default, as the `zhner` command), more on an idle
        machine with long texts, or None to leave torch's own setting alone. Set it later as `tagger.threads`.

    An unknown name, a missing directory or device is a zhner.ZhnerError (one line)."""
    import torch

    from zhner.classifier import Classifier
    from zhner.device import resolve_device
    from zhner.pipeline import Pipeline
    from zhner.shipped import resolve_model
    from zhner.tagger import Tagger

    from zhner.errors import ZhnerError
    from zhner.pipeline import check_threads

    if model is not None and not isinstance(model, (str, Path)):
        raise TypeError(f"model must be a shipped name, a directory path or None, not {type(model).__name__}")
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise TypeError(f"device must be a string (\"cpu\", \"cuda\", \"cuda:N\" or \"auto\"), not {type(device).__name__}")
    check_threads(threads)
    try:
        target = resolve_device(device)  # a bad device fails before the model is read
    except ZhnerError as exc:  # its messages name the CLI's option; here it is a keyword
        raise ZhnerError(str(exc).replace("--device", "device")) from None
    directory = resolve_model(model)
    pipeline = (Tagger if Pipeline.task_kind(directory) == "tagging" else Classifier).load(directory)
    pipeline.model.to(target)
    pipeline.threads = threads
    return pipeline

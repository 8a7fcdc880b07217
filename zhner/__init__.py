"""zhner: Chinese named entity recognition with knowledge-shaped Transformer taggers.

    import zhner
    tagger = zhner.load()                    # the shipped model, "zh-small"
    for ent in tagger.predict("张三在北京大学工作。"):
        print(ent.text, ent.type, ent.start, ent.end, round(ent.score, 2))
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

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


def load(model: str | Path | None = None, device: str = "cpu") -> Any:
    """A trained pipeline: a Tagger (span tagging) or a Classifier (sentence classification).

    model: None for the default shipped model ("zh-small"), the name of a shipped model (`shipped_models()`), or the
    path of a model directory (what `zhner train -o DIR` writes). device: "cpu", "cuda" (or "cuda:N"), or "auto" (the
    GPU when CUDA is available). An unknown name, a missing directory or device is a zhner.ZhnerError."""
    from zhner.classifier import Classifier
    from zhner.device import resolve_device
    from zhner.pipeline import Pipeline
    from zhner.shipped import resolve_model
    from zhner.tagger import Tagger

    from zhner.errors import ZhnerError

    try:
        target = resolve_device(device)  # a bad device fails before the model is read
    except ZhnerError as exc:  # its messages name the CLI's option; here it is a keyword
        raise ZhnerError(str(exc).replace("--device", "device")) from None
    directory = resolve_model(model)
    pipeline = (Tagger if Pipeline.task_kind(directory) == "tagging" else Classifier).load(directory)
    pipeline.model.to(target)
    return pipeline

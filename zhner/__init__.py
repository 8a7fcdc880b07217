"""zhner: Chinese named entity recognition with knowledge-shaped Transformer taggers."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Classifier", "Tagger", "ZhnerError", "__version__", "load"]


def __getattr__(name: str):
    # Keep `import zhner` light: torch is imported only when the tagger is asked for.
    if name == "Tagger":
        from zhner.tagger import Tagger

        return Tagger
    if name == "Classifier":
        from zhner.classifier import Classifier

        return Classifier
    if name == "ZhnerError":
        from zhner.errors import ZhnerError

        return ZhnerError
    raise AttributeError(name)


def load(directory):
    """The pipeline saved in a model directory: a Tagger (span tagging) or a Classifier (sentence classification)."""
    from zhner.classifier import Classifier
    from zhner.pipeline import Pipeline
    from zhner.tagger import Tagger

    return (Tagger if Pipeline.task_kind(directory) == "tagging" else Classifier).load(directory)

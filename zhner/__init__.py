"""zhner: Chinese named entity recognition with knowledge-shaped Transformer taggers."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Tagger", "ZhnerError", "__version__"]


def __getattr__(name: str):
    # Keep `import zhner` light: torch is imported only when the tagger is asked for.
    if name == "Tagger":
        from zhner.tagger import Tagger

        return Tagger
    if name == "ZhnerError":
        from zhner.errors import ZhnerError

        return ZhnerError
    raise AttributeError(name)

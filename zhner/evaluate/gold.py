"""Gold data against the model scored on it."""
from __future__ import annotations

from collections.abc import Sequence

from zhner.data.corpus import Corpus


def unknown_labels_warning(corpus: Corpus, labels: Sequence[str]) -> str | None:
    """A warning when gold data holds labels a model that predicts `labels` never predicts (None when it holds none):
    entity types of a tagged corpus (PERSON in the gold file, PER in the model: every such entity counts as missed),
    or sentence labels of a classification corpus (every such sentence counts as wrong)."""
    tagged = corpus.scheme is not None
    unknown = sorted((corpus.types() if tagged else {s.label for s in corpus}) - set(labels))
    if not unknown:
        return None
    if tagged:
        return (f"{corpus.path}: entity types {', '.join(unknown)} are not among the model's labels "
                f"({', '.join(labels)}); their entities all count as missed")
    return (f"{corpus.path}: labels {', '.join(unknown)} are not among the model's ({', '.join(labels)}); "
            "their sentences all count as wrong")

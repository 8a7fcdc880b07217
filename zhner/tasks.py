"""Tasks: what is specific to span tagging or to sentence classification, so that the trainer, the model directory,
evaluate, predict, serve and export need not know which one they run.

A task owns its labels, how an example's annotation becomes targets (and a batch of them a tensor), the scorer and the
metric that selects the best epoch, the numbers a results table shows, and how a model's output becomes a prediction.
Its `to_dict()` is saved in vocab.json beside the fields.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from zhner.data.corpus import Corpus
from zhner.data.example import Example
from zhner.data.schemes import SCHEMES, all_tags, convert_tags, split_tag, trim_tags
from zhner.errors import ZhnerError
from zhner.evaluate.classification import ClassificationScorer
from zhner.evaluate.metrics import CLASSIFICATION_HEADLINE, NERScorer, headline

CLASSIFICATION_METRICS = CLASSIFICATION_HEADLINE  # any of them can select the best epoch (data.metric)


class SpanTagging:
    """One tag per token in a BIO / BIOES / BMES scheme; entities are the spans the tags encode. Selected on strict
    entity F1 (dev)."""

    kind = "tagging"
    metric = "f1_strict"
    target_key = "tags"

    def __init__(self, tags: list[str], scheme: str):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown tag scheme {scheme!r}")
        self.labels = list(tags)
        self.scheme = scheme
        self.index = {t: i for i, t in enumerate(self.labels)}

    @classmethod
    def build(cls, splits: dict[str, Corpus]) -> "SpanTagging":
        """Every tag of the scheme over the types seen in any split (splits disagree on rare types)."""
        scheme = splits["train"].scheme
        types = {split_tag(t)[1] for corpus in splits.values() for s in corpus for t in (s.tags or []) if t != "O"}
        return cls(all_tags(types, scheme), scheme)

    def has_target(self, example: Example) -> bool:
        return example.tags is not None

    def target(self, example: Example) -> dict[str, list[int]]:
        return {"tags": [self.index[t] for t in example.tags]}

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        out = torch.zeros(len(items), width, dtype=torch.long)
        for b, it in enumerate(items):
            out[b, : len(it["tags"])] = torch.tensor(it["tags"], dtype=torch.long)
        return {"tags": out}

    def predictions(self, model, batch: dict[str, torch.Tensor]) -> list[list[str]]:
        paths = [[self.labels[t] for t in path] for path in model.decode(batch)]
        if getattr(model, "crf", None) is None:  # a softmax head may emit I-X without B-X: read it as conlleval does
            paths = [convert_tags(tags, self.scheme, self.scheme) for tags in paths]
        return paths

    def finish(self, tokens: Sequence[str], tags: list[str]) -> list[str]:
        """The prediction for a sentence of `tokens` from the model's tags: no entity begins or ends on whitespace or an
        emoji, none lacks a letter or digit (`zhner.data.schemes.trim_tags`), whatever the model and its head."""
        return trim_tags(tokens, tags, self.scheme)

    def scorer(self, per_sentence: bool = False) -> "TaggingScorer":
        return TaggingScorer(self.scheme, per_sentence)

    def select(self, result: dict) -> float:
        return result["strict"]["f1"]

    def headline(self, result: dict) -> dict:
        return headline(result)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "labels": self.labels, "scheme": self.scheme}


class TaggingScorer(NERScorer):
    """NERScorer fed with examples: gold tags converted from the corpus's scheme to the model's."""

    def add_example(self, example: Example, predicted: Sequence[str], scheme: str) -> None:
        gold = list(example.tags or [])
        self.add(gold if scheme == self.scheme else convert_tags(gold, scheme, self.scheme), predicted, example.tokens)


class SentenceClassification:
    """One label per example; the prediction is the label with the highest probability, with every label's probability.
    Selected on `metric` (accuracy, or MCC for CoLA, macro-F1, F0.5 of the positive label)."""

    kind = "classification"
    target_key = "label"

    def __init__(self, labels: list[str], metric: str = "accuracy", positive: str | None = None):
        if metric not in CLASSIFICATION_METRICS:
            raise ZhnerError(f"unknown classification metric {metric!r}; expected one of {', '.join(CLASSIFICATION_METRICS)}")
        self.labels = list(labels)
        self.metric = metric
        self.positive = positive
        self.index = {t: i for i, t in enumerate(self.labels)}

    @classmethod
    def build(
        cls, splits: dict[str, Corpus], metric: str = "accuracy", positive: str | None = None
    ) -> "SentenceClassification":
        """The labels of train; a dev or test label train lacks is an error (the model could never predict it)."""
        labels = sorted({s.label for s in splits["train"] if s.label is not None})
        if len(labels) < 2:
            raise ZhnerError(f"a classification corpus needs at least two labels, train has {labels}", splits["train"].path)
        for corpus in splits.values():
            for ex in corpus:
                if ex.label is not None and ex.label not in labels:
                    raise ZhnerError(f"label {ex.label!r} is not in train ({', '.join(labels)})", corpus.path, ex.line)
        if positive is not None and positive not in labels:
            raise ZhnerError(f"data.positive: {positive!r} is not a label ({', '.join(labels)})", "config")
        return cls(labels, metric, positive)

    def has_target(self, example: Example) -> bool:
        return example.label is not None

    def target(self, example: Example) -> dict[str, int]:
        return {"label": self.index[example.label]}

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        return {"label": torch.tensor([it["label"] for it in items], dtype=torch.long)}

    def predictions(self, model, batch: dict[str, torch.Tensor]) -> list[dict]:
        probs = model.probabilities(batch)  # [B, C]
        best = probs.argmax(-1).tolist()
        return [
            {"label": self.labels[k], "scores": {label: round(p, 6) for label, p in zip(self.labels, row)}}
            for k, row in zip(best, probs.tolist())
        ]

    def finish(self, tokens: Sequence[str], prediction: dict) -> dict:
        """The prediction as the model made it (a label is not tied to tokens)."""
        return prediction

    def scorer(self) -> "LabelScorer":
        return LabelScorer(self.labels, self.positive)

    def select(self, result: dict) -> float:
        return result[self.metric]

    def headline(self, result: dict) -> dict:
        return headline(result)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "labels": self.labels, "metric": self.metric, "positive": self.positive}


class LabelScorer(ClassificationScorer):
    def add_example(self, example: Example, predicted: dict, scheme: str | None = None) -> None:
        # an example without tokens gets no label (the model is not called): it counts as wrong
        self.add(example.label, predicted["label"] if predicted["label"] is not None else "<none>")


Task = SpanTagging | SentenceClassification


def task_from_dict(d: dict) -> Task:
    if d.get("kind") == "classification":
        return SentenceClassification(list(d["labels"]), d.get("metric", "accuracy"), d.get("positive"))
    return SpanTagging(list(d["labels"]), d["scheme"])

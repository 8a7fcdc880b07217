"""The sentence classifier: a trained classification model as a pipeline from texts to labels with their scores.

    classifier = Classifier.load("runs/bert_sst2")
    classifier.predict(["a charming and often affecting journey ."])
    # [{"label": "1", "scores": {"0": 0.02, "1": 0.98}}]

A text of any length is classified whole: the model reads a long one in windows (the BERT classifier: 510 word pieces;
the TENER classifier: 512 characters) and averages their logits.
"""
from __future__ import annotations

from collections.abc import Iterable

from zhner.pipeline import Pipeline, check_positive, one_or_many, with_threads


class Classifier(Pipeline):
    """A trained sentence classifier. `zhner.load(directory)` gives one for a model trained to classify.

        classifier = zhner.load("runs/bert_sst2")
        classifier("a charming and often affecting journey .")  # {"label": "1", "scores": {"0": 0.02, "1": 0.98}}
        classifier.labels                                       # ['0', '1']

    Calling the classifier is `predict`; `threads` as for a Tagger (1 by default).
    """

    kind = "classification"

    def _empty(self) -> dict:
        """An empty text has no tokens: the model is not called, and no label is preferred."""
        share = round(1 / len(self.task.labels), 6)
        return {"label": None, "scores": {label: share for label in self.task.labels}}

    @with_threads
    def predict(self, texts: str | Iterable[str], batch_size: int = 32) -> dict | list[dict]:
        """{"label", "scores"}: the most probable label and every label's probability, of one text, or for each text of
        a list (a list of them)."""
        check_positive("batch_size", batch_size)
        texts, single = one_or_many(texts)
        predictions = self.predictions(self.examples(texts), batch_size)
        return predictions[0] if single else predictions

    def record(self, text: str, prediction: dict) -> dict:
        return {"text": text, **prediction}

    # -- the service's micro-batcher protocol (zhner.serve.batcher.Pieces): a text is one piece, whatever its length --
    def split(self, text: str) -> list[tuple[int, str]]:
        return [(0, text)]

    def piece_spans(self, chunks: list[str], batch_size: int, confidence: bool = False) -> list[dict]:
        return self.predict(chunks, batch_size)

    @staticmethod
    def join(text: str, pieces: list[tuple[int, str]], predictions: list[dict]) -> dict:
        return predictions[0]

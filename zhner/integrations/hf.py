"""zhner's entities as transformers' token-classification pipeline gives them with aggregation_strategy="simple":
one record per entity, {"entity_group", "score", "word", "start", "end"}, so code written for that pipeline reads
zhner's output unchanged.

    from zhner.integrations.hf import pipeline
    ner = pipeline("runs/flat_resume")           # or a loaded Tagger / zhner.runtime.RuntimeTagger; None: the shipped model
    ner("张三毕业于北京大学。")                    # [{"entity_group": "PER", "score": 0.98, "word": "张三", "start": 0, "end": 2}, ...]
    ner(["张三毕业于北京大学。", "李四在上海工作。"])  # one list per text

The mapping: entity_group = the entity's type; score = its probability under the CRF (Tagger.predict(confidence=True):
a Python float where transformers gives numpy.float32); word = text[start:end], the text itself (transformers decodes the
word pieces instead: for Chinese, characters joined by spaces, lower-cased, [UNK] for unknown ones); start, end =
character offsets, end exclusive, as in transformers.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zhner.errors import ZhnerError

HF_KEYS = ("entity_group", "score", "word", "start", "end")


def _field(entity: Any, name: str) -> Any:
    """A field of an entity given as a dict or as a record with attributes (.type .start .end .text .score)."""
    if isinstance(entity, Mapping):
        return entity.get(name)
    return getattr(entity, name, None)


def to_hf(entities: Iterable[Any]) -> list[dict]:
    """One text's zhner entities (with scores: predict(..., confidence=True)) as transformers' "simple" records."""
    records = []
    for entity in entities:
        score = _field(entity, "score")
        if score is None:
            raise ZhnerError("transformers-style records carry a score: predict with confidence=True")
        records.append({
            "entity_group": str(_field(entity, "type")), "score": float(score), "word": str(_field(entity, "text")),
            "start": int(_field(entity, "start")), "end": int(_field(entity, "end")),
        })
    return records


class TokenClassification:
    """A callable like transformers' pipeline("token-classification", aggregation_strategy="simple") over a zhner
    tagger: a string gives a list of records, a list of strings a list of such lists."""

    def __init__(self, tagger: Any, batch_size: int = 32):
        self.tagger, self.batch_size = tagger, batch_size

    def __call__(self, inputs: str | Sequence[str]) -> list[dict] | list[list[dict]]:
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        predictions = self.tagger.predict(texts, batch_size=self.batch_size, confidence=True)
        records = [to_hf(entities) for entities in predictions]
        return records[0] if isinstance(inputs, str) else records


def pipeline(model: str | Path | Any | None = None, batch_size: int = 32) -> TokenClassification:
    """The transformers-style callable of a model directory (loaded with zhner.load), of a loaded tagger (a Tagger or
    a zhner.runtime.RuntimeTagger), or of the shipped model (None)."""
    if model is None or isinstance(model, (str, Path)):
        import zhner
        from zhner.tagger import default_model_dir

        directory = model if model is not None else default_model_dir()
        if directory is None:
            raise ZhnerError("no model given and this installation ships no default model: pass a model directory")
        model = zhner.load(directory)
    if getattr(model, "task", None) is None or model.task.kind != "tagging":
        raise ZhnerError("transformers-style token classification needs a tagger (this model classifies sentences)")
    return TokenClassification(model, batch_size)

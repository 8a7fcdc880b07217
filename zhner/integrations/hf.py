"""zhner's entities as transformers' token-classification pipeline gives them: code written for
`transformers.pipeline("ner", ...)` reads zhner's output unchanged, and calls it the same way.

    from zhner.integrations.hf import pipeline
    ner = pipeline("runs/flat_resume")           # or "zh-accurate", a loaded Tagger / zhner.runtime.RuntimeTagger; None: zh-small
    ner("张三毕业于北京大学。")                    # [{"entity_group": "PER", "score": 0.98, "word": "张三", "start": 0, "end": 2}, ...]
    ner(["张三毕业于北京大学。", "李四在上海工作。"], batch_size=8)  # one list per text
    ner("张三毕业于北京大学。", aggregation_strategy="none")  # one record per character: {"entity": "B-PER", ...}
    ner.model.config.id2label                   # {0: "O", 1: "B-PER", ...}: the model's tags

The mapping: entity_group = the entity's type; score = its probability under the CRF (Tagger.predict(confidence=True):
a Python float where transformers gives numpy.float32); word = text[start:end], the text itself (transformers decodes the
word pieces instead: for Chinese, characters joined by spaces, lower-cased, [UNK] for unknown ones); start, end =
character offsets, end exclusive, as in transformers. aggregation_strategy "none" gives each token (character, or word
of a word model) of each entity with its tag in the model's scheme; zhner scores entities, not tokens, so each token
carries its entity's score. "simple", "first", "average" and "max" differ in transformers only on the word pieces of
one word: a zhner tagger has none, so they give the same records.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zhner.errors import ZhnerError

HF_KEYS = ("entity_group", "score", "word", "start", "end")
TOKEN_KEYS = ("entity", "score", "index", "word", "start", "end")  # aggregation_strategy="none"
STRATEGIES = ("none", "simple", "first", "average", "max")
DEFAULT_STRATEGY = "simple"  # transformers' default is "none"; zhner's output has always been entities
UNSUPPORTED = ("stride", "offset_mapping", "is_split_into_words", "delimiter", "num_workers")


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


def strategy_name(strategy: Any) -> str:
    """An aggregation_strategy as transformers takes it (a name in any case, or its AggregationStrategy enum)."""
    name = getattr(strategy, "value", strategy)
    if not isinstance(name, str) or name.lower() not in STRATEGIES:
        raise ValueError(f"aggregation_strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    return name.lower()


class ModelConfig:
    """What transformers code reads from `ner.model.config`: the model's tags by id and ids by tag."""

    def __init__(self, tags: Sequence[str], name_or_path: str):
        self.id2label = dict(enumerate(tags))
        self.label2id = {tag: i for i, tag in enumerate(tags)}
        self.num_labels = len(tags)
        self.name_or_path = self._name_or_path = name_or_path

    def __repr__(self) -> str:
        return f"ModelConfig(id2label={self.id2label})"


class TaggerModel:
    """`ner.model`: the zhner tagger (its attributes are read through), with transformers' `config`."""

    def __init__(self, tagger: Any):
        self.tagger = tagger
        directory = getattr(tagger, "directory", None)
        self.config = ModelConfig(_tags(tagger), str(directory) if directory is not None else "")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tagger, name)


class TokenClassification:
    """A callable like transformers' `pipeline("token-classification")` over a zhner tagger: a string gives a list of
    records, a list of strings a list of such lists. `aggregation_strategy` and `batch_size` are taken when it is made
    and at each call, `ignore_labels` (entity types or tags left out; default ["O"]) too."""

    def __init__(self, tagger: Any, batch_size: int = 32, aggregation_strategy: Any = DEFAULT_STRATEGY,
                 ignore_labels: Sequence[str] | None = None):
        self.tagger = tagger
        self.model = TaggerModel(tagger)
        self.batch_size = batch_size
        self.aggregation_strategy = strategy_name(aggregation_strategy)
        self.ignore_labels = list(ignore_labels) if ignore_labels is not None else ["O"]
        self._scheme = _scheme(tagger)
        self._unit = getattr(getattr(tagger, "featurizer", None), "unit", "char")

    @property
    def device(self) -> Any:
        """Where the model runs (a torch.device; "cpu" for the torch-free runtime)."""
        return getattr(self.tagger, "device", "cpu")

    def __call__(self, inputs: str | Iterable[str], batch_size: int | None = None, aggregation_strategy: Any = None,
                 ignore_labels: Sequence[str] | None = None, **unsupported: Any) -> list[dict] | list[list[dict]]:
        if unsupported:
            known = [name for name in unsupported if name in UNSUPPORTED]
            raise TypeError(f"{', '.join(known or unsupported)}: not taken by zhner's token classification (it reads "
                            "raw text of any length, cut and stitched by zhner)")
        if inputs is None or isinstance(inputs, bytes) or not isinstance(inputs, (str, Iterable)):
            raise TypeError(f"inputs must be a string or a list of strings, not {type(inputs).__name__}")
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        strategy = strategy_name(aggregation_strategy) if aggregation_strategy is not None else self.aggregation_strategy
        ignored = set(ignore_labels if ignore_labels is not None else self.ignore_labels)
        size = batch_size if batch_size is not None else self.batch_size
        predictions = self.tagger.predict(texts, batch_size=size, confidence=True)
        if strategy == "none":
            records = [[r for r in self._token_records(text, entities) if r["entity"] not in ignored]
                       for text, entities in zip(texts, predictions)]
        else:
            records = [[r for r in to_hf(entities) if r["entity_group"] not in ignored] for entities in predictions]
        return records[0] if single else records

    def _token_records(self, text: str, entities: Iterable[Any]) -> list[dict]:
        """aggregation_strategy="none": each token of each entity, {"entity": its tag, "score": the entity's,
        "index": the token's position counting transformers' [CLS] as 0, "word", "start", "end"}; whitespace, which
        a word-piece tokenizer drops, has no record."""
        from zhner.data.example import words_of
        from zhner.data.schemes import spans_to_tags

        offsets = words_of(text)[1] if self._unit == "word" else [(i, i + 1) for i in range(len(text))]
        first_token = {start: i for i, (start, _) in enumerate(offsets)}
        records = []
        for entity in to_hf(entities):
            index = first_token.get(entity["start"])
            if index is None:  # not on a token boundary (cannot happen with zhner's own entities): no token records
                continue
            tokens = []
            while index < len(offsets) and offsets[index][1] <= entity["end"]:
                tokens.append((index, *offsets[index]))
                index += 1
            tags = spans_to_tags(len(tokens), [(0, len(tokens), entity["entity_group"])], self._scheme)
            for (i, start, end), tag in zip(tokens, tags):
                if text[start:end].strip():
                    records.append({"entity": tag, "score": entity["score"], "index": i + 1, "word": text[start:end],
                                    "start": start, "end": end})
        return records


def _tags(tagger: Any) -> list[str]:
    """The model's tags, "O" included, in the order of its output layer."""
    featurizer = getattr(tagger, "featurizer", None)
    if featurizer is not None:
        return list(featurizer.tags)
    return list(tagger.tags)  # zhner.runtime.RuntimeTagger


def _scheme(tagger: Any) -> str:
    featurizer = getattr(tagger, "featurizer", None)
    scheme = featurizer.scheme if featurizer is not None else tagger.task.scheme
    return scheme or "bio"


def pipeline(model: str | Path | Any | None = None, batch_size: int = 32, aggregation_strategy: Any = DEFAULT_STRATEGY,
             ignore_labels: Sequence[str] | None = None, device: str | None = None) -> TokenClassification:
    """The transformers-style callable of a model directory or shipped name (loaded with zhner.load), of a loaded
    tagger (a Tagger or a zhner.runtime.RuntimeTagger), or of the shipped model (None). `device`: where a model given
    by name or path runs ("cpu", "cuda", "auto"; a loaded tagger stays where it is)."""
    if model is None or isinstance(model, (str, Path)):
        import zhner
        from zhner.tagger import default_model_dir

        directory = model if model is not None else default_model_dir()
        if directory is None:
            raise ZhnerError("no model given and this installation ships no default model: pass a model directory")
        model = zhner.load(directory, device=device or "cpu")
    elif device is not None:
        raise ZhnerError("device is for a model given by name or path: move a loaded tagger with tagger.to(device)")
    if getattr(model, "task", None) is None or model.task.kind != "tagging":
        raise ZhnerError("transformers-style token classification needs a tagger (this model classifies sentences)")
    return TokenClassification(model, batch_size, aggregation_strategy, ignore_labels)

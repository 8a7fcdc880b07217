"""A spaCy pipeline component: zhner's entities as doc.ents on any Chinese tokenizer.

    import spacy
    nlp = spacy.blank("zh")                                   # the character segmenter; jieba and pkuseg work too
    nlp.add_pipe("zhner", config={"model": "runs/flat_resume"})  # or "zh-accurate"; no "model": zh-small
    doc = nlp("张三毕业于北京大学。")
    [(e.text, e.label_, e._.zhner_score) for e in doc.ents]   # [("张三", "PER", 0.98), ("北京大学", "ORG", 1.0)]

The factory "zhner" is registered through the entry point group spacy_factories (pyproject.toml), so an installed zhner
needs no import. zhner finds entities in characters; a token boundary of another segmenter can fall inside one. Such a
span is aligned as `alignment_mode` says ("expand" to the tokens it touches, the default; "contract" to the tokens inside
it; "strict": left out of doc.ents) and recorded in doc._.zhner_misaligned, as are spans that overlap once expanded
(the first is kept): none is dropped silently, and doc._.zhner_entities keeps every entity with its exact offsets.
`nlp.pipe` tags the texts of each batch in one Tagger.predict call. `nlp.to_disk` copies the model's files into the
component's directory, so `spacy.load` of that directory needs only zhner installed.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import minibatch

from zhner.errors import ZhnerError

MODEL_FILES = ("config.yaml", "vocab.json", "model.safetensors", "metrics.json", "lexicon.txt", "model.onnx")
RUNTIMES = ("torch", "onnx")
ALIGNMENT_MODES = ("expand", "contract", "strict")
SETTINGS = "zhner.json"

Span.set_extension("zhner_score", default=None, force=True)
Doc.set_extension("zhner_entities", default=None, force=True)
Doc.set_extension("zhner_misaligned", default=None, force=True)


@Language.factory(
    "zhner",
    default_config={"model": None, "runtime": "torch", "alignment_mode": "expand", "batch_size": 32},
)
def make_zhner(
    nlp: Language, name: str, model: str | None, runtime: str, alignment_mode: str, batch_size: int
) -> "ZhnerEntities":
    """The factory spaCy calls for nlp.add_pipe("zhner", config={...})."""
    return ZhnerEntities(name, model, runtime, alignment_mode, batch_size)


class ZhnerEntities:
    """Sets doc.ents (span._.zhner_score: the entity's probability under the CRF, None without a CRF head),
    doc._.zhner_entities (zhner's records, exact character offsets) and doc._.zhner_misaligned (the entities whose
    offsets are not token boundaries, or that overlap once aligned, with "action": what was done to each)."""

    def __init__(self, name: str, model: str | None, runtime: str = "torch", alignment_mode: str = "expand",
                 batch_size: int = 32):
        if runtime not in RUNTIMES:
            raise ZhnerError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}", f"components.{name}.runtime")
        if alignment_mode not in ALIGNMENT_MODES:
            raise ZhnerError(f"alignment_mode must be one of {', '.join(ALIGNMENT_MODES)}, not {alignment_mode!r}",
                             f"components.{name}.alignment_mode")
        self.name, self.model, self.runtime = name, model, runtime
        self.alignment_mode, self.batch_size = alignment_mode, batch_size
        self._tagger: Any = None  # loaded on first use: spacy.load calls from_disk right after building the component

    @property
    def tagger(self) -> Any:
        if self._tagger is None:
            self._tagger = _load_tagger(self.model, self.runtime)
        return self._tagger

    def __call__(self, doc: Doc) -> Doc:
        return next(self.pipe([doc]))

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        for batch in minibatch(docs, size=batch_size or self.batch_size):
            scored = _has_crf(self.tagger)
            predictions = self.tagger.predict([doc.text for doc in batch], batch_size=self.batch_size, confidence=scored)
            for doc, entities in zip(batch, predictions):
                self.set_entities(doc, entities)
                yield doc

    def set_entities(self, doc: Doc, entities: list[dict]) -> None:
        spans, misaligned = [], []
        for entity in entities:
            span = doc.char_span(entity["start"], entity["end"], label=entity["type"], alignment_mode=self.alignment_mode)
            exact = span is not None and (span.start_char, span.end_char) == (entity["start"], entity["end"])
            if span is None or len(span) == 0:
                misaligned.append({**entity, "action": "dropped"})
                continue
            if spans and span.start < spans[-1].end:  # entities do not overlap; aligned ones can
                misaligned.append({**entity, "action": "overlap dropped"})
                continue
            if not exact:
                misaligned.append({**entity, "action": self.alignment_mode})
            span._.zhner_score = entity.get("score")
            spans.append(span)
        doc.ents = spans
        doc._.zhner_entities = entities
        doc._.zhner_misaligned = misaligned

    # -- serialisation: the model's files travel with the pipeline ---------------------------------------------------
    def to_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        source = _model_dir(self.model)
        for name in MODEL_FILES:
            if (source / name).is_file() and (name != "model.onnx" or self.runtime == "onnx"):
                shutil.copyfile(source / name, path / name)
        settings = {"runtime": self.runtime, "alignment_mode": self.alignment_mode, "batch_size": self.batch_size}
        (path / SETTINGS).write_text(json.dumps(settings), encoding="utf-8")

    def from_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> "ZhnerEntities":
        path = Path(path)
        settings = json.loads((path / SETTINGS).read_text(encoding="utf-8"))
        self.runtime, self.alignment_mode = settings["runtime"], settings["alignment_mode"]
        self.batch_size = int(settings["batch_size"])
        self.model, self._tagger = str(path), None
        return self


def _model_dir(model: str | None) -> Path:
    """The component's "model": a model directory or a shipped name (zh-small, zh-accurate); none: the default."""
    if model is not None:
        from zhner.shipped import resolve_model

        return Path(resolve_model(model))
    from zhner.tagger import default_model_dir

    shipped = default_model_dir()
    if shipped is None:
        raise ZhnerError("no model given and this installation ships no default model: set the component's \"model\"")
    return shipped


def _load_tagger(model: str | None, runtime: str) -> Any:
    directory = _model_dir(model)
    if runtime == "onnx":
        from zhner.runtime import RuntimeTagger

        return RuntimeTagger.load(directory)
    import zhner

    tagger = zhner.load(directory)
    if tagger.task.kind != "tagging":
        raise ZhnerError("the spaCy component needs a tagger; this model classifies sentences", directory)
    return tagger


def _has_crf(tagger: Any) -> bool:
    """Whether the tagger can give confidences (a CRF head)."""
    if hasattr(tagger, "has_crf"):
        return tagger.has_crf
    return getattr(tagger.model, "crf", None) is not None

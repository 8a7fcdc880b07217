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

What a doc holds is plain data (dicts, floats), so `doc.to_bytes()`, `DocBin(store_user_data=True)` and
`nlp.pipe(n_process=2)` carry it. The model is loaded when the component is made (a bad "model" fails at add_pipe);
`score` is spaCy's own entity scorer, so `nlp.evaluate` and `spacy evaluate` report ents_p / ents_r / ents_f.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import minibatch

from zhner.errors import ZhnerError
from zhner.fileio import (
    LEXICON_FILE, MODEL_FILE, SMALL_JSON, VOCAB_FILE, FileKind, copy_file, model_directory, read_committed, read_json,
    replacing, require_mapping, writing,
)

BIG_FILE = FileKind("a weights file", 2**40)  # checked by its own reader when loaded
MODEL_FILES = {  # the files of a model directory that travel with the pipeline, each with the bound of its kind
    "config.yaml": MODEL_FILE, "vocab.json": VOCAB_FILE, "model.safetensors": BIG_FILE, "metrics.json": MODEL_FILE,
    "lexicon.txt": LEXICON_FILE, "encoder_reference.json": MODEL_FILE, "model.onnx": BIG_FILE,
}
RUNTIMES = ("torch", "onnx")
ALIGNMENT_MODES = ("expand", "contract", "strict")
SETTINGS = "zhner.json"
SAVED = "zhner_saved"  # nlp.meta key: {component name: its "model" setting} of the components whose model is saved with it
ASSIGNS = ["doc.ents", "token.ent_iob", "token.ent_type", "span._.zhner_score", "doc._.zhner_entities",
           "doc._.zhner_misaligned"]

Span.set_extension("zhner_score", default=None, force=True)
Doc.set_extension("zhner_entities", default=None, force=True)
Doc.set_extension("zhner_misaligned", default=None, force=True)


@Language.factory(
    "zhner",
    default_config={"model": None, "runtime": "torch", "alignment_mode": "expand", "batch_size": 32,
                    "scorer": {"@scorers": "spacy.ner_scorer.v1"}},
    assigns=ASSIGNS,
    default_score_weights={"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None},
)
def make_zhner(
    nlp: Language, name: str, model: str | None, runtime: str, alignment_mode: str, batch_size: int,
    scorer: Callable | None = None,
) -> "ZhnerEntities":
    """The factory spaCy calls for nlp.add_pipe("zhner", config={...}): the model is loaded here, so a bad one fails
    at once, except in a pipeline being loaded from disk (spacy.load), whose saved copy of the model `from_disk` reads."""
    saved = nlp.meta.get(SAVED)
    restoring = isinstance(saved, dict) and name in saved and saved[name] == model
    component = ZhnerEntities(name, model, runtime, alignment_mode, batch_size, scorer, load=not restoring)
    nlp.meta[SAVED] = {**(saved if isinstance(saved, dict) else {}), name: model}  # written to meta.json by to_disk
    return component


class ZhnerEntities:
    """Sets doc.ents (span._.zhner_score: the entity's probability under the CRF, None without a CRF head),
    doc._.zhner_entities (zhner's records, exact character offsets) and doc._.zhner_misaligned (the entities whose
    offsets are not token boundaries, or that overlap once aligned, with "action": what was done to each)."""

    def __init__(self, name: str, model: str | None, runtime: str = "torch", alignment_mode: str = "expand",
                 batch_size: int = 32, scorer: Callable | None = None, load: bool = True):
        if model is not None and not isinstance(model, str):
            raise ZhnerError(f"model must be a model directory or a shipped name (zh-small, zh-accurate), not {model!r}",
                             f"components.{name}.model")
        if runtime not in RUNTIMES:
            raise ZhnerError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}", f"components.{name}.runtime")
        if alignment_mode not in ALIGNMENT_MODES:
            raise ZhnerError(f"alignment_mode must be one of {', '.join(ALIGNMENT_MODES)}, not {alignment_mode!r}",
                             f"components.{name}.alignment_mode")
        self.name, self.model, self.runtime = name, model, runtime
        self.alignment_mode, self.batch_size = alignment_mode, batch_size
        self.scorer = scorer if scorer is not None else _ner_scorer()
        self._tagger: Any = None
        if load:  # spacy.load builds the component, then from_disk reads the saved model: it is loaded there instead
            self._tagger = _load_tagger(model, runtime, f"components.{name}.model")

    @property
    def tagger(self) -> Any:
        if self._tagger is None:
            self._tagger = _load_tagger(self.model, self.runtime, f"components.{self.name}.model")
        return self._tagger

    @property
    def labels(self) -> tuple[str, ...]:
        """The entity types the model finds (nlp.pipe_labels lists them); none while spacy.load has yet to read the
        saved model (spaCy asks for them as it reads meta.json)."""
        tagger = self._tagger
        if tagger is None:
            return ()
        if hasattr(tagger, "labels"):
            return tuple(tagger.labels)
        return tuple(sorted({tag.split("-", 1)[1] for tag in tagger.tags if tag != "O"}))

    def score(self, examples: Iterable[Any], **kwargs: Any) -> dict[str, Any]:
        """spaCy's entity scores of the docs this component tagged against the references: ents_p, ents_r, ents_f and
        ents_per_type (what nlp.evaluate and `spacy evaluate` report)."""
        return self.scorer(examples, **kwargs)

    def __call__(self, doc: Doc) -> Doc:
        return next(self.pipe([doc]))

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        for batch in minibatch(docs, size=batch_size or self.batch_size):
            scored = _has_crf(self.tagger)
            predictions = self.tagger.predict([doc.text for doc in batch], batch_size=self.batch_size, confidence=scored)
            for doc, entities in zip(batch, predictions):
                self.set_entities(doc, entities)
                yield doc

    def set_entities(self, doc: Doc, entities: list[Any]) -> None:
        # plain dicts (not zhner.Entity): what the doc holds must go through doc.to_bytes (DocBin, nlp.pipe(n_process))
        entities = [entity.to_dict() if hasattr(entity, "to_dict") else dict(entity) for entity in entities]
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
        """The model's files (as last saved: zhner.fileio.read_committed) copied into `path`, spaCy's folder of this
        component, each written as a new file of its own and renamed into place, as the trainer writes: a symlink or
        FIFO planted at a name is replaced, never written through. A missing or incomplete model directory is an
        error naming it, before anything is written."""
        path = Path(path)
        source = model_directory(_model_dir(self.model))
        weights = "model.onnx" if self.runtime == "onnx" else "model.safetensors"

        def copy(source_path: Callable[[str], Path]) -> None:
            names = [n for n in MODEL_FILES if os.path.lexists(source_path(n)) and (n != "model.onnx" or self.runtime == "onnx")]
            missing = next((n for n in ("config.yaml", "vocab.json", weights) if n not in names), None)
            if missing is not None:
                raise ZhnerError(f"not a model directory of zhner's: no {missing}", source)
            with writing(path):
                path.mkdir(parents=True, exist_ok=True)
            for name in names:
                copy_file(source_path(name), path / name, MODEL_FILES[name])

        read_committed(source, copy)  # a save into the model meanwhile: copied again, from the new set
        settings = {"runtime": self.runtime, "alignment_mode": self.alignment_mode, "batch_size": self.batch_size}
        with replacing(path / SETTINGS) as handle:
            handle.write(json.dumps(settings))

    def from_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> "ZhnerEntities":
        path = Path(path)
        settings = require_mapping(read_json(path / SETTINGS, SMALL_JSON), path / SETTINGS)
        runtime, alignment_mode, batch_size = (settings.get(k) for k in ("runtime", "alignment_mode", "batch_size"))
        if runtime not in RUNTIMES or alignment_mode not in ALIGNMENT_MODES or type(batch_size) is not int or batch_size < 1:
            raise ZhnerError("expected runtime, alignment_mode and a positive batch_size as to_disk writes them", path / SETTINGS)
        self.runtime, self.alignment_mode, self.batch_size = runtime, alignment_mode, batch_size
        self.model, self._tagger = str(path), None
        self._tagger = _load_tagger(self.model, self.runtime, path)  # the saved model is checked as the pipeline loads
        return self


def _ner_scorer() -> Callable:
    from spacy.scorer import get_ner_prf

    return get_ner_prf


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


def _load_tagger(model: str | None, runtime: str, where: str | Path) -> Any:
    """The component's tagger; a ZhnerError naming `where` (the config field, or the saved directory) when the model
    cannot be loaded."""
    try:
        directory = _model_dir(model)
        if runtime == "onnx":
            from zhner.runtime import RuntimeTagger

            return RuntimeTagger.load(directory)
        import zhner

        if zhner.Tagger.task_kind(directory) != "tagging":
            raise ZhnerError("the spaCy component needs a tagger; this model classifies sentences", directory)
        return zhner.load(directory)
    except ZhnerError as exc:
        if exc.where is not None:  # the problem is in a file of the model: that file is named
            raise
        raise ZhnerError(exc.message, str(where)) from None


def _has_crf(tagger: Any) -> bool:
    """Whether the tagger can give confidences (a CRF head)."""
    if hasattr(tagger, "has_crf"):
        return tagger.has_crf
    return getattr(tagger.model, "crf", None) is not None

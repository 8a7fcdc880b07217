"""The user-facing tagger: a trained model plus everything needed to run it, saved as one self-contained directory.

    tagger = Tagger.load("runs/tener_resume")
    tagger.predict(["张三毕业于北京大学。"])  # [[{"type": "NAME", "start": 0, "end": 2, "text": "张三"}, ...]]

A model directory holds config.yaml, vocab.json, model.safetensors, metrics.json and, for lattice models, lexicon.txt.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from zhner.config import Config, config_from_dict, dump_config
from zhner.data.batching import budget_batches
from zhner.data.corpus import Corpus, Example
from zhner.data.longtext import split_long_text, stitch
from zhner.data.schemes import convert_tags, tags_to_spans
from zhner.errors import ZhnerError
from zhner.evaluate.metrics import NERScorer
from zhner.fileio import atomic_write_text
from zhner.lexicon.lexicon import Lexicon
from zhner.models import MODELS
from zhner.models.base import SequenceTagger
from zhner.models.inputs import Featurizer
from zhner.nn.crf import DISALLOWED, allowed_transitions

CONFIG, VOCAB, WEIGHTS, METRICS, LEXICON = "config.yaml", "vocab.json", "model.safetensors", "metrics.json", "lexicon.txt"
MAX_CELLS = 2_000_000  # sentences x length^2 per batch: bounds the [B, H, L, L] attention tensors of long sentences
MEMORY_MB = 1024  # default memory budget of one model call at prediction; longer text is split (see `max_chars`)
# Longest piece `predict` tags whole: a longer text is cut at its sentence ends (its over-long sentences into windows of
# this size). The cost per character grows with a piece's length (attention is quadratic): MSRA test text as pieces of
# ~45 / 512 / 2,033 characters took 0.58 / 4.49 / 16.8 CPU s per 20,000 characters with the shipped FLAT model.
PIECE_CHARS = 512
OVERLAP = 32  # characters shared by neighbouring windows inside an over-long sentence (at most a quarter of a window)
MIN_CHUNK = 16
# the general PER/LOC/ORG tagger shipped inside the package (trained with configs/flat_general.yaml); absent in a fresh clone
DEFAULT_MODEL = Path(__file__).resolve().parent / "resources" / "default_model"
T = TypeVar("T")
Piece = tuple[int, str]  # (offset in the text, characters)


def default_model_dir() -> Path | None:
    """The shipped default model directory, or None when this installation has none (e.g. a clone before it is trained)."""
    return DEFAULT_MODEL if (DEFAULT_MODEL / WEIGHTS).is_file() else None


def run_in_batches(
    featurizer: Featurizer,
    sentences: Sequence[Sequence[str]],
    batch_size: int,
    max_cells: int,
    run: Callable[[dict[str, torch.Tensor], list[int]], list[T]],
    empty: T,
) -> list[T]:
    """`run(batch, lengths)` over sentences in length-aware batches bounded by `max_cells` (sentences x length^2), one
    result per sentence, in input order. Empty sentences get `empty` without a model call."""
    out: list[T | None] = [None] * len(sentences)
    lengths = [len(s) for s in sentences]
    for idx in budget_batches(lengths, batch_size, max_cells):
        todo = [i for i in idx if lengths[i] > 0]
        for i in idx:
            if lengths[i] == 0:
                out[i] = empty
        if not todo:
            continue
        batch = featurizer.collate([featurizer.encode(sentences[i]) for i in todo])
        for i, result in zip(todo, run(batch, [lengths[i] for i in todo])):
            out[i] = result
    return out  # type: ignore[return-value]


def tag_in_batches(
    featurizer: Featurizer,
    sentences: Sequence[Sequence[str]],
    batch_size: int,
    max_cells: int,
    decode: Callable[[dict[str, torch.Tensor], list[int]], list[list[int]]],
) -> list[list[str]]:
    """Tag sentences in length-aware batches bounded by `max_cells` (sentences x length^2); `decode(batch, lengths)` gives
    each sentence's tag ids. Empty sentences get [] without a model call. Shared by Tagger and zhner.export.OnnxTagger."""
    paths = run_in_batches(featurizer, sentences, batch_size, max_cells, decode, [])
    return [[featurizer.tags[t] for t in path] for path in paths]


def build_model(config: Config, featurizer: Featurizer) -> SequenceTagger:
    _, model_class = MODELS[config.model.name]
    constraints = allowed_transitions(featurizer.tags, featurizer.scheme)
    return model_class(config.model, featurizer.vocab_sizes(), len(featurizer.tags), constraints)


class Tagger:
    def __init__(self, model: SequenceTagger, featurizer: Featurizer, config: Config, metrics: dict | None = None):
        self.model = model.eval()
        self.featurizer = featurizer
        self.config = config
        self.metrics = metrics or {}
        self._max_chars: dict[float, int] = {}  # memory_mb -> max_chars: a binary search, asked once per text

    # -- persistence ----------------------------------------------------------------------------------------------
    def save(self, directory: str | Path, weights: dict[str, torch.Tensor] | None = None, lexicon: bool = True) -> None:
        """Write the model directory (each file atomically). `weights` defaults to the current model state;
        `lexicon=False` skips rewriting an unchanged lexicon.txt (the trainer saves at every new best epoch)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(directory / CONFIG, dump_config(self.config))
        atomic_write_text(directory / VOCAB, json.dumps(self.featurizer.to_dict(), ensure_ascii=False))
        if lexicon and self.featurizer.lexicon is not None:
            self.featurizer.lexicon.save(directory / LEXICON)
        state = weights if weights is not None else self.model.state_dict()
        # safetensors writes by path: write a temporary file, then rename it over the old one
        partial = directory / f".{WEIGHTS}.partial"
        try:
            save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(partial))
            partial.replace(directory / WEIGHTS)
        finally:
            partial.unlink(missing_ok=True)
        self.save_metrics(directory)

    def save_metrics(self, directory: str | Path) -> None:
        atomic_write_text(Path(directory) / METRICS, json.dumps(self.metrics, indent=2, ensure_ascii=False))

    @classmethod
    def load(cls, directory: str | Path) -> "Tagger":
        directory = Path(directory)
        if not directory.is_dir():
            raise ZhnerError("no such model directory", directory)
        raw = _read_yaml(directory / CONFIG)
        if isinstance(raw.get("model"), dict) and "crf_init" in raw["model"]:  # a full dump, as `save` writes
            raw["model"].setdefault("constrained_decoding", None)  # saved before the option: it decoded as it trained
        config = config_from_dict(raw, str(directory / CONFIG))
        vocab = _read_json(directory / VOCAB)
        lexicon = None
        if vocab.get("lexicon", vocab.get("words") is not None):  # older directories: a lattice model has words
            if not (directory / LEXICON).exists():
                raise ZhnerError("missing lexicon file of a lattice model", directory / LEXICON)
            lexicon = Lexicon.load(directory / LEXICON)
        try:
            featurizer = Featurizer.from_dict(vocab, lexicon)
        except (KeyError, TypeError, ValueError) as exc:
            raise ZhnerError(f"malformed vocabulary ({exc})", directory / VOCAB) from None
        model = build_model(config, featurizer)
        try:
            state = load_file(str(directory / WEIGHTS))
        except FileNotFoundError:
            raise ZhnerError("missing weights file", directory / WEIGHTS) from None
        except (SafetensorError, OSError, ValueError) as exc:
            raise ZhnerError(f"corrupt weights file ({exc})", directory / WEIGHTS) from None
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            first = str(exc).splitlines()[0]
            raise ZhnerError(f"weights do not fit the config/vocabulary: {first}", directory / WEIGHTS) from None
        metrics_path = directory / METRICS
        metrics = _read_json(metrics_path) if metrics_path.exists() else {}
        return cls(model, featurizer, config, metrics)

    # -- prediction -----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def tag(self, sentences: Sequence[Sequence[str]], batch_size: int = 32) -> list[list[str]]:
        """Tag character sequences (each at most a few hundred characters; see `predict` for long text)."""
        self.model.eval()
        device = next(self.model.parameters()).device

        def decode(batch: dict[str, torch.Tensor], lengths: list[int]) -> list[list[int]]:
            if device.type != "cpu":
                batch = {k: v.to(device) for k, v in batch.items()}
            return self.model.decode(batch)

        return tag_in_batches(self.featurizer, sentences, batch_size, MAX_CELLS, decode)

    def max_chars(self, memory_mb: float = MEMORY_MB) -> int:
        """The longest text one model call takes within `memory_mb`, by the model's own estimate (`inference_bytes`)."""
        if memory_mb not in self._max_chars:
            self._max_chars[memory_mb] = self._search_max_chars(memory_mb * 2**20)
        return self._max_chars[memory_mb]

    def _search_max_chars(self, budget: float) -> int:
        low, high = MIN_CHUNK, 1 << 20  # the answer is in [low, high]: binary search on a non-decreasing estimate
        if self.model.inference_bytes(high) <= budget:
            return high
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self.model.inference_bytes(mid) <= budget else (low, mid - 1)
        return low

    def piece_chars(self, memory_mb: float = MEMORY_MB) -> int:
        """The longest piece `predict` tags whole: PIECE_CHARS, or less where the memory budget demands it."""
        return min(PIECE_CHARS, self.max_chars(memory_mb))

    def split(self, text: str, memory_mb: float = MEMORY_MB) -> list[Piece]:
        """The pieces `predict` tags for `text`: the text itself, or its sentences (and windows) when it is longer than
        `piece_chars(memory_mb)`; see zhner.data.longtext."""
        max_len = self.piece_chars(memory_mb)
        return split_long_text(text, max_len, min(OVERLAP, max_len // 4))

    def piece_spans(self, chunks: Sequence[str], batch_size: int = 32, confidence: bool = False) -> list[list[tuple]]:
        """(start, end, type) spans of each chunk (each at most a few hundred characters), tagged in batches;
        with `confidence`, (start, end, type, probability of the span under the CRF) -- see `_scored_spans`."""
        if confidence:
            return run_in_batches(self.featurizer, chunks, batch_size, MAX_CELLS, self._scored_spans, [])
        return [tags_to_spans(tags, self.featurizer.scheme, strict=True) for tags in self.tag(chunks, batch_size)]

    @staticmethod
    def join(text: str, pieces: list[Piece], spans: list[list[tuple]]) -> list[dict]:
        """The pieces' spans stitched into the text's entities: [{"type", "start", "end", "text"(, "score")}]."""
        return [_entity(text, *span) for span in stitch(pieces, spans)]

    def predict(
        self, texts: Iterable[str], batch_size: int = 32, memory_mb: float = MEMORY_MB, confidence: bool = False
    ) -> list[list[dict]]:
        """Entities in each text: [{"type", "start", "end", "text"}], offsets in characters of the text, end exclusive.
        A text longer than `piece_chars(memory_mb)` is cut at sentence ends, an over-long sentence into overlapping
        windows, and the spans are stitched back (zhner.data.longtext): nothing is truncated, whatever the length.
        The pieces of all texts are tagged together, sorted by length, so one long line costs what its sentences do.
        `confidence=True` adds "score": the CRF's probability that the entity's characters carry exactly its tags
        (computed on the piece that found it)."""
        texts = list(texts)
        pieces = [self.split(text, memory_mb) for text in texts]
        chunks = [chunk for text_pieces in pieces for _, chunk in text_pieces]
        spans = iter(self.piece_spans(chunks, batch_size, confidence))
        return [self.join(text, tp, [next(spans) for _ in tp]) for text, tp in zip(texts, pieces)]

    @torch.no_grad()
    def _scored_spans(self, batch: dict[str, torch.Tensor], lengths: list[int]) -> list[list[tuple[int, int, str, float]]]:
        """Viterbi spans with their marginal probability: for a span i..j, P(y_i..y_j = the decoded tags), from the
        forward-backward scores (zhner.nn.crf.CRF.subpath_log_probs). In BIO a span also ends only if y_{j+1} is not
        I-X, so P(y_i..y_{j+1} = tags + I-X) is taken off; BIOES/BMES close a span with its own E-/S- tag."""
        self.model.eval()
        device = next(self.model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        emissions, mask, crf = self.model.emissions(batch), batch["mask"], self.model.crf
        tags, scheme = self.featurizer.tags, self.featurizer.scheme
        index = {t: i for i, t in enumerate(tags)}
        spans, queries, pairs = [], [], []  # per sentence spans; (b, i, tags) queries; per span (its query, BIO's or -1)
        for b, path in enumerate(crf.decode(emissions, mask)):
            spans.append(tags_to_spans([tags[t] for t in path], scheme, strict=True))
            for start, end, label in spans[-1]:
                queries.append((b, start, path[start:end]))
                inside = index.get(f"I-{label}")
                if scheme == "bio" and end < lengths[b] and inside is not None:
                    queries.append((b, start, path[start:end] + [inside]))
                    pairs.append((len(queries) - 2, len(queries) - 1))
                else:
                    pairs.append((len(queries) - 1, -1))
        probs = crf.subpath_log_probs(emissions, mask, queries).exp().tolist()
        scores = iter(probs[q] - (probs[x] if x >= 0 else 0.0) for q, x in pairs)
        return [[(s, e, t, min(1.0, max(0.0, next(scores)))) for s, e, t in sentence] for sentence in spans]

    def nbest(self, texts: Iterable[str], k: int = 5, batch_size: int = 32) -> list[list[dict]]:
        """The k most probable tag paths of each text, best first, by k-best Viterbi: [{"probability", "entities"}].
        Only for texts of one piece (at most `piece_chars()` characters): the paths of a cut text's pieces would
        combine into k^pieces candidates. Fewer than k when the text has fewer allowed paths."""
        texts = list(texts)
        for i, text in enumerate(texts):
            if len(text) > self.piece_chars():
                raise ZhnerError(f"n-best takes texts of at most {self.piece_chars()} characters, text {i} has {len(text)}")
        paths = run_in_batches(self.featurizer, texts, batch_size, MAX_CELLS, lambda b, n: self._nbest(b, n, k), [([], 1.0)])
        return [[_ranked(text, tags, p, self.featurizer.scheme) for tags, p in options] for text, options in zip(texts, paths)]

    @torch.no_grad()
    def _nbest(self, batch: dict[str, torch.Tensor], lengths: list[int], k: int) -> list[list[tuple[list[str], float]]]:
        """Per sentence, up to k (tags, probability) pairs; paths through a forbidden transition are left out."""
        self.model.eval()
        device = next(self.model.parameters()).device
        batch = {key: v.to(device) for key, v in batch.items()}
        emissions, mask, crf = self.model.emissions(batch), batch["mask"], self.model.crf
        paths, scores = crf.nbest(emissions, mask, k)
        log_z = crf.log_partition(emissions, mask, decoding=True)  # the distribution the paths are decoded from
        log_probs = scores - log_z.unsqueeze(1)  # [B, k]; scores alone have no fixed level (emissions may all be < 0)
        allowed = log_probs > DISALLOWED / 2  # a forbidden step costs DISALLOWED: such a path is not in the scheme
        probs = log_probs.exp()
        return [
            [([self.featurizer.tags[t] for t in paths[b, r, :n].tolist()], probs[b, r].item()) for r in range(k) if allowed[b, r]]
            for b, n in enumerate(lengths)
        ]

    def evaluate(self, corpus: Corpus, batch_size: int = 64) -> dict:
        """Score the tagger on a labelled corpus (strict + lenient span P/R/F1 in percent, per type, Span F, Type Acc)."""
        predicted = self.tag([s.tokens for s in corpus.sentences], batch_size)
        scorer = NERScorer(self.featurizer.scheme)
        for sent, pred in zip(corpus.sentences, predicted):
            scorer.add(_convert(sent, corpus.scheme, self.featurizer.scheme), pred)
        return scorer.result()


def _entity(text: str, start: int, end: int, label: str, *score: float) -> dict:
    entity = {"type": label, "start": start, "end": end, "text": text[start:end]}
    if score:
        entity["score"] = round(score[0], 4)
    return entity


def _ranked(text: str, tags: list[str], probability: float, scheme: str) -> dict:
    spans = tags_to_spans(tags, scheme, strict=True)
    return {"probability": round(probability, 6), "entities": [_entity(text, *span) for span in spans]}


def _convert(sent: Example, source: str, target: str) -> list[str]:
    return list(sent.tags or []) if source == target else convert_tags(sent.tags or [], source, target)


def _read_yaml(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ZhnerError("missing file in the model directory", path) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ZhnerError(f"corrupt file ({type(exc).__name__})", path) from None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ZhnerError("missing file in the model directory", path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ZhnerError(f"corrupt file ({type(exc).__name__})", path) from None

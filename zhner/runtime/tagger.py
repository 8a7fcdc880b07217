"""RuntimeTagger: an exported tagger (DIR/model.onnx) run by onnxruntime with numpy features and decoding, no torch.

Its `predict` is Tagger.predict's: texts longer than the piece size the export recorded are cut at sentence ends (an
over-long sentence into overlapping windows) and the spans stitched back; pieces of all texts are tagged together in
length-sorted batches; `confidence=True` adds each entity's probability under the CRF."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


from zhner.data.batching import budget_batches
from zhner.data.example import check_positive, text_list
from zhner.data.longtext import LEGACY_PIECE_CHARS, OVERLAP, PIECE_CHARS, split_long_text, stitch
from zhner.data.schemes import tags_to_spans, trim_spans
from zhner.errors import ZhnerError
from zhner.fileio import VOCAB_FILE, FileKind, check_regular, model_directory, read_committed, read_model_mapping
from zhner.decoding import BatchCRF, scored_spans, viterbi
from zhner.runtime.features import Features
from zhner.shipped import onnx_file, resolve_model

ONNX_FILE = "model.onnx"
# batches of at most this many sentences x length^2: onnxruntime's arena keeps the largest batch's memory for good; at
# 250,000 the runtime peaked at 1.06 GB on the three test sets, at 100,000 at 445 MB, and tagged 1.06x as fast
# (interleaved, zh-small). A graph exported before the character-query positions stores R per pair ([B, N, N, d_model])
ONNX_MAX_CELLS = 100_000
ONNX_GRAPH = FileKind("an ONNX graph", 2**31)  # protobuf's limit: a larger graph keeps its weights outside
PIECE_CHARS_KEY = "zhner.piece_chars"  # the export's metadata: the longest piece the PyTorch tagger tags whole
Piece = tuple[int, str]


@dataclass(frozen=True)
class RuntimeTask:
    """The task of the model directory (vocab.json's "task"): tagging with `labels` in `scheme`."""

    labels: list[str]
    scheme: str
    kind: str = "tagging"


def session(path: Path, threads: int = 1):
    """An onnxruntime CPU session of the graph at `path`; a missing or unreadable file is an error naming it."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ZhnerError("running an ONNX model needs onnxruntime: pip install 'zhner[onnx]'") from None
    check_regular(path, ONNX_GRAPH, missing="no such ONNX file (write it with: zhner export MODEL_DIR)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types for unreadable graphs
        raise ZhnerError(f"cannot load this ONNX model ({type(exc).__name__})", path) from None


def _task_and_features(path: Callable[[str], Path]) -> tuple[RuntimeTask, Features]:
    """The task and features of a model directory whose file NAME is at path(NAME)."""
    vocab = read_model_mapping(path("vocab.json"), "json", VOCAB_FILE)
    try:
        task = vocab["task"]
        if task.get("kind") != "tagging":
            raise ZhnerError("the torch-free runtime runs taggers; load a classifier with zhner.export.load_onnx",
                             path("vocab.json"))
        return RuntimeTask(list(task["labels"]), str(task["scheme"])), Features.from_directory(vocab, path)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ZhnerError(f"malformed vocabulary ({type(exc).__name__}: {exc})", path("vocab.json")) from None


class RuntimeTagger:
    """A model directory's exported tagger: `predict(texts)` gives Tagger.predict's entities, without torch."""

    def __init__(self, session, features: Features, task: RuntimeTask, piece_chars: int = PIECE_CHARS):
        self.session, self.featurizer, self.task = session, features, task
        self.input_names = [i.name for i in session.get_inputs()]
        missing = [name for name in self.input_names if name not in features.produces()]
        if missing:
            raise ZhnerError(
                f"the graph reads {', '.join(missing)}, which the torch-free runtime does not build: "
                "run it with zhner.export.OnnxTagger (PyTorch installed)"
            )
        self._piece_chars = piece_chars
        self.directory: Path | None = None  # the model directory it was loaded from (load sets it)

    @classmethod
    def load(cls, directory: str | Path | None, onnx_path: str | Path | None = None, threads: int = 1) -> "RuntimeTagger":
        """DIRECTORY's vocab.json (and lexicon.txt) with `onnx_path` (default DIRECTORY/model.onnx); DIRECTORY may be
        a shipped name (zh-small, zh-accurate; None: the default), whose graph the user exports to a file of their own."""
        directory = model_directory(resolve_model(directory))
        runtime_task, features = read_committed(directory, _task_and_features)  # the vocabulary and lexicon of one save
        graph_path = onnx_file(directory, onnx_path)
        graph = session(graph_path, threads)
        tagger = cls(graph, features, runtime_task, _piece_chars(graph, graph_path))
        tagger.directory = directory
        return tagger

    @property
    def has_crf(self) -> bool:
        """Whether the graph returns CRF scores (confidences need them) besides the emissions."""
        return len(self.session.get_outputs()) == 4

    @property
    def tags(self) -> list[str]:
        return self.task.labels

    def piece_chars(self) -> int:
        """The longest piece `predict` tags whole (recorded at export from the PyTorch tagger's)."""
        return self._piece_chars

    def split(self, text: str) -> list[Piece]:
        return split_long_text(text, self._piece_chars, min(OVERLAP, self._piece_chars // 4))

    def record(self, text: str, prediction: list[dict]) -> dict:
        return {"text": text, "entities": prediction}

    def predict(self, texts: Iterable[str], batch_size: int = 32, confidence: bool = False) -> list[list[dict]]:
        """Entities in each text: [{"type", "start", "end", "text"(, "score")}], character offsets, end exclusive."""
        texts = text_list(texts)
        check_positive("batch_size", batch_size)
        if not isinstance(confidence, bool):
            raise TypeError(f"confidence must be True or False, not {confidence!r}")
        pieces = [self.split(text) for text in texts]
        chunks = [chunk for text_pieces in pieces for _, chunk in text_pieces]
        spans = iter(self.piece_spans(chunks, batch_size, confidence))
        return [self.join(text, tp, [next(spans) for _ in tp]) for text, tp in zip(texts, pieces)]

    def join(self, text: str, pieces: list[Piece], spans: list[list[tuple]]) -> list[dict]:
        """The entities of `text` from the spans of its pieces (as `split` cut it), stitched across the pieces."""
        return [entity(text, *s) for s in stitch(pieces, spans)]

    def piece_spans(self, chunks: Sequence[str], batch_size: int = 32, confidence: bool = False) -> list[list[tuple]]:
        """(start, end, type(, probability)) spans of each chunk, tagged in batches of similar length; a lattice
        model's chunks are matched against its lexicon first, and batched by length and word count: fewer padded word
        keys, the same entities, 1.065x (zh-small) and 1.024x (zh-accurate) the sentences per CPU second on MSRA's
        test set (benchmarks/results/ab_speed_runtime_words_*_b32.json)."""
        out: list[list[tuple]] = [[] for _ in chunks]
        lengths = [len(c) for c in chunks]
        matches = self.featurizer.match(chunks)  # None without a lexicon
        words = None if matches is None else [len(m) for m in matches]
        for idx in budget_batches(lengths, batch_size, ONNX_MAX_CELLS, words=words):
            todo = [i for i in idx if lengths[i] > 0]
            if todo:
                matched = None if matches is None else [matches[i] for i in todo]
                spans = self._batch_spans([chunks[i] for i in todo], confidence, matched)
                for i, found in zip(todo, spans):
                    out[i] = found
        return out

    def _batch_spans(self, chunks: list[str], confidence: bool, matches: list | None = None) -> list[list[tuple]]:
        batch = self.featurizer.batch(chunks, matches)
        outputs = self.session.run(None, {name: batch[name] for name in self.input_names})
        lengths = [len(c) for c in chunks]
        if len(outputs) == 1:  # a softmax head: the best tag per character
            if confidence:
                raise ZhnerError("confidences need a CRF head; this model has a softmax head")
            paths = [row[:n].tolist() for row, n in zip(outputs[0].argmax(-1), lengths)]
        else:
            emissions, start, trans, end = outputs
            paths = viterbi(emissions, lengths, start, trans, end)
        labels = self.task.labels
        spans = [tags_to_spans([labels[t] for t in path], self.task.scheme, strict=True) for path in paths]
        if confidence:  # P(a span's characters carry exactly its tags), as Tagger._scored_spans computes it
            crf = BatchCRF(emissions, lengths, start, trans, end)
            spans = scored_spans(crf, paths, spans, lengths, labels, self.task.scheme)
        # as Tagger.predict: no entity begins or ends on whitespace or an emoji (scored on the span the model decoded)
        return [trim_spans(list(chunk), found) for chunk, found in zip(chunks, spans)]


def _piece_chars(graph, path: Path) -> int:
    value = graph.get_modelmeta().custom_metadata_map.get(PIECE_CHARS_KEY)
    if value is None:  # exported before the key was written: Tagger's default then
        return LEGACY_PIECE_CHARS
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 4:
        raise ZhnerError(f"malformed metadata {PIECE_CHARS_KEY}={value!r}", path)
    return size


def entity(text: str, start: int, end: int, label: str, *score: float) -> dict:
    """One entity record of `predict`: {"type", "start", "end", "text"(, "score" to 4 places)}."""
    record = {"type": label, "start": start, "end": end, "text": text[start:end]}
    if score:
        record["score"] = round(score[0], 4)
    return record

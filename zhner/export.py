"""Export a trained tagger to ONNX and run it with onnxruntime: same `predict(texts)` as Tagger, same spans.

What is exported: the model's emissions ([B, L, T] scores per character and tag) for a batch of any size and length,
from `SequenceTagger.traceable_emissions` (FLAT stores R of Eq. 8 per pair there instead of its gathered-table fast path),
traced by torch.export (the dynamo-based `torch.onnx.export(..., dynamo=True)`) with dynamic batch, length and word dims.
The CRF's start / transition / end scores (forbidden ones already set to DISALLOWED) are constant outputs of the same
graph, so the .onnx file is all the model there is; Viterbi decoding runs in numpy (zhner.decoding.viterbi), the
same recursion and tie-breaking as zhner.nn.crf.CRF.viterbi_tensor. OnnxTagger featurizes with the model's Featurizer
(torch tensors, every field); zhner.runtime.RuntimeTagger runs the same graph with no torch at all (character models;
the piece size it cuts long text at is written into the graph's metadata here). Featurization (vocabularies, lexicon
matching) comes from the model directory, as for Tagger. ACT-S's graph takes the translation field's tensors too (the
English pieces, their words, the word mask). A frozen BERT (ACT-S's English side, a frozen character encoder) runs in the
graph instead of reading its memo (`zhner.nn.bert_features.memo_disabled`), rounded to float16 as the memo keeps its
outputs.

    zhner export runs/flat_resume               # -> runs/flat_resume/model.onnx
    OnnxTagger.load("runs/flat_resume").predict(["张三毕业于北京大学。"])
"""
from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from zhner.data.example import Example
from zhner.data.longtext import token_parts
from zhner.errors import ZhnerError
from zhner.fileio import staged_path, writing
from zhner.nn.bert_features import BertCharFeatures, memo_disabled
from zhner.classifier import Classifier
from zhner.pipeline import Pipeline, run_in_batches
from zhner.decoding import viterbi
from zhner.runtime.features import key_length_range
from zhner.runtime.tagger import ONNX_FILE, ONNX_MAX_CELLS, PIECE_CHARS_KEY, session
from zhner.shipped import onnx_file, resolve_model
from zhner.tagger import Tagger

__all__ = ["ONNX_FILE", "ONNX_MAX_CELLS", "OnnxClassifier", "OnnxTagger", "export_onnx", "load_onnx", "viterbi"]

OPSET = 18
QUANTIZED_KEY = "zhner.quantized"  # the graph's metadata when `zhner export --int8` quantised it
_INPUTS = (
    "chars", "bigrams", "mask", "words", "word_starts", "word_ends", "word_mask", "bert_ids", "first_piece", "local_mask",
    "char_features",  # frozen LAC features (model.char_features), [B, L, F]: computed by the featurizer, fed to the graph
    "word_types",  # lexicon words' types (embeddings.word_types), [B, W, S]
    "key_lengths",  # FLAT's key lengths 0..K-1 of the batch's words, [K] (key_length_range): R is built for those
)
_ENGLISH = ("en_ids", "en_pieces", "en_word_of_piece", "en_first_piece", "en_word_mask")  # ACT-S's translation field
_DIMS = {
    "chars": ("B", "L"), "bigrams": ("B", "L"), "mask": ("B", "L"), "first_piece": ("B", "L"), "bert_ids": ("B", "P"),
    "char_features": ("B", "L"), "key_lengths": ("K",),
} | {
    k: ("B", "W") for k in ("words", "word_starts", "word_ends", "word_mask", "word_types")
} | {"en_ids": ("B", "Q"), "en_pieces": ("B",), "en_word_of_piece": ("B", "Q"), "en_first_piece": ("B", "E"), "en_word_mask": ("B", "E")}
EXAMPLE_TEXTS = {
    "char": ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。", "王五生于广州市。"],
    "word": ["John Smith works for the United Nations in New York .", "Peter lives in Paris .", "EU rejects German call ."],
}
EXAMPLE_TRANSLATIONS = [  # of the "char" texts, for ACT-S: English sides of different lengths
    "Zhang San graduated from Peking University and is now governor of the People's Bank of China .",
    "Li Si works in Shanghai .",
    "Wang Wu was born in Guangzhou .",
]


class EmissionsGraph(nn.Module):
    """What is traced: positional tensors (the batch fields the model reads, in `names` order) ->
    (emissions [B, L, T], start [T], transitions [T, T] (from, to), end [T]) for a CRF tagger; (emissions,) for a
    softmax tagger; (logits [B, C],) for a classifier."""

    def __init__(self, model: nn.Module, names: Sequence[str]):
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch = dict(zip(self.names, tensors))
        if self.model.task_kind == "classification":  # one window's logits: longer text is windowed outside the graph
            return (getattr(self.model, "window_logits", self.model.logits)(batch),)
        emissions = self.model.traceable_emissions(batch)
        if self.model.crf is None:
            return (emissions,)
        start, trans, end = self.model.crf.scores(decoding=True)
        return emissions, start, trans, end


def example_batch(pipeline: Pipeline) -> dict[str, torch.Tensor]:
    """A batch with 2+ sentences of different lengths and 2+ words each, so that no traced dim is specialised to 0 or 1."""
    examples = pipeline.examples(EXAMPLE_TEXTS[pipeline.featurizer.unit])
    if "translation" in pipeline.featurizer.fields:
        for example, translation in zip(examples, EXAMPLE_TRANSLATIONS):
            example.translation = translation
    return pipeline.featurizer.collate([pipeline.featurizer.encode(ex, labelled=False) for ex in examples])


def _key_lengths(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A FLAT batch's `key_lengths` input [K] (zhner.runtime.features.key_length_range of its word spans)."""
    return torch.from_numpy(key_length_range(batch["word_starts"].numpy(), batch["word_ends"].numpy()))


def cache_graph(model: str | Path | None = None) -> Path:
    """The graph of a model (a shipped name, default zh-small, or a directory) for the torch-free runtime: its own
    DIR/model.onnx, or the one in the user cache (zhner.runtime.cache), exported there now if it is not there yet."""
    from zhner.runtime.cache import graph_path

    return graph_path(model, export_for_runtime)[1]


def export_for_runtime(directory: Path, path: Path) -> None:
    """The exporter zhner.runtime.cache asks for: the model of `directory` as a graph at `path`."""
    export_onnx(Tagger.load(directory), path)


def export_onnx(tagger: Pipeline, path: str | Path, opset: int = OPSET, int8: bool = False, own_file: bool = False) -> Path:
    """Write the model's graph (a tagger's emissions + CRF scores, a classifier's logits) to `path` (atomically: a new
    file renamed into place; a FIFO or device there is written through unless `own_file`, the model directory's own
    model.onnx, where whatever was planted is replaced); returns the path. A BERT model's graph takes at most BERT's positions (`bert_ids` of at most 512 ids): taggers cut
    longer text into pieces before, classifiers into windows (see OnnxClassifier). `int8`: onnxruntime's dynamic
    quantisation (weights of the matrix products stored as int8, activations quantised per batch at run time): a
    smaller, usually faster graph whose scores differ slightly (measure its F1: `zhner evaluate MODEL DATA --onnx FILE`)."""
    import onnx  # noqa: F401 - the exporter needs onnx and onnxscript: fail early with a clear message

    path = Path(path)
    model = tagger.model.eval()
    batch = example_batch(tagger)
    lexicon = tagger.featurizer.lexicon if model.task_kind == "tagging" else None
    char_queries = hasattr(model, "export_word_lengths") and lexicon is not None  # FLAT: R over (distance, word length)
    if char_queries and len(model.layers) == 1:
        batch["key_lengths"] = _key_lengths(batch)
    bert = model.bert_encoder() if hasattr(model, "bert_encoder") else None
    names = [k for k in _INPUTS if k in batch and (model.task_kind == "tagging" or bert is None or k in ("bert_ids", "local_mask"))]
    names += [k for k in _ENGLISH if k in batch]
    graph = EmissionsGraph(model, names)
    dims = {d: torch.export.Dim(d, min=1) for d in ("B", "L", "W", "E", "K")}
    # ACT-S: [CLS] + at least one piece + [SEP] (OnnxTagger pads a batch of empty translations to that)
    dims["Q"] = torch.export.Dim("Q", min=3, max=512)
    if model.task_kind == "classification" and bert is None:  # a character classifier's graph reads one window
        dims["L"] = torch.export.Dim("L", min=1, max=model.config.window)
    dims["P"] = torch.export.Dim("P", min=3, max=bert.window + 2 if bert is not None else 1 << 16)
    # SLA / WLA's local_mask is square over BERT's pieces ([B, P + 2, P + 2]) or the characters ([B, L, L])
    shapes = _DIMS | {"local_mask": ("B", "P" if bert is not None else "L", "P" if bert is not None else "L")}
    dynamic = tuple({axis: dims[d] for axis, d in enumerate(shapes[k])} for k in names)
    with writing(path):  # an output folder that cannot be made fails before the export's work
        path.parent.mkdir(parents=True, exist_ok=True)
    if char_queries:
        model.export_word_lengths = max(1, lexicon.max_len)
    try:
        with torch.no_grad(), warnings.catch_warnings(), _quiet(), memo_disabled(model):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                graph,
                tuple(batch[k] for k in names),
                dynamo=True,
                input_names=names,
                output_names=_outputs(model),
                dynamic_shapes=(dynamic,),
                opset_version=opset,
                optimize=True,
                verbose=False,
            )
        _drop_traced_shapes(program.model.graph)
        if model.task_kind == "tagging":  # what zhner.runtime needs to cut long text as this tagger does
            program.model.metadata_props[PIECE_CHARS_KEY] = str(tagger.piece_chars())
        with staged_path(path, through_special=not own_file) as partial:  # a new file, renamed over `path` once complete
            if int8:
                _save_int8(program, partial)
            else:
                program.save(str(partial), external_data=False)
    except ZhnerError:
        raise
    except Exception as e:  # torch.export / onnxscript: a model path that does not trace; nothing is written
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ZhnerError(
            f"could not export model {model.config.name!r} to ONNX ({type(e).__name__}: {first}); the model directory is"
            " unchanged and still serves with PyTorch",
            path,
        ) from None
    finally:
        if hasattr(model, "export_word_lengths"):
            model.export_word_lengths = None
    return path


def _save_int8(program, path: Path) -> None:
    """The exported program, dynamically quantised to int8 weights by onnxruntime, written to `path`."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise ZhnerError("int8 quantisation needs onnxruntime: pip install 'zhner[onnx]'") from None
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "model.fp32.onnx"
        program.save(str(full), external_data=False)
        with _root_logging_quiet():  # onnxruntime's quantiser logs advice through the root logger
            quantize_dynamic(str(full), str(path), weight_type=QuantType.QInt8)
    graph = onnx.load(str(path))
    graph.metadata_props.add(key=QUANTIZED_KEY, value="int8 dynamic (onnxruntime.quantization.quantize_dynamic)")
    onnx.save(graph, str(path))


@contextlib.contextmanager
def _root_logging_quiet():
    """Only errors from the root logger for the block; a handler logging.warning() installs on the way is removed."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)


def _outputs(model: nn.Module) -> list[str]:
    if model.task_kind == "classification":
        return ["logits"]
    return ["emissions", "start", "transitions", "end"] if model.crf is not None else ["emissions"]


def _drop_traced_shapes(graph) -> None:
    """Shape inference after the trace loses the symbolic length through nn.LSTM and records the example's length for
    the values behind it (the graph computes correctly; onnxruntime only warns at every call). Drop the recorded shapes
    of intermediate values (onnxruntime infers its own) and state the emissions' dims."""
    outputs = set(graph.outputs)
    for node in graph:
        for value in node.outputs:
            if value not in outputs:
                value.shape = None
    first = graph.outputs[0]
    if first.name == "logits":
        first.shape = type(first.shape)(["B", first.shape[1]])
    else:
        first.shape = type(first.shape)(["B", "L", first.shape[2]])


@contextlib.contextmanager
def _quiet():
    """The exporter logs about optional packages (torchvision) and prints optimiser notes; keep the CLI's output clean."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def _at_least_one_english_piece(batch: dict[str, torch.Tensor], pad_id: int) -> dict[str, torch.Tensor]:
    """ACT-S's graph takes at least one English piece and word per batch: a batch whose translations are all empty gets
    one padding piece and one masked word, which every row ignores (the pieces' lengths and the word mask say so)."""
    B = batch["en_ids"].shape[0]
    batch = dict(batch)
    if batch["en_ids"].shape[1] < 3:
        batch["en_ids"] = torch.cat([batch["en_ids"], batch["en_ids"].new_full((B, 1), pad_id)], dim=1)
        batch["en_word_of_piece"] = torch.cat([batch["en_word_of_piece"], batch["en_word_of_piece"].new_full((B, 1), -1)], 1)
    if batch["en_word_mask"].shape[1] == 0:
        batch["en_word_mask"] = batch["en_word_mask"].new_zeros(B, 1)
        batch["en_first_piece"] = batch["en_first_piece"].new_zeros(B, 1)
    return batch


class OnnxTagger(Tagger):
    """A Tagger whose model is an exported ONNX graph run by onnxruntime (CPU); predict / tag / evaluate as Tagger's."""

    def __init__(self, session, base: Tagger, path: Path):
        super().__init__(base.model, base.featurizer, base.config, base.metrics)
        self.session, self.path = session, path
        self.input_names = [i.name for i in session.get_inputs()]

    @classmethod
    def load(cls, directory: str | Path, onnx_path: str | Path | None = None, threads: int = 1) -> "OnnxTagger":
        """The model directory's featurizer and config with `onnx_path` (default DIRECTORY/model.onnx)."""
        base = Tagger.load(resolve_model(directory))
        path = onnx_file(base.directory, onnx_path)
        return cls(session(path, threads), base, path)

    def scores_by_default(self) -> bool:
        return False  # scores come from the PyTorch model's CRF, not the graph: only when asked for (confidence=True)

    def emissions(self, batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        bert = self.model.bert_encoder()
        if bert is not None and batch["bert_ids"].shape[1] > bert.window + 2:
            raise ZhnerError(
                f"a token of more than {bert.window} word pieces: the exported BERT graph takes one window; "
                "use the PyTorch model"
            )
        if "en_ids" in batch:
            batch = _at_least_one_english_piece(batch, self.translation_field().pad_id)
        if "key_lengths" in self.input_names:  # FLAT's key lengths (a graph exported with them: EXPORT_FORMAT >= 3)
            batch = batch | {"key_lengths": _key_lengths(batch)}
        feeds = {name: batch[name].numpy() for name in self.input_names}
        return tuple(self.session.run(None, feeds))  # type: ignore[return-value]

    def model_predictions(self, sentences: Sequence, batch_size: int = 32) -> list[list[str]]:
        def decode(batch: dict[str, torch.Tensor], lengths: list[int]) -> list[list[int]]:
            outputs = self.emissions(batch)
            if len(outputs) == 1:  # a softmax head
                return [row[:n].tolist() for row, n in zip(outputs[0].argmax(-1), lengths)]
            emissions, start, trans, end = outputs
            return viterbi(emissions, lengths, start, trans, end)

        parts, owners = self.window_parts(sentences)
        paths: list[list[int]] = [[] for _ in sentences]
        for owner, path in zip(owners, run_in_batches(self.featurizer, parts, batch_size, ONNX_MAX_CELLS, decode, [])):
            paths[owner].extend(path)
        return [[self.featurizer.tags[t] for t in path] for path in paths]

    def window_parts(self, sentences: Sequence) -> tuple[list, list[int]]:
        """The sentences as the graph takes them, and the index of the sentence each part is of: a sentence of more word
        pieces than BERT's window (510) is cut into parts at its sentence ends, as `predict` cuts long text
        (zhner.data.longtext.token_parts), and their tags joined. The PyTorch model reads such a sentence whole (its
        encoder in windows, the layers above over the whole sentence), so the two may differ on it."""
        bert, field = self.model.bert_encoder(), self.featurizer.fields.get("pieces")
        if bert is None or field is None:
            return list(sentences), list(range(len(sentences)))
        parts, owners = [], []
        for i, sentence in enumerate(sentences):
            ex = sentence if isinstance(sentence, Example) else Example(list(sentence))
            encoded = field.encode(ex)
            pieces = len(encoded["bert_ids"]) - 2
            if pieces <= bert.window:
                parts.append(sentence)
                owners.append(i)
                continue
            first = [f - 1 for f in encoded.get("first_piece", range(1, len(ex.tokens) + 1))]  # each token's first piece
            sizes = [b - a for a, b in zip(first, first[1:] + [pieces])]
            for s, e in token_parts(ex.tokens, sizes, bert.window, ex.spaces):
                spaces = ex.spaces[s:e] if ex.spaces is not None else None
                parts.append(Example(ex.tokens[s:e], spaces=spaces, translation=ex.translation, line=ex.line))
                owners.append(i)
        return parts, owners


class OnnxClassifier(Classifier):
    """A Classifier whose model is an exported ONNX graph of one window. A longer text is read in windows whose logits
    are averaged by their size, as the PyTorch model does inside: a BERT classifier's windows hold at most `window`
    pieces, each re-wrapped in [CLS] .. [SEP] (zhner.models.modeling_bert.cls_windows); a character classifier's, at most
    `window` characters (zhner.models.modeling_tener_classifier)."""

    def __init__(self, session, base: Classifier, path: Path):
        super().__init__(base.model, base.featurizer, base.config, base.metrics)
        self.session, self.path = session, path
        bert = base.model.bert_encoder()
        self.bert = bert is not None
        self.window = bert.window if bert is not None else base.model.config.window
        self.input_names = [i.name for i in session.get_inputs()]

    @classmethod
    def load(cls, directory: str | Path, onnx_path: str | Path | None = None, threads: int = 1) -> "OnnxClassifier":
        base = Classifier.load(resolve_model(directory))
        path = onnx_file(base.directory, onnx_path)
        return cls(session(path, threads), base, path)

    def _window_logits(self, ex) -> tuple[np.ndarray, np.ndarray]:
        """Each window's logits [N, C] and size [N, 1] for one example. SLA / WLA models also feed each window its block
        of the local mask, cut as the PyTorch model cuts it."""
        item = self.featurizer.encode(ex, labelled=False)
        local = self.featurizer.collate([item])["local_mask"] if "local_mask" in self.input_names else None
        if not self.bert:
            starts = range(0, len(ex), self.window)
            feeds = []
            for s in starts:
                feed = {name: np.asarray([item[name][s : s + self.window]]) for name in self.input_names if name in item}
                feed["mask"] = np.asarray([[True] * len(item["chars"][s : s + self.window])])
                if local is not None:  # [1, w, w]: the window's characters attend within the window
                    feed["local_mask"] = local[:, s : s + self.window, s : s + self.window].numpy()
                feeds.append(feed)
            logits = np.concatenate([self.session.run(None, f)[0] for f in feeds])
            return logits, np.array([[len(f["mask"][0])] for f in feeds], dtype=np.float32)
        field = self.featurizer.fields["pieces"]
        pieces = item["bert_ids"][1:-1]
        windows = [pieces[s : s + self.window] for s in range(0, len(pieces), self.window)]
        if local is not None:  # one window per call: each has its own square mask
            logits = []
            for i, w in enumerate(windows):
                block = BertCharFeatures.window_local_mask(local, i * self.window, len(w), torch.tensor([len(w)]))
                ids = np.asarray([[field.cls, *w, field.sep]], dtype=np.int64)
                logits.append(self.session.run(None, {"bert_ids": ids, "local_mask": block.numpy()})[0])
            return np.concatenate(logits), np.array([[len(w)] for w in windows], dtype=np.float32)
        ids = np.full((len(windows), max(len(w) for w in windows) + 2), field.pad_id, dtype=np.int64)
        for i, w in enumerate(windows):
            ids[i, : len(w) + 2] = [field.cls, *w, field.sep]
        (logits,) = self.session.run(None, {"bert_ids": ids})
        return logits, np.array([[len(w)] for w in windows], dtype=np.float32)

    def predictions(self, examples: Sequence, batch_size: int = 32) -> list[dict]:
        out = []
        for ex in examples:
            if len(ex) == 0:
                out.append(self._empty())
                continue
            logits, weights = self._window_logits(ex)
            mean = (logits * weights).sum(0) / weights.sum()
            probs = np.exp(mean - mean.max())
            probs /= probs.sum()
            labels = self.task.labels
            out.append({"label": labels[int(probs.argmax())], "scores": {k: round(float(p), 6) for k, p in zip(labels, probs)}})
        return out


def same_predictions(a: list, b: list, tolerance: float = 1e-4) -> bool:
    """Whether two pipelines' predictions agree: the same entities (taggers), or the same labels with scores within
    `tolerance` (classifiers: ONNX Runtime's float sums differ from PyTorch's in the last digits)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, dict):
            if x["label"] != y["label"] or any(abs(x["scores"][k] - y["scores"][k]) > tolerance for k in x["scores"]):
                return False
        elif x != y:
            return False
    return True


def load_onnx(directory: str | Path, onnx_path: str | Path | None = None, threads: int = 1) -> Pipeline:
    """The ONNX pipeline of a model directory (or a shipped name, with `onnx_path`): OnnxTagger or OnnxClassifier, as
    its task."""
    directory = resolve_model(directory)
    kind = Pipeline.task_kind(directory)
    return (OnnxTagger if kind == "tagging" else OnnxClassifier).load(directory, onnx_path, threads)

"""Export a trained tagger to ONNX and run it with onnxruntime: same `predict(texts)` as Tagger, same spans.

What is exported: the model's emissions ([B, L, T] scores per character and tag) for a batch of any size and length,
from `SequenceTagger.traceable_emissions` (FLAT stores R of Eq. 8 per pair there instead of its gathered-table fast path),
traced by torch.export (the dynamo-based `torch.onnx.export(..., dynamo=True)`) with dynamic batch, length and word dims.
The CRF's start / transition / end scores (forbidden ones already set to DISALLOWED) are constant outputs of the same
graph, so the .onnx file is all the model there is; Viterbi decoding runs in numpy (`viterbi`), the same recursion and
tie-breaking as zhner.nn.crf.CRF.viterbi_tensor. Featurization (vocabularies, lexicon matching) stays in Python and
comes from the model directory, as for Tagger.

    zhner export runs/flat_resume               # -> runs/flat_resume/model.onnx
    OnnxTagger.load("runs/flat_resume").predict(["张三毕业于北京大学。"])
"""
from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from zhner.errors import ZhnerError
from zhner.models.base import SequenceTagger
from zhner.pipeline import run_in_batches
from zhner.tagger import Tagger

ONNX_FILE = "model.onnx"
OPSET = 18
# FLAT's exported graph stores R per pair ([B, N, N, d_model] floats): a smaller attention budget than Tagger's
ONNX_MAX_CELLS = 250_000
_INPUTS = ("chars", "bigrams", "mask", "words", "word_starts", "word_ends", "word_mask")
_DIMS = {"chars": ("B", "L"), "bigrams": ("B", "L"), "mask": ("B", "L")} | {
    k: ("B", "W") for k in ("words", "word_starts", "word_ends", "word_mask")
}


class EmissionsGraph(nn.Module):
    """What is traced: positional tensors (the batch fields the model reads, in `names` order) ->
    (emissions [B, L, T], start [T], transitions [T, T] (from, to), end [T])."""

    def __init__(self, model: SequenceTagger, names: Sequence[str]):
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch = dict(zip(self.names, tensors))
        emissions = self.model.traceable_emissions(batch)
        start, trans, end = self.model.crf.scores(decoding=True)
        return emissions, start, trans, end


def example_batch(tagger: Tagger) -> dict[str, torch.Tensor]:
    """A batch with 2+ sentences of different lengths and 2+ words each, so that no traced dim is specialised to 0 or 1."""
    texts = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。", "王五生于广州市。"]
    return tagger.featurizer.collate([tagger.featurizer.encode(list(t)) for t in texts])


def export_onnx(tagger: Tagger, path: str | Path, opset: int = OPSET) -> Path:
    """Write the tagger's emissions + CRF scores graph to `path` (atomically); returns the path."""
    import onnx  # noqa: F401 - the exporter needs onnx and onnxscript: fail early with a clear message

    path = Path(path)
    model = tagger.model.eval()
    batch = example_batch(tagger)
    names = [k for k in _INPUTS if k in batch]
    graph = EmissionsGraph(model, names)
    dims = {d: torch.export.Dim(d, min=1) for d in ("B", "L", "W")}
    dynamic = tuple({0: dims[_DIMS[k][0]], 1: dims[_DIMS[k][1]]} for k in names)
    partial = path.with_name(f".{path.name}.partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with torch.no_grad(), warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                graph,
                tuple(batch[k] for k in names),
                dynamo=True,
                input_names=names,
                output_names=["emissions", "start", "transitions", "end"],
                dynamic_shapes=(dynamic,),
                opset_version=opset,
                optimize=True,
                verbose=False,
            )
        _drop_traced_shapes(program.model.graph)
        program.save(str(partial), external_data=False)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _drop_traced_shapes(graph) -> None:
    """Shape inference after the trace loses the symbolic length through nn.LSTM and records the example's length for
    the values behind it (the graph computes correctly; onnxruntime only warns at every call). Drop the recorded shapes
    of intermediate values (onnxruntime infers its own) and state the emissions' dims."""
    outputs = set(graph.outputs)
    for node in graph:
        for value in node.outputs:
            if value not in outputs:
                value.shape = None
    emissions = graph.outputs[0]
    emissions.shape = type(emissions.shape)(["B", "L", emissions.shape[2]])


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


def viterbi(emissions: np.ndarray, lengths: Sequence[int], start: np.ndarray, trans: np.ndarray, end: np.ndarray) -> list[list[int]]:
    """Best tag path per sequence, emissions [B, L, T] (float32), trans [T, T] (from, to); the recursion of
    CRF.viterbi_tensor: delta_i[j] = max_k (delta_{i-1}[k] + trans[k, j]) + e_i[j], ties to the lowest index."""
    paths = []
    for b, n in enumerate(lengths):
        e = emissions[b, :n]  # [n, T]
        delta = start + e[0]  # [T]
        back = np.empty((max(n - 1, 0), e.shape[1]), dtype=np.int64)
        for i in range(1, n):
            step = delta[:, None] + trans  # [T(from), T(to)]
            back[i - 1] = step.argmax(axis=0)
            delta = step.max(axis=0) + e[i]
        tag = int((delta + end).argmax())
        path = [tag]
        for psi in back[::-1]:
            tag = int(psi[tag])
            path.append(tag)
        paths.append(path[::-1])
    return paths


class OnnxTagger(Tagger):
    """A Tagger whose model is an exported ONNX graph run by onnxruntime (CPU); predict / tag / evaluate as Tagger's."""

    def __init__(self, session, base: Tagger, path: Path):
        super().__init__(base.model, base.featurizer, base.config, base.metrics)
        self.session, self.path = session, path
        self.input_names = [i.name for i in session.get_inputs()]

    @classmethod
    def load(cls, directory: str | Path, onnx_path: str | Path | None = None, threads: int = 1) -> "OnnxTagger":
        """The model directory's featurizer and config with `onnx_path` (default DIRECTORY/model.onnx)."""
        try:
            import onnxruntime as ort
        except ImportError:
            raise ZhnerError("running an ONNX model needs onnxruntime: pip install 'zhner[export]'") from None
        base = Tagger.load(directory)
        path = Path(onnx_path) if onnx_path is not None else Path(directory) / ONNX_FILE
        if not path.is_file():
            raise ZhnerError("no such ONNX file (write it with: zhner export MODEL_DIR)", path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        try:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types for unreadable graphs
            raise ZhnerError(f"cannot load this ONNX model ({type(exc).__name__})", path) from None
        return cls(session, base, path)

    def emissions(self, batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        feeds = {name: batch[name].numpy() for name in self.input_names}
        return tuple(self.session.run(None, feeds))  # type: ignore[return-value]

    def predictions(self, sentences: Sequence, batch_size: int = 32) -> list[list[str]]:
        def decode(batch: dict[str, torch.Tensor], lengths: list[int]) -> list[list[int]]:
            emissions, start, trans, end = self.emissions(batch)
            return viterbi(emissions, lengths, start, trans, end)

        paths = run_in_batches(self.featurizer, sentences, batch_size, ONNX_MAX_CELLS, decode, [])
        return [[self.featurizer.tags[t] for t in path] for path in paths]

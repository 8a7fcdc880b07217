"""LAC's two BiGRU layers (zhner.pretrained.lac) as one ONNX graph run by onnxruntime, when it is installed.

The numpy loop in `BiGRULayer.run` makes about a dozen numpy calls a character step, each a pass over [2, B, 3H]
arrays; onnxruntime's GRU kernel runs the same recurrence in one C++ loop. The speed of both on the three test sets:
benchmarks/speed/lac_bigru.py (benchmarks/results/lac_bigru.json). The graph is written here byte by byte (`_Proto`:
the few protobuf messages of onnx.proto it needs), so the torch-free runtime needs no `onnx` package, only onnxruntime.

ONNX's GRU (opset 14, `linear_before_reset=0`) is PaddlePaddle's `dynamic_gru` (lac.py's docstring) up to the sign of
the update gate: ONNX computes

    z_t = sigmoid(x_z + h_{t-1} R_z^T)    r_t = sigmoid(x_r + h_{t-1} R_r^T)    c_t = tanh(x_c + (r_t * h_{t-1}) R_h^T)
    h_t = (1 - z_t) * c_t + z_t * h_{t-1}

and Paddle h_t = (1 - u_t) * h_{t-1} + u_t * c_t, so z_t = 1 - u_t = sigmoid(-(x_u + h_{t-1} W_g[:, :H])): the update
gate's input weights, recurrent weights and bias enter negated. `sequence_lens` makes the reverse direction start at
each sentence's last character, as `_reversal` does for numpy; outputs past a sentence's length are zero.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from zhner.pretrained.lac import HIDDEN, GRUDirection, LacModel

OPSET = 14
IR_VERSION = 8
FLOAT, INT32, INT64, FLOAT16 = 1, 6, 7, 10  # TensorProto.DataType
_NUMPY_TYPE = {np.dtype(np.float32): FLOAT, np.dtype(np.int32): INT32, np.dtype(np.int64): INT64}
ATTR_INT, ATTR_STRING, ATTR_INTS = 2, 3, 7  # AttributeProto.AttributeType
RUN_CHARACTERS = 8192  # padded characters per session run (OrtBiGRU.states)


class _Proto:
    """A protobuf message being written: fields appended in order (proto2 wire format, repeated fields unpacked)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    @staticmethod
    def _varint(n: int) -> bytes:
        n &= (1 << 64) - 1  # negative int64 as two's complement, ten bytes
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def int(self, field: int, value: int) -> "_Proto":
        self.parts.append(self._varint(field << 3) + self._varint(value))
        return self

    def bytes(self, field: int, value: bytes | str | "_Proto") -> "_Proto":
        data = value.encode() if isinstance(value, str) else value.done() if isinstance(value, _Proto) else value
        self.parts.append(self._varint(field << 3 | 2) + self._varint(len(data)) + data)
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


def _tensor(name: str, array: np.ndarray) -> _Proto:
    """TensorProto: dims (1), data_type (2), name (8), raw_data (9, little-endian)."""
    t = _Proto()
    for dim in array.shape:
        t.int(1, dim)
    t.int(2, _NUMPY_TYPE[array.dtype]).bytes(8, name)
    return t.bytes(9, np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str], **attributes: int | str | Sequence[int]) -> _Proto:
    """NodeProto: input (1), output (2), op_type (4), attribute (5: name 1, i 3, s 4, ints 8, type 20)."""
    node = _Proto()
    for name in inputs:
        node.bytes(1, name)
    for name in outputs:
        node.bytes(2, name)
    node.bytes(4, op)
    for key, value in attributes.items():
        attr = _Proto().bytes(1, key)
        if isinstance(value, str):
            attr.bytes(4, value).int(20, ATTR_STRING)
        elif isinstance(value, int):
            attr.int(3, value).int(20, ATTR_INT)
        else:
            for v in value:
                attr.int(8, v)
            attr.int(20, ATTR_INTS)
        node.bytes(5, attr)
    return node


def _value_info(name: str, elem_type: int, dims: Sequence[int | str]) -> _Proto:
    """ValueInfoProto: name (1), type (2: TypeProto.tensor_type 1: elem_type 1, shape 2: dim 1: value 1 | param 2)."""
    shape = _Proto()
    for dim in dims:
        shape.bytes(1, _Proto().bytes(2, dim) if isinstance(dim, str) else _Proto().int(1, dim))
    return _Proto().bytes(1, name).bytes(2, _Proto().bytes(1, _Proto().int(1, elem_type).bytes(2, shape)))


def _onnx_gates(d: GRUDirection) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction's W [3H, in], R [3H, H] and B [6H] in ONNX's gate order (z, r, h), update gate negated."""
    H = HIDDEN
    pw, pb, gw = d.proj_w, d.proj_b, d.gate_w
    W = np.concatenate([-pw[:, :H].T, pw[:, H : 2 * H].T, pw[:, 2 * H :].T])
    R = np.concatenate([-gw[:, :H].T, gw[:, H:].T, d.state_w.T])
    B = np.concatenate([-pb[:H], pb[H : 2 * H], pb[2 * H :], np.zeros(3 * H, np.float32)])  # input biases, then R's
    return W, R, B


def _model(graph: _Proto) -> bytes:
    """ModelProto of `graph` at this module's IR version and opset."""
    opset = _Proto().bytes(1, "").int(2, OPSET)
    return _Proto().int(1, IR_VERSION).bytes(2, "zhner").bytes(7, graph).bytes(8, opset).done()


def bigru_graph(lac: LacModel) -> bytes:
    """The ModelProto of LAC's embedding lookup and two BiGRU layers: ids int64 [L, B] (time-major), lengths int32 [B]
    -> states float32 [B, L, 2H] ([forward ; backward] of the top layer, zero past each length)."""
    H = HIDDEN
    nodes = [_node("Gather", ["embedding", "ids"], ["x0"], axis=0)]  # [L, B, 128]
    weights = [_tensor("embedding", lac.embedding.astype(np.float32)), _tensor("width", np.array([0, 0, 2 * H], np.int64))]
    x = "x0"
    for k, layer in enumerate(lac.layers):
        both = [_onnx_gates(layer.forward), _onnx_gates(layer.backward)]
        for i, name in enumerate("WRB"):
            weights.append(_tensor(f"{name}{k}", np.stack([gates[i] for gates in both]).astype(np.float32)))
        nodes += [
            _node("GRU", [x, f"W{k}", f"R{k}", f"B{k}", "lengths"], [f"y{k}"], hidden_size=H, direction="bidirectional",
                  linear_before_reset=0),  # [L, 2, B, H]
            _node("Transpose", [f"y{k}"], [f"t{k}"], perm=[0, 2, 1, 3]),  # [L, B, 2, H]
            _node("Reshape", [f"t{k}", "width"], [f"x{k + 1}"]),  # [L, B, 2H]
        ]
        x = f"x{k + 1}"
    nodes.append(_node("Transpose", [x], ["states"], perm=[1, 0, 2]))  # [B, L, 2H]
    graph = _Proto()
    for node in nodes:
        graph.bytes(1, node)
    graph.bytes(2, "lac_bigru")
    for tensor in weights:
        graph.bytes(5, tensor)
    graph.bytes(11, _value_info("ids", INT64, ["L", "B"])).bytes(11, _value_info("lengths", INT32, ["B"]))
    graph.bytes(12, _value_info("states", FLOAT, ["B", "L", 2 * H]))
    return _model(graph)


def float16_rounding_graph() -> bytes:
    """x float32 [B, L, F] -> x rounded to float16 and back to float32 (two Casts): what numpy's
    `x.astype(np.float16).astype(np.float32)` gives, bit for bit (both round to nearest, ties to even, subnormals
    kept), in 0.07 ms instead of 1.6 for [32, 46, 256] (one thread, this machine)."""
    graph = _Proto().bytes(1, _node("Cast", ["x"], ["half"], to=FLOAT16))
    graph.bytes(1, _node("Cast", ["half"], ["y"], to=FLOAT))
    graph.bytes(2, "float16_rounding")
    graph.bytes(11, _value_info("x", FLOAT, ["B", "L", "F"])).bytes(12, _value_info("y", FLOAT, ["B", "L", "F"]))
    return _model(graph)


def _one_thread_session(model: bytes):
    """An onnxruntime CPU session of a ModelProto written here, one thread (as every zhner default)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class OrtBiGRU:
    """LAC's BiGRU layers in an onnxruntime session."""

    def __init__(self, lac: LacModel):
        self.session = _one_thread_session(bigru_graph(lac))

    def states(self, ids: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
        """ids [B, L] (padded with anything), lengths [B] -> [B, L, 2H] float32, zero past each length. Run
        RUN_CHARACTERS padded characters at a time: onnxruntime's arena keeps its largest run's buffers, so this
        bounds them (32 of MSRA's longest sentences in one run raised zh-accurate's peak over the three test sets by
        ~100 MB), and runs of this size measured faster than whole batches."""
        B, L = ids.shape
        lengths = np.asarray(lengths, dtype=np.int32)
        out = np.empty((B, L, 2 * HIDDEN), dtype=np.float32)
        step = max(1, RUN_CHARACTERS // max(L, 1))
        for s in range(0, B, step):
            feed = {"ids": np.ascontiguousarray(ids[s : s + step].T, dtype=np.int64), "lengths": lengths[s : s + step]}
            out[s : s + step] = self.session.run(None, feed)[0]
        return out


# (process, id(lac)) -> (lac, its session): made once per model and process (a forked worker, e.g. `zhner serve
# --workers`, makes its own rather than share its parent's)
_SESSIONS: dict[tuple[int, int], tuple[LacModel, OrtBiGRU]] = {}


@lru_cache(maxsize=1)
def onnxruntime_installed() -> bool:
    """Whether onnxruntime imports, asked once a process (a failed import is not cached by Python: each batch of
    features would search the path again)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def ort_bigru(lac: LacModel) -> OrtBiGRU | None:
    """The onnxruntime BiGRU of `lac`, or None where onnxruntime is not installed."""
    key = (os.getpid(), id(lac))
    if key not in _SESSIONS:
        if not onnxruntime_installed():
            return None
        if len(_SESSIONS) >= 4:  # LacModel.variant makes new models: keep a few sessions, not one per call
            _SESSIONS.clear()
        _SESSIONS[key] = (lac, OrtBiGRU(lac))  # the model is kept with its session, so its id stays its own
    return _SESSIONS[key][1]


_ROUNDERS: dict[int, object] = {}  # process -> its float16 rounding session


def round_to_float16(x: np.ndarray) -> np.ndarray:
    """x float32 [B, L, F] rounded to float16's precision, as float32: onnxruntime where it is installed, else numpy."""
    if not onnxruntime_installed():
        return x.astype(np.float16).astype(np.float32)
    session = _ROUNDERS.get(os.getpid())
    if session is None:
        session = _ROUNDERS[os.getpid()] = _one_thread_session(float16_rounding_graph())
    return session.run(None, {"x": np.ascontiguousarray(x, dtype=np.float32)})[0]

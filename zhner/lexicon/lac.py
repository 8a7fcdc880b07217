"""Baidu LAC's 128-d character table, read straight from the PaddlePaddle files that ship inside jieba.

`jieba/lac_small/model_baseline/word_emb` is a PaddlePaddle LoDTensor and `jieba/lac_small/word.dic` maps its rows to
tokens; both are parsed here without PaddlePaddle, so the default vectors need nothing beyond jieba.
"""
from __future__ import annotations

import importlib.util
import math
import struct
from pathlib import Path

import numpy as np

from zhner.errors import ZhnerError
from zhner.lexicon.table import Vectors


def jieba_dir() -> Path:
    """The installed jieba package's folder, found without importing jieba."""
    spec = importlib.util.find_spec("jieba")
    if spec is None or not spec.submodule_search_locations:
        raise ZhnerError("the jieba package is not installed (pip install jieba); it provides the default resources")
    return Path(next(iter(spec.submodule_search_locations)))


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _parse_tensor_desc(desc: bytes) -> tuple[int, list[int]]:
    """Paddle's TensorDesc protobuf: field 1 data_type (enum varint), field 2 dims (repeated int64, packed or not)."""
    data_type, dims, pos = None, [], 0
    while pos < len(desc):
        key, pos = _varint(desc, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(desc, pos)
            if number == 1:
                data_type = value
            elif number == 2:
                dims.append(value)
        elif wire == 2:
            length, pos = _varint(desc, pos)
            chunk, pos = desc[pos : pos + length], pos + length
            if number == 2:  # packed dims
                sub = 0
                while sub < len(chunk):
                    value, sub = _varint(chunk, sub)
                    dims.append(value)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    if data_type is None or not dims:
        raise ValueError("TensorDesc lacks data_type or dims")
    return data_type, dims


def read_lod_tensor(path: Path) -> np.ndarray:
    """A float32 PaddlePaddle LoDTensor file: uint32 version, uint64 lod_level (+ LoD levels), uint32 version,
    int32 desc_len, a TensorDesc protobuf, then the little-endian data."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ZhnerError(f"cannot read: {exc.strerror}", path) from None
    try:
        (version,) = struct.unpack_from("<I", raw, 0)
        if version != 0:
            raise ValueError(f"unsupported LoDTensor version {version}")
        (lod_level,) = struct.unpack_from("<Q", raw, 4)
        pos = 12
        for _ in range(lod_level):  # each LoD level: uint64 byte size, then that many bytes
            (size,) = struct.unpack_from("<Q", raw, pos)
            pos += 8 + size
        tensor_version, desc_len = struct.unpack_from("<Ii", raw, pos)
        pos += 8
        if tensor_version != 0 or desc_len <= 0:
            raise ValueError(f"unsupported tensor header (version {tensor_version}, desc_len {desc_len})")
        data_type, dims = _parse_tensor_desc(raw[pos : pos + desc_len])
        pos += desc_len
    except (struct.error, ValueError) as exc:
        raise ZhnerError(f"not a PaddlePaddle LoDTensor file ({exc})", path) from None
    if data_type != 5:  # VarType.FP32
        raise ZhnerError(f"expected float32 data (type 5), found type {data_type}", path)
    count = math.prod(dims)
    if len(raw) - pos != 4 * count:
        raise ZhnerError(f"expected {4 * count} data bytes for dims {dims}, found {len(raw) - pos}", path)
    return np.frombuffer(raw, dtype="<f4", count=count, offset=pos).reshape(dims).astype(np.float32)


def read_word_dic(path: Path, rows: int) -> dict[int, str]:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ZhnerError(f"cannot read: {exc.strerror}", path) from None
    except UnicodeDecodeError:
        raise ZhnerError("not valid UTF-8", path) from None
    entries: dict[int, str] = {}
    for lineno, line in enumerate(text.split("\n"), 1):  # not splitlines(): tokens include U+001C..U+001E
        if not line:
            continue
        ident, sep, token = line.partition("\t")
        if not sep or not ident.isdigit() or not token:
            raise ZhnerError("expected ID<TAB>TOKEN", path, lineno)
        idx = int(ident)
        if idx >= rows or idx in entries:
            raise ZhnerError(f"ID {idx} is out of range (table has {rows} rows) or repeated", path, lineno)
        entries[idx] = token
    return entries


def load_lac_char_vectors() -> Vectors:
    """The 128-d character vectors of Baidu LAC shipped in jieba (20940 tokens; IDs without a word.dic entry are skipped).

    Besides characters, the table has ASCII letters/digits and the specials OOV_NUM, OOV_ALPHA, OOV_ALNUM, OOV_HANZ, OOV.
    """
    lac = jieba_dir() / "lac_small"
    emb_path, dic_path = lac / "model_baseline" / "word_emb", lac / "word.dic"
    for p in (emb_path, dic_path):
        if not p.is_file():
            raise ZhnerError("missing file of jieba's LAC model (jieba >= 0.42 ships it)", p)
    table = read_lod_tensor(emb_path)
    if table.ndim != 2:
        raise ZhnerError(f"expected a 2-D embedding table, found shape {table.shape}", emb_path)
    entries = read_word_dic(dic_path, table.shape[0])
    ids = sorted(entries)
    return Vectors([entries[i] for i in ids], table[ids])

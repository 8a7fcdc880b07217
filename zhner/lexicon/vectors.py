"""Pretrained vectors: jieba's Baidu LAC character table, word2vec text files, and embedding-matrix initialisation.

- `load_lac_char_vectors()` reads the 128-d character table that ships inside the installed jieba package
  (`jieba/lac_small/model_baseline/word_emb`, a PaddlePaddle LoDTensor, + `jieba/lac_small/word.dic`).
- `load_word2vec_text(path)` reads any word2vec text file (header optional; plain, .gz or .xz) and caches the parsed
  table as .npy so the second load is fast.
- `compose_vectors` / `embedding_matrix` give bigrams and lexicon words the mean of their characters' vectors,
  since no pretrained bigram or word vectors are available here.

Every problem with an input file is a ZhnerError naming the file (and line).
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import lzma
import math
import os
import struct
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zhner.data.vocab import EOS, PAD, UNK
from zhner.errors import ZhnerError
from zhner.fileio import atomic_open, reading

LAC_SPECS = ("lac",)
_CACHE_FORMAT = 1  # bump when the cache layout changes; older caches are then ignored
_SPECIAL_MARKERS = (PAD, UNK, EOS)  # vocabulary markers, not characters: never composed from their letters


@dataclass(eq=False)  # eq on numpy arrays is ambiguous; compare tokens/matrix explicitly
class Vectors:
    """A token list and its [N, D] float32 matrix (row i is the vector of tokens[i])."""

    tokens: list[str]
    matrix: np.ndarray
    _index: dict[str, int] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.matrix = np.ascontiguousarray(self.matrix, dtype=np.float32)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != len(self.tokens):
            raise ValueError(f"matrix {self.matrix.shape} does not fit {len(self.tokens)} tokens")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def index(self) -> dict[str, int]:
        """token -> row, built once; for a token listed twice the first row wins (as word2vec readers do)."""
        if self._index is None:
            index: dict[str, int] = {}
            for i, tok in enumerate(self.tokens):
                index.setdefault(tok, i)
            self._index = index
        return self._index

    def get(self, token: str) -> np.ndarray | None:
        row = self.index().get(token)
        return None if row is None else self.matrix[row]


# -- reading text files --------------------------------------------------------------------------------------------


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a UTF-8 file, plain or .gz/.xz (detected by magic bytes).

    Lines are split on b"\\n" only: some vector files have tokens such as U+001C or U+2028 that
    str.splitlines() would treat as line breaks. The trailing "\\r" of CRLF files and a leading BOM are dropped.
    """
    path = Path(path)
    with reading(path), open(path, "rb") as probe:
        magic = probe.read(6)
    if magic.startswith(b"\x1f\x8b"):
        opener = gzip.open
    elif magic.startswith(b"\xfd7zXZ\x00"):
        opener = lzma.open
    else:
        opener = open
    lineno = 0
    try:
        with opener(path, "rb") as handle:
            for lineno, raw in enumerate(handle, 1):
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ZhnerError(
                        f"not valid UTF-8 (byte {raw[exc.start]:#04x}); convert the file to UTF-8", path, lineno
                    ) from None
                yield lineno, text
    except (EOFError, lzma.LZMAError, gzip.BadGzipFile, zlib.error) as exc:
        raise ZhnerError(f"corrupt compressed file ({exc})", path, lineno + 1) from None


def _split_entry(line: str) -> tuple[str, list[str]]:
    """Split a word2vec line into (token, value strings).

    Values are separated by whitespace, but the token is everything before the first ASCII space (or tab),
    so tokens such as U+3000 or control characters, which str.split() would swallow, survive.
    """
    head, sep, rest = line.partition(" ")
    if not sep:
        head, _, rest = line.partition("\t")
    if head == "" and rest.startswith(" "):  # the token is itself an ASCII space: "  v1 v2 ..."
        head, rest = " ", rest[1:]
    return head, rest.split()


def is_word2vec_header(first: str, second: str | None) -> int | None:
    """The dimension D if `first` is a word2vec header "N D" (and `second`, the next non-blank line, has D values)."""
    fields = first.split()
    if len(fields) != 2 or not all(f.isascii() and f.isdigit() for f in fields):
        return None
    dim = int(fields[1])
    if dim <= 0:
        return None
    if second is not None and len(_split_entry(second)[1]) != dim:
        return None  # e.g. a word list whose first word happens to be a number followed by a count
    return dim


# -- word2vec text -------------------------------------------------------------------------------------------------


def _parse_word2vec(path: Path) -> Vectors:
    """Parse a word2vec text file (header optional). Checks every line has D values and every value is a float."""
    tokens: list[str] = []
    values: list[str] = []  # flat; converted in one numpy call, which is ~3x faster than per line
    value_lines: list[int] = []
    dim: int | None = None
    declared: int | None = None
    pending: tuple[int, str] | None = None  # the first non-blank line, until we know whether it is a header
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        if dim is None and pending is None:
            pending = (lineno, line)
            continue
        if pending is not None:
            first_no, first = pending
            pending = None
            header_dim = is_word2vec_header(first, line)
            if header_dim is not None:
                dim, declared = header_dim, int(first.split()[0])
            else:
                dim = len(_split_entry(first)[1])
                _add_entry(path, first_no, first, dim, tokens, values, value_lines)
        _add_entry(path, lineno, line, dim, tokens, values, value_lines)  # type: ignore[arg-type]
    if pending is not None:  # a single non-blank line: a header with no vectors, or one vector
        first_no, first = pending
        if is_word2vec_header(first, None) is not None:
            raise ZhnerError("the file has a word2vec header but no vectors", path)
        dim = len(_split_entry(first)[1])
        _add_entry(path, first_no, first, dim, tokens, values, value_lines)
    if not tokens:
        raise ZhnerError("the file is empty, expected word2vec text (TOKEN v1 ... vD per line)", path)
    if dim == 0:
        raise ZhnerError("no vector values after the token", path, value_lines[0])
    try:
        matrix = np.array(values, dtype=np.float32).reshape(len(tokens), dim)
    except ValueError:
        _raise_bad_float(path, tokens, values, value_lines, dim)  # type: ignore[arg-type]
        raise
    if declared is not None and declared != len(tokens):
        warnings.warn(f"{path}: the header says {declared} vectors but the file has {len(tokens)}", stacklevel=3)
    return Vectors(tokens, matrix)


def _add_entry(path: Path, lineno: int, line: str, dim: int, tokens: list, values: list, value_lines: list) -> None:
    parts = line.split()
    if len(parts) == dim + 1:  # fast path: an ordinary token
        token, vals = parts[0], parts[1:]
    else:
        token, vals = _split_entry(line)
    if len(vals) != dim or not token:
        raise ZhnerError(f"expected a token and {dim} values, found {len(vals)} values", path, lineno)
    tokens.append(token)
    values.extend(vals)
    value_lines.append(lineno)


def _raise_bad_float(path: Path, tokens: list, values: list, value_lines: list, dim: int) -> None:
    for row, lineno in enumerate(value_lines):
        for text in values[row * dim : (row + 1) * dim]:
            try:
                float(text)
            except ValueError:
                raise ZhnerError(f"not a number: {text[:40]!r}", path, lineno) from None


def _cache_dirs(path: Path, cache_dir: str | Path | None) -> list[Path]:
    """Where a cache may live: an explicit dir, else next to the file if writable, else the user cache."""
    if cache_dir is not None:
        return [Path(cache_dir)]
    dirs = []
    if os.access(path.parent, os.W_OK):
        dirs.append(path.parent / ".zhner_cache")
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zhner" / "vectors"
    dirs.append(user)
    return dirs


def _cache_stem(path: Path) -> str:
    # keyed by the absolute path; freshness (size + mtime) is checked against the meta file, so an edited
    # source file overwrites its stale cache instead of leaving it behind
    digest = hashlib.sha1(str(path.resolve()).encode("utf-8")).hexdigest()[:16]
    return f"{path.name}.{digest}"


def _source_stamp(path: Path) -> dict:
    st = path.stat()
    return {"format": _CACHE_FORMAT, "source": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_cache(directory: Path, stem: str, stamp: dict) -> Vectors | None:
    meta_path = directory / f"{stem}.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if any(meta.get(k) != v for k, v in stamp.items()):
            return None
        matrix = np.load(directory / f"{stem}.npy", allow_pickle=False)
        tokens = (directory / f"{stem}.tokens.txt").read_text(encoding="utf-8").split("\n")
    except (OSError, ValueError):
        return None  # missing or damaged cache: parse the text again
    if matrix.ndim != 2 or len(tokens) != matrix.shape[0] or tuple(matrix.shape) != (meta.get("n"), meta.get("dim")):
        return None
    return Vectors(tokens, matrix)


def _write_cache(directory: Path, stem: str, stamp: dict, vectors: Vectors) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with atomic_open(directory / f"{stem}.npy", "wb") as handle:
            np.save(handle, vectors.matrix)
        with atomic_open(directory / f"{stem}.tokens.txt") as handle:
            handle.write("\n".join(vectors.tokens))  # tokens never contain "\n": lines were split on it
        meta = dict(stamp, n=len(vectors.tokens), dim=vectors.dim)
        with atomic_open(directory / f"{stem}.json") as handle:  # written last: its presence marks a complete cache
            json.dump(meta, handle)
        return True
    except OSError:
        return False


def load_word2vec_text(path: str | Path, cache: bool = True, cache_dir: str | Path | None = None) -> Vectors:
    """Load a word2vec text file: an optional "N D" header, then `TOKEN v1 ... vD` per line (plain, .gz or .xz).

    With `cache`, the parsed table is saved as `<name>.<hash>.npy` + `.tokens.txt` + `.json` in `cache_dir`, or by
    default in `.zhner_cache/` next to the file if that folder is writable, else in `~/.cache/zhner/vectors/`.
    A later load reuses the cache while the file's size and mtime are unchanged.
    """
    path = Path(path)
    if not path.is_file():
        raise ZhnerError("no such vectors file" if not path.exists() else "not a file", path)
    if not cache:
        return _parse_word2vec(path)
    stamp, stem = _source_stamp(path), _cache_stem(path)
    dirs = _cache_dirs(path, cache_dir)
    for directory in dirs:
        cached = _read_cache(directory, stem, stamp)
        if cached is not None:
            return cached
    vectors = _parse_word2vec(path)
    for directory in dirs:
        if _write_cache(directory, stem, stamp, vectors):
            break
    return vectors


# -- jieba's LAC table ---------------------------------------------------------------------------------------------


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


def _read_word_dic(path: Path, rows: int) -> dict[int, str]:
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
    entries = _read_word_dic(dic_path, table.shape[0])
    ids = sorted(entries)
    return Vectors([entries[i] for i in ids], table[ids])


def load_vectors(spec: str | Path | None = None) -> Vectors:
    """"lac" (or None): jieba's LAC character table; anything else: the path of a word2vec text file."""
    if spec is None or (isinstance(spec, str) and spec.lower() in LAC_SPECS):
        return load_lac_char_vectors()
    path = Path(spec)
    if not path.exists():
        raise ZhnerError("no such vectors file (expected 'lac' or a word2vec text file)", path)
    return load_word2vec_text(path)


# -- embedding matrices --------------------------------------------------------------------------------------------


def _strip_markers(token: str) -> str:
    for marker in _SPECIAL_MARKERS:  # "国<eos>" composes from 国 only, not from the letters e, o, s
        if marker in token:
            token = token.replace(marker, "")
    return token


def _compose_into(tokens: list[str], rows: list[int], chars: Vectors, out: np.ndarray) -> int:
    """Set out[i] to the mean of token i's character vectors for i in rows; returns how many had a known char."""
    index, table, composed = chars.index(), chars.matrix, 0
    for i in rows:
        ids = [index[c] for c in _strip_markers(tokens[i]) if c in index]
        if ids:
            out[i] = table[ids].mean(axis=0)
            composed += 1
    return composed


def compose_vectors(
    tokens: list[str], chars: Vectors, rng: np.random.Generator, scale: float | None = None
) -> tuple[np.ndarray, int]:
    """Vectors for multi-character tokens (bigrams, words): the mean of their characters' vectors.

    Characters without a vector are skipped; a token with no known character gets a random vector,
    uniform in [-scale, scale] (default sqrt(3 / D), i.e. about unit norm). Returns the matrix and how many were composed.
    """
    dim = chars.dim
    scale = math.sqrt(3.0 / dim) if scale is None else scale
    out = rng.uniform(-scale, scale, size=(len(tokens), dim)).astype(np.float32)
    return out, _compose_into(tokens, list(range(len(tokens))), chars, out)


def embedding_matrix(
    vocab_tokens: list[str], vectors: Vectors | None, dim: int, rng: np.random.Generator, compose: bool
) -> tuple[np.ndarray, dict[str, int]]:
    """One row per vocabulary token: its pretrained vector if it has one, else (with `compose`) the mean of its
    characters' vectors, else uniform random in [-sqrt(3/dim), sqrt(3/dim)].

    Returns the [V, dim] float32 matrix and {"pretrained": n, "composed": n, "random": n}.
    The random draw covers all rows first, so the result depends only on the rng state, the tokens and the vectors.
    """
    scale = math.sqrt(3.0 / dim)
    matrix = rng.uniform(-scale, scale, size=(len(vocab_tokens), dim)).astype(np.float32)
    stats = {"pretrained": 0, "composed": 0, "random": len(vocab_tokens)}
    if vectors is None:
        return matrix, stats
    if vectors.dim != dim:
        raise ZhnerError(f"the pretrained vectors are {vectors.dim}-d but the embedding is {dim}-d")
    index = vectors.index()
    missing = []
    for i, tok in enumerate(vocab_tokens):
        row = index.get(tok)
        if row is None:
            missing.append(i)
        else:
            matrix[i] = vectors.matrix[row]
    stats["pretrained"] = len(vocab_tokens) - len(missing)
    if compose:
        stats["composed"] = _compose_into(vocab_tokens, missing, vectors, matrix)
    stats["random"] = len(missing) - stats["composed"]
    return matrix, stats

"""word2vec text files: a line reader for plain/.gz/.xz UTF-8 files, the parser, and its .npy cache.

Parsing a large vectors file takes seconds to minutes, so the parsed table is cached next to the file (or in the user
cache) and reused while the file's size and mtime are unchanged. Every problem is a ZhnerError naming file and line.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from zhner.errors import ZhnerError
from zhner.fileio import (
    SMALL_JSON, FileKind, atomic_open, bounded_lines, check_regular, open_regular, read_json, read_text, require_mapping,
)
from zhner.lexicon.table import Vectors

WORD_FILE = FileKind("a word list or vectors file", 2**40)  # read line by line, each line bounded: any size
CACHED_MATRIX = FileKind("a cached vectors table", 2**40)  # as large as the vectors file it caches
CACHED_TOKENS = FileKind("a cached token list", 2**34)
_CACHE_FORMAT = 1  # bump when the cache layout changes; older caches are then ignored


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a UTF-8 file, plain or .gz/.xz (detected by magic bytes).

    Lines are split on b"\\n" only: some vector files have tokens such as U+001C or U+2028 that
    str.splitlines() would treat as line breaks. The trailing "\\r" of CRLF files and a leading BOM are dropped.
    """
    path = Path(path)
    with open_regular(path, WORD_FILE) as stream:  # a FIFO or /dev/zero is refused; each line is bounded below
        lineno = 0
        try:
            for lineno, raw in bounded_lines(_decompressed(stream), path):
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


def _decompressed(stream: IO[bytes]) -> IO[bytes]:
    """`stream` itself, or its content when it is gzip or xz (told by the magic bytes)."""
    magic = stream.read(6)
    stream.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=stream)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(stream)
    return stream


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


def _looks_like_header(line: str) -> bool:
    """Two ASCII numbers, "N D": a word2vec header, whether or not it tells the truth about the vectors below it."""
    fields = line.split()
    return len(fields) == 2 and all(f.isascii() and f.isdigit() for f in fields)


def is_word2vec_header(first: str, second: str | None) -> int | None:
    """The dimension D if `first` is a word2vec header "N D" (and `second`, the next non-blank line, has D values)."""
    if not _looks_like_header(first):
        return None
    dim = int(first.split()[1])
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
            elif _looks_like_header(first) and len(_split_entry(line)[1]) != 1:  # not a 1-d vector of the token "N"
                raise ZhnerError(
                    f"the header {first.strip()!r} says {first.split()[1]} values per vector, but the first vector "
                    f"has {len(_split_entry(line)[1])}",
                    path,
                    lineno,
                )
            else:
                dim = len(_split_entry(first)[1])
                _add_entry(path, first_no, first, dim, tokens, values, value_lines)
        _add_entry(path, lineno, line, dim, tokens, values, value_lines)  # type: ignore[arg-type]
    if pending is not None:  # a single non-blank line: a header with no vectors, or one vector
        first_no, first = pending
        if _looks_like_header(first):
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
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():  # nan, inf or 1e400 (over float32): the model would train to NaN and call it done
        row = int(np.argmin(finite))
        raise ZhnerError(f"a value that is not finite in the vector of {tokens[row]!r}", path, value_lines[row])
    if declared is not None and declared > len(tokens):  # cut short, e.g. an interrupted download
        raise ZhnerError(f"the header says {declared} vectors but the file has only {len(tokens)} (truncated?)", path)
    if declared is not None and declared < len(tokens):
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
        meta = require_mapping(read_json(meta_path, SMALL_JSON), meta_path)
        if any(meta.get(k) != v for k, v in stamp.items()):
            return None
        check_regular(directory / f"{stem}.npy", CACHED_MATRIX)  # np.load would wait on a FIFO
        matrix = np.load(directory / f"{stem}.npy", allow_pickle=False)
        tokens = read_text(directory / f"{stem}.tokens.txt", CACHED_TOKENS).split("\n")
    except (OSError, ValueError, ZhnerError):
        return None  # missing, damaged or planted cache: parse the text again
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


def write_word2vec_text(vectors: Vectors, path: str | Path) -> None:
    """Write a word2vec text file (a "N D" header, then "token v1 ... vD" lines), atomically, that the reader reads back
    token for token: a token may not hold an ASCII space, tab or line break, nor start or end with other whitespace
    (U+3000 alone is a token; a lone space is one too); one that could not be read back is refused."""

    def unreadable(token: str) -> bool:
        if token == " " or (len(token) == 1 and token not in "\t\n\r"):
            return False  # any single character but a tab or line break, whitespace or not
        return not token or token != token.strip() or any(c in token for c in " \t\n\r")

    bad = next((t for t in vectors.tokens if unreadable(t)), None)
    if bad is not None:
        raise ZhnerError(f"token {bad!r} is empty or holds an ASCII space, tab or line break: a word2vec text file cannot hold it", path)
    with atomic_open(path) as out:
        out.write(f"{len(vectors)} {vectors.dim}\n")
        for token, row in zip(vectors.tokens, vectors.matrix):
            out.write(token + " " + " ".join(f"{x:.6g}" for x in row) + "\n")

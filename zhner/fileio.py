"""Writing files so that a crash or a bad input never leaves a half-written result behind."""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from zhner.errors import ZhnerError


def current_umask() -> int:
    """The process's umask. Linux shows it in /proc; elsewhere set-and-restore it (os.umask cannot only read it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file next to `path`; rename it over `path` only if the block finishes."""
    path = Path(path)
    check_output_file(path)  # os.replace would fail only at the end, after all the work
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        # mkstemp creates the file 0600; give the result the mode a plain open() would (0666 less the umask)
        os.chmod(tmp, 0o666 & ~current_umask())
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_write_error(exc):  # a full disk: the error of the file being written, not of the command
            raise ZhnerError(f"cannot write: {exc.strerror}", path) from None
        raise


# errno values of a write that the disk refused (full, over a quota or a size limit, failing)
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def is_write_error(exc: BaseException) -> bool:
    """An OSError of writing an open file (no file name attached: the OS names none when a write fails)."""
    return isinstance(exc, OSError) and exc.filename is None and exc.errno in WRITE_ERRNOS


def check_output_file(path: str | Path) -> None:
    """A file to write: refuse a path naming a directory, or under an existing file, before any work starts."""
    path = Path(path)
    if path.is_dir():
        raise ZhnerError("is a directory; name the file to write", path)
    if any(parent.exists() and not parent.is_dir() for parent in path.parents):
        raise ZhnerError("a parent of this path is a file, not a directory", path)


def check_output_dir(path: str | Path) -> None:
    """A directory to create or fill: refuse a path naming an existing file (or under one), a dangling symbolic link,
    or a place the OS will not let us write (read-only, /proc, a name too long), before any work starts."""
    path = Path(path)
    with writing(path):
        for p in (path, *path.parents):
            if p.is_symlink() and not p.exists():
                raise ZhnerError(f"a symbolic link to {os.readlink(p)}, which does not exist", p)
            if p.exists():
                if not p.is_dir():
                    raise ZhnerError("exists and is not a directory; name a directory for the run", p)
                break
        _probe_writable_dir(path)


def _probe_writable_dir(path: Path) -> None:
    """Create `path` (and its missing parents) and a file in it, then remove what was created: the OS's refusal is
    found now, and a run that fails later (a bad corpus) leaves nothing behind."""
    created = []
    try:
        for p in reversed((path, *path.parents)):
            if not p.is_dir():
                p.mkdir()
                created.append(p)
        with tempfile.TemporaryFile(dir=path):
            pass
    finally:
        for p in reversed(created):
            with contextlib.suppress(OSError):
                p.rmdir()


MAX_CONFIG_BYTES = 2**20  # a YAML config or model-directory file over 1 MiB is no config (/dev/zero): refused, not read


def read_small_text(path: str | Path, expected: str = "a YAML config file", missing: str = "no such file") -> str:
    """A UTF-8 text file of at most MAX_CONFIG_BYTES; a larger one is an error naming it, read no further.
    UnicodeDecodeError is left to the caller, which names the format it expected."""
    with reading(path, expected, missing):
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ZhnerError(f"larger than {MAX_CONFIG_BYTES:,} bytes (zhner's limit), expected {expected}", path)
    return raw.decode("utf-8")


def parse_yaml(text: str) -> object:
    """yaml.safe_load, except that a key given twice in one mapping is a yaml error at its line (PyYAML keeps the last
    silently: a second `model:` section would replace the first)."""
    import yaml

    return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass


@functools.cache
def _unique_key_loader() -> type:
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may override keys: that is its purpose
                    continue
                key = self.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text)


@contextlib.contextmanager
def reading(path: str | Path, expected: str = "a file", missing: str = "no such file") -> Iterator[None]:
    """Turn the OS errors of opening/reading `path` into one-line user errors naming it."""
    try:
        yield
    except FileNotFoundError:
        raise ZhnerError(missing, path) from None
    except IsADirectoryError:
        raise ZhnerError(f"is a directory, expected {expected}", path) from None
    except OSError as exc:
        raise ZhnerError(f"cannot read: {exc.strerror}", path) from None


def model_directory(directory: str | Path) -> Path:
    """`directory` as a Path when it is a directory; an empty name, a missing one or one the OS refuses to look at
    (too long, no permission) is an error naming it."""
    if str(directory).strip() == "":
        raise ZhnerError("no model directory given (an empty path)")
    path = Path(directory)
    try:
        found = path.is_dir()
    except OSError as exc:
        raise ZhnerError(f"cannot read this model directory ({exc.strerror})", path) from None
    if not found:
        raise ZhnerError("no such model directory", path)
    return path


def read_model_mapping(
    path: str | Path, parse: Callable[[str], Any], parse_errors: tuple[type[Exception], ...]
) -> dict:
    """A model directory's YAML / JSON file, which must hold a mapping; every way it can be unreadable is an error
    naming it."""
    with reading(path, "a file of the model directory", missing="missing file in the model directory"):
        raw = Path(path).read_bytes()
    try:
        data = parse(raw.decode("utf-8"))
    except (UnicodeDecodeError, *parse_errors) as exc:
        raise ZhnerError(f"corrupt file ({type(exc).__name__})", path) from None
    return require_mapping(data, path)


def require_mapping(value: object, path: str | Path, field: str | None = None) -> dict:
    """`value` (a parsed YAML / JSON file, or its `field`) when it is a mapping, else an error naming the file."""
    if isinstance(value, dict):
        return value
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}
    found = "nothing" if value is None else names.get(type(value), type(value).__name__)
    raise ZhnerError(f"{field + ': ' if field else ''}expected a mapping, found {found}", path)


MAX_LINE_BYTES = 16 * 2**20  # the longest line zhner reads (16 MiB): /dev/zero or a file without newlines is an error


def bounded_lines(stream: IO[bytes], name: str | Path) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, raw line with its newline) of a binary stream; a line over MAX_LINE_BYTES is an error
    naming it, read no further, so memory stays bounded whatever the stream holds."""
    for n, raw in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""), 1):
        if len(raw) > MAX_LINE_BYTES:
            raise ZhnerError(f"a line longer than {MAX_LINE_BYTES:,} bytes (zhner's limit): not a text file?", name, n)
        yield n, raw


def utf8_lines(path: str | Path, expected: str = "a text file") -> Iterator[tuple[int, str]]:
    """(line number from 1, line) of a UTF-8 text file; a line that is not UTF-8 (or over MAX_LINE_BYTES) is an error
    naming it."""
    with reading(path, expected):
        with open(path, "rb") as f:
            for n, raw in bounded_lines(f, path):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ZhnerError("not UTF-8 text", path, n) from None
                yield n, line


def json_value(line: str, path: str | Path, lineno: int) -> object:
    """One line of a JSONL file, parsed; what is not JSON (or nests too deeply, or holds an integer too long for
    Python to read) is an error naming path:lineno."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ZhnerError(f"invalid JSON: {exc.msg}", path, lineno) from None
    except RecursionError:
        raise ZhnerError("invalid JSON: nested too deeply", path, lineno) from None
    except ValueError:  # int("9" * 5000): over Python's limit on digits
        raise ZhnerError("invalid JSON: a number too long to read", path, lineno) from None


def read_jsonl_cache(path: Path, add: Callable[[dict], None], bad: str) -> None:
    """Feed each record of an append-only JSONL cache to `add` (nothing when the file does not exist yet); a line that
    is not JSON, or that `add` rejects with ValueError / KeyError / TypeError, is a ZhnerError `bad` at its line."""
    if not path.exists():
        return
    for n, line in utf8_lines(path, "a JSONL cache file"):
        if not line.strip():
            continue
        try:
            add(json_value(line, path, n))
        except (ZhnerError, ValueError, KeyError, TypeError):
            raise ZhnerError(bad, path, n) from None


def append_jsonl(path: Path, records: Iterable[dict]) -> None:
    """Append records to a JSONL file, one per line, creating it and its folder if need be."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn the OS errors of creating or writing `path` (or its folder) into one-line user errors naming it."""
    try:
        yield
    except IsADirectoryError:
        raise ZhnerError("is a directory; name a file to write", path) from None
    except (FileExistsError, NotADirectoryError):
        raise ZhnerError("a parent of this path is a file, not a directory", path) from None
    except OSError as exc:
        raise ZhnerError(f"cannot write: {exc.strerror}", path) from None

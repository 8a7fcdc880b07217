"""Writing files so that a crash or a bad input never leaves a half-written result behind."""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from zhner.errors import ZhnerError

TEMP_SUFFIX = ".tmp"  # of every temporary file: .NAME.XXXXXXXX.tmp beside NAME


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
    """Open a temporary file next to `path`; rename it over `path` only if the block finishes.

    A `path` that exists and is not a regular file (a FIFO, a device such as /dev/null, a symlink to one, or
    /proc/self/fd/1 on a pipe or terminal) is written through instead: renaming over it would replace the node with a
    regular file. A symlink to a regular file keeps the link: the file it points to is the one replaced."""
    path = Path(path)
    check_output_file(path)  # os.replace would fail only at the end, after all the work
    if is_special_file(path):
        with writing(path):
            handle = open(path, mode, encoding=None if "b" in mode else encoding)
        with handle:
            yield handle
        return
    target = Path(os.path.realpath(path)) if path.is_symlink() and path.exists() else path
    with staged_file(target, mode, encoding) as (handle, tmp):
        yield handle
    _move_into_place(tmp, target)


@contextlib.contextmanager
def replacing(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write a file zhner owns inside its own directory (a checkpoint, a model's metrics): a temporary file renamed
    over `path` when the block finishes. Whatever is at `path` (a planted symlink, a FIFO) is replaced, never written
    through."""
    path = Path(path)
    with staged_file(path, mode, encoding) as (handle, tmp):
        yield handle
    _move_into_place(tmp, path)


@contextlib.contextmanager
def staged_path(path: str | Path) -> Iterator[Path]:
    """For writers that take only a file name (an ONNX program): the name of a new temporary file beside `path`,
    created exclusively, for the block to write; renamed over `path` when the block finishes, removed if it fails.
    A FIFO or device at `path` is written through (its own name is given), as atomic_open does."""
    path = Path(path)
    if is_special_file(path):
        yield path
        return
    with staged_file(path, "wb") as (_, tmp):
        yield tmp
    _move_into_place(tmp, path)


def _move_into_place(tmp: Path, path: Path) -> None:
    """Rename a complete temporary file over `path`; if that fails, remove it."""
    try:
        with writing(path):
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_special_file(path: str | Path) -> bool:
    """Whether `path` exists (after symlinks) and is something other than a regular file or a directory."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def staged_file(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[tuple[IO, Path]]:
    """A new temporary file beside `path` (created exclusively: O_EXCL | O_NOFOLLOW under a random name, so nothing
    planted there is followed), as (handle, its path); flushed to disk when the block finishes, removed if it fails.
    The caller renames it into place."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    tmp = Path(name)
    try:
        # mkstemp creates the file 0600; give the result the mode a plain open() would (0666 less the umask)
        os.fchmod(fd, 0o666 & ~current_umask())
        handle = os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    try:
        with handle:
            yield handle, tmp
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
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
    finish_pending_save(path)  # a save killed after its commit point: its new files are the model
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


# -- a set of files replaced together ---------------------------------------------------------------------------------
SAVE_JOURNAL = ".zhner-save.json"  # present only between a set's commit point and the end of its renames


class StagedFiles:
    """The new versions of files of one directory, each written to a temporary file beside its final name."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.staged: dict[str, Path] = {}  # final name -> its temporary file, complete and on disk

    @contextlib.contextmanager
    def open(self, name: str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
        with staged_file(self.directory / name, mode, encoding) as (handle, tmp):
            yield handle
        self.staged[name] = tmp

    def discard(self) -> None:
        for tmp in self.staged.values():
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def replace_together(directory: str | Path) -> Iterator[StagedFiles]:
    """Replace several files of `directory` as one change: the block writes each through `files.open(name)` into a
    temporary file; only when all are complete does a journal naming them (written atomically: the commit point) let
    them be renamed into place. A failure before the commit point leaves every old file as it was and no temporary
    file behind; a kill after it leaves the journal, and the renames are finished by `finish_pending_save` (which
    loading a model directory calls), so a reader sees the old set or the new one, never a mix."""
    directory = Path(directory)
    with writing(directory):
        directory.mkdir(parents=True, exist_ok=True)
    finish_pending_save(directory)
    files = StagedFiles(directory)
    try:
        yield files
        journal = {"rename": {name: tmp.name for name, tmp in files.staged.items()}}
        with staged_file(directory / SAVE_JOURNAL) as (handle, tmp):
            handle.write(json.dumps(journal))
        _move_into_place(tmp, directory / SAVE_JOURNAL)
    except BaseException:
        files.discard()
        raise
    finish_pending_save(directory)


def finish_pending_save(directory: str | Path) -> None:
    """Finish the renames of a set committed by `replace_together` and interrupted (a kill, a full disk) before they
    were all done; nothing when no journal is there."""
    directory = Path(directory)
    journal = directory / SAVE_JOURNAL
    try:
        raw = journal.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError):
        raise ZhnerError("cannot read this journal of an interrupted save", journal) from None
    renames = _journal_renames(raw, journal)
    try:
        for name, tmp in renames.items():
            source = directory / tmp
            if source.is_file() and not source.is_symlink():  # else renamed already
                os.replace(source, directory / name)
        fsync_directory(directory)
        journal.unlink()
    except OSError as exc:
        raise ZhnerError(
            f"an interrupted save is pending here and cannot be finished ({exc.strerror}); it needs write access", directory
        ) from None


def _journal_renames(raw: str, journal: Path) -> dict[str, str]:
    """The journal's {final name: temporary name}: plain names of this directory only, so a planted journal cannot
    rename anything else."""
    try:
        renames = json.loads(raw)["rename"]
    except (ValueError, KeyError, TypeError):
        renames = None
    ok = isinstance(renames, dict) and all(
        isinstance(name, str) and isinstance(tmp, str) and _plain_name(name) and _plain_name(tmp)
        and tmp.startswith(f".{name}.") and tmp.endswith(TEMP_SUFFIX)
        for name, tmp in renames.items()
    )
    if not ok:
        raise ZhnerError("not a journal of zhner's (malformed); delete it", journal)
    return renames


def _plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def fsync_directory(directory: Path) -> None:
    """Make renames in `directory` durable (a file system that cannot sync a directory is left as it is)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

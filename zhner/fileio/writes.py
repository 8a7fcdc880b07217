"""Writing files so that a crash or a bad input never leaves a half-written result behind.

Every file zhner writes is first written to a new temporary file beside its final name (created exclusively, flushed
to disk) and renamed over that name only when complete: `atomic_open` for a user's output (a FIFO or /dev/stdout given
as -o is written through), `replacing` and `staged_path` for files of zhner's own directories, `new_directory` for a
directory made whole. `writing` turns the OS's errors of writing into one line naming the file; `check_output_file` /
`check_output_dir` refuse an output path before any work starts. Several files of one directory replaced as one change
are `zhner.fileio.saves`'."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from zhner.errors import ZhnerError
from zhner.fileio.reads import FileKind, open_regular

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
    regular file; so is this process's stdout or stderr when it is a regular file (`-o /dev/stdout > out.txt`: the
    output goes where the shell opened it, at its offset). A symlink to a regular file keeps the link: the file it
    points to is the one replaced."""
    path = Path(path)
    check_output_file(path)  # os.replace would fail only at the end, after all the work
    stream = standard_stream(path)
    if stream is not None:  # /dev/stdout redirected to a file: written where the shell put it, not renamed over it
        with os.fdopen(os.dup(stream), mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
        return
    if is_special_file(path):
        with writing(path):
            handle = open(path, mode, encoding=None if "b" in mode else encoding)
        with handle:
            yield handle
        return
    target = Path(os.path.realpath(path)) if path.is_symlink() and path.exists() else path
    with staged_file(target, mode, encoding) as (handle, tmp):
        yield handle
    move_into_place(tmp, target)


@contextlib.contextmanager
def replacing(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write a file zhner owns inside its own directory (a checkpoint, a model's metrics): a temporary file renamed
    over `path` when the block finishes. Whatever is at `path` (a planted symlink, a FIFO) is replaced, never written
    through."""
    path = Path(path)
    with staged_file(path, mode, encoding) as (handle, tmp):
        yield handle
    move_into_place(tmp, path)


@contextlib.contextmanager
def staged_path(path: str | Path, through_special: bool = True) -> Iterator[Path]:
    """For writers that take only a file name (an ONNX program): the name of a new temporary file beside `path`,
    created exclusively, for the block to write; renamed over `path` when the block finishes, removed if it fails.
    A FIFO or device at `path` (a user's -o) is written through (its own name is given), as atomic_open does, unless
    not `through_special` (a file of zhner's own directory, as `replacing` writes: whatever is there is replaced)."""
    path = Path(path)
    if through_special and is_special_file(path):
        yield path
        return
    with staged_file(path, "wb") as (_, tmp):
        yield tmp
    move_into_place(tmp, path)


def move_into_place(tmp: Path, path: Path) -> None:
    """Rename a complete temporary file over `path`; if that fails, remove it."""
    try:
        with writing(path):
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def standard_stream(path: str | Path) -> int | None:
    """1 or 2 when `path` names the file this process's stdout or stderr is (/dev/stdout, /proc/self/fd/2, or the
    file the shell redirected it to), else None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            for stream in (sys.stdout, sys.stderr):  # what Python buffered comes first
                with contextlib.suppress(Exception):
                    stream.flush()
            return fd
    return None


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


@contextlib.contextmanager
def new_directory(path: Path) -> Iterator[Path]:
    """A directory at `path`, which must not exist, filled by the block in a temporary directory beside it and renamed
    into place when the block finishes: `path` is claimed first (mkdir: a name that exists, a dangling link included,
    is refused), so the rename replaces only that empty claim. A failure leaves neither behind."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path)
        except FileExistsError:
            raise ZhnerError("already exists; name a new directory", path) from None
    try:
        with writing(path):
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent))
        try:
            yield tmp
            mode = 0o777 & ~current_umask()  # mkdtemp makes 0700; a plain mkdir would give this
            os.chmod(tmp, mode)
            with writing(path):
                os.replace(tmp, path)  # over the empty claim; a claim someone filled meanwhile fails (ENOTEMPTY)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        with contextlib.suppress(OSError):
            path.rmdir()  # the empty claim; a filled one is someone else's
        raise


def copy_file(source: Path, target: Path, kind: FileKind) -> None:
    """Copy a regular file of `kind` into a new file of its own renamed over `target` (`replacing`): a symlink or
    FIFO planted at `target` is replaced, never written through."""
    with open_regular(source, kind) as src, replacing(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text)


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

"""The run directory a training writes (`zhner train -o DIR`): it must be new, empty or a run of zhner's, and one
training at a time holds it.

The hold is an advisory lock (fcntl.flock) on DIR/.zhner-lock, which records the holder's pid, host and start time: a
second training into DIR fails at once with a line naming them. A training that ends normally (completed, stopped
early or by its time budget) removes the file; an error or a kill -9 leaves it, marking DIR as a run of zhner's, and
the kernel drops the lock with the process, so a stale file never blocks a resume.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from zhner.errors import ZhnerError
from zhner.fileio import SAVE_JOURNAL, TEMP_SUFFIX, check_output_dir, directory_lock, finish_pending_save, writing

try:
    import fcntl
except ImportError:  # not POSIX: runs are not locked
    fcntl = None

LOCK = ".zhner-lock"
# any of these in a directory marks it as a run of zhner's (with the trainer's checkpoint.pt, log.jsonl, metrics.json)
RUN_MARKERS = (LOCK, SAVE_JOURNAL)


def output_path(output: str, option: str = "-o") -> Path:
    """The directory named on the command line; an empty name (which would be the current directory) is an error."""
    if not str(output).strip():
        raise ZhnerError(f"{option}: an empty path; name the directory to write")
    return Path(output)


def check_ours(directory: Path, is_ours: Callable[[Path], bool], what: str) -> None:
    """Refuse an existing directory that is neither empty nor holds what zhner writes (`is_ours` of one entry):
    writing there would replace the user's own files (`train proj/config.yaml -o proj`)."""
    check_output_dir(directory)
    try:
        entries = list(directory.iterdir()) if directory.is_dir() else []
    except OSError as exc:
        raise ZhnerError(f"cannot read this directory ({exc.strerror})", directory) from None
    if entries and not any(is_ours(entry) for entry in entries):
        shown = ", ".join(sorted(e.name for e in entries)[:3]) + (", ..." if len(entries) > 3 else "")
        raise ZhnerError(
            f"holds files that are not {what} ({shown}); -o must be a new or empty directory, or {what} to resume", directory
        )


@contextlib.contextmanager
def claimed(directory: Path, markers: tuple[str, ...]) -> Iterator[None]:
    """Check `directory` (new, empty, or holding one of `markers`), create it and hold its lock for the block. If
    the block fails and the directory holds nothing but the lock file, the directories this call made are removed
    again: a bad config or corpus leaves nothing behind."""
    check_ours(directory, lambda entry: entry.name in markers + RUN_MARKERS, "a run of zhner's")
    made = _missing_parents(directory)
    with writing(directory):
        directory.mkdir(parents=True, exist_ok=True)
    new_lock = not (directory / LOCK).exists()
    try:
        with locked(directory / LOCK, directory):
            try:
                with directory_lock(directory):  # another save into it (Tagger.save) takes turns
                    finish_pending_save(directory)  # a model save killed after its commit point
                _remove_stale_temporaries(directory)
                yield
                (directory / LOCK).unlink()  # a finished run is known by its metrics.json; a model ships without it
            except BaseException:
                if new_lock and [p.name for p in directory.iterdir()] == [LOCK]:
                    (directory / LOCK).unlink()
                raise
    except BaseException:
        for path in made:  # deepest first; one that is not empty (another's files) stays
            with contextlib.suppress(OSError):
                path.rmdir()
        raise


def _remove_stale_temporaries(directory: Path) -> None:
    """The temporary files (.NAME.XXXXXXXX.tmp) a killed run left: no one else writes here while the lock is held."""
    for entry in directory.iterdir():
        if _STALE.fullmatch(entry.name):
            with contextlib.suppress(OSError):
                entry.unlink()


_STALE = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX))  # as fileio.staged_file names them (mkstemp)


def _missing_parents(directory: Path) -> list[Path]:
    """`directory` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing.append(path)
    return missing


@contextlib.contextmanager
def locked(lock_path: Path, directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if need be, never through a symlink) for the block; a lock
    another process holds is an error naming it."""
    if fcntl is None:
        yield
        return
    fd = _lock(lock_path, directory)
    try:
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}Z\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def _lock(lock_path: Path, directory: Path) -> int:
    """An open descriptor of `lock_path` holding its lock. A lock taken on a file that was removed meanwhile (by a
    holder that gave the directory up) locks nothing: then the file is opened again."""
    for _ in range(3):
        with writing(lock_path):
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ZhnerError(f"another training is writing this run ({holder}); wait for it or use another -o", directory) from None
        try:
            if os.fstat(fd).st_ino == os.lstat(lock_path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise ZhnerError("could not lock this run directory (its lock file keeps changing)", directory)


def _holder(fd: int) -> str:
    """What the lock file says of its holder (pid, host, start), or that it says nothing yet."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "holder not recorded yet"

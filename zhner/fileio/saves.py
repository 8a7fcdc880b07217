"""A set of files of one directory replaced together, and read back as the set last committed.

A writer (`replace_together`) stages each new file beside its final name, commits the set by writing a journal that
names them, then renames them into place; a save killed after the commit point is finished by the next writer
(`finish_pending_save`). Writers take turns by a flock on the directory (`directory_lock`). A reader
(`read_committed`) takes no lock and writes nothing: it looks at the journal and the files it read before and after
reading, and reads again when a save landed meanwhile (issue 46)."""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

from zhner.errors import ZhnerError
from zhner.fileio.reads import JOURNAL_FILE, parse_json, read_text
from zhner.fileio.writes import TEMP_SUFFIX, move_into_place, staged_file, writing

try:
    import fcntl
except ImportError:  # not POSIX: two saves into one directory are not kept apart
    fcntl = None


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
    file behind; a kill after it leaves the journal, and the next save (or training) into the directory finishes the
    renames (`finish_pending_save`).

    A reader (`read_committed`) never writes and takes no lock: it sees the old set or the new one, never a mix, by
    looking at the journal and its files again after reading (a set renamed under it is read again), and reads a set
    whose save was killed after its commit point from the temporary files its journal names. Two saves into one
    directory take turns by an exclusive flock on it (`directory_lock`) for their commit and renames."""
    directory = Path(directory)
    with writing(directory):
        directory.mkdir(parents=True, exist_ok=True)
    with directory_lock(directory):
        finish_pending_save(directory)
    files = StagedFiles(directory)
    try:
        yield files  # the new files are written without the lock: their temporary names are no reader's business
    except BaseException:
        files.discard()
        raise
    with directory_lock(directory):
        try:
            journal = {"rename": {name: tmp.name for name, tmp in files.staged.items()}}
            with staged_file(directory / SAVE_JOURNAL) as (handle, tmp):
                handle.write(json.dumps(journal))
            move_into_place(tmp, directory / SAVE_JOURNAL)
        except BaseException:
            files.discard()
            raise
        finish_pending_save(directory)


def finish_pending_save(directory: str | Path) -> None:
    """Finish the renames of a set committed by `replace_together` and interrupted (a kill, a full disk) before they
    were all done; nothing when no journal is there. Writers only, holding `directory_lock`."""
    directory = Path(directory)
    journal = directory / SAVE_JOURNAL
    renames = pending_renames(directory)
    if renames is None:
        return
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


def pending_renames(directory: Path) -> dict[str, str] | None:
    """The renames of a committed save that were not all done (its journal's {final name: temporary name}), or None
    when no journal is there."""
    journal = directory / SAVE_JOURNAL
    try:
        os.lstat(journal)
    except FileNotFoundError:
        return None
    except OSError as exc:  # the directory itself cannot be searched: its fault, not the journal's
        raise ZhnerError(f"cannot read this directory ({exc.strerror})", directory) from None
    return _journal_renames(read_text(journal, JOURNAL_FILE), journal)


T = TypeVar("T")
READ_RETRY_S = 60.0  # a reader that sees a save under it reads again, for up to this long


def read_committed(directory: Path, read: Callable[[Callable[[str], Path]], T]) -> T:
    """`read(path)` over the set of files last committed to a model directory, where path(NAME) is the file to read
    for NAME: its own name, or the temporary file a killed save's journal names. No lock, nothing written: the
    journal and every file `read` asked for are looked at before and after it (`_View`), and when a save renamed any
    of them meanwhile, `read` runs again on the new set. So a reader never sees two saves mixed, never waits for a
    save nor makes one wait, and leaves a killed save for the next writer to finish (issue 46)."""
    deadline, pause = time.monotonic() + READ_RETRY_S, 0.005
    while True:
        view = _View(directory)
        try:
            result = read(view.path)
        except Exception:  # a file renamed away under the read: read again; else the error is the directory's
            if view.unchanged():
                raise
        else:
            if view.unchanged():
                return result
        if time.monotonic() > deadline:
            raise ZhnerError(f"saved into over and over for {READ_RETRY_S:.0f} s while read; try again", directory)
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


class _View:
    """What a reader of a model directory looked at: the journal, and (path, identity) of each file it was given."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.journal = _identity(directory / SAVE_JOURNAL)  # first: a save renames only while its journal is there
        try:
            self.renames = pending_renames(directory) or {}
        except ZhnerError:
            if _identity(directory / SAVE_JOURNAL) == self.journal:
                raise
            self.renames = {}  # the journal went (or came) meanwhile: this view is stale, and read again
        self.seen: dict[str, tuple[Path, tuple | None]] = {}

    def _resolve(self, name: str) -> Path:
        staged = self.directory / self.renames[name] if name in self.renames else None
        return staged if staged is not None and os.path.lexists(staged) else self.directory / name

    def path(self, name: str) -> Path:
        path = self._resolve(name)
        self.seen.setdefault(name, (path, _identity(path)))  # looked at before it is opened
        return path

    def unchanged(self) -> bool:
        """Whether no save committed or renamed anything the reader read since it began (the journal is looked at
        first again: renames happen only while it is there, so a set renamed under the reader shows in a file)."""
        if _identity(self.directory / SAVE_JOURNAL) != self.journal:
            return False
        return all((p := self._resolve(name), _identity(p)) == seen for name, seen in self.seen.items())


def _identity(path: Path) -> tuple | None:
    """What tells one file from the one a save renames over it: device, inode, size and modification time."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return ("unreadable", exc.errno)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


LOCK_WAIT_S = 600.0  # a save waits this long for another save into the same directory


@contextlib.contextmanager
def directory_lock(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory` itself (no lock file) for a writer's commit and renames (or its finishing of
    a killed save): two saves into one directory take turns. Readers take no lock (`read_committed`). Waits up to
    LOCK_WAIT_S, then an error naming it; where the OS or file system has no flock, nothing is locked."""
    if fcntl is None:
        yield
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except OSError as exc:
        raise ZhnerError(f"cannot write: {exc.strerror}", directory) from None
    try:
        _flock(fd, directory)
        yield
    finally:
        os.close(fd)  # releases the lock


def _flock(fd: int, directory: Path) -> None:
    deadline, pause = time.monotonic() + LOCK_WAIT_S, 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ZhnerError(f"another save has held this directory for over {LOCK_WAIT_S:.0f} s", directory) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        except OSError:  # no flock here (some network file systems): unlocked, as on a system without fcntl
            return


def _journal_renames(raw: str, journal: Path) -> dict[str, str]:
    """The journal's {final name: temporary name}: plain names of this directory only, so a planted journal cannot
    rename anything else."""
    try:
        renames = parse_json(raw)["rename"]  # TooDeep is a ValueError
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

"""Writing files so that a crash or a bad input never leaves a half-written result behind."""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from zhner.errors import ZhnerError

try:
    import fcntl
except ImportError:  # not POSIX: two saves into one directory are not kept apart
    fcntl = None

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
    _move_into_place(tmp, path)


def _move_into_place(tmp: Path, path: Path) -> None:
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


# -- reading files zhner did not write in this process -----------------------------------------------------------------
# Every file zhner reads back (model, run and cache directories, configs, journals, logs, manifests, headers) goes
# through `open_regular` / `read_bytes` / `read_json` / `read_yaml`: what is not a regular file is refused (a FIFO would
# hang the reader, /dev/zero fill its memory), a file over the bound of its kind is refused before it is read, JSON and
# YAML nest at most MAX_DEPTH levels (their parsers recurse once per level), and each failure is one ZhnerError naming
# the file. Special files are read only where that is the documented use (predict's input, stdin).
MAX_DEPTH = 64  # zhner's own files nest 5 levels at most; 100,000 nested brackets are an attack on the parser's stack


@dataclass(frozen=True)
class FileKind:
    """A kind of file zhner reads: what it is (named in errors) and the most bytes a sound one holds."""

    what: str
    max_bytes: int


MAX_CONFIG_BYTES = 2**20  # a YAML config over 1 MiB is no config
MODEL_FILE = FileKind("a file of the model directory", 16 * 2**20)  # config.yaml, metrics.json, encoder_reference.json
VOCAB_FILE = FileKind("a vocabulary file", 256 * 2**20)  # vocab.json: e5's 250k pieces take 5 MB
LEXICON_FILE = FileKind("a lexicon file", 2**30)  # one word a line: Tencent's 12M words take 150 MB
JOURNAL_FILE = FileKind("a journal of a save", 2**20)
LOG_FILE = FileKind("a training log", 256 * 2**20)  # one line an epoch, a few kB each
MANIFEST_FILE = FileKind("a manifest of the pretrained cache", 2**20)
SMALL_JSON = FileKind("a small JSON file", 16 * 2**20)  # spaCy's zhner.json, a vectors cache's stamp


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _over_limit(size: int, kind: FileKind) -> str:
    return f"larger than {kind.max_bytes:,} bytes (zhner's limit for {kind.what}): {size:,} bytes"


@contextlib.contextmanager
def open_regular(path: str | Path, kind: FileKind, missing: str = "no such file") -> Iterator[IO[bytes]]:
    """`path` opened for reading in binary when it is a regular file (symlinks followed) of at most kind.max_bytes; a
    directory, FIFO, device or socket (or a symlink to one) is refused without blocking, and so is a larger file."""
    with reading(path, kind.what, missing):
        # O_NONBLOCK: opening a FIFO that no one writes would wait for ever; a regular file ignores the flag
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode, size = (st := os.fstat(fd)).st_mode, st.st_size
        if stat.S_ISDIR(mode):
            raise ZhnerError(f"is a directory, expected {kind.what}", path)
        if not stat.S_ISREG(mode):
            raise ZhnerError(f"{_file_type(mode)}, expected {kind.what}: zhner reads regular files only", path)
        if size > kind.max_bytes:
            raise ZhnerError(_over_limit(size, kind), path)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle, reading(path, kind.what, missing):
        yield handle


def check_regular(path: str | Path, kind: FileKind, missing: str = "no such file") -> None:
    """Refuse `path` as `open_regular` would, before a reader that takes only a name (safetensors, torch) opens it."""
    with open_regular(path, kind, missing):
        pass


def read_bytes(path: str | Path, kind: FileKind, missing: str = "no such file") -> bytes:
    """The bytes of a regular file of at most kind.max_bytes (one that grows past it while read is refused too)."""
    with open_regular(path, kind, missing) as f:
        raw = f.read(kind.max_bytes + 1)
    if len(raw) > kind.max_bytes:
        raise ZhnerError(_over_limit(len(raw), kind), path)
    return raw


def read_text(path: str | Path, kind: FileKind, missing: str = "no such file") -> str:
    """A regular UTF-8 text file of at most kind.max_bytes; what is not UTF-8 is an error naming it."""
    try:
        return read_bytes(path, kind, missing).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ZhnerError(f"corrupt file (not valid UTF-8 at byte {exc.start:,}), expected {kind.what}", path) from None


def torch_archive_problem(path: str | Path, kind: FileKind) -> str | None:
    """What is wrong with a file torch.load is to read (None: nothing), found before it unpacks anything. The file
    must be regular and within kind.max_bytes, and torch's zip archive of stored records (torch.save compresses
    nothing) adding up to at most kind.max_bytes: a compressed record is a zip bomb (1 MB that unpacks to gigabytes),
    and torch's legacy format, which is no zip archive, allocates the storage sizes it declares."""
    check_regular(path, kind)
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return "not a zip archive as torch.save writes"
    if any(r.compress_type != zipfile.ZIP_STORED for r in records):
        return "compressed records, which torch.save never writes"
    if sum(r.file_size for r in records) > kind.max_bytes:
        return f"records of over {kind.max_bytes:,} bytes, zhner's limit for {kind.what}"
    return None


def read_small_text(path: str | Path, expected: str = "a YAML config file", missing: str = "no such file") -> str:
    """A UTF-8 text file of at most MAX_CONFIG_BYTES; a larger one (or one that is not a regular file) is an error
    naming it, read no further. UnicodeDecodeError is left to the caller, which names the format it expected."""
    return read_bytes(path, FileKind(expected, MAX_CONFIG_BYTES), missing).decode("utf-8")


class TooDeep(ValueError):
    """JSON or YAML nested deeper than MAX_DEPTH levels."""

    def __init__(self) -> None:
        super().__init__(f"nested deeper than {MAX_DEPTH} levels (zhner's limit)")


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def check_json_depth(text: str) -> None:
    """TooDeep when `text`'s brackets (outside strings) nest deeper than MAX_DEPTH: found by a scan of the brackets
    alone, before json.loads recurses into them."""
    depth = 0
    for c in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth += 1 if c in "[{" else -1
        if depth > MAX_DEPTH:
            raise TooDeep


def parse_json(text: str) -> object:
    """json.loads of at most MAX_DEPTH levels: TooDeep, or json's ValueError (JSONDecodeError, or an integer over
    Python's digit limit)."""
    check_json_depth(text)
    try:
        return json.loads(text)
    except RecursionError:  # nesting the scan did not see (an unterminated string hid brackets): the stack's limit
        raise TooDeep from None


def read_json(path: str | Path, kind: FileKind, missing: str = "no such file") -> object:
    """A regular JSON file of `kind`, parsed; every way it can be unreadable or not JSON is an error naming it."""
    text = read_text(path, kind, missing)
    try:
        return parse_json(text)
    except TooDeep as exc:
        raise ZhnerError(f"corrupt file: {exc}", path) from None
    except json.JSONDecodeError as exc:
        raise ZhnerError(f"corrupt file (invalid JSON at line {exc.lineno}: {exc.msg})", path) from None
    except ValueError:
        raise ZhnerError("corrupt file (a number too long to read)", path) from None


def read_yaml(path: str | Path, kind: FileKind, missing: str = "no such file") -> object:
    """A regular YAML file of `kind`, parsed by `parse_yaml`; what is not YAML is an error naming it (and the line)."""
    import yaml

    text = read_text(path, kind, missing)
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ZhnerError(f"invalid YAML: {getattr(exc, 'problem', None) or exc}", path, mark and mark.line + 1) from None


def parse_yaml(text: str) -> object:
    """yaml.safe_load, except that a key given twice in one mapping is a yaml error at its line (PyYAML keeps the last
    silently: a second `model:` section would replace the first), and so is nesting deeper than MAX_DEPTH (PyYAML's
    composer recurses once per level)."""
    import yaml

    try:
        return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
    except RecursionError:  # aliases nest what the composer saw shallow: the stack's limit
        raise yaml.constructor.ConstructorError(None, None, str(TooDeep()), None) from None


@functools.cache
def _unique_key_loader() -> type:
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise yaml.composer.ComposerError(None, None, str(TooDeep()), self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

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
    (too long, no permission) is an error naming it. Nothing is written: see `read_committed`."""
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


def read_model_mapping(path: str | Path, fmt: str, kind: FileKind = MODEL_FILE, empty: dict | None = None) -> dict:
    """A model directory's YAML or JSON file (`fmt`), which must hold a mapping (an empty YAML file is `empty` when
    given); every way it can be unreadable is an error naming it."""
    missing = "missing file in the model directory"
    data = read_yaml(path, kind, missing) if fmt == "yaml" else read_json(path, kind, missing)
    return require_mapping(empty if data is None and empty is not None else data, path)


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


def utf8_lines(path: str | Path, expected: str = "a text file", max_bytes: int = 2**40) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) of a regular UTF-8 text file of at most `max_bytes`, read line by line; a line that
    is not UTF-8 (or over MAX_LINE_BYTES) is an error naming it."""
    with open_regular(path, FileKind(expected, max_bytes)) as f:
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
            _move_into_place(tmp, directory / SAVE_JOURNAL)
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

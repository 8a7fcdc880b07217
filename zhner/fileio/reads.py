"""Reading files zhner did not write in this process, within bounds.

Every file zhner reads back (model, run and cache directories, configs, journals, logs, manifests, headers) goes
through `open_regular` / `read_bytes` / `read_json` / `read_yaml`: what is not a regular file is refused (a FIFO would
hang the reader, /dev/zero fill its memory), a file over the bound of its kind is refused before it is read, JSON and
YAML nest at most MAX_DEPTH levels (their parsers recurse once per level), and each failure is one ZhnerError naming
the file. Special files are read only where that is the documented use (predict's input, stdin). Lines are read at
most MAX_LINE_BYTES at a time (`bounded_lines`, `utf8_lines`); a model directory's YAML and JSON files must hold a
mapping (`model_directory`, `read_model_mapping`, `require_mapping`)."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import stat
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from zhner.errors import ZhnerError

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

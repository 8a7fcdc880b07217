"""Files zhner reads and writes: bounded reads, atomic writes, and a model directory's files saved as one set.

    reads    reading files zhner did not write in this process: regular files only, within a bound of their kind,
             JSON / YAML nested at most MAX_DEPTH levels, lines of at most MAX_LINE_BYTES; each failure one ZhnerError
    writes   writing files through a temporary file renamed into place, and the OS's errors of writing as ZhnerError
    saves    several files of one directory replaced as one change (`replace_together`) and read back without a lock
             as the set last committed (`read_committed`)

The names below are what the rest of zhner imports (`from zhner.fileio import ...`); the modules hold the rest.
"""
from zhner.fileio.reads import (
    LEXICON_FILE,
    LOG_FILE,
    MANIFEST_FILE,
    MAX_LINE_BYTES,
    MODEL_FILE,
    SMALL_JSON,
    VOCAB_FILE,
    FileKind,
    bounded_lines,
    check_regular,
    json_value,
    model_directory,
    open_regular,
    parse_json,
    parse_yaml,
    read_bytes,
    read_json,
    read_jsonl_cache,
    read_model_mapping,
    read_small_text,
    read_text,
    read_yaml,
    reading,
    require_mapping,
    torch_archive_problem,
    utf8_lines,
)
from zhner.fileio.saves import SAVE_JOURNAL, directory_lock, finish_pending_save, read_committed, replace_together
from zhner.fileio.writes import (
    TEMP_SUFFIX,
    append_jsonl,
    atomic_open,
    atomic_write_text,
    check_output_dir,
    check_output_file,
    copy_file,
    current_umask,
    is_write_error,
    new_directory,
    replacing,
    staged_file,
    staged_path,
    writing,
)

__all__ = [
    "FileKind", "LEXICON_FILE", "LOG_FILE", "MANIFEST_FILE", "MAX_LINE_BYTES", "MODEL_FILE", "SMALL_JSON", "VOCAB_FILE",
    "bounded_lines", "check_regular", "json_value", "model_directory", "open_regular", "parse_json", "parse_yaml",
    "read_bytes", "read_json", "read_jsonl_cache", "read_model_mapping", "read_small_text", "read_text", "read_yaml",
    "reading", "require_mapping", "torch_archive_problem", "utf8_lines",
    "SAVE_JOURNAL", "directory_lock", "finish_pending_save", "read_committed", "replace_together",
    "TEMP_SUFFIX", "append_jsonl", "atomic_open", "atomic_write_text", "check_output_dir", "check_output_file",
    "copy_file", "current_umask", "is_write_error", "new_directory", "replacing", "staged_file", "staged_path", "writing",
]

"""The run directory a training writes (`zhner train -o DIR`, also the model directory of its best epoch), and what
the trainer keeps in it between and after epochs:

    config.yaml vocab.json model.safetensors metrics.json   the best model so far (see zhner.tagger)
    log.jsonl                                               one line per finished epoch (append_log, trim_log)
    checkpoint.pt                                           resumable state (save_checkpoint, resume); removed when
                                                            training ends, kept when its time budget stopped it
    .zhner-lock                                             held while a training runs (claimed)

The directory must be new, empty or a run of zhner's, and one training at a time holds it. The hold is an advisory
lock (fcntl.flock) on DIR/.zhner-lock, which records the holder's pid, host and start time: a second training into DIR
fails at once with a line naming them. A training that ends normally (completed, stopped early or by its time budget)
removes the file; an error or a kill -9 leaves it, marking DIR as a run of zhner's, and the kernel drops the lock with
the process, so a stale file never blocks a resume.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import torch
import yaml

from zhner.config import Config, config_from_dict, dump_config
from zhner.errors import ZhnerError
from zhner.fileio import (
    LOG_FILE, SAVE_JOURNAL, TEMP_SUFFIX, FileKind, check_output_dir, directory_lock, finish_pending_save, parse_json,
    parse_yaml, read_bytes, replacing, torch_archive_problem, writing,
)
from zhner.pipeline import state_bytes
from zhner.tasks import Task
from zhner.train.averaging import WeightAverage

try:
    import fcntl
except ImportError:  # not POSIX: runs are not locked
    fcntl = None

LOCK = ".zhner-lock"
CHECKPOINT, LOG = "checkpoint.pt", "log.jsonl"
Scheduler = torch.optim.lr_scheduler.LRScheduler
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


# --- the checkpoint: everything a killed run needs to go on exactly where it stopped


def fresh_state() -> dict:
    """The training state of a run that starts from its first step: the position (epoch, batch in it, optimiser
    step), model selection (best dev score, its epoch and metrics, epochs without a better one) and time trained."""
    return {"epoch": 0, "batch": 0, "step": 0, "best_f1": float("-inf"), "best_epoch": 0, "bad_epochs": 0, "elapsed": 0.0, "best": None}


def resume(
    out_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Scheduler, config: Config,
    average: WeightAverage | None, overwrite: bool, is_main: bool, log: Callable[[str], None],
) -> dict | None:
    """The state to go on from when `out_dir` holds a checkpoint (model, optimiser, schedule, average and torch's
    random state restored from it; the log cut back to the epochs it covers), or None for a fresh start. --overwrite
    discards an interrupted run, whatever config it had. Only process 0 (`is_main`) changes the directory."""
    path = out_dir / CHECKPOINT
    if overwrite and path.exists():
        log(f"{path}: interrupted run discarded (--overwrite)")
        if is_main:
            path.unlink()
    if not os.path.lexists(path) or overwrite:
        return None
    state = restore_checkpoint(path, model, optimizer, scheduler, config, average)
    log(f"resuming from {path}: epoch {state['epoch'] + 1}, batch {state['batch']}, step {state['step']}")
    if is_main:
        trim_log(out_dir / LOG, state["epoch"], log)
    return state


def save_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Scheduler, state: dict,
    config: Config, average: WeightAverage | None,
) -> None:
    """Everything a killed run needs to go on where it stopped: the model, the optimiser's moments, the schedule, the
    training state, torch's random state and the weight average, in one new file renamed over the last."""
    payload = {
        "config": dump_config(config),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "state": state,
        "rng": torch.get_rng_state(),
        "average": average.state_dict() if average is not None else None,
    }
    with replacing(path, "wb") as handle:  # a temporary file of its own: nothing planted beside it is followed
        _torch_save(payload, handle)


class _Writes:
    """A file handle that keeps the OSError of a failed write: torch.save reports one (a full disk) as a RuntimeError
    of its zip writer ("enforce fail at inline_container.cc"), which names neither the file nor the cause."""

    def __init__(self, handle: IO[bytes]):
        self.handle, self.error = handle, None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.handle.flush()


def _torch_save(payload: dict, handle: IO[bytes]) -> None:
    """torch.save to `handle`; a write the disk refused is raised as its OSError, which `replacing` turns into one
    line naming the file (the previous file stays: the new one was a temporary file of its own)."""
    writes = _Writes(handle)
    try:
        torch.save(payload, writes)
    except RuntimeError:
        if writes.error is not None:
            raise writes.error from None
        raise


def checkpoint_kind(model: torch.nn.Module) -> FileKind:
    """A checkpoint holds the model's state, the optimiser's moments (two per weight with Adam), an average of the
    weights and small counters: a file over six times the state (and 64 MiB) is no checkpoint of this model."""
    return FileKind("a checkpoint of this model", 6 * state_bytes(model) + 2**26)


def restore_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Scheduler, config: Config,
    average: WeightAverage | None,
) -> dict:
    """Load a checkpoint into the model, optimiser, schedule and average, and torch's random state; returns the
    training state. Anything but a checkpoint of this config and model is one error line, before any of it runs."""
    problem = torch_archive_problem(path, checkpoint_kind(model))  # before torch.load reads (or unpacks) it
    if problem:
        raise ZhnerError(f"cannot read this checkpoint ({problem}); delete it to start over", path)
    try:
        # tensors and plain containers only: a pickled object (a planted payload) is refused before anything of it runs
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "global" not in str(exc).lower():  # not an object the safe loader refused: garbage, a truncated file
            raise ZhnerError("cannot read this checkpoint (UnpicklingError); delete it to start over", path) from None
        raise ZhnerError(
            "refused: this checkpoint holds Python objects, not only tensors and plain values (nothing of it was run); "
            "delete it to start over", path
        ) from None
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file
        raise ZhnerError(f"cannot read this checkpoint ({type(exc).__name__}); delete it to start over", path) from None
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(payload, dict) or k not in payload]
    if missing or not isinstance(payload["state"], dict) or not _valid_state(payload["state"]):
        what = f"no {', '.join(missing)}" if missing else "a malformed training state"
        raise ZhnerError(f"not a zhner checkpoint ({what}); delete it to start over", path)
    if not _same_config(payload.get("config"), config):
        raise ZhnerError(
            "this run was started with a different config; resume it with the same one, use another -o, "
            "or pass --overwrite to start afresh", path
        )
    try:
        model.load_state_dict(payload["model"])
        load_optimizer_state(optimizer, payload["optimizer"])
        scheduler.load_state_dict(payload["scheduler"])
        if average is not None:
            average.load_state_dict(payload["average"])
        torch.set_rng_state(payload["rng"])
    except Exception as exc:  # noqa: BLE001 - any failure here means the checkpoint is unusable
        raise ZhnerError(f"cannot resume from this checkpoint ({type(exc).__name__}); delete it to start over", path) from None
    return payload["state"]


CHECKPOINT_KEYS = ("config", "model", "optimizer", "scheduler", "rng", "state")


def _valid_state(state: dict) -> bool:
    """The counters a resumed run goes on from are integers (epoch, batch, step) and a number (elapsed seconds)."""
    counters = all(type(state.get(k)) is int and state[k] >= 0 for k in ("epoch", "batch", "step"))
    return counters and isinstance(state.get("elapsed"), (int, float))


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """The saved moments and step counts, with this optimiser's kernel choice (fused, foreach) kept: load_state_dict
    would put back the saving run's choice, so a run started before AdamW went fused would resume about 2x slower."""
    kernels = [{k: g[k] for k in ("fused", "foreach") if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, kernel in zip(optimizer.param_groups, kernels):
        group.update(kernel)


def _same_config(saved: object, config: Config) -> bool:
    """Whether a checkpoint's config (dump_config text) is `config`; fields added since it was written count as their
    defaults, so a newer zhner resumes an older run. The time budget may differ: it changes where a run stops, not
    what it trains."""
    if saved == dump_config(config):
        return True
    try:
        return _without_budget(config_from_dict(parse_yaml(saved))) == _without_budget(config)
    except (ZhnerError, yaml.YAMLError, AttributeError, TypeError):  # TooDeep is a YAMLError here
        return False


def _without_budget(config: Config) -> Config:
    return config.model_copy(update={"train": config.train.model_copy(update={"max_minutes": None})})


# --- the log and the metrics


def append_log(path: Path, record: dict, fresh: bool = False) -> None:
    """One line for the epoch, in one write; never through a symlink planted at the log's name. `fresh`: the first
    line of a new run, which replaces an old run's log (kept until now: a run that fails first loses nothing)."""
    if fresh:
        with replacing(path) as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def trim_log(path: Path, epochs_done: int, log: Callable[[str], None]) -> None:
    """Drop log lines of epochs the checkpoint does not cover (they will be run again), and a last line cut short by
    a kill (with a warning); a damaged line before it is an error naming it."""
    if not os.path.lexists(path):
        return
    text = read_bytes(path, LOG_FILE).decode("utf-8", errors="replace")
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    records = []
    for i, (n, line) in enumerate(lines):
        try:
            record = parse_json(line)  # at most MAX_DEPTH levels: a deep last line is dropped as a damaged one
            epoch = record["epoch"]
        except (ValueError, KeyError, TypeError):
            if i < len(lines) - 1:
                raise ZhnerError("not a log record of zhner's; delete the line (or the file) to resume", path, n) from None
            log(f"warning: {path}:{n}: a log line cut short (the run was killed while writing it) is dropped")
            break
        records.append((line, epoch))
    kept = [line for line, epoch in records if isinstance(epoch, int) and epoch <= epochs_done]
    # rewritten (a file of its own) when lines go, when the last lacks its newline (the next would join it), or when
    # the name is a symlink: appends never go through one
    if len(kept) != len(lines) or not text.endswith("\n") or path.is_symlink():
        with replacing(path) as handle:
            handle.write("".join(line + "\n" for line in kept))


def run_metrics(config: Config, task: Task, state: dict, started: float, status: str, dev_label: str) -> dict:
    """metrics.json: the run (model, data, seed), how it stopped, and the dev and test scores of its best epoch.
    `started`: time.perf_counter() at the start of training (less the time trained before a resume)."""
    best = state["best"] or {}
    return {
        "model": config.model.name,
        "dataset": config.data.dataset,
        "task": task.kind,
        "metric": task.metric,  # the dev metric that selected best_epoch
        "seed": config.train.seed,
        "status": status,
        "best_epoch": state["best_epoch"],
        "epochs_run": state["epoch"],
        "dev_label": dev_label,
        "dev": best.get("dev"),
        "test": best.get("test"),
        "train_seconds": round(time.perf_counter() - started, 1),
        **({"test_per_corpus": best["test_per_corpus"]} if "test_per_corpus" in best else {}),
        "warnings": state.get("warnings", []) + (
            [f"ended with {dev_label} F1 0 for its last {state['zero_epochs']} epochs"]
            if status != "running" and state.get("zero_epochs", 0) >= (config.train.collapse_epochs or 10**9)
            else []
        ),
    }

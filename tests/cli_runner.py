"""Run `zhner ARGS` as a separate process, the way a user's shell does, for the tests.

The process is forked from a per-test-process zygote (tests/cli_zygote.py) that has torch and zhner imported, which
saves about 3 CPU seconds of imports per command; `ZHNER_TEST_SUBPROCESS=1` runs a fresh `python -m zhner.cli`
instead (the two must agree: tests/test_cli_runner.py). The result is a `subprocess.CompletedProcess` either way.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ZYGOTE = Path(__file__).with_name("cli_zygote.py")
_zygote: subprocess.Popen | None = None
_pending = b""  # what was read of the zygote's answers beyond the last line


def _argument(a) -> str:
    return os.fsdecode(a) if isinstance(a, bytes) else str(a)


def run_zhner(*args, stdin: str | None = None, cwd: str | Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m zhner.cli ARGS` in `cwd` with this process's environment; `stdin` is the text it reads (none:
    /dev/null); stdout and stderr are captured as text."""
    argv = [_argument(a) for a in args]
    if os.environ.get("ZHNER_TEST_SUBPROCESS") == "1":
        return subprocess.run([sys.executable, "-m", "zhner.cli", *argv], input=stdin, capture_output=True, text=True,
                              cwd=cwd, timeout=timeout, stdin=None if stdin is not None else subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="zhner-cli-") as tmp:
        files = {name: Path(tmp) / name for name in ("stdin", "stdout", "stderr")}
        if stdin is not None:
            files["stdin"].write_text(stdin, encoding="utf-8")
        request = {"args": argv, "cwd": str(cwd), "env": dict(os.environ),
                   "stdin": str(files["stdin"]) if stdin is not None else None,
                   "stdout": str(files["stdout"]), "stderr": str(files["stderr"])}
        code = _run_forked(request, timeout)
        out, err = (files[n].read_text(encoding="utf-8", errors="replace") for n in ("stdout", "stderr"))
    return subprocess.CompletedProcess([sys.executable, "-m", "zhner.cli", *argv], code, out, err)


def _run_forked(request: dict, timeout: float) -> int:
    zygote = _started()
    zygote.stdin.write(json.dumps(request) + "\n")
    zygote.stdin.flush()
    pid = int(_read_line(zygote, 60).removeprefix("pid "))
    try:
        return int(_read_line(zygote, timeout).removeprefix("exit "))
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        _read_line(zygote, 60)  # the zygote reaps it
        raise subprocess.TimeoutExpired(request["args"], timeout) from None


def _read_line(zygote: subprocess.Popen, timeout: float) -> str:
    """The zygote's next answer line, read from its pipe unbuffered (so `select` sees what is not read yet)."""
    global _pending
    deadline = time.monotonic() + timeout
    while b"\n" not in _pending:
        ready, _, _ = select.select([zygote.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise subprocess.TimeoutExpired("zhner", timeout)
        chunk = os.read(zygote.stdout.fileno(), 4096)
        if not chunk:
            raise RuntimeError("the zhner zygote died (tests/cli_zygote.py)")
        _pending += chunk
    line, _pending = _pending.split(b"\n", 1)
    return line.decode()


def _stop(zygote: subprocess.Popen) -> None:
    zygote.kill()
    zygote.wait()  # reaped, so its CPU time counts in this process's children (the suite's measured CPU time)


def _started() -> subprocess.Popen:
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen([sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, cwd=Path(__file__).resolve().parents[1])
        atexit.register(_stop, _zygote)
        if _read_line(_zygote, 120) != "ready":
            raise RuntimeError("the zhner zygote did not start (tests/cli_zygote.py)")
    return _zygote

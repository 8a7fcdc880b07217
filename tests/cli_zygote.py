"""A process that has imported torch and zhner once and forks a child per `zhner` command a test runs.

`python -m zhner.cli ...` spends about 3 CPU seconds importing torch before it does anything; the suite runs the CLI
a few hundred times. A child forked from this process is the command as a user runs it -- its own process, with its
own standard streams (files the test names), working directory, environment and exit code, and the CLI's own `main()`
-- without paying the imports again. Only `tests/cli_runner.py` talks to it.

Protocol, one request at a time on stdin (a JSON line: args, cwd, env, stdin, stdout, stderr paths); for each the
answer is the line `pid N` once the child runs, then `exit CODE` when it has ended. This process itself runs no torch
operation (so no thread pool exists to be broken by fork) and writes nothing to its own Python streams.
"""
import atexit
import json
import os
import sys
import traceback

HEAVY_MODULES = (
    "torch",
    "numpy",
    "zhner.cli",
    "zhner.tagger",
    "zhner.config",
    "zhner.data.registry",
    "zhner.train.trainer",
    "zhner.evaluate.metrics",
)


def _exit_code(exc: SystemExit) -> int:
    """The status a Python process exits with for this SystemExit (None: 0, a message: printed, 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_command(args: list[str]) -> int:
    """The CLI as `python -m zhner.cli ARGS` runs it, up to the interpreter's exit (atexit handlers, flushed streams)."""
    import zhner.cli as cli

    sys.argv = [cli.__file__, *args]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # what Python itself would print for an uncaught exception
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:  # as Python's own exit skips a stream the program closed
            continue
        try:
            stream.flush()
        except BaseException:
            code = code or 120  # as Python does when flushing stdout fails at exit
    return code


def _child(request: dict) -> None:
    """In the forked child: become the command's process, run it, never return."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        streams = [
            os.open(request["stdin"] or os.devnull, os.O_RDONLY),
            os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
            os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        ]
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
            os.close(fd)
        code = _run_command(request["args"])  # str; bytes arguments arrive as os.fsdecode made them
    finally:
        os._exit(code)


def _answer(line: str) -> None:
    os.write(1, (line + "\n").encode())


def serve() -> None:
    for name in HEAVY_MODULES:
        __import__(name)
    _answer("ready")
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")  # its own handle: a child's fd 0 is its command's stdin
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            _child(request)
        _answer(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        _answer(f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":  # not under multiprocessing's re-import of the main module (`__mp_main__`)
    serve()

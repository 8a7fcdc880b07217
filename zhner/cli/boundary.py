"""The error boundary of `zhner`: every way a command can fail becomes one line on stderr and an exit status.

User errors (bad files, configs, arguments) print one `error: ...` line and exit with status 2, with no traceback; a
bug keeps its plain traceback.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import warnings

import typer

from zhner.cli.common import echo_err
from zhner.errors import ZhnerError

NO_TORCH = (
    "PyTorch is not installed: pip install torch (the CPU build: --index-url https://download.pytorch.org/whl/cpu), or "
    "tag without it with a model exported to ONNX: zhner predict --runtime onnx -m MODEL"
)


def run(app: typer.Typer) -> None:
    """Run the command line of this process and exit with its status (0 on success)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    warnings.formatwarning = _one_line_warning
    signal.signal(signal.SIGTERM, _on_sigterm)  # `serve` replaces it with uvicorn's graceful shutdown
    usage_errors = _usage_error_types()
    try:
        rc = app(prog_name="zhner", standalone_mode=False)  # returns the code of a typer.Exit in this mode
        with contextlib.suppress(ValueError):  # ValueError: predict closed it
            sys.stdout.flush()  # a full disk under stdout is found here, not at exit (where Python prints a traceback)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except ZhnerError as exc:
        echo_err(f"error: {exc}")
        sys.exit(2)
    except KeyboardInterrupt:
        echo_err("interrupted")
        sys.exit(130)
    except _Terminated:
        echo_err("terminated")
        sys.exit(128 + signal.SIGTERM)
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(0)
    except OSError as exc:  # every OS error the library did not name itself: one line, once, here
        echo_err(f"error: {_os_error_message(exc)}")
        sys.exit(2)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "torch":
            raise
        echo_err(f"error: {NO_TORCH}")  # a torch-free install: one line, not the traceback of an import deep inside
        sys.exit(2)
    except usage_errors as exc:  # unknown command or option, missing argument, a value out of its range
        if type(exc).__name__ != "NoArgsIsHelpError":  # `zhner` alone: the help is the message
            echo_err(f"error: {_usage_message(exc)}")
        sys.exit(2)
    except Exception as exc:
        if type(exc).__name__ == "Abort":  # click's / typer's Abort: the user pressed Ctrl-C at a prompt
            echo_err("interrupted")
            sys.exit(130)
        raise


def _usage_error_types() -> tuple[type[BaseException], ...]:
    """The exception classes of command-line usage errors. typer >= 0.2x vendors click (typer._click, errors derive from
    typer.TyperException); older typer raises click's own: catch whichever this installation has."""
    types: list[type[BaseException]] = []
    if isinstance(getattr(typer, "TyperException", None), type):
        types.append(typer.TyperException)
    try:
        import click

        types.append(click.ClickException)
    except ImportError:
        pass
    return tuple(types)


def _usage_message(exc: BaseException) -> str:
    """One line: the command it concerns and click's message ("No such option: --bogus", "Invalid value for ...")."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    message = " ".join(str(message).split())  # click's messages may hold newlines (suggestions)
    path = getattr(getattr(exc, "ctx", None), "command_path", None) or "zhner"
    return f"{path}: {message} (see {path} --help)"


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that `finally` blocks run: atomic_open removes its temporary file."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"  # not Python's two lines with the source line that raised it


def _os_error_message(exc: OSError) -> str:
    """`PATH: strerror` (both paths of a rename or link), or the standard output's error when no file is named."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None:
        paths = _file_name(exc.filename) + ("" if exc.filename2 is None else f" -> {_file_name(exc.filename2)}")
        return f"{paths}: {reason}"
    from zhner.fileio import is_write_error

    if is_write_error(exc):  # files are written through zhner.fileio, which names them: this is stdout
        _silence_stdout()
        return f"cannot write the standard output: {reason}"
    return reason


def _file_name(name: object) -> str:
    return os.fsdecode(name) if isinstance(name, (str, bytes)) else str(name)  # an fd is an int


def _silence_stdout() -> None:
    """Point stdout at /dev/null: what is left in its buffer cannot be written, and Python's flush at exit would print
    a second error about it."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)

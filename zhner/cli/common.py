"""What the command families share: limits of their options, how a model or config is named, where lines go.

Nothing here imports torch or pydantic at import time: `zhner --help` and the torch-free `predict --runtime onnx`
start without them.
"""
from __future__ import annotations

import enum
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from zhner.errors import ZhnerError

if TYPE_CHECKING:
    import torch

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
MAX_SEED = 2**32 - 1  # = zhner.config.MAX_SEED (not imported: the CLI imports pydantic only when a command needs it)
MAX_SERVE_WORKERS = 64  # processes of `zhner serve --workers`; each holds a model, so far more than the cores only costs memory
MAX_MEMORY_MB = 1_048_576  # 1 TiB: a finite bound (inf was a traceback) far above any machine's memory
MAX_RESAMPLES = 10_000_000  # the p of a randomization test has a floor of 1 / (resamples + 1): 10^7 reaches 1e-7


class Choice(str, enum.Enum):
    """The words an option takes (--format jsonl|conll), declared with `choice_option`: Typer lists them in --help. A
    member is the str it spells, so the library below takes it as that string."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def spelled(cls) -> str:
        words = [member.value for member in cls]
        return " or ".join(words) if len(words) == 2 else "one of " + ", ".join(words)


class Runtime(Choice):
    """What runs a tagger: PyTorch, or its exported graph on onnxruntime (zhner.runtime, no torch)."""

    torch = "torch"
    onnx = "onnx"


def export_graph(directory: Path, path: Path) -> None:
    """A model's graph for the torch-free runtime, exported into the cache on first use: torch is imported only now."""
    try:
        from zhner.export import export_for_runtime
    except ModuleNotFoundError as exc:
        raise ZhnerError(f"no exported graph in the cache yet ({path}), and exporting it needs {exc.name}: pip install "
                         "torch, or copy there a graph made by `zhner export` on a machine with torch", directory) from None
    export_for_runtime(directory, path)


def choice_option(default: Choice | None, *names: str, kind: type[Choice] | None = None, **options: Any) -> Any:
    """typer.Option of a Choice (`kind`: its class, where the default is None). A word not among its members is the
    one-line error the CLI always gave, `--engine must be local or ray, not 'spark'` (status 2), not click's longer
    "Invalid value for '--engine': ..." with its pointer to --help."""
    kind = kind or type(default)
    flag = names[-1]

    def parse(value: str | Choice) -> Choice:
        try:
            return kind(value)
        except ValueError:
            raise ZhnerError(f"{flag} must be {kind.spelled()}, not {value!r}") from None

    return typer.Option(default, *names, parser=parse, **options)


def recipe_option() -> Any:
    """--recipe of a command that reads a config (train, sweep, bench)."""
    return typer.Option(None, "--recipe", help="apply a recipe of the config (e.g. fast), before --set")


def model_argument() -> Any:
    """MODEL_DIR of a command that needs a model (evaluate, export, info)."""
    return typer.Argument(..., help="a trained model directory, or a shipped name (zh-small, zh-accurate)")


def model_option() -> Any:
    """-m of a command with a default model (predict, serve)."""
    return typer.Option(
        None, "-m", "--model", help="model directory or shipped name (zh-small, zh-accurate; default zh-small)"
    )


def echo_err(message: str) -> None:
    typer.echo(message, err=True)


def print_version(value: bool) -> None:
    """The eager `--version` option: print and stop before any command runs."""
    if value:
        from zhner import __version__

        typer.echo(f"zhner {__version__}")
        raise typer.Exit(0)


class _EchoHandler(logging.Handler):
    """Prints zhner's log records (the trainer's progress) on stderr, one plain line each, as the CLI always has;
    stderr is looked up at each record, so a test runner's captured stream gets them too."""

    def emit(self, record: logging.LogRecord) -> None:
        echo_err(self.format(record))


def log_to_stderr() -> None:
    """Route the trainer's logger to stderr at INFO (once): the library only logs, it never prints; the CLI prints
    the lines it always printed. (Other zhner loggers keep Python's default: warnings only, as before.)"""
    trainer = logging.getLogger("zhner.train")
    if not any(isinstance(h, _EchoHandler) for h in trainer.handlers):
        trainer.addHandler(_EchoHandler())
    trainer.setLevel(logging.INFO)
    trainer.propagate = False  # a host application's root handler would print each line twice


def set_threads(threads: int) -> None:
    """torch's thread count for a command that trains (train.threads): the CLI's to set, never the library's."""
    import torch

    torch.set_num_threads(threads)


def torch_device(name: str) -> torch.device:
    """--device as a torch.device; a bad name or a missing GPU is a one-line error."""
    from zhner.device import resolve_device

    return resolve_device(name)


def resolve_config(name_or_path: str) -> Path:
    """A YAML path, or the name of a shipped config (`tener_resume` -> zhner/configs/tener_resume.yaml)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    shipped = CONFIG_DIR / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if shipped.exists():
        return shipped
    known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
    raise ZhnerError(f"no such config file or shipped config (shipped: {known})", name_or_path)


def resolve_model_dir(model_dir: str | Path | None) -> Path:
    """`-m DIR` or `-m NAME` of a shipped model (zh-small, zh-accurate) if given, else the model shipped in the package
    (zhner/resources/default_model/), if there is one. `-m ''` is an error (as a Path it would be the current
    directory); a word that is neither a shipped name nor a directory is an error listing the shipped names."""
    if model_dir is not None:
        if str(model_dir).strip() == "":
            raise ZhnerError("no model directory given (an empty path)")
        from zhner.shipped import resolve_model

        return Path(resolve_model(str(model_dir)))
    from zhner.shipped import default_model_dir  # not through zhner.tagger: that imports torch

    shipped = default_model_dir()
    if shipped is None:
        raise ZhnerError("no model given and this installation ships no default model: pass -m DIR (a trained model)")
    return shipped

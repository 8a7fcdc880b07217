"""The `zhner` command: train / sweep / evaluate / compare / attention / gates / plot / predict / export / info / serve /
score / vectors / translate / bench / demo / data / pretrained.

This module assembles the Typer app from the command families (one module each) in the order `zhner --help` lists
them; `main` (the console script) runs it inside the error boundary (`zhner.cli.boundary`).
"""
from __future__ import annotations

import typer

from zhner.cli.bench import bench, demo
from zhner.cli.boundary import run
from zhner.cli.common import CONFIG_DIR, MAX_SEED, log_to_stderr, print_version, resolve_config, resolve_model_dir
from zhner.cli.data import data_app, translate, vectors
from zhner.cli.export import export_model, info
from zhner.cli.figures import attention, gates, plot
from zhner.cli.prediction import predict
from zhner.cli.pretrained import pretrained_app
from zhner.cli.scoring import compare, evaluate, score
from zhner.cli.serving import serve
from zhner.cli.training import sweep, train

__all__ = ["CONFIG_DIR", "MAX_SEED", "app", "evaluate", "main", "predict", "resolve_config", "resolve_model_dir"]

# pretty_exceptions_enable=False: a bug keeps a plain traceback; user errors never reach it (see zhner.cli.boundary)
app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Chinese named entity recognition.", pretty_exceptions_enable=False
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, expose_value=False, callback=print_version, help="print the version and exit"
    ),
) -> None:
    """Chinese named entity recognition."""
    log_to_stderr()


for _command in (train, sweep, compare, attention, gates, plot, evaluate, predict):
    app.command()(_command)
app.command("export")(export_model)
for _command in (info, serve, score, vectors, translate, bench, demo):
    app.command()(_command)
app.add_typer(data_app, name="data")
app.add_typer(pretrained_app, name="pretrained")


def main() -> None:
    """The console script `zhner`."""
    run(app)

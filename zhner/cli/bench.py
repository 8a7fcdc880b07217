"""`zhner bench` (training and inference throughput) and `zhner demo` (the main job on what the package carries)."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from zhner.cli.common import recipe_option, resolve_config, set_threads


def bench(
    config: str = typer.Argument(..., help="YAML config or shipped config name"),
    as_json: bool = typer.Option(False, "--json"),
    set_: list[str] = typer.Option([], "--set"),
    recipe: str | None = recipe_option(),
    seconds: float = typer.Option(15.0, min=1.0, max=3600.0, help="seconds of training to time"),
) -> None:
    """Training and inference throughput (sentences/s) on the config's dataset, one thread; peak memory."""
    from zhner.bench import run_bench
    from zhner.config import load_config

    cfg = load_config(resolve_config(config), set_, recipe)
    set_threads(cfg.train.threads)
    result = run_bench(cfg, train_seconds=seconds)
    typer.echo(json.dumps(result) if as_json else "\n".join(f"{k:28s} {v}" for k, v in result.items()))


def demo(
    output: Path = typer.Option(Path("runs/demo"), "-o", "--output"),
    minutes: float = typer.Option(3.0, help="training budget"),
) -> None:
    """The main job on what the package carries: train a small TENER on `mini` (the corpus inside the package),
    evaluate it, tag a few sentences, then the same with the shipped model."""
    from zhner.demo import run_demo

    set_threads(1)  # tener_mini's train.threads
    run_demo(output, minutes)

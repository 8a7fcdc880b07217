"""`zhner train` and `zhner sweep`: runs, seed sets and parameter sweeps written to a run directory."""
from __future__ import annotations

import json
import os

import typer

from zhner.cli.common import recipe_option, resolve_config, set_threads, torch_device
from zhner.errors import ZhnerError


def train(
    config: str = typer.Argument(..., help="YAML config, or the name of a shipped one (e.g. tener_resume)"),
    output: str = typer.Option(..., "-o", "--output", help="run directory (the best model is saved there)"),
    set_: list[str] = typer.Option([], "--set", help="override a config field, e.g. --set train.lr=0.001"),
    recipe: str | None = recipe_option(),
    seeds: int = typer.Option(
        1, "--seeds", min=1, max=1000, help="train this many seeds (seed, seed+1, ...), one sub-directory each"
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace a finished model or an interrupted run in OUTPUT"),
    device: str = typer.Option("auto", "--device", help="auto (a GPU when CUDA is available), cpu, or cuda"),
) -> None:
    """Train a model; resumes automatically if OUTPUT holds an interrupted run."""
    from zhner.config import load_config
    from zhner.fileio import check_output_dir
    from zhner.train.rundir import output_path
    from zhner.train.runs import run_summary, train_seeds
    from zhner.train.trainer import train as run_training

    output = output_path(output)  # typer would read '' as '.'
    cfg = load_config(resolve_config(config), set_, recipe)
    if os.environ.get("RANK", "0") == "0":  # under torchrun process 0 alone touches OUTPUT (a probe of each would race)
        check_output_dir(output)
    torch_device(device)  # a bad --device fails before the data is loaded
    set_threads(cfg.train.threads)
    if seeds == 1:
        metrics = run_training(cfg, output, overwrite=overwrite, device=device)
        if metrics:  # under torchrun only process 0 has the run's metrics
            typer.echo(json.dumps(run_summary(metrics), ensure_ascii=False))
        return
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ZhnerError("--seeds is not supported under torchrun: launch one torchrun per seed (--set train.seed=N)")
    # seed<N> run directories and seeds.json; a finished seed with the same config is read back, not trained again
    summaries = train_seeds(cfg, output, seeds, overwrite=overwrite, device=device)
    typer.echo(json.dumps(summaries, ensure_ascii=False))


def sweep(
    config: str = typer.Argument(..., help="YAML config, or the name of a shipped one (e.g. atssa_resume)"),
    output: str = typer.Option(..., "-o", "--output", help="sweep directory: one run (or seed set) per value + sweep.json"),
    param: str = typer.Option(..., "--param", help="the parameter and its values, e.g. model.topk=1,2,3,4,5,6"),
    set_: list[str] = typer.Option([], "--set", help="override a config field for every run"),
    recipe: str | None = recipe_option(),
    seeds: int = typer.Option(1, "--seeds", min=1, max=1000, help="seeds per value (seed, seed+1, ...)"),
    overwrite: bool = typer.Option(False, "--overwrite", help="retrain finished runs"),
) -> None:
    """Train one run per value of a parameter (the ATSSA paper's Figures 6-7); running it again resumes."""
    from zhner.config import apply_overrides, apply_recipe, read_yaml_config
    from zhner.fileio import check_output_dir
    from zhner.train.rundir import output_path
    from zhner.train.runs import sweep as run_sweep

    output = output_path(output)  # typer would read '' as '.'
    path = resolve_config(config)
    check_output_dir(output)
    raw = apply_overrides(apply_recipe(read_yaml_config(path), recipe, str(path)), set_)
    threads = raw["train"].get("threads", 1) if isinstance(raw, dict) and isinstance(raw.get("train"), dict) else 1
    set_threads(threads if isinstance(threads, int) and threads >= 1 else 1)  # a bad value: the config check reports it
    result = run_sweep(raw, output, param, seeds, overwrite=overwrite, source=str(path))
    for run in result["runs"]:
        score = run[f"test.{run['metric']}"]
        std = f" ± {score['std']:.2f}" if score["std"] is not None else ""
        name = "F1" if run["metric"] == "f1_strict" else run["metric"]
        typer.echo(f"{result['param']}={run['value']}\ttest {name} {score['mean']:.2f}{std} ({score['n']} seed(s))")

"""The `zhner` command: train / evaluate / predict / score / data / bench / demo.

User errors (bad files, configs, arguments) print one `error: ...` line and exit with status 2; no traceback.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from zhner.errors import ZhnerError
from zhner.fileio import atomic_write_text

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Chinese named entity recognition.")
data_app = typer.Typer(no_args_is_help=True, help="Datasets: list, check checksums, fetch from their public sources.")
app.add_typer(data_app, name="data")

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def _echo_err(message: str) -> None:
    typer.echo(message, err=True)


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


@app.command()
def train(
    config: str = typer.Argument(..., help="YAML config, or the name of a shipped one (e.g. tener_resume)"),
    output: Path = typer.Option(..., "-o", "--output", help="run directory (the best model is saved there)"),
    set_: list[str] = typer.Option([], "--set", help="override a config field, e.g. --set train.lr=0.001"),
    seeds: int = typer.Option(1, "--seeds", min=1, help="train this many seeds (seed, seed+1, ...), one sub-directory each"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace a finished model already in OUTPUT"),
) -> None:
    """Train a model; resumes automatically if OUTPUT holds an interrupted run."""
    from zhner.train.config import load_config
    from zhner.train.trainer import train as run_training

    cfg = load_config(resolve_config(config), set_)
    if seeds == 1:
        metrics = run_training(cfg, output, log=_echo_err, overwrite=overwrite)
        typer.echo(json.dumps(_summary(metrics), ensure_ascii=False))
        return
    results = []
    for k in range(seeds):
        seed = cfg.train.seed + k
        seeded = cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": seed})})
        results.append(run_training(seeded, output / f"seed{seed}", log=_echo_err, overwrite=overwrite))
    summary = [_summary(m) for m in results]
    atomic_write_text(output / "seeds.json", json.dumps(summary, indent=2, ensure_ascii=False))
    typer.echo(json.dumps(summary, ensure_ascii=False))


def _summary(metrics: dict) -> dict:
    from zhner.evaluate.metrics import headline

    return {k: metrics[k] for k in ("model", "dataset", "seed", "best_epoch", "epochs_run", "status")} | {
        "dev": headline(metrics["dev"]) if metrics.get("dev") else None,
        "test": headline(metrics["test"]) if metrics.get("test") else None,
    }


@app.command()
def evaluate(
    model_dir: Path = typer.Argument(..., help="a trained model directory"),
    data: str = typer.Argument(..., help="a labelled corpus file, or a dataset name (its test split; NAME:dev for dev)"),
    batch_size: int = typer.Option(64, min=1),
) -> None:
    """Score a trained model on labelled data; prints JSON metrics (percent)."""
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import DATASETS, load_dataset
    from zhner.tagger import Tagger

    tagger = Tagger.load(model_dir)
    name, _, split = data.partition(":")
    if not Path(data).exists() and name in DATASETS:
        corpus = load_dataset(name)[split or "test"]
    else:
        corpus = read_corpus(data)
    typer.echo(json.dumps(tagger.evaluate(corpus, batch_size), ensure_ascii=False, indent=2))


@app.command()
def predict(
    input_file: str = typer.Argument("-", help="text file, one text per line ('-' or absent: stdin)"),
    model_dir: Optional[Path] = typer.Option(None, "-m", "--model", help="model directory"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write here (atomically) instead of stdout"),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or conll"),
    batch_size: int = typer.Option(32, min=1),
    memory_mb: Optional[float] = typer.Option(
        None, "--memory-mb", min=1, help="memory budget of one model call (default 1024); longer lines are cut at "
        "sentence ends, then in overlapping windows, and the entities stitched back to line offsets"
    ),
) -> None:
    """Tag texts: one JSON object per input line, {"text", "entities": [{"type", "start", "end", "text"}]}."""
    from zhner.serve.predict import predict_stream
    from zhner.tagger import Tagger

    if fmt not in ("jsonl", "conll"):
        raise ZhnerError(f"--format must be jsonl or conll, not {fmt!r}")
    if model_dir is None:
        raise ZhnerError("no model given: pass -m DIR (a trained model directory)")
    tagger = Tagger.load(model_dir)
    predict_stream(tagger, input_file, output, fmt, batch_size, memory_mb)


@app.command()
def score(
    gold: Path = typer.Argument(..., help="gold tag file (CHAR TAG lines)"),
    pred: Path = typer.Argument(..., help="predicted tag file, same sentences"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    scheme: Optional[str] = typer.Option(None, help="bio / bioes / bmes (default: detected from GOLD)"),
) -> None:
    """Score predicted tags against gold: strict and lenient span P/R/F1, per type, Span F, Type Acc."""
    from zhner.evaluate.metrics import format_report, score_files

    result = score_files(gold, pred, scheme=scheme)
    typer.echo(json.dumps(result, ensure_ascii=False) if as_json else format_report(result))


@app.command()
def bench(
    config: str = typer.Argument(..., help="YAML config or shipped config name"),
    as_json: bool = typer.Option(False, "--json"),
    set_: list[str] = typer.Option([], "--set"),
    seconds: float = typer.Option(15.0, help="seconds of training to time"),
) -> None:
    """Training and inference throughput (sentences/s) on the config's dataset, one thread; peak memory."""
    from zhner.bench import run_bench
    from zhner.train.config import load_config

    result = run_bench(load_config(resolve_config(config), set_), train_seconds=seconds)
    typer.echo(json.dumps(result) if as_json else "\n".join(f"{k:28s} {v}" for k, v in result.items()))


@app.command()
def demo(
    output: Path = typer.Option(Path("runs/demo"), "-o", "--output"),
    minutes: float = typer.Option(3.0, help="training budget"),
) -> None:
    """The main job on embedded defaults: train a small TENER on Resume NER, evaluate it, tag a few sentences."""
    from zhner.demo import run_demo

    run_demo(output, minutes)


@data_app.command("list")
def data_list() -> None:
    """Known datasets and where they are found."""
    from zhner.data.registry import DATASETS, find_file

    for name, info in DATASETS.items():
        try:
            where = str(find_file(name, "train").parent)
        except ZhnerError:
            where = "not found (zhner data fetch " + name + ")"
        typer.echo(f"{name:15s} {info.description[:60]:60s} {where}")


@data_app.command("check")
def data_check(name: str, data_dir: Optional[Path] = typer.Option(None)) -> None:
    """Verify a dataset's files against their sha256; exit 1 if any is missing or differs."""
    from zhner.data.registry import check

    rows = check(name, data_dir)
    bad = False
    for row in rows:
        typer.echo(f"{row['split']:6s} {row['status']:10s} {row.get('sentences') or '':>7} {row.get('path') or row['relpath']}")
        bad |= row["status"] not in ("ok", "unverified")
    raise typer.Exit(1 if bad else 0)


@data_app.command("fetch")
def data_fetch(
    name: str,
    cache_dir: Optional[Path] = typer.Option(None, help="default: $ZHNER_CACHE or ~/.cache/zhner/data"),
    base_url: Optional[str] = typer.Option(None, help="a mirror to download from instead of the public sources"),
) -> None:
    """Download a dataset from its public source and verify its sha256."""
    from zhner.data.registry import fetch

    for path in fetch(name, cache_dir, base_url):
        typer.echo(str(path))


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        rc = app(standalone_mode=False)  # returns the code of a typer.Exit in this mode
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except ZhnerError as exc:
        _echo_err(f"error: {exc}")
        sys.exit(2)
    except KeyboardInterrupt:
        _echo_err("interrupted")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # click usage errors come through here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()

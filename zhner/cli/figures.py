"""`zhner attention`, `zhner gates` and `zhner plot`: the papers' figures of a model's attention, and training curves."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from zhner.cli.common import echo_err
from zhner.errors import ZhnerError

if TYPE_CHECKING:
    from zhner.pipeline import Pipeline


def attention(
    model_dir: Path = typer.Argument(..., help="a trained ATSSA model, or a BERT / TENER model with model.local_attention (SLA / WLA)"),
    text: str = typer.Argument(..., help="one sentence (at most 256 characters / 254 word pieces)"),
    output: Path = typer.Option(Path("attention"), "-o", "--output", help="directory for the PNGs and tables"),
) -> None:
    """Heatmaps of a model's attention on one sentence: ATSSA's selective attention per layer and head (the ATSSA paper's
    Figure 9), or SLA / WLA's global, local and mixed distributions per layer with the local mask (the SLA paper's
    Figure 3)."""
    import zhner
    from zhner.data.corpus import lone_surrogate
    from zhner.fileio import check_output_dir, writing

    if lone_surrogate(text) is not None:  # bytes that are not UTF-8 reach argv as surrogates
        raise ZhnerError("TEXT: not valid UTF-8 text")
    check_output_dir(output)
    with writing(output):  # before the model runs: a folder that cannot be made is found now
        output.mkdir(parents=True, exist_ok=True)
    pipeline = zhner.load(model_dir)
    if getattr(pipeline.config.model, "local_attention", "none") != "none":
        pngs = _local_attention(pipeline, text, output)
    else:
        pngs = _selective_attention(pipeline, text, output)
    typer.echo(f"wrote {len(pngs)} heatmaps to {output}")


def _local_attention(pipeline: Pipeline, text: str, output: Path) -> list[Path]:
    """SLA / WLA: the heatmaps of each layer, and its gates printed a line a layer."""
    from zhner.evaluate.attention import local_maps, plot_local_maps

    maps = local_maps(pipeline, text)
    pngs = plot_local_maps(maps, output)
    typer.echo("prediction: " + json.dumps(maps["prediction"], ensure_ascii=False))
    for n, layer in enumerate(maps["layers"]):
        typer.echo(f"layer {n + 1} gates: " + " ".join(f"{p}:{g:.2f}" for p, g in zip(maps["pieces"], layer["gate"])))
    return pngs


def _selective_attention(pipeline: Pipeline, text: str, output: Path) -> list[Path]:
    """ATSSA: the heatmaps of each layer and head, and the keys each head kept printed a line a head."""
    from zhner.evaluate.attention import cjk_font, plot_attention, selective_maps

    maps = selective_maps(pipeline, text)
    pngs = plot_attention(maps, output)
    if cjk_font() is None:
        echo_err(f"note: no CJK font (pip install 'zhner[plot]' brings one): ticks are character indices, see {output / 'tokens.txt'}")
    typer.echo("entities: " + json.dumps(maps["entities"], ensure_ascii=False))
    for n, layer in enumerate(maps["layers"]):
        for h, kept in enumerate(layer["kept"]):
            typer.echo(f"layer {n + 1} head {h + 1} keys kept: " + " ".join(f"{c}{k}" for c, k in zip(maps["chars"], kept)))
    return pngs


def gates(
    model_dirs: list[Path] = typer.Argument(..., help="trained BERT / TENER models with model.local_attention (SLA / WLA)"),
    data: Optional[str] = typer.Option(
        None, "--data", help="DATASET[:SPLIT] or a corpus file to run (default: each model's own dataset, dev split)"
    ),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write the plot here (PNG) and its table beside it (.json)"),
    batch_size: int = typer.Option(32, min=1),
) -> None:
    """Mean gate g of each layer (SLA Eq. 5) over every word piece of a dataset: the SLA paper's Figure 2. Prints one
    row per model; with -o, a PNG with one line per model and a JSON table beside it."""
    import zhner
    from zhner.data.registry import load_corpus
    from zhner.evaluate.attention import gate_means, plot_gates
    from zhner.fileio import atomic_write_text
    from zhner.train.corpora import dev_split

    rows: dict[str, list[float]] = {}
    for model_dir in model_dirs:
        pipeline = zhner.load(model_dir)
        corpus = load_corpus(data, pipeline.featurizer.unit) if data else dev_split(pipeline.config)
        rows[str(model_dir)] = gate_means(pipeline, corpus.sentences, batch_size)
        typer.echo(f"{model_dir}\t" + "\t".join(f"{g:.3f}" for g in rows[str(model_dir)]))
    if output is not None:
        plot_gates(rows, output)
        table = {"command": "zhner gates " + " ".join(sys.argv[2:]), "data": data, "gates": rows}
        atomic_write_text(output.with_suffix(".json"), json.dumps(table, indent=1) + "\n")
        typer.echo(f"wrote {output} and {output.with_suffix('.json')}")


def plot(
    runs: list[Path] = typer.Argument(..., help="run directories (what zhner train -o wrote; each has log.jsonl)"),
    output: Path = typer.Option(..., "-o", "--output", help="the PNG to write (atomically)"),
) -> None:
    """Training curves: the training loss and the dev score of each epoch, one line per run, the best epoch circled."""
    from zhner.evaluate.curves import plot_curves, read_curve
    from zhner.fileio import check_output_file

    check_output_file(output)
    curves = [read_curve(run) for run in runs]  # every log is read before anything is drawn
    plot_curves(curves, output)
    for curve in curves:
        best = curve.epochs.index(curve.best_epoch)
        typer.echo(f"{curve.name}: {len(curve.epochs)} epochs, best dev {curve.metric} {curve.dev[best]:.2f} at epoch {curve.best_epoch}")
    typer.echo(f"wrote {output}")

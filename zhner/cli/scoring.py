"""`zhner evaluate`, `zhner compare` and `zhner score`: a model on labelled data, two run sets or two models against
each other, predicted tag files against gold."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from zhner.cli.common import (
    MAX_RESAMPLES,
    MAX_SEED,
    Choice,
    choice_option,
    echo_err,
    model_argument,
    resolve_model_dir,
    torch_device,
)
from zhner.data.schemes import SCHEMES
from zhner.errors import ZhnerError

if TYPE_CHECKING:
    from zhner.data.corpus import Corpus
    from zhner.evaluate.metrics import NERScorer
    from zhner.pipeline import Pipeline

Scheme = Choice("Scheme", [(name, name) for name in SCHEMES])  # score --scheme: the tag schemes zhner reads

SEEN_IN_HELP = (
    "the training corpus (a file, or a dataset name for its train split): also score, strictly, the mentions seen in "
    "it as an entity of the same type apart from the unseen ones"
)


def _resamples(asked_by: str) -> Any:
    """--resamples of the randomization test that the option `asked_by` runs (compare --on, score --against)."""
    return typer.Option(
        10_000, "--resamples", min=1, max=MAX_RESAMPLES, help=f"with {asked_by}: shuffles of the randomization test"
    )


def _shuffle_seed(asked_by: str) -> Any:
    return typer.Option(0, "--seed", min=0, max=MAX_SEED, help=f"with {asked_by}: the shuffles' random seed")


def evaluate(
    model_dir: str = model_argument(),
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

    target = torch_device(device)
    if onnx is not None:
        from zhner.export import load_onnx

        if target.type != "cpu":
            raise ZhnerError("--onnx runs the graph with onnxruntime on the CPU; leave --device out")
        tagger = load_onnx(resolve_model_dir(model_dir), onnx)
    else:
        tagger = zhner.load(model_dir)
    tagger.model.to(target)
    if seen_in is not None and tagger.task.kind == "classification":
        raise ZhnerError("--seen-in scores entity mentions; this is a classification model", model_dir)
    corpus = _gold(tagger, data)
    from zhner.train.corpora import model_corpus  # torch and the trainer's data reading only once a command runs

    seen = None if seen_in is None else model_corpus(tagger.config, seen_in, tagger.featurizer.unit, default_split="train")
    _print_scores(tagger.evaluate(corpus, batch_size, seen_in=seen), as_json)


def _gold(pipeline: Pipeline, data: str) -> Corpus:
    """DATA in the model's types, of the model's task (tags for a tagger, sentence labels for a classifier); labels it
    holds that the model never predicts are warned about."""
    from zhner.evaluate.gold import unknown_labels_warning
    from zhner.train.corpora import model_corpus

    corpus = model_corpus(pipeline.config, data, pipeline.featurizer.unit)
    if (corpus.scheme is None) != (pipeline.task.kind == "classification"):
        what = "labelled sentences (classification)" if corpus.scheme is None else "tagged tokens"
        raise ZhnerError(f"holds {what}, but the model is a {pipeline.task.kind} model", corpus.path)
    warning = unknown_labels_warning(corpus, pipeline.labels)
    if warning is not None:
        echo_err(f"warning: {warning}")
    return corpus


def _print_scores(result: dict, as_json: bool) -> None:
    """A scorer's result as `zhner score` prints it (a tagger's table, a classifier's report), or as JSON."""
    from zhner.evaluate.classification import format_classification_report
    from zhner.evaluate.metrics import format_report

    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        typer.echo(format_report(result) if "strict" in result else format_classification_report(result))


def compare(
    runs_a: Path = typer.Argument(..., help="run set A: a --seeds directory (seeds.json or seed*/), or one run"),
    runs_b: Path = typer.Argument(..., help="run set B, paired with A by seed number"),
    on: Optional[str] = typer.Option(
        None, "--on", help="compare two single trained taggers sentence by sentence on this labelled data (a corpus "
        "file, or a dataset name: its test split; NAME:dev for dev) instead of over seeds"
    ),
    resamples: int = _resamples("--on"),
    seed: int = _shuffle_seed("--on"),
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
    tagger.model.to(torch_device(device))
    corpus = _gold(tagger, data)
    return tagger.scorer(corpus, batch_size, per_sentence=True), [s.tags for s in corpus.sentences]


def score(
    gold: Path = typer.Argument(..., help="gold tag file (CHAR TAG lines)"),
    pred: Path = typer.Argument(..., help="predicted tag file, same sentences"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    scheme: Optional[Scheme] = choice_option(None, "--scheme", kind=Scheme, help="bio / bioes / bmes (default: detected from GOLD)"),
    seen_in: Optional[str] = typer.Option(None, "--seen-in", help=SEEN_IN_HELP),
    against: Optional[Path] = typer.Option(
        None, "--against", help="a second predicted tag file of the same sentences: score both and test the difference "
        "(paired approximate randomization over sentences)"
    ),
    resamples: int = _resamples("--against"),
    seed: int = _shuffle_seed("--against"),
) -> None:
    """Score predicted tags against gold: strict and lenient span P/R/F1, per type, Span F, Type Acc. With --against,
    the strict and lenient F1 of PRED and of the second file, and whether they differ (p of a paired approximate
    randomization test over the sentences)."""
    from zhner.data.registry import load_corpus
    from zhner.evaluate.metrics import file_scorer, format_report, score_files
    from zhner.evaluate.significance import compare_sentences, format_sentence_comparison

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
    seen = load_corpus(seen_in, default_split="train") if seen_in is not None else None
    result = score_files(gold, pred, scheme=scheme, seen_in=seen)
    typer.echo(json.dumps(result, ensure_ascii=False) if as_json else format_report(result))

"""`make demo`: train a small TENER for a few minutes on `mini`, the corpus carried inside the package, evaluate it, and
tag a few sentences; then the same sentences with the shipped model. It needs nothing beside the package (no corpus
to download), and speaks to a newcomer: each step says what it does and each number what it means."""
from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from zhner.config import load_config
from zhner.data.registry import CARRIED_ROOT
from zhner.entity import Entity
from zhner.errors import ZhnerError
from zhner.evaluate.metrics import test_scores_by_corpus
from zhner.fileio import LOG_FILE, parse_json, read_text
from zhner.info import trained_on
from zhner.shipped import DEFAULT_NAME, SHIPPED
from zhner.tagger import Tagger, default_model_dir
from zhner.train.rundir import LOG
from zhner.train.trainer import train

DEMO_SENTENCES = [  # not in `mini`: the model has not seen them
    "张晓明毕业于复旦大学，现任上海浦东发展银行副行长。",
    "国家统计局今天发布数据，广东和江苏的经济总量继续位居全国前列。",
    "周末我和小雨去杭州西湖边散步，顺便尝了知味观的小笼包。",
]
EPOCH_LINE = re.compile(r"^epoch \d+/\d+ ")  # the trainer's summary of an epoch (its numbers are read from log.jsonl)


def say(text: str = "") -> None:
    typer.echo(text)


def run_demo(output: Path, minutes: float) -> None:
    config_path = Path(__file__).resolve().parent / "configs" / "tener_mini.yaml"
    config = load_config(config_path, [f"train.max_minutes={minutes}"])
    epochs = config.train.epochs
    say(f"Step 1 of 3: training a small TENER tagger (one Transformer layer) for about {minutes:g} minutes on `mini`, "
        "1,000 sentences of news, business, sports and everyday posts written for zhner, with their people (PER), "
        f"places (LOC) and organisations (ORG) marked; the package carries them ({CARRIED_ROOT / 'mini'}). It may make {epochs} passes "
        f"over the training sentences (epochs), but stops when its {minutes:g} minutes are spent; after each epoch it "
        "is scored on held-out sentences (dev F1, 0-100) and the best epoch is kept.")
    metrics = train(config, output, log=_epoch_reporter(output, epochs, minutes), overwrite=True)  # `make demo` twice retrains
    ran, best = metrics.get("epochs_run"), metrics["best_epoch"]
    ended = f"Its {minutes:g} minutes ran out after {ran} of {epochs} epochs" if metrics.get("status") == "time_budget" else f"It trained {ran} epochs"
    say(f"{ended}; the model of epoch {best}, the best on the dev sentences, is saved in {output}.")
    strict = metrics["test"]["strict"]
    say()
    say(f"Step 2 of 3: scored on the {metrics['test']['n_sentences']} test sentences, which it never saw: "
        f"{strict['r']:.1f}% of the entities in them are found (recall), {strict['p']:.1f}% of the entities it marks are "
        f"right (precision); F1, the balance of the two, is {strict['f1']:.1f} out of 100. An entity counts only when "
        "both its span and its type are exact (strict). A few minutes on a corpus this small give a rough model; the "
        "shipped one below was trained on 50,000 sentences.")
    say()
    say("Step 3 of 3: the entities it finds in three new sentences (type, characters start-end, text):")
    show(Tagger.load(output))
    say()
    say(f"Try it yourself: {command_name()} predict -m {output} -   then type a sentence and press Enter (Ctrl-D to end).")
    shipped = default_model_dir()
    if shipped is not None:  # a fresh clone has none until it is trained (configs/flat_general.yaml)
        tagger = Tagger.load(shipped)
        say()
        say(f"The model shipped with zhner ({describe_shipped(tagger.metrics, tagger.config.data.model_dump())}) "
            "on the same sentences:")
        show(tagger)
        say("It is the default of `zhner predict` (no -m) and of zhner.load() in Python.")


def command_name() -> str:
    """How the user can call zhner again: `zhner` when that name on the PATH is this program, else the path it was
    started by (`make demo` runs .venv/bin/zhner, which is not on the PATH until the environment is activated)."""
    started = Path(sys.argv[0])
    if started.name != "zhner":  # python -m zhner.cli, or a test
        return "zhner"
    on_path = shutil.which("zhner")
    return "zhner" if on_path and Path(on_path).resolve() == started.resolve() else str(started)


def describe_shipped(metrics: dict, data: dict) -> str:
    """The shipped model in words: its name, what it is, and its test F1 on each corpus it was trained on."""
    corpora = trained_on(data)
    scores = test_scores_by_corpus(metrics, corpora)
    names = {"msra": "MSRA", "weibo": "Weibo", "resume": "Resume"}
    scored = ", ".join(f"{names.get(name, name)} {score:.2f}" for name, score in scores.items())
    return f"{DEFAULT_NAME}: {SHIPPED[DEFAULT_NAME][1]}" + (f"; test F1 {scored}" if scored else "")


def _epoch_reporter(output: Path, epochs: int, minutes: float) -> Callable[[str], None]:
    """The trainer's `log` for the demo: each epoch as a sentence (from the record it has just written to log.jsonl),
    warnings as they are; the setup details `zhner train` prints are left out."""

    def report(message: str) -> None:
        if message.startswith("warning"):
            typer.echo(message, err=True)
            return
        if not EPOCH_LINE.match(message):
            return
        try:
            record = parse_json(read_text(output / LOG, LOG_FILE).splitlines()[-1])
        except (ZhnerError, ValueError, IndexError):
            say(f"  {message}")
            return
        dev = next((v for k, v in record.items() if k.startswith("dev") and isinstance(v, dict)), {})
        best = "the best so far" if record["best_epoch"] == record["epoch"] else f"the best is still epoch {record['best_epoch']}"
        say(f"  epoch {record['epoch']} of at most {epochs}: dev F1 {dev.get('f1_strict', 0.0):.1f} ({best}); "
            f"{record['seconds'] / 60:.1f} of {minutes:g} minutes used")

    return report


def show(tagger: Tagger) -> None:
    for text, entities in zip(DEMO_SENTENCES, tagger.predict(DEMO_SENTENCES, confidence=False)):
        say(text)
        for ent in entities:
            say(entity_line(ent))


def entity_line(ent: Entity) -> str:
    return f"  {ent.type:6s} [{ent.start:3d}, {ent.end:3d})  {ent.text}"

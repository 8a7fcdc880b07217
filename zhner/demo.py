"""`make demo`: train a small TENER on Resume NER for a few minutes, evaluate it, and tag a few sentences; then the same
sentences with the shipped general model when the package has one."""
from __future__ import annotations

from pathlib import Path

import typer

from zhner.config import load_config
from zhner.tagger import Tagger, default_model_dir
from zhner.train.trainer import train

DEMO_SENTENCES = [
    "张晓明，男，1965年出生，中国国籍，无境外永久居留权，本科学历，高级经济师。",
    "现任北京大学光华管理学院教授、博士生导师，兼任中国银行独立董事。",
    "2008年至今任上海浦东发展银行股份有限公司副行长。",
]


def run_demo(output: Path, minutes: float) -> None:
    config_path = Path(__file__).resolve().parent / "configs" / "tener_resume.yaml"
    overrides = [f"train.max_minutes={minutes}", "model.layers=1"]
    config = load_config(config_path, overrides)
    typer.echo(f"training TENER on Resume NER for about {minutes:g} minutes -> {output}", err=True)
    metrics = train(config, output, log=lambda m: typer.echo(m, err=True), overwrite=True)  # `make demo` twice just retrains
    test = metrics["test"]
    typer.echo(
        f"\nbest epoch {metrics['best_epoch']}: test strict P/R/F1 = "
        f"{test['strict']['p']:.2f} / {test['strict']['r']:.2f} / {test['strict']['f1']:.2f} "
        f"(lenient F1 {test['lenient']['f1']:.2f})\n"
    )
    show(Tagger.load(output))
    typer.echo(f"\nmodel saved in {output}; try: zhner predict -m {output} -  (then type a sentence)")
    shipped = default_model_dir()
    if shipped is not None:  # a fresh clone has none until it is trained (configs/flat_general.yaml)
        tagger = Tagger.load(shipped)
        f1 = ((tagger.metrics.get("test") or {}).get("strict") or {}).get("f1")
        score = f", MSRA test F1 {f1:.2f}" if f1 is not None else ""
        typer.echo(f"\nthe shipped general model (PER/LOC/ORG, FLAT trained on MSRA{score}):")
        show(tagger)
        typer.echo("it is the default of: zhner predict -  (no -m)")


def show(tagger: Tagger) -> None:
    for text, entities in zip(DEMO_SENTENCES, tagger.predict(DEMO_SENTENCES)):
        typer.echo(text)
        for ent in entities:
            typer.echo(f"  {ent['type']:6s} [{ent['start']:3d}, {ent['end']:3d})  {ent['text']}")

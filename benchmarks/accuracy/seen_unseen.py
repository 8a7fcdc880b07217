"""How much of a model's score comes from mentions it saw in training: strict P/R/F1 on seen and unseen mentions of
each split, with each split's share of unseen gold mentions (`zhner evaluate --seen-in` for several models at once).

    python benchmarks/accuracy/seen_unseen.py msra LABEL=MODEL_DIR [LABEL=MODEL_DIR ...] --splits dev test --name msra

writes benchmarks/results/seen_unseen_<name>.json and prints a markdown table. A mention is seen when its exact text
occurred as an entity of the same type in the dataset's train split (MSRA: without the held-out dev).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import zhner
from zhner.data.corpus import map_types
from zhner.data.registry import load_dataset
from zhner.fileio import atomic_write_text

RESULTS = Path(__file__).resolve().parents[1] / "results"


def score_model(model_dir: str, corpora: dict, splits: list[str]) -> dict:
    tagger = zhner.load(model_dir)
    type_map = tagger.config.data.type_map
    if type_map:  # a model trained on mapped types (the general model) is scored in them
        corpora = {k: map_types(c, type_map) if c.types() <= set(type_map) else c for k, c in corpora.items()}
    out = {}
    for split in splits:
        result = tagger.evaluate(corpora[split], seen_in=corpora["train"])
        seen, unseen = result["seen"]["seen"], result["seen"]["unseen"]
        out[split] = {
            "f1_strict": result["strict"]["f1"],
            "unseen_share": round(100 * unseen["n_gold"] / max(1, result["n_gold"]), 2),
            "seen": seen,
            "unseen": unseen,
        }
    return out


def table(rows: dict, splits: list[str]) -> str:
    head = "| model | split | F1 | unseen share of gold | seen F1 | unseen F1 | unseen P / R |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for label, by_split in rows.items():
        for split in splits:
            r = by_split[split]
            lines.append(
                f"| {label} | {split} | {r['f1_strict']} | {r['unseen_share']}% ({r['unseen']['n_gold']}) | "
                f"{r['seen']['f1']} | {r['unseen']['f1']} | {r['unseen']['p']} / {r['unseen']['r']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("models", nargs="+", help="LABEL=MODEL_DIR")
    ap.add_argument("--splits", nargs="+", default=["dev", "test"])
    ap.add_argument("--name", required=True, help="writes benchmarks/results/seen_unseen_<name>.json")
    ap.add_argument("--note", default="", help="how the models were trained (commands, seeds, commits)")
    args = ap.parse_args(argv)
    corpora = load_dataset(args.dataset)  # read once; map_types gives each model a mapped copy
    rows = {}
    for spec in args.models:
        label, sep, model_dir = spec.partition("=")
        if not sep:
            sys.exit(f"error: {spec!r}: expected LABEL=MODEL_DIR")
        rows[label] = score_model(model_dir, corpora, args.splits)
    command = "python benchmarks/accuracy/seen_unseen.py " + " ".join(argv if argv is not None else sys.argv[1:])
    payload = {"name": args.name, "dataset": args.dataset, "command": command, "note": args.note, "models": rows}
    atomic_write_text(RESULTS / f"seen_unseen_{args.name}.json", json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
    print(table(rows, args.splits))


if __name__ == "__main__":
    main()

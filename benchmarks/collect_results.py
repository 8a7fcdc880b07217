"""Turn finished run directories into benchmarks/results/<model>_<dataset>.json and the README table.

    python benchmarks/collect_results.py RUN_DIR [RUN_DIR ...] --command "zhner train ... -o RUN_DIR"
    python benchmarks/collect_results.py RUN_DIR --command "..." --variant=-RPE   # an ablation: nflat-RPE_resume.json
    python benchmarks/collect_results.py --table      # the markdown table of every results file, for the README

Several run directories of the same model x dataset (one per seed) are reported together (mean over seeds, and each seed).
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from zhner.evaluate.metrics import headline

RESULTS = Path(__file__).resolve().parent / "results"


def load_run(run_dir: Path) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    log = [json.loads(x) for x in (run_dir / "log.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    speeds = [r["train_sentences_per_s"] for r in log]
    return {
        "metrics": metrics,
        "train_sentences_per_s": round(statistics.median(speeds), 1),
        "epochs": len(log),
    }


def mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 2)


def markdown_table() -> str:
    rows = [
        "| model | dataset | test P | test R | test F1 strict | test F1 lenient | Span F | Type Acc | dev F1 | best / run epochs | seeds | train sent/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(RESULTS.glob("*_*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if "test" not in r or "model" not in r:
            continue
        t = r["test"]
        epochs = ", ".join(f"{b} / {e}" for b, e in zip(r["best_epoch"], r["epochs"]))
        rows.append(
            f"| {r['model']}{r.get('variant', '')} | {r['dataset']} | {t['p']} | {t['r']} | **{t['f1_strict']}** | {t['f1_lenient']} | {t['span_f']} | "
            f"{t['type_acc']} | {r['dev']['f1_strict']} | {epochs} | {len(r['seeds'])} | {r['train_sentences_per_s']} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--command", help="the exact command that produced the runs")
    parser.add_argument("--note", default=None)
    parser.add_argument("--variant", default="", help="appended to the model name for an ablation, e.g. -RPE")
    parser.add_argument("--table", action="store_true", help="print the markdown table of benchmarks/results/*.json")
    args = parser.parse_args()
    if args.table:
        print(markdown_table())
        return
    if not args.runs or not args.command:
        parser.error("give run directories and --command")

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run_dir in args.runs:
        run = load_run(run_dir)
        groups[(run["metrics"]["model"], run["metrics"]["dataset"])].append(run)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for (model, dataset), runs in groups.items():
        tests = [headline(r["metrics"]["test"]) for r in runs]
        devs = [headline(r["metrics"]["dev"]) for r in runs]
        out = {
            "model": model,
            "dataset": dataset,
            "seeds": [r["metrics"]["seed"] for r in runs],
            "test": {k: mean([t[k] for t in tests]) for k in tests[0]},
            "dev": {k: mean([d[k] for d in devs]) for k in devs[0]},
            "dev_label": runs[0]["metrics"].get("dev_label", "dev"),
            "best_epoch": [r["metrics"]["best_epoch"] for r in runs],
            "epochs": [r["epochs"] for r in runs],
            "status": [r["metrics"]["status"] for r in runs],
            "train_seconds": [r["metrics"]["train_seconds"] for r in runs],
            "train_sentences_per_s": mean([r["train_sentences_per_s"] for r in runs]),
            "per_seed_test": tests,
            "command": args.command,
        }
        if args.note:
            out["note"] = args.note
        if args.variant:
            out["variant"] = args.variant
        path = RESULTS / f"{model}{args.variant}_{dataset}.json"
        path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{path}: test F1 strict {out['test']['f1_strict']} lenient {out['test']['f1_lenient']}")


if __name__ == "__main__":
    main()

"""Turn finished run directories into benchmarks/results/<model>_<dataset>.json and the README table.

    python benchmarks/accuracy/collect_results.py RUN_DIR [RUN_DIR ...] --command "zhner train ... -o RUN_DIR"
    python benchmarks/accuracy/collect_results.py RUN_DIR ... --command "..." --merge benchmarks/results/flat_resume.json
    python benchmarks/accuracy/collect_results.py RUN_DIR ... --command "..." --variant no_ssa   # atssa_resume_no_ssa.json
    python benchmarks/accuracy/collect_results.py --table      # the markdown table of every results file, for the README
    python benchmarks/accuracy/collect_results.py --ablation flat_resume VARIANT=RUN_DIR ... --command "..."

Several run directories of the same model x dataset (one per seed) are reported together (mean and sample std over seeds,
and each seed). `--merge` adds the seeds already recorded in a results file (runs whose directories are gone); a seed given
both ways is an error. `--ablation` writes benchmarks/results/ablation_<name>.json: one row per variant, in the given order.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from zhner.evaluate.metrics import headline

RESULTS = Path(__file__).resolve().parents[1] / "results"


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


def std(values: list[float]) -> float:
    return round(statistics.stdev(values), 2) if len(values) > 1 else 0.0


def recorded_seeds(path: Path) -> list[dict]:
    """The per-seed records of an existing results file, in load_run's shape (metrics as headline numbers)."""
    r = json.loads(path.read_text(encoding="utf-8"))
    devs = r.get("per_seed_dev") or ([r["dev"]] if len(r["seeds"]) == 1 else None)
    if devs is None:
        raise SystemExit(f"{path}: no per-seed dev metrics to merge")
    return [
        {
            "seed": seed,
            "test": test,
            "dev": dev,
            "best_epoch": r["best_epoch"][k],
            "epochs": r["epochs"][k],
            "status": r["status"][k],
            "train_seconds": r["train_seconds"][k],
            "train_sentences_per_s": r["train_sentences_per_s"] if len(r["seeds"]) == 1 else None,
            "command": r["command"],
        }
        for k, (seed, test, dev) in enumerate(zip(r["seeds"], r["per_seed_test"], devs))
    ]


def seed_record(run_dir: Path) -> dict:
    run = load_run(run_dir)
    m = run["metrics"]
    return {
        "model": m["model"],
        "dataset": m["dataset"],
        "dev_label": m.get("dev_label", "dev"),
        "seed": m["seed"],
        "test": headline(m["test"]),
        "dev": headline(m["dev"]),
        "best_epoch": m["best_epoch"],
        "epochs": run["epochs"],
        "status": m["status"],
        "train_seconds": m["train_seconds"],
        "train_sentences_per_s": run["train_sentences_per_s"],
    }


def summarize(records: list[dict]) -> dict:
    tests, devs = [r["test"] for r in records], [r["dev"] for r in records]
    speeds = [r["train_sentences_per_s"] for r in records if r.get("train_sentences_per_s") is not None]
    return {
        "seeds": [r["seed"] for r in records],
        "test": {k: mean([t[k] for t in tests]) for k in tests[0]},
        "test_std": {k: std([t[k] for t in tests]) for k in tests[0]},
        "dev": {k: mean([d[k] for d in devs]) for k in devs[0]},
        "best_epoch": [r["best_epoch"] for r in records],
        "epochs": [r["epochs"] for r in records],
        "status": [r["status"] for r in records],
        "train_seconds": [r["train_seconds"] for r in records],
        "train_sentences_per_s": mean(speeds) if speeds else None,
        "per_seed_test": tests,
        "per_seed_dev": devs,
    }


def ablation(name: str, variants: list[str], command: str, note: str | None) -> Path:
    rows = []
    for item in variants:
        variant, _, run_dir = item.partition("=")
        if not run_dir:
            raise SystemExit(f"--ablation: expected VARIANT=RUN_DIR, got {item!r}")
        rec = seed_record(Path(run_dir))
        rows.append({"variant": variant, "run": run_dir} | {k: rec[k] for k in ("seed", "test", "dev", "best_epoch", "epochs", "status")})
    out = {"name": name, "rows": rows, "command": command} | ({"note": note} if note else {})
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"ablation_{name}.json"
    path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def ablation_table(path: Path) -> str:
    r = json.loads(path.read_text(encoding="utf-8"))
    lines = [
        "| variant | test F1 strict | test F1 lenient | test P | test R | dev F1 | best / run epochs |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        t = row["test"]
        lines.append(
            f"| {row['variant']} | **{t['f1_strict']}** | {t['f1_lenient']} | {t['p']} | {t['r']} | {row['dev']['f1_strict']} | "
            f"{row['best_epoch']} / {row['epochs']} |"
        )
    return "\n".join(lines)


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
        if "accuracy" in t:  # a classifier: classification_table
            continue
        epochs = ", ".join(f"{b} / {e}" for b, e in zip(r["best_epoch"], r["epochs"]))
        f1 = f"{t['f1_strict']} ± {r['test_std']['f1_strict']}" if len(r["seeds"]) > 1 else f"{t['f1_strict']}"
        model = f"{r['model']} ({r['variant']})" if r.get("variant") else r["model"]
        speed = "-" if r["train_sentences_per_s"] is None else f"{r['train_sentences_per_s']:.1f}"
        rows.append(
            f"| {model} | {r['dataset']} | {t['p']} | {t['r']} | **{f1}** | {t['f1_lenient']} | {t['span_f']} | "
            f"{t['type_acc']} | {r['dev']['f1_strict']} | {epochs} | {len(r['seeds'])} | {speed} |"
        )
    return "\n".join(rows)


def classification_table() -> str:
    """The classifiers' results files: accuracy, MCC, macro-F1 (mean ± std over seeds) on test and dev."""
    rows = [
        "| model | dataset | test accuracy | test MCC | test macro-F1 | dev accuracy | dev MCC | best / run epochs | seeds | train sent/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(RESULTS.glob("*_*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if "test" not in r or "model" not in r or "accuracy" not in r["test"]:
            continue
        t, sd, d = r["test"], r["test_std"], r["dev"]
        pm = (lambda k: f"{t[k]} ± {sd[k]}") if len(r["seeds"]) > 1 else (lambda k: f"{t[k]}")
        epochs = ", ".join(f"{b} / {e}" for b, e in zip(r["best_epoch"], r["epochs"]))
        speed = "-" if r["train_sentences_per_s"] is None else f"{r['train_sentences_per_s']:.1f}"
        model = f"{r['model']} ({r['variant']})" if r.get("variant") else r["model"]
        rows.append(
            f"| {model} | {r['dataset']} | {pm('accuracy')} | {pm('mcc')} | {pm('macro_f1')} | {d['accuracy']} | "
            f"{d['mcc']} | {epochs} | {len(r['seeds'])} | {speed} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--command", help="the exact command that produced the runs")
    parser.add_argument("--note", default=None)
    parser.add_argument("--variant", help="a config variant of the model (e.g. no_ssa): its own file and table row")
    parser.add_argument("--merge", type=Path, help="an existing results file whose recorded seeds are added")
    parser.add_argument("--table", action="store_true", help="print the markdown table of benchmarks/results/*.json")
    parser.add_argument("--ablation", metavar="NAME", help="write ablation_NAME.json from VARIANT=RUN_DIR arguments")
    parser.add_argument("--ablation-table", type=Path, metavar="FILE", help="print an ablation file as a markdown table")
    args = parser.parse_args()
    if args.table:
        print(markdown_table())
        print()
        print(classification_table())
        return
    if args.ablation_table:
        print(ablation_table(args.ablation_table))
        return
    if not args.runs or not args.command:
        parser.error("give run directories and --command")
    if args.ablation:
        print(ablation(args.ablation, [str(r) for r in args.runs], args.command, args.note))
        return

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run_dir in args.runs:
        rec = seed_record(run_dir)
        groups[(rec["model"], rec["dataset"])].append(rec)
    commands = [args.command]
    if args.merge:
        old = json.loads(args.merge.read_text(encoding="utf-8"))
        key = (old["model"], old["dataset"])
        if key not in groups:
            parser.error(f"--merge {args.merge}: no new run of {key}")
        new_seeds = {r["seed"] for r in groups[key]}
        for rec in recorded_seeds(args.merge):
            if rec["seed"] in new_seeds:
                parser.error(f"--merge: seed {rec['seed']} is both recorded and given as a run")
            groups[key].insert(0, rec | {"dev_label": old.get("dev_label", "dev")})
        commands.insert(0, old["command"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    for (model, dataset), records in groups.items():
        records.sort(key=lambda r: r["seed"])
        out = {"model": model, "dataset": dataset} | summarize(records) | {
            "dev_label": records[0]["dev_label"],
            "command": commands[0] if len(commands) == 1 else commands,
        }
        if args.note:
            out["note"] = args.note
        if args.variant:
            out = {"model": model, "variant": args.variant} | out
        path = RESULTS / (f"{model}_{dataset}_{args.variant}.json" if args.variant else f"{model}_{dataset}.json")
        path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        t = out["test"]
    print(f"{path}: " + (f"test accuracy {t['accuracy']} MCC {t['mcc']}" if "accuracy" in t else
                         f"test F1 strict {t['f1_strict']} lenient {t['f1_lenient']}"))


if __name__ == "__main__":
    main()

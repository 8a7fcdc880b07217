"""A candidate for the accurate shipped model against a shipped model's runs, seed by seed: the same union data
(MSRA, Weibo's named mentions, Resume; PER / LOC / ORG) and the same union dev set.

    OMP_NUM_THREADS=1 zhner train flat_accurate -o runs/accurate_s42 --set train.seed=42     # and 43
    python benchmarks/accuracy/accurate_model.py runs/accurate_s42 runs/accurate_s43 --commit COMMIT  # accurate_model.json

    OMP_NUM_THREADS=1 zhner train flat_e5_accurate -o runs/e5_s42 --set train.seed=42
    python benchmarks/accuracy/accurate_model.py runs/e5_s42 --config flat_e5_accurate --against zh-accurate --commit COMMIT \
        --output benchmarks/results/accurate_model_e5.json

Reads each run's metrics.json and log.jsonl and pairs it with the run of the same seed of the model it is measured
against: zh-small's (configs/flat_general.yaml, benchmarks/results/general_model.json: runs/s28/general_lean, seed 42,
shipped; runs/s29/general_seed43) or zh-accurate's (configs/flat_accurate.yaml, benchmarks/results/accurate_model.json:
runs/s37/general_lac_s42, shipped; general_lac_s43). Writes per seed the union dev F1 by epoch, test F1 per corpus and
the difference to the other run; the run with the higher union dev F1 is the candidate to ship (test scores are not
used to choose). Two seeds give the sign of each difference, not a significance test; one seed, an anecdote.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
CORPORA = ("msra", "weibo", "resume")
TARGETS = {"msra": 94.5, "weibo": 63.0, "resume": 95.0}  # issue 34's for the accurate shipped model


def run_row(directory: Path) -> dict:
    metrics = json.loads((directory / "metrics.json").read_text(encoding="utf-8"))
    log = [json.loads(line) for line in (directory / "log.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    return {
        "run": str(directory),
        "seed": metrics["seed"],
        "status": metrics["status"],
        "best_epoch": metrics["best_epoch"],
        "epochs_run": metrics["epochs_run"],
        "train_seconds": metrics.get("train_seconds"),
        "dev_f1": metrics["dev"]["strict"]["f1"],
        "dev_f1_per_epoch": [r["dev"]["f1_strict"] for r in log if "dev" in r],
        "test_per_corpus": metrics["test_per_corpus"],
    }


def baseline_runs(against: str) -> dict[int, dict]:
    """seed -> {run, dev_f1, test F1 per corpus} of the shipped model's config, from its results file."""
    if against == "zh-small":
        rows = {r["run"]: r for r in json.loads((RESULTS / "general_model.json").read_text(encoding="utf-8"))["rows"]}
        runs = {42: "runs/s28/general_lean", 43: "runs/s29/general_seed43"}
        return {seed: {"run": run, "dev_f1": rows[run]["dev"]["f1_strict"],
                       "test": {c: rows[run]["test_per_corpus"][c]["f1_strict"] for c in CORPORA}}
                for seed, run in runs.items()}
    rows = json.loads((RESULTS / "accurate_model.json").read_text(encoding="utf-8"))["rows"]
    return {r["seed"]: {"run": r["run"], "dev_f1": r["dev_f1"],
                        "test": {c: r["test_per_corpus"][c]["f1_strict"] for c in CORPORA}} for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--commit", required=True, help="the commit the runs trained at")
    parser.add_argument("--config", default="flat_accurate", help="the config the runs trained (configs/NAME.yaml)")
    parser.add_argument("--against", choices=("zh-small", "zh-accurate"), default="zh-small")
    parser.add_argument("--command", help="how the runs were trained, when not `zhner train CONFIG --set train.seed=S`")
    parser.add_argument("--note", default="")
    parser.add_argument("--output", type=Path, default=RESULTS / "accurate_model.json")
    args = parser.parse_args()
    if args.output.resolve() == (RESULTS / "accurate_model.json").resolve() and args.against == "zh-accurate":
        parser.error("--against zh-accurate reads accurate_model.json: write the result elsewhere (--output)")
    base = baseline_runs(args.against)
    key = args.against.replace("-", "_")
    rows = []
    for directory in args.runs:
        row = run_row(directory)
        other = base[row["seed"]]
        row[f"{key}_run"], row[f"{key}_dev_f1"], row[f"{key}_test_per_corpus"] = other["run"], other["dev_f1"], other["test"]
        row["dev_f1_minus_" + key] = round(row["dev_f1"] - other["dev_f1"], 2)
        row["test_f1_minus_" + key] = {c: round(row["test_per_corpus"][c]["f1_strict"] - other["test"][c], 2) for c in CORPORA}
        rows.append(row)
    best = max(rows, key=lambda r: r["dev_f1"])
    command = args.command or f"OMP_NUM_THREADS=1 zhner train {args.config} -o RUN --set train.seed=SEED"
    out = {
        "what": f"configs/{args.config}.yaml against {args.against}'s config seed by seed; union dev = 5% of MSRA train "
                "+ Weibo dev + Resume dev",
        "command": f"{command}  (at commit {args.commit})",
        "highest_dev": best["run"],
        "targets": TARGETS,
        "rows": rows,
        "note": args.note,
    }
    args.output.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for r in rows:
        print(r["run"], "dev", r["dev_f1"], {c: r["test_per_corpus"][c]["f1_strict"] for c in CORPORA},
              f"minus {args.against}: dev", r["dev_f1_minus_" + key], "test", r["test_f1_minus_" + key])
    print("highest union dev:", best["run"])


if __name__ == "__main__":
    main()

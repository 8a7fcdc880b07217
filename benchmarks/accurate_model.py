"""The accurate shipped model (zh-accurate, configs/flat_accurate.yaml) against the small one (zh-small,
configs/flat_general.yaml), seed by seed: the same data, sizes and schedule, with and without LAC's frozen features.

    OMP_NUM_THREADS=1 zhner train flat_accurate -o runs/accurate_s42 --set train.seed=42     # and 43
    python benchmarks/accurate_model.py runs/accurate_s42 runs/accurate_s43 --commit COMMIT  # writes the results file

Reads each run's metrics.json and log.jsonl and pairs it with the flat_general run of the same seed recorded in
benchmarks/results/general_model.json (the zh-small rows: runs/s28/general_lean, seed 42, shipped; runs/s29/
general_seed43). Writes benchmarks/results/accurate_model.json: per seed, union dev F1 by epoch, test F1 per corpus and
the difference to zh-small's run; the run with the higher union dev F1 is the one shipped (test scores are not used to
choose). Two seeds give the sign of each difference, not a significance test.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SMALL_RUNS = {42: "runs/s28/general_lean", 43: "runs/s29/general_seed43"}  # zh-small's config, these seeds
CORPORA = ("msra", "weibo", "resume")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--commit", required=True, help="the commit the runs trained at")
    parser.add_argument("--output", type=Path, default=RESULTS / "accurate_model.json")
    args = parser.parse_args()
    small = {r["run"]: r for r in json.loads((RESULTS / "general_model.json").read_text(encoding="utf-8"))["rows"]}
    rows = []
    for directory in args.runs:
        row = run_row(directory)
        base = small[SMALL_RUNS[row["seed"]]]
        row["zh_small_run"] = base["run"]
        row["zh_small_test_per_corpus"] = {c: base["test_per_corpus"][c]["f1_strict"] for c in CORPORA}
        row["zh_small_dev_f1"] = base["dev"]["f1_strict"]
        row["test_f1_minus_zh_small"] = {
            c: round(row["test_per_corpus"][c]["f1_strict"] - base["test_per_corpus"][c]["f1_strict"], 2) for c in CORPORA}
        rows.append(row)
    shipped = max(rows, key=lambda r: r["dev_f1"])
    out = {
        "what": "zh-accurate (FLAT + LAC's frozen BiGRU features, configs/flat_accurate.yaml) against zh-small's config "
                "(configs/flat_general.yaml) seed by seed; union dev = 5% of MSRA train + Weibo dev + Resume dev",
        "command": "OMP_NUM_THREADS=1 zhner train flat_accurate -o RUN --set train.seed=SEED  (trained as "
                   "`zhner train flat_general --set model.char_features=lac`, the same config, at commit "
                   f"{args.commit}; one thread each, two runs sharing the 2 cores)",
        "shipped": shipped["run"],
        "targets": {"msra": 94.5, "weibo": 63.0, "resume": 95.0},
        "rows": rows,
        "note": "the zh-small rows were trained at earlier commits (general_model.json); FLAT's code and the config are "
                "the same apart from model.char_features. Two seeds: the sign of each difference, no significance test.",
    }
    args.output.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for r in rows:
        print(r["run"], "dev", r["dev_f1"], {c: r["test_per_corpus"][c]["f1_strict"] for c in CORPORA},
              "minus zh-small", r["test_f1_minus_zh_small"])
    print("shipped:", shipped["run"])


if __name__ == "__main__":
    main()

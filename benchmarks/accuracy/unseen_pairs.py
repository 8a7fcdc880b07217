"""Issue 50's measurement: FLAT and NFLAT with typed lexicon words (embeddings.word_types), mention replacement
(train.mention_replacement) and both, against the same configs without, on Weibo and Resume, seeds 42-44, paired by seed
(`zhner compare`), overall and on the test mentions seen / unseen in train (`zhner evaluate --seen-in`).

    python benchmarks/accuracy/unseen_pairs.py                       # the whole grid: 2 models x 4 arms x 2 corpora x 3 seeds
    python benchmarks/accuracy/unseen_pairs.py --table               # the markdown table of the results file

Trainings are `zhner train CONFIG -o ROOT/<model>_<corpus>/<arm>/seed<S> --set train.seed=S [arm's --set]` with the
configs' own schedules (`--recipe` picks one of their recipes), one torch thread each, at most `--jobs` (2) at once.
It is resumable: a finished run (metrics.json, status not "running") is skipped, an interrupted one resumes from its
checkpoint. Then each run is scored on its corpus's test split with seen / unseen mentions (kept in the run directory as
seen_unseen.json), and each arm is compared with "none" by seed (two-sided paired t-test over the common seeds) on
test strict F1, unseen F1, seen F1 and dev F1; the results file keeps the commands, seeds and per-seed scores.

`--none-from FILE` pairs the arms with the per-seed figures of the "none" arm recorded in an earlier results file of
this script (its rows' per_seed_none for the same model and corpus) instead of training it again. `--merge FILE ...`
pools the seeds of the same pairs recorded in earlier results files (each arm's and none's per-seed figures) with
this run's, and tests the pooled seeds: more seeds of a pair without training the first ones again.

Corpora are registry names whose configs exist (weibo, resume, msra: MSRA one seed for the best arm, `--corpora msra
--arms none both --seeds 42`), or NAME=CONFIG_CORPUS to train another dataset with a corpus's config (the smoke test:
`--corpora mini=resume`, with `--set` overrides for a tiny model).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
REPO = Path(__file__).resolve().parents[2]
ARMS = ("none", "types", "replacement", "both")
METRICS = ("test.f1_strict", "test_unseen.f1", "test_seen.f1", "dev.f1_strict")


def arm_overrides(arm: str, args: argparse.Namespace) -> list[str]:
    types = [f"embeddings.word_types={args.word_types}"]
    replacement = [f"train.mention_replacement={args.replacement}", f"train.mention_replacement_source={args.replacement_source}"]
    return {"none": [], "types": types, "replacement": replacement, "both": types + replacement}[arm]


def corpus_spec(spec: str) -> tuple[str, str]:
    """"weibo" -> (weibo, weibo); "mini=resume" -> (mini, resume): the dataset trained on, the corpus whose config."""
    name, _, config = spec.partition("=")
    return name, config or name


def plan(args: argparse.Namespace) -> list[dict]:
    runs = []
    for model in args.models:
        for spec in args.corpora:
            dataset, config_corpus = corpus_spec(spec)
            for arm in args.arms:
                for seed in args.seeds:
                    out = args.root / f"{model}_{dataset}" / arm / f"seed{seed}"
                    sets = [f"train.seed={seed}", "train.threads=1", *arm_overrides(arm, args), *args.set]
                    if dataset != config_corpus:
                        sets.insert(0, f"data.dataset={dataset}")
                    command = ["zhner", "train", f"{model}_{config_corpus}", "-o", str(out)]
                    command += ["--recipe", args.recipe] if args.recipe else []
                    for item in sets:
                        command += ["--set", item]
                    runs.append({"model": model, "dataset": dataset, "arm": arm, "seed": seed, "dir": out, "command": command})
    return runs


def finished(run_dir: Path) -> bool:
    # a run stopped by train.max_minutes keeps its checkpoint (to be continued with a larger budget), but it is done:
    # its metrics.json says "time_budget"; an interrupted one says "running" or has none yet
    metrics = run_dir / "metrics.json"
    if not metrics.is_file():
        return False
    try:
        return json.loads(metrics.read_text(encoding="utf-8")).get("status") not in (None, "running")
    except ValueError:
        return False


def train_one(run: dict, log_dir: Path) -> tuple[dict, int, float]:
    """One training in a child process (one thread); resumes from a checkpoint, restarts a run that died before its
    first one (weights but no checkpoint and no final metrics)."""
    out: Path = run["dir"]
    command = [sys.executable, "-m", "zhner.cli", *run["command"][1:]]
    if (out / "model.safetensors").exists() and not (out / "checkpoint.pt").exists():
        command.append("--overwrite")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{run['model']}_{run['dataset']}_{run['arm']}_seed{run['seed']}.log"
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as handle:
        code = subprocess.call(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
        if code == 0 and finished(out):
            # scored here, in the run's own worker, so a grid cut off by a time limit keeps the scores of what finished
            # and the scoring runs as many at once as the trainings
            code = subprocess.call([sys.executable, __file__, "--score", str(out)], cwd=REPO, env=env,
                                   stdout=handle, stderr=subprocess.STDOUT)
    return run, code, time.perf_counter() - started


def seen_unseen(run_dir: Path) -> dict:
    """Test strict F1 overall and on mentions seen / unseen in train (`zhner evaluate RUN CORPUS --seen-in CORPUS`),
    kept in the run directory."""
    path = run_dir / "seen_unseen.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    import zhner
    from zhner.train.corpora import data_sources, read_source

    tagger = zhner.load(run_dir)
    splits = read_source(tagger.config.data, data_sources(tagger.config.data)[0])
    result = tagger.evaluate(splits["test"], seen_in=splits["train"])
    scores = {
        "f1_strict": result["strict"]["f1"],
        "n_gold": result["n_gold"],
        "seen": result["seen"]["seen"],
        "unseen": result["seen"]["unseen"],
    }
    path.write_text(json.dumps(scores, indent=1) + "\n", encoding="utf-8")
    return scores


def summaries(runs: list[dict]) -> dict[int, dict]:
    """seed -> the summary zhner.evaluate.significance.compare reads, with test_seen / test_unseen added."""
    from zhner.evaluate.significance import _summary_from_metrics

    out = {}
    for run in runs:
        metrics = json.loads((run["dir"] / "metrics.json").read_text(encoding="utf-8"))
        split = seen_unseen(run["dir"])
        summary = _summary_from_metrics(metrics)
        summary["test_seen"], summary["test_unseen"] = split["seen"], split["unseen"]
        out[run["seed"]] = summary
    return out


def pairs(runs: list[dict], args: argparse.Namespace) -> list[dict]:
    from zhner.evaluate.significance import compare

    rows = []
    groups = sorted({(r["model"], r["dataset"]) for r in runs})
    for model, dataset in groups:
        by_arm = {arm: [r for r in runs if (r["model"], r["dataset"], r["arm"]) == (model, dataset, arm) and finished(r["dir"])]
                  for arm in args.arms}
        base = by_arm.get("none") or []
        if base:
            base_runs, base_dir = summaries(base), str(base[0]["dir"].parent)
        elif args.none_from:
            base_runs, base_dir = recorded_none(args.none_from, model, dataset), f"the none arm of {args.none_from.name}"
        else:
            continue
        for arm in args.arms:
            if arm == "none" or not by_arm[arm]:
                continue
            arm_runs, none_runs = summaries(by_arm[arm]), dict(base_runs)
            for path in args.merge:  # earlier seeds of the same pair: this run's own seeds win
                earlier_arm, earlier_none = recorded(path, model, dataset, arm)
                arm_runs, none_runs = earlier_arm | arm_runs, earlier_none | none_runs
            a_dir, b_dir = by_arm[arm][0]["dir"].parent, base_dir
            if args.merge:
                b_dir += " (+ the seeds recorded in " + ", ".join(p.name for p in args.merge) + ")"
            rows.append({
                "model": model, "dataset": dataset, "a": arm, "b": "none",
                "a_overrides": arm_overrides(arm, args),
                "command": f"zhner compare {a_dir} {b_dir} --json  (+ zhner evaluate RUN {dataset} --seen-in {dataset} per run)",
                "per_seed": {str(s): {k: _get(arm_runs[s], k) for k in METRICS} for s in sorted(arm_runs)},
                "per_seed_none": {str(s): {k: _get(none_runs[s], k) for k in METRICS} for s in sorted(none_runs)},
                "comparison": compare(arm_runs, none_runs, METRICS),
            })
    return rows


def recorded_none(path: Path, model: str, dataset: str) -> dict[int, dict]:
    """seed -> summary of the "none" arm's per-seed figures recorded in `path` (a results file of this script)."""
    return _from_figures(_recorded_row(path, model, dataset)["per_seed_none"])


def recorded(path: Path, model: str, dataset: str, arm: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """(seed -> summary of `arm`, seed -> summary of none) as the pair's row of `path` recorded them."""
    row = _recorded_row(path, model, dataset, arm)
    return _from_figures(row["per_seed"]), _from_figures(row["per_seed_none"])


def _recorded_row(path: Path, model: str, dataset: str, arm: str | None = None) -> dict:
    """The first row of `path` (a results file of this script) for `model` on `dataset` (and `arm`, when given); a
    one-line error when the file cannot be read or holds none."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"{path}: not a results file of this script ({type(exc).__name__})") from None
    for row in rows:
        if (row["model"], row["dataset"]) == (model, dataset) and arm in (None, row.get("a")):
            return row
    raise SystemExit(f"{path}: no row for {model} on {dataset}" + (f" with the arm {arm}" if arm else ""))


def _from_figures(per_seed: dict[str, dict]) -> dict[int, dict]:
    """A results file's per-seed figures ({"42": {"test.f1_strict": ...}}) -> seed -> summary ({"test": {...}})."""
    out: dict[int, dict] = {}
    for seed, figures in per_seed.items():
        summary: dict[str, dict] = {}
        for metric, value in figures.items():
            split, key = metric.split(".")
            summary.setdefault(split, {})[key] = value
        out[int(seed)] = summary
    return out


def _get(summary: dict, metric: str) -> float | None:
    split, key = metric.split(".")
    return (summary.get(split) or {}).get(key)


def table(result: dict) -> str:
    lines = ["| model | corpus | A (vs none) | seeds | test F1 A − B (p) | unseen F1 A − B (p) | seen F1 A − B (p) | dev F1 A − B |",
             "|---|---|---|---|---|---|---|---|"]

    def cell(c: dict, metric: str, p: bool = True) -> str:
        m = c["metrics"][metric]
        if m["a"]["mean"] is None or m["b"]["mean"] is None:
            return "-"
        text = f"{m['a']['mean']:.2f} − {m['b']['mean']:.2f} = {m['paired']['mean_diff']:+.2f}"
        return text + (f" ({m['paired']['p']:.3f})" if p and m["paired"]["p"] is not None else "")

    for row in result["rows"]:
        c = row["comparison"]
        seeds = ", ".join(map(str, c["paired_seeds"]))
        lines.append(f"| {row['model']} | {row['dataset']} | {row['a']} | {seeds} | {cell(c, 'test.f1_strict')} | "
                     f"{cell(c, 'test_unseen.f1')} | {cell(c, 'test_seen.f1')} | {cell(c, 'dev.f1_strict', False)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["flat", "nflat"])
    ap.add_argument("--corpora", nargs="+", default=["weibo", "resume"], help="NAME or NAME=CONFIG_CORPUS")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    ap.add_argument("--word-types", default="both", choices=["jieba", "lac", "both"], help="the types arm's source")
    ap.add_argument("--replacement", type=float, default=0.3, help="the replacement arm's probability per mention")
    ap.add_argument("--replacement-source", default="train", choices=["train", "lexicon"])
    ap.add_argument("--recipe", default=None, help="a recipe of the configs (default: their own schedules)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every training (as zhner train --set)")
    ap.add_argument("--jobs", type=int, default=2, help="trainings at once (one thread each)")
    ap.add_argument("--root", type=Path, default=REPO / "runs" / "unseen")
    ap.add_argument("--out", type=Path, default=RESULTS / "unseen_pairs.json")
    ap.add_argument("--note", default="", help="how the runs were trained (commit, machine, what else ran)")
    ap.add_argument("--table", action="store_true", help="print the results file's table and stop")
    ap.add_argument("--no-train", action="store_true", help="only score and compare the runs already finished")
    ap.add_argument("--none-from", type=Path, help="pair with the none arm recorded in this results file (not trained)")
    ap.add_argument("--merge", type=Path, nargs="+", default=[], help="pool the seeds recorded in these results files")
    ap.add_argument("--score", type=Path, metavar="RUN_DIR", help="write RUN_DIR/seen_unseen.json and stop")
    args = ap.parse_args(argv)
    if args.score:
        print(json.dumps(seen_unseen(args.score)))
        return
    if args.table:
        print(table(json.loads(args.out.read_text(encoding="utf-8"))))
        return
    runs = plan(args)
    # seed by seed: a grid cut short still holds whole pairs (every arm of the first seeds) rather than whole arms
    todo = sorted((r for r in runs if not finished(r["dir"])), key=lambda r: r["seed"])
    print(f"{len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to train ({args.jobs} at once)", flush=True)
    failed = []
    if todo and not args.no_train:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for run, code, seconds in pool.map(lambda r: train_one(r, args.root / "logs"), todo):
                status = "done" if code == 0 and finished(run["dir"]) else f"FAILED (exit {code})"
                print(f"{run['model']}_{run['dataset']} {run['arm']} seed {run['seed']}: {status} in {seconds:.0f} s", flush=True)
                if status != "done":
                    failed.append(run)
    rows = pairs(runs, args)
    payload = {
        "issue": 50,
        "command": "python benchmarks/accuracy/unseen_pairs.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "trainings": [" ".join(r["command"]) for r in runs],
        "arms": {arm: arm_overrides(arm, args) for arm in args.arms},
        "metrics": list(METRICS),
        "note": args.note,
        "incomplete": [str(r["dir"]) for r in runs if not finished(r["dir"])],
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(payload))
    if failed:
        sys.exit(f"{len(failed)} training(s) failed: see {args.root / 'logs'}")


if __name__ == "__main__":
    main()

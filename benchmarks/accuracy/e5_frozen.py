"""Frozen-and-memoised e5-small against fine-tuning (issue 34), from results files.

    python benchmarks/accuracy/e5_frozen.py timings NAME DEVICE RUN_DIR ... # epoch times and device into results/NAME.json
    python benchmarks/accuracy/e5_frozen.py recorded NAME DIR              # DIR/seeds.json of results/NAME.json, for zhner compare
    python benchmarks/accuracy/e5_frozen.py                                # writes results/e5_frozen.json, prints the table

A frozen run's first epoch encodes every training sentence (and its dev / test passes every dev and test sentence);
later epochs read the memo. `timings` keeps, per seed (in the results file's seed order), the first epoch's seconds
and training sentences/s and the median of the later epochs' (from each run's log.jsonl; an epoch's seconds include
its dev and test passes). A fine-tuned results file has no per-epoch log: its time per epoch is train_seconds / epochs.
Each pair runs zhner's paired t-test (as `zhner compare`) on test strict F1 over the seeds both files have.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from zhner.evaluate.significance import paired_t_test

RESULTS = Path(__file__).resolve().parents[1] / "results"
FROZEN = "frozen, memoised"
PAIRS = [  # (frozen, fine-tuned, what, how much is frozen)
    ("bert_tagger_weibo_e5_frozen", "bert_tagger_weibo_e5", "BERT-CRF on e5-small, Weibo", FROZEN),
    ("flat_weibo_e5_frozen", "flat_weibo_e5", "FLAT + e5-small, Weibo", FROZEN),
    ("bert_tagger_resume_e5_frozen", "bert_tagger_resume_e5", "BERT-CRF on e5-small, Resume", FROZEN),
    ("flat_resume_e5_frozen", "flat_resume_e5", "FLAT + e5-small, Resume", FROZEN),
    # model.bert_frozen_layers: the embeddings and the first K of 12 layers frozen, their output memoised
    ("bert_tagger_resume_e5_k6", "bert_tagger_resume_e5", "BERT-CRF on e5-small, Resume", "layers 1-6 frozen, memoised"),
    ("bert_tagger_resume_e5_k9", "bert_tagger_resume_e5", "BERT-CRF on e5-small, Resume", "layers 1-9 frozen, memoised"),
    # the same, against fine-tuning on this CPU (seeds 42 and 43)
    ("bert_tagger_resume_e5_k6", "bert_tagger_resume_e5_cpu", "BERT-CRF on e5-small, Resume (CPU)", "layers 1-6 frozen, memoised"),
]


def read(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def epoch_timing(run_dir: Path) -> dict:
    """One run's first epoch and its later epochs (median): seconds and training sentences/s."""
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    seconds = [r["seconds"] for r in log]
    later = [b - a for a, b in zip(seconds, seconds[1:])]
    return {
        "first_epoch_s": round(seconds[0], 1),
        "later_epoch_s": round(statistics.median(later), 1) if later else None,
        "first_sentences_per_s": round(log[0]["train_sentences_per_s"], 1),
        "later_sentences_per_s": round(statistics.median(r["train_sentences_per_s"] for r in log[1:]), 1) if later else None,
    }


def add_timings(name: str, device: str, run_dirs: list[Path]) -> None:
    """Writes the runs' epoch timings and the device they ran on into results/NAME.json, in its seed order."""
    result = read(name)
    by_seed = {json.loads((d / "metrics.json").read_text(encoding="utf-8"))["seed"]: epoch_timing(d) for d in run_dirs}
    if sorted(by_seed) != sorted(result["seeds"]):
        raise SystemExit(f"{name}: runs of seeds {sorted(by_seed)}, the file has {result['seeds']}")
    result["device"] = device
    result["epoch_timing"] = [by_seed[s] for s in result["seeds"]]
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_recorded(name: str, directory: Path) -> None:
    """The per-seed scores a results file recorded as a run set's seeds.json: `zhner compare` reads it like the
    seeds.json of `zhner train --seeds` (for runs whose directories are gone, such as the GPU runs)."""
    r = read(name)
    runs = [{"model": r["model"], "dataset": r["dataset"], "seed": seed, "dev": dev, "test": test}
            for seed, dev, test in zip(r["seeds"], r["per_seed_dev"], r["per_seed_test"])]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "seeds.json").write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")


def row(name: str) -> dict:
    """A results file's means, and its time per epoch: the frozen runs' first / later epochs, or the whole run's mean."""
    r = read(name)
    out = {"name": name, "seeds": r["seeds"], "test": r["test"]["f1_strict"], "test_std": r["test_std"]["f1_strict"],
           "dev": r["dev"]["f1_strict"], "device": r.get("device", "NVIDIA H200 (shared)" if "cuda" in r["command"] else "CPU"),
           "sentences_per_s": r["train_sentences_per_s"], "epochs": r["epochs"][0],
           "run_s": round(statistics.fmean(r["train_seconds"]), 1)}
    if "epoch_timing" in r:
        t = r["epoch_timing"]
        for key in ("first_epoch_s", "later_epoch_s", "first_sentences_per_s", "later_sentences_per_s"):
            out[key] = round(statistics.fmean(x[key] for x in t), 1)
    else:
        out["epoch_s"] = round(statistics.fmean(s / e for s, e in zip(r["train_seconds"], r["epochs"])), 1)
    return out


def pair(frozen: str, tuned: str, what: str, how: str = FROZEN) -> dict:
    a = {s: t["f1_strict"] for s, t in zip(read(frozen)["seeds"], read(frozen)["per_seed_test"])}
    b = {s: t["f1_strict"] for s, t in zip(read(tuned)["seeds"], read(tuned)["per_seed_test"])}
    seeds = sorted(set(a) & set(b))
    test = paired_t_test([a[s] for s in seeds], [b[s] for s in seeds])
    return {"what": what, "how": how, "frozen": row(frozen), "fine_tuned": row(tuned), "seeds": seeds,
            "mean_diff": round(test["mean_diff"], 2), "p": None if test["p"] is None else round(test["p"], 3)}


def table(result: dict) -> str:
    """The pairs as a markdown table (the docs site's `e5-frozen` part)."""
    lines = ["| model | encoder | device | seeds | dev F1 | test F1 | train sent/s | s per epoch | epochs, s per run | "
             "frozen − fine-tuned (p) |", "|---|---|---|---|---|---|---|---|---|---|"]
    shown = set()  # a fine-tuned row once, however many frozen variants pair with it
    for p in result["pairs"]:
        f, t = p["frozen"], p["fine_tuned"]
        seeds = ", ".join(map(str, f["seeds"]))
        common = "" if p["seeds"] == f["seeds"] else f"; seeds {', '.join(map(str, p['seeds']))}"
        if t["name"] not in shown:
            shown.add(t["name"])
            lines.append(f"| {p['what']} | fine-tuned | {t['device']} | {', '.join(map(str, t['seeds']))} | {t['dev']:.2f} | "
                         f"{t['test']:.2f} ± {t['test_std']:.2f} | {t['sentences_per_s']} | {t['epoch_s']} | "
                         f"{t['epochs']}, {t['run_s']} | |")
        lines.append(f"| {p['what']} | {p.get('how', FROZEN)} | {f['device']} | {seeds} | {f['dev']:.2f} | "
                     f"{f['test']:.2f} ± {f['test_std']:.2f} | {f['first_sentences_per_s']} (epoch 1), "
                     f"{f['later_sentences_per_s']} (later) | {f['first_epoch_s']} (epoch 1), {f['later_epoch_s']} (later) | "
                     f"{f['epochs']}, {f['run_s']} | {p['mean_diff']:+.2f} ({p['p']}{common}) |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["timings"]:
        add_timings(sys.argv[2], sys.argv[3], [Path(d) for d in sys.argv[4:]])
        return
    if sys.argv[1:2] == ["recorded"]:
        write_recorded(sys.argv[2], Path(sys.argv[3]))
        return
    pairs = [pair(*p) for p in PAIRS if (RESULTS / f"{p[0]}.json").is_file()]
    out = {"metric": "test strict F1", "test": "two-sided paired t-test over the common seeds", "pairs": pairs}
    (RESULTS / "e5_frozen.json").write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(out))


if __name__ == "__main__":
    main()

"""Loads beside a training's saves (issue 46, item 3): N `zhner.load` calls on a run directory while real trainings save
their best model into it, and the failures counted on each side.

    OMP_NUM_THREADS=1 python benchmarks/service/load_race.py          # 1,000 loads; writes benchmarks/results/load_race.json

The trainings are `zhner train tener_resume` processes (a tiny TENER on --sentences Resume sentences, --epochs epochs),
run one after another into the same directory with --overwrite for as long as the loads go on: the first epoch of each
saves the model (replace_together: config.yaml, vocab.json, model.safetensors, metrics.json), later ones while dev F1
climbs. This process calls zhner.load on the directory --loads times, --pause-ms apart, from the first save on.
A load fails when zhner.load raises; a training fails when it exits non-zero. Saves are counted from each run's
log.jsonl (epochs that were the best so far); "reads_repeated" counts the reads a save landed in, which then read the
new set again (zhner.load reads vocab.json, then the whole directory: two reads a load). Before issue 46 a load finished a pending save itself, without a lock:
the readers then broke the trainer's renames, or the trainer theirs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

REPO = harness.REPO


def training(run: Path, args: argparse.Namespace, stderr: Path) -> subprocess.Popen:
    sets = [
        "model.heads=2", "model.head_dim=8", "model.layers=1", "train.batch_size=8", "train.lr=0.01",
        f"train.epochs={args.epochs}", f"data.max_train_sentences={args.sentences}", "data.max_eval_sentences=100",
    ]
    command = [sys.executable, "-m", "zhner.cli", "train", "tener_resume", "-o", str(run), "--overwrite"]
    command += [item for s in sets for item in ("--set", s)]
    with open(stderr, "w", encoding="utf-8") as err:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)


def saves_in(log: Path) -> int:
    """Epochs of a finished run that were the best so far: each saved the model."""
    try:
        records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return 0
    return sum(1 for r in records if r.get("best_epoch") == r.get("epoch"))


def last_line(path: Path) -> str:
    lines = [x for x in path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    return lines[-1] if lines else ""


def counting_rereads() -> list[int]:
    """How many times a load found that a save had landed in its reads, and read the new set again
    (zhner.fileio.saves._View.unchanged was false; zhner.fileio._View before fileio became a package). Empty for a
    zhner without it."""
    import importlib

    import zhner.fileio as fileio

    try:
        view = importlib.import_module("zhner.fileio.saves")._View
    except (ImportError, AttributeError):
        view = getattr(fileio, "_View", None)
    rereads: list[int] = []
    if view is not None:
        rereads.append(0)
        unchanged = view.unchanged

        def counted(self) -> bool:
            same = unchanged(self)
            rereads[0] += not same
            return same

        view.unchanged = counted
    return rereads


def race(args: argparse.Namespace, workdir: Path) -> dict:
    import zhner

    rereads = counting_rereads()

    run, stderr = workdir / "run", workdir / "train.err"
    trainings, training_failures, saves = 0, [], 0
    proc = training(run, args, stderr)
    while not (run / "model.safetensors").exists():  # the first save
        if proc.poll() is not None:
            raise SystemExit(f"the first training failed: {last_line(stderr)}")
        time.sleep(0.05)
    loads, load_failures, started = 0, [], time.perf_counter()
    while loads < args.loads:
        if proc.poll() is not None:  # the next training, as soon as one ends
            trainings += 1
            saves += saves_in(run / "log.jsonl")
            if proc.returncode != 0:
                training_failures.append(last_line(stderr))
            proc = training(run, args, stderr)
        try:
            zhner.load(run)
        except Exception as exc:  # noqa: BLE001 - every failure counts, whatever its type
            load_failures.append(f"{type(exc).__name__}: {exc}")
        loads += 1
        time.sleep(args.pause_ms / 1000)
    seconds = time.perf_counter() - started
    proc.wait()
    trainings += 1
    saves += saves_in(run / "log.jsonl")
    if proc.returncode != 0:
        training_failures.append(last_line(stderr))
    return {
        "loads": loads, "load_failures": len(load_failures), "load_failure_examples": sorted(set(load_failures))[:5],
        "reads_repeated": rereads[0] if rereads else None,
        "trainings": trainings, "training_failures": len(training_failures),
        "training_failure_examples": sorted(set(training_failures))[:5], "model_saves": saves,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--sentences", type=int, default=300, help="Resume training sentences per run")
    parser.add_argument("--pause-ms", type=float, default=0.0, help="between two loads")
    parser.add_argument("--out", type=Path, default=harness.RESULTS / "load_race.json")
    args = parser.parse_args()
    provenance = harness.Run()
    with tempfile.TemporaryDirectory(prefix="zhner-load-race-") as tmp:
        result = race(args, Path(tmp))
    result |= {
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    }
    result = provenance.record(result)
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if args.out:
        harness.write(args.out, result, echo=False, indent=1)


if __name__ == "__main__":
    main()

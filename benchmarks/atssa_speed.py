"""Inference speed of ATSSA against FLAT and against ATSSA without its selective mechanism (-SSA), on the Resume test set.

Usage: python benchmarks/atssa_speed.py [--repeats 5] [--batch 1 16] [-o benchmarks/results/atssa_speed.json]

Models are built from the shipped configs (atssa_resume, atssa_resume with model.selective=false, flat_resume) with random
weights: the cost of selective attention does not depend on how many keys are kept (it is dense masking), so untrained
weights time it fairly; `keys_kept_per_query_random_weights` reports what the untrained thresholds keep.
One torch thread. Each repeat tags the whole test set (477 sentences) with every model in turn, so that load from other
processes hits all models alike; the figure is the median over repeats of sentences per second, featurisation included
(what `Tagger.tag` does). The paper reports ATSSA about 5% slower than FLAT at inference.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing zhner
from zhner.cli import resolve_config  # noqa: E402
from zhner.config import load_config  # noqa: E402
from zhner.train.assemble import prepare  # noqa: E402

MODELS = {
    "atssa": ("atssa_resume", []),
    "atssa_-SSA": ("atssa_resume", ["model.selective=false"]),
    "flat": ("flat_resume", []),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("-o", "--output", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = {name: prepare(load_config(resolve_config(cfg), sets), log=lambda _: None) for name, (cfg, sets) in MODELS.items()}
    test = [s.tokens for s in next(iter(runs.values())).splits["test"].sentences]
    times: dict[str, list[float]] = {f"{name}_b{bs}": [] for name in runs for bs in args.batch}
    for name, run in runs.items():  # warm-up pass
        run.tagger.tag(test[:64], batch_size=16)
    for _ in range(args.repeats):
        for bs in args.batch:
            for name, run in runs.items():
                t0 = time.perf_counter()
                run.tagger.tag(test, batch_size=bs)
                times[f"{name}_b{bs}"].append(time.perf_counter() - t0)
    result = {
        "what": "inference sentences/s on the Resume test set (random weights, shipped configs), median over repeats",
        "command": "python benchmarks/atssa_speed.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, torch {torch.__version__}, 1 thread",
        "sentences": len(test),
        "repeats": args.repeats,
        "sentences_per_s": {k: round(len(test) / statistics.median(v), 1) for k, v in times.items()},
    }
    sel = runs["atssa"].tagger.model.selectors()[0]
    run = runs["atssa"]
    batch = run.featurizer.collate([run.featurizer.encode(s) for s in test[:64]])
    with torch.no_grad():
        run.tagger.model.decode(batch)
    kept = sel.last.z.sum(-1)[batch["mask"][:, None, :].expand(-1, sel.heads, -1)]
    result["keys_kept_per_query_random_weights"] = round(float(kept.float().mean()), 2)
    for bs in args.batch:
        sps = result["sentences_per_s"]
        result[f"atssa_vs_flat_b{bs}"] = round(sps[f"atssa_b{bs}"] / sps[f"flat_b{bs}"] - 1, 3)
        result[f"atssa_vs_-SSA_b{bs}"] = round(sps[f"atssa_b{bs}"] / sps[f"atssa_-SSA_b{bs}"] - 1, 3)
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

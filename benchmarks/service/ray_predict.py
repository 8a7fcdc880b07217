"""Batch tagging throughput: `zhner predict --engine ray` (zhner.integrations.ray) with 1 and 2 model actors against
the local engine, on the same file, with the same model; sentences/s over the whole run and with start-up left out.

    python benchmarks/service/ray_predict.py -m zhner/resources/default_model --sentences 20000 --workers 1 2

The input is the first N sentences of MSRA's train split, one a line (a text file). Each Ray run starts its own local
instance (`ray.init(num_cpus=workers + 1)`: the actors and a CPU for the read tasks) and counts three times: Ray's
start-up, the job (actors loading the model, reading, tagging, writing in input order), and the two together. The local
engine is timed as `zhner predict` runs: model load, then tagging. Both outputs must be identical (checked).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402
from harness import load_average  # noqa: E402

harness.use_checkout()


def write_input(path: Path, count: int) -> int:
    texts = harness.split_texts("msra", "train", count)
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return len(texts)


def run_local(model_dir: str, source: Path, output: Path) -> dict:
    import zhner
    from zhner.serve.predict import predict_stream

    t0 = time.perf_counter()
    tagger = zhner.load(model_dir)
    t1 = time.perf_counter()
    predict_stream(tagger, str(source), output)
    t2 = time.perf_counter()
    return {"engine": "local", "workers": 1, "load_s": round(t1 - t0, 2), "tag_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2)}


def run_ray(model_dir: str, source: Path, output: Path, workers: int) -> dict:
    import ray

    from zhner.integrations.ray import predict_file

    t0 = time.perf_counter()
    ray.init(num_cpus=workers + 1, include_dashboard=False, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    t1 = time.perf_counter()
    try:
        predict_file(str(source), output, model_dir, workers=workers)
    finally:
        t2 = time.perf_counter()
        ray.shutdown()
    return {"engine": "ray", "workers": workers, "ray_start_s": round(t1 - t0, 2), "job_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default="zhner/resources/default_model")
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    harness.output_options(parser, "ray_predict.json")
    args = parser.parse_args()
    provenance = harness.Run(note=args.note)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "input.txt"
        n = write_input(source, args.sentences)
        runs = []
        local = run_local(args.model, source, Path(tmp) / "local.jsonl")
        local["load_average_after"] = load_average()
        runs.append(local)
        print(json.dumps(local), flush=True)
        expected = (Path(tmp) / "local.jsonl").read_bytes()
        for workers in args.workers:
            out = Path(tmp) / f"ray{workers}.jsonl"
            run = run_ray(args.model, source, out, workers)
            run["same_output_as_local"] = out.read_bytes() == expected
            run["load_average_after"] = load_average()
            runs.append(run)
            print(json.dumps(run), flush=True)
    for run in runs:
        run["sentences_per_s"] = round(n / run["total_s"], 1)
        busy = run.get("tag_s") or run.get("job_s")
        run["sentences_per_s_without_start"] = round(n / busy, 1)  # ray: the job still includes the actors' model load
    report = provenance.record({
        "benchmark": "ray_predict",
        "model_dir": args.model,
        "input": f"the first {n} sentences of MSRA train, a text file of one per line",
        "runs": runs,
        "machine": harness.machine(),
        "threads": "one torch thread per process (OMP_NUM_THREADS=1); Ray: one CPU per actor plus one for the read tasks",
    })
    harness.write(args.output, report, echo=False)


if __name__ == "__main__":
    main()

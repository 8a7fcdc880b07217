"""Two versions of zhner timed against each other, interleaved: a worker process per version (this tree, and a git
revision written to a temporary directory by `git archive`) loads the model once, then the two take turns tagging the
same texts, A B A B ..., each pass timed in its own CPU seconds (time.process_time), one torch thread, with LAC's
feature memo emptied before each pass (`forget_features`). Load on a shared machine moves both alike; the best pass of
each is compared.

    OMP_NUM_THREADS=1 python benchmarks/speed/ab_speed.py --base main -m zh-small --batch 32 --rounds 5
    OMP_NUM_THREADS=1 python benchmarks/speed/ab_speed.py --base main -m zh-accurate --batch 1 --sentences 500

Texts: the first --sentences test sentences of --dataset (default MSRA, all). Prints and writes
benchmarks/results/ab_speed.json (or --out) with the command, both commits and the load before and after.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

RESULTS = harness.RESULTS


def worker(model: str, dataset: str, sentences: int | None, batch: int, runtime: str, confidence: str) -> None:
    """Load, then answer each line of stdin with the CPU seconds of one tagging pass."""
    import zhner

    texts = harness.split_texts(dataset, "test", sentences)
    scores = {"on": True, "off": False, "default": None}[confidence]
    if runtime == "onnx":
        import torch

        from zhner.export import cache_graph
        from zhner.runtime import load_runtime

        torch.set_num_threads(1)
        cache_graph(model)  # exported into the cache on first use, before any timing
        tagger = load_runtime(model)
        with_scores = tagger.has_crf if scores is None else scores  # the default as Tagger's: scores with a CRF
        run = lambda: tagger.predict(texts, batch_size=batch, confidence=with_scores)  # noqa: E731
    else:
        tagger = harness.load(model)
        run = lambda: tagger.predict(texts, batch_size=batch, confidence=scores)  # noqa: E731
    tagger.predict(texts[:64])  # warm-up
    print(json.dumps({"ready": zhner.__file__, "sentences": len(texts)}), flush=True)
    for _ in sys.stdin:
        harness.forget_features(tagger)
        with harness.clocked() as clock:
            run()
        print(json.dumps({"cpu_s": clock.cpu_s}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="git revision (A) to compare this tree (B) with")
    parser.add_argument("-m", "--model", default="zh-small")
    parser.add_argument("--dataset", default="msra")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runtime", default="torch", choices=["torch", "onnx"], help="how B tags")
    parser.add_argument("--runtime-base", default=None, choices=["torch", "onnx"], help="how A tags (default: as B)")
    parser.add_argument("--confidence", default="default", choices=["default", "on", "off"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(RESULTS / "ab_speed.json"))
    args = parser.parse_args()
    if args.worker:
        worker(args.model, args.dataset, args.sentences, args.batch, args.runtime, args.confidence)
        return
    provenance = harness.Run()
    with tempfile.TemporaryDirectory() as tmp:
        workers = {}
        trees = harness.two_trees(args.base, Path(tmp), (args.runtime_base or args.runtime, args.runtime))
        for side, (root, runtime, env) in zip("AB", trees):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "-m", args.model, "--dataset", args.dataset,
                   "--batch", str(args.batch), "--runtime", runtime, "--confidence", args.confidence]
            if args.sentences:
                cmd += ["--sentences", str(args.sentences)]
            proc = subprocess.Popen(cmd, env=env, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            ready = json.loads(proc.stdout.readline())
            workers[side] = (proc, ready)
        passes: dict[str, list[float]] = {"A": [], "B": []}
        for _ in range(args.rounds):
            for side in ("A", "B"):
                proc, _ = workers[side]
                proc.stdin.write("run\n")
                proc.stdin.flush()
                passes[side].append(json.loads(proc.stdout.readline())["cpu_s"])
        for proc, _ in workers.values():
            proc.stdin.close()
            proc.wait()
    n = workers["B"][1]["sentences"]
    best = {side: min(p) for side, p in passes.items()}
    out = {
        "A": f"{args.base} ({harness.commit(args.base)}), {args.runtime_base or args.runtime}",
        "B": f"this tree ({harness.commit()}), {args.runtime}",
        "model": args.model, "dataset": args.dataset, "sentences": n, "batch": args.batch, "confidence": args.confidence,
        "cpu_s_per_pass": {side: [round(x, 3) for x in p] for side, p in passes.items()},
        "sentences_per_cpu_s_best": {side: round(n / t, 1) for side, t in best.items()},
        "speedup_B_over_A": round(best["A"] / best["B"], 3),
    }
    harness.write(args.out, provenance.record(out))


if __name__ == "__main__":
    main()

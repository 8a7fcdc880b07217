"""LAC's BiGRU layers (zh-accurate's frozen features) in numpy against onnxruntime: CPU ms per sentence over the three
test sets, sentences sorted by length in batches as `LacField.prepare` runs them, both engines interleaved in rounds
(best round), one thread; and how far their states differ.

    OMP_NUM_THREADS=1 python benchmarks/speed/lac_bigru.py                    # MSRA, Weibo, Resume test; batch 32
    OMP_NUM_THREADS=1 python benchmarks/speed/lac_bigru.py --batches 8 32 128 --rounds 5

Writes benchmarks/results/lac_bigru.json (with the command, commit and machine load).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
from zhner.pretrained.lac import load_lac_model  # noqa: E402

ENGINES = ("numpy", "onnxruntime")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["msra", "weibo", "resume"])
    parser.add_argument("--batches", nargs="+", type=int, default=[32])
    parser.add_argument("--rounds", type=int, default=3)
    harness.output_options(parser, "lac_bigru.json")
    args = parser.parse_args()
    run = harness.Run(note=args.note or None)
    lac = load_lac_model()
    sentences = sorted((list(t) for d in args.datasets for t in harness.split_texts(d)), key=len)
    chars = sum(map(len, sentences))
    rows = []
    for batch in args.batches:
        parts = [sentences[s : s + batch] for s in range(0, len(sentences), batch)]
        best = {engine: float("inf") for engine in ENGINES}
        states = {}
        for engine in ENGINES:  # warm-up: onnxruntime builds its session once
            lac.states_batch(parts[0], engine=engine)
        for _ in range(args.rounds):
            for engine in ENGINES:
                with harness.clocked() as clock:
                    states[engine] = [x for part in parts for x in lac.states_batch(part, engine=engine)]
                best[engine] = min(best[engine], clock.cpu_s)
        differ = max(float(np.abs(a - b).max()) for a, b in zip(*(states[e] for e in ENGINES)) if len(a))
        ms = {engine: round(1000 * best[engine] / len(sentences), 4) for engine in ENGINES}
        rows.append({"batch": batch, "cpu_ms_per_sentence": ms, "speedup": round(best["numpy"] / best["onnxruntime"], 2),
                     "max_abs_state_difference": differ})
        print(f"batch {batch}: numpy {ms['numpy']} ms, onnxruntime {ms['onnxruntime']} ms a sentence "
              f"({rows[-1]['speedup']}x), states within {differ:.1e}", file=sys.stderr)
    result = {"datasets": args.datasets, "sentences": len(sentences), "characters": chars, "rounds": args.rounds,
              "rows": rows, "machine": harness.machine()}
    harness.write_result(run, result, args.output)


if __name__ == "__main__":
    main()

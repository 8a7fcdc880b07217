"""What a window of an over-long sentence costs, by window size: MSRA test text cut into windows of each size (no
sentence ends honoured: every piece is a full window, as an over-long sentence becomes), each window one model call,
timed in CPU seconds of this process, one thread, best of --repeats, interleaved over the sizes.

    OMP_NUM_THREADS=1 python benchmarks/speed/window_cost.py              # zh-accurate's runtime graph, 512 / 256 / 128
    OMP_NUM_THREADS=1 python benchmarks/speed/window_cost.py --models zh-small zh-accurate --runtime torch

The model calls only (the runtime's graph, or the PyTorch model's emissions and Viterbi through `Tagger.predict` of the
window alone), not lexicon matching of the text. Per size: CPU seconds for all --chars characters, and ms per window
(what a service call that carries such a window adds). Writes benchmarks/results/window_cost.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()


def runtime_calls(model: str):
    """A function that runs the runtime's graph once per window (features built outside the timed part)."""
    from zhner.runtime.tagger import RuntimeTagger

    tagger = RuntimeTagger.load(model, harness.runtime_graph(model))

    def prepare(windows: list[str]):
        batches = [tagger.featurizer.batch([w]) for w in windows]
        return lambda: [tagger.session.run(None, {n: b[n] for n in tagger.input_names}) for b in batches]

    return prepare


def torch_calls(model: str):
    """A function that tags each window alone with the PyTorch model (`predict`, scores off)."""
    tagger = harness.load(model)

    def prepare(windows: list[str]):
        def run():
            harness.forget_features(tagger)
            return [tagger.predict([w], confidence=False) for w in windows]

        return run

    return prepare


def table(result: dict) -> str:
    """The docs' table: per model and window size, ms a window and CPU seconds for the whole text."""
    lines = [f"| model, path | window | ms a window | CPU s for {result['chars']:,} characters |", "|---|---|---|---|"]
    for r in result["rows"]:
        path = "runtime" if r["runtime"] == "onnx" else "PyTorch"
        lines.append(f"| {r['model']}, {path} | {r['window']} | {r['ms_per_window']:.1f} | {r['cpu_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["zh-accurate"])
    parser.add_argument("--runtime", default="onnx", choices=["onnx", "torch"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[512, 256, 128])
    parser.add_argument("--chars", type=int, default=20480)
    parser.add_argument("--repeats", type=int, default=3)
    harness.output_options(parser, "window_cost.json")
    args = parser.parse_args()
    run = harness.Run(note=args.note)
    text = harness.long_text(args.chars)
    rows = []
    for model in args.models:
        prepare = (runtime_calls if args.runtime == "onnx" else torch_calls)(model)
        calls = {size: prepare([text[i : i + size] for i in range(0, len(text), size)]) for size in args.sizes}
        best = {size: float("inf") for size in args.sizes}
        for _ in range(args.repeats):
            for size, call in calls.items():
                with harness.clocked() as clock:
                    call()
                best[size] = min(best[size], clock.cpu_s)
        for size in args.sizes:
            windows = -(-len(text) // size)
            rows.append({"model": model, "runtime": args.runtime, "window": size, "windows": windows,
                         "cpu_s": round(best[size], 3), "ms_per_window": round(1000 * best[size] / windows, 1)})
            print(f"{model} {args.runtime} window {size}: {best[size]:.2f} CPU s, {1000 * best[size] / windows:.1f} ms a window",
                  file=sys.stderr)
    harness.write_result(run, {"chars": len(text), "repeats": args.repeats, "rows": rows}, args.output)


if __name__ == "__main__":
    main()

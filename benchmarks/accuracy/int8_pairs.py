"""Whether the int8 graph of a shipped model tags as its float graph does: both through the torch-free runtime on the
MSRA, Weibo and Resume test sets, strict PER/LOC/ORG F1 as benchmarks/speed/peers.py scores it (the same gold mapping),
and a paired approximate randomization test over the sentences (zhner.evaluate.significance) on each set.

    OMP_NUM_THREADS=1 python benchmarks/accuracy/int8_pairs.py                     # both shipped models
    OMP_NUM_THREADS=1 python benchmarks/accuracy/int8_pairs.py --models zh-small --sentences 200 --out /tmp/x.json

The int8 graph is onnxruntime's dynamic quantisation of the linear layers (`zhner export --int8`), exported once into
the user cache (benchmarks/harness.py runtime_graph). Writes benchmarks/results/int8_pairs.json: per model and set the
two F1s, their difference, p, and the sentences whose entities changed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))  # peers.py's test sets, gold mapping, systems
import harness  # noqa: E402
from peers import test_sets, zhner_system  # noqa: E402

harness.use_checkout()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.sentence_pair_options(parser, "int8_pairs.json")
    args = parser.parse_args()
    provenance = harness.Run()
    data = test_sets(args.sentences)
    rows = []
    for model in args.models:
        # peers.py's runtime systems: the float graph ("onnx") and the int8 one ("onnx8"), entities without scores
        systems = {kind: zhner_system(model, runtime, args.batch, False)[0]
                   for kind, runtime in (("float", "onnx"), ("int8", "onnx8"))}
        for corpus, (texts, gold) in data.items():
            predicted = {kind: run(texts) for kind, run in systems.items()}
            test, changed = harness.paired_sentence_test(gold, predicted["int8"], predicted["float"], args.resamples,
                                                         args.seed)
            rows.append({"model": model, "corpus": corpus, "sentences": len(texts),
                         "f1_float": round(100 * test["f1_b"], 2), "f1_int8": round(100 * test["f1_a"], 2),
                         "int8_minus_float": round(100 * test["diff"], 2), "p": round(test["p"], 4),
                         "sentences_changed": changed})
            print(f"{model} {corpus}: float {rows[-1]['f1_float']}, int8 {rows[-1]['f1_int8']} "
                  f"({rows[-1]['int8_minus_float']:+.2f}, p {rows[-1]['p']}), {changed} sentences changed", flush=True)
    out = provenance.record({
        "metric": "strict span F1 over PER/LOC/ORG, gold mapped as in benchmarks/speed/peers.py",
        "test": f"paired approximate randomization over sentences, {args.resamples} resamples, seed {args.seed}",
        "batch": args.batch, "rows": rows,
    })
    harness.write(args.out, out, echo=False)


if __name__ == "__main__":
    main()

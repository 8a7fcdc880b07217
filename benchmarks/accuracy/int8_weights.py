"""What storing a model's encoder as int8 (`model.bert_int8_weights`, with `bert_half_weights`) costs in F1, and what
it saves on disk: the model directory as trained (float32) and re-saved with both switches on, each loaded and scored
on the same data.

Usage: python benchmarks/accuracy/int8_weights.py MODEL_DIR DATA [-o benchmarks/results/int8_weights_NAME.json]

DATA is what `zhner evaluate` takes (a dataset name scores its test split). Prints and writes test strict F1 of both,
their difference, the sentences whose predicted spans changed, and the size of each model.safetensors.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
from zhner.data.registry import load_corpus  # noqa: E402
from zhner.tagger import Tagger  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("data")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    provenance = harness.Run()
    full = Tagger.load(args.model_dir)
    corpus = load_corpus(args.data, full.featurizer.unit)
    with tempfile.TemporaryDirectory() as tmp:
        model = full.config.model.model_copy(update={"bert_int8_weights": True, "bert_half_weights": True})
        Tagger(full.model, full.featurizer, full.config.model_copy(update={"model": model}), full.metrics).save(tmp)
        small = Tagger.load(tmp)
        small_bytes = (Path(tmp) / "model.safetensors").stat().st_size
        a, b = full.evaluate(corpus), small.evaluate(corpus)
        changed = sum(x != y for x, y in zip(full.predictions(corpus.sentences), small.predictions(corpus.sentences)))
    result = {
        "model_dir": args.model_dir, "data": args.data, "sentences": len(corpus.sentences),
        "float32_f1_strict": a["strict"]["f1"], "int8_f1_strict": b["strict"]["f1"],
        "diff": round(b["strict"]["f1"] - a["strict"]["f1"], 2), "sentences_changed": changed,
        "float32_bytes": (Path(args.model_dir) / "model.safetensors").stat().st_size, "int8_bytes": small_bytes,
    }
    result = provenance.record(result)
    print(json.dumps(result, indent=2))
    if args.output:
        harness.write(args.output, result, echo=False)


if __name__ == "__main__":
    main()

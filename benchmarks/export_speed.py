"""Inference speed of an exported ONNX model (onnxruntime + numpy Viterbi) against the PyTorch Tagger, one thread.

Usage: .venv/bin/python benchmarks/export_speed.py [--configs flat_resume tener_resume bilstm_crf_resume] [--seconds 8]
       [--out benchmarks/results/export_speed.json]

For each shipped config: build the model exactly as training would (Resume, LAC vectors, jieba lexicon), save it, export it
(`zhner.export.export_onnx`), then tag the Resume test sentences (length-bucketed groups, shuffled with seed 1) with
`Tagger.tag` and `OnnxTagger.tag` at batch 1 and 16 for about --seconds each, end to end: featurization (lexicon
matching included), the model, Viterbi. Weights are the untrained initialisation (seed 42): speed does not depend on them.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing zhner
from zhner.bench import _timed_loop  # noqa: E402
from zhner.cli import resolve_config  # noqa: E402
from zhner.config import load_config  # noqa: E402
from zhner.data.batching import length_batches  # noqa: E402
from zhner.export import OnnxTagger, export_onnx  # noqa: E402
from zhner.fileio import atomic_write_text  # noqa: E402
from zhner.tagger import Tagger  # noqa: E402
from zhner.train.assemble import prepare  # noqa: E402


def measure(name: str, seconds: float) -> dict:
    run = prepare(load_config(resolve_config(name)), log=lambda _: None)
    test = [s.tokens for s in run.splits["test"]]
    with tempfile.TemporaryDirectory() as tmp:
        run.tagger.save(tmp)
        t0 = time.perf_counter()
        export_onnx(run.tagger, Path(tmp) / "model.onnx")
        export_s = time.perf_counter() - t0
        taggers = {"pytorch": Tagger.load(tmp), "onnx": OnnxTagger.load(tmp, threads=1)}
        result = {"config": name, "export_seconds": round(export_s, 1),
                  "onnx_bytes": (Path(tmp) / "model.onnx").stat().st_size}
        for bs in (1, 16):
            groups = [[test[i] for i in idx] for idx in length_batches([len(t) for t in test], bs, shuffle=True, seed=1)]
            for kind, tagger in taggers.items():
                n, t = _timed_loop(groups, lambda g, tg=tagger: len(tg.tag(g, batch_size=bs)), seconds)
                result[f"{kind}_sentences_per_s_b{bs}"] = round(n / t, 1)
            result[f"speedup_b{bs}"] = round(result[f"onnx_sentences_per_s_b{bs}"] / result[f"pytorch_sentences_per_s_b{bs}"], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["flat_resume", "tener_resume", "bilstm_crf_resume"])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "export_speed.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.configs:
        rows.append(measure(name, args.seconds))
        print(json.dumps(rows[-1]), flush=True)
    import onnxruntime

    record = {
        "command": "python benchmarks/export_speed.py " + " ".join(sys.argv[1:]),
        "threads": 1,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "exporter": "torch.onnx.export(dynamo=True), opset 18",
        "machine": platform.processor() or platform.machine(),
        "measured": time.strftime("%Y-%m-%d"),
        "results": rows,
    }
    atomic_write_text(args.out, json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Peak memory of tagging in bulk: each shipped model tags the MSRA, Weibo and Resume test sets (5,112 sentences, the
1,475-character MSRA sentence among them) in a process of its own, with PyTorch and with the torch-free runtime
(and its int8 graph), one thread, batch 32; the process's peak RSS (ru_maxrss) and CPU seconds are reported, with
whether torch was imported.

    OMP_NUM_THREADS=1 python benchmarks/resources/runtime_memory.py     # -> benchmarks/results/runtime_memory.json

The graphs are exported into the user cache by this parent process before the children start (the int8 graph with
`zhner export --int8`'s dynamic quantisation, into $ZHNER_CACHE/onnx8), so a runtime child never imports torch.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
CORPORA = ("msra", "weibo", "resume")

CHILD = """
import json, resource, sys, time
from zhner.data.registry import load_dataset
model, runtime, graph, batch = sys.argv[1], sys.argv[2], sys.argv[3] or None, int(sys.argv[4])
texts = [ex.text for name in {corpora!r} for ex in load_dataset(name)["test"]]
start = time.process_time()
if runtime == "torch":
    import torch, zhner
    torch.set_num_threads(1)
    tagger = zhner.load(model)
else:
    from zhner.runtime import RuntimeTagger
    tagger = RuntimeTagger.load(model, graph)
found = sum(len(row) for row in tagger.predict(texts, batch_size=batch))
print(json.dumps({{"sentences": len(texts), "entities": found, "cpu_s": round(time.process_time() - start, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  "torch_imported": "torch" in sys.modules}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["zh-small", "zh-accurate"])
    parser.add_argument("--runtimes", nargs="+", default=["torch", "onnx", "onnx8"], choices=["torch", "onnx", "onnx8"])
    parser.add_argument("--batch", type=int, default=32)
    harness.output_options(parser, "runtime_memory.json")
    args = parser.parse_args()
    provenance = harness.Run(note=args.note or None)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    rows = {}
    for model in args.models:
        for runtime in args.runtimes:  # graphs exported here, before the child that reads them starts
            graph = "" if runtime == "torch" else str(harness.runtime_graph(model, int8=runtime == "onnx8"))
            child = [sys.executable, "-c", CHILD.format(corpora=CORPORA), model, runtime, graph, str(args.batch)]
            done = subprocess.run(child, capture_output=True, text=True, env=env, cwd=harness.REPO)
            if done.returncode != 0:
                raise SystemExit(f"{model} {runtime}: {done.stderr.strip().splitlines()[-1]}")
            rows[f"{model}:{runtime}"] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{model}:{runtime}", rows[f"{model}:{runtime}"], flush=True)
    harness.write(args.output, provenance.record({
        "corpora": list(CORPORA), "batch": args.batch, "threads": 1,
        "method": "one process per row: the model loaded, then the three test sets tagged in one predict call (scores "
                  "off); cpu_s includes loading", "rows": rows,
    }), echo=False)


if __name__ == "__main__":
    main()

"""Peak memory of tagging in bulk: each shipped model tags the MSRA, Weibo and Resume test sets (5,112 sentences, the
1,475-character MSRA sentence among them) in a process of its own, with PyTorch and with the torch-free runtime
(and its int8 graph), one thread, batch 32; the process's peak RSS (ru_maxrss) and CPU seconds are reported, with
whether torch was imported.

    OMP_NUM_THREADS=1 python benchmarks/runtime_memory.py     # -> benchmarks/results/runtime_memory.json

The graphs are exported into the user cache by this parent process before the children start (the int8 graph with
`zhner export --int8`'s dynamic quantisation, into $ZHNER_CACHE/onnx8), so a runtime child never imports torch.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results"
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


def graphs(model: str) -> dict[str, Path]:
    """The runtime's graphs of `model`: the cached float32 one, and an int8 one beside the cache (made once)."""
    from zhner.export import cache_graph, export_onnx
    from zhner.runtime.cache import cache_root
    from zhner.tagger import Tagger

    plain = cache_graph(model)
    int8 = cache_root().parent / "onnx8" / plain.parent.name / "model.onnx"
    if not int8.is_file():
        int8.parent.mkdir(parents=True, exist_ok=True)
        export_onnx(Tagger.load(model), int8, int8=True)
    return {"onnx": plain, "onnx8": int8}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["zh-small", "zh-accurate"])
    parser.add_argument("--runtimes", nargs="+", default=["torch", "onnx", "onnx8"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default=str(RESULTS / "runtime_memory.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    rows = {}
    for model in args.models:
        paths = graphs(model) if any(r != "torch" for r in args.runtimes) else {}
        for runtime in args.runtimes:
            child = [sys.executable, "-c", CHILD.format(corpora=CORPORA), model, runtime, str(paths.get(runtime, "")),
                     str(args.batch)]
            done = subprocess.run(child, capture_output=True, text=True, env=env, cwd=REPO)
            if done.returncode != 0:
                raise SystemExit(f"{model} {runtime}: {done.stderr.strip().splitlines()[-1]}")
            rows[f"{model}:{runtime}"] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{model}:{runtime}", rows[f"{model}:{runtime}"], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    out = {
        "command": "OMP_NUM_THREADS=1 python benchmarks/runtime_memory.py " + " ".join(sys.argv[1:]),
        "commit": commit, "corpora": list(CORPORA), "batch": args.batch, "threads": 1,
        "note": "one process per row: the model loaded, then the three test sets tagged in one predict call (scores off);"
                " cpu_s includes loading",
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "time_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

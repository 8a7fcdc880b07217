"""The shipped models side by side: test F1 per corpus, sizes, inference speed on one thread (PyTorch, ONNX, ONNX with
int8 weights) and the time to a first answer from a cold start.

    OMP_NUM_THREADS=1 python benchmarks/speed/shipped_models.py          # writes benchmarks/results/shipped_models.json

For each shipped model (zh-small, zh-accurate; or --models DIR for a candidate) the directory is copied to a temporary one and exported there twice
(`zhner export`, and `zhner export --int8`: onnxruntime's dynamic quantisation). Then:
  - strict F1 on each corpus's test set, in the model's types (the data.union type maps of its config), with the PyTorch
    weights, the ONNX graph and the int8 graph (`zhner evaluate MODEL DATA --onnx FILE` scores the same way);
  - sentences per CPU second over those test sets (5,112 sentences; process time, so other load on the machine
    costs less than in wall time), batch 1 and 32, for PyTorch (zhner.load), the torch-free runtime on the ONNX graph
    and on the int8 graph; each path runs in its own process, after a warm-up batch;
  - the time from starting Python to the first answer for one sentence (fresh processes, --runs times, best and median:
    benchmarks/resources/runtime_onnx.py's measurement), PyTorch and the torch-free runtime.
Deterministic predictions; speeds depend on the machine and its load (recorded).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402
from harness import first_answer, write_result  # noqa: E402

REPO = harness.REPO
MODELS = ("zh-small", "zh-accurate")
PATHS = ("torch", "onnx", "onnx_int8")

SCORE = r"""
import json, sys
import torch
torch.set_num_threads(1)
from zhner.export import load_onnx
from zhner.tagger import Tagger
from zhner.train.corpora import load_splits
directory, graph = sys.argv[1:3]
tagger = Tagger.load(directory) if graph == "-" else load_onnx(directory, graph)
_, parts = load_splits(tagger.config)
print(json.dumps({name: tagger.task.headline(tagger.evaluate(splits["test"], 64)) for name, splits in parts.items()}))
"""

THROUGHPUT = r"""
import json, sys, time
kind, directory, graph, texts_file, batch = sys.argv[1:6]
texts = json.loads(open(texts_file, encoding="utf-8").read())
if kind == "torch":
    import torch
    torch.set_num_threads(1)
    import zhner
    tagger = zhner.load(directory)
    run = lambda part: tagger.predict(part, batch_size=int(batch), confidence=False)
else:
    from zhner.runtime import RuntimeTagger
    tagger = RuntimeTagger.load(directory, graph, threads=1)
    run = lambda part: tagger.predict(part, batch_size=int(batch))
run(texts[:64])
start = time.process_time()
out = run(texts)
cpu = time.process_time() - start
print(json.dumps({"sentences_per_cpu_s": len(texts) / cpu, "entities": sum(map(len, out))}))
"""


def python(code: str, *args: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"a measurement failed ({' '.join(args)}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def export(directory: Path, env: dict) -> dict[str, Path]:
    graphs = {"onnx": directory / "model.onnx", "onnx_int8": directory / "model.int8.onnx"}
    for kind, path in graphs.items():
        extra = ["--int8"] if kind == "onnx_int8" else []
        subprocess.run([sys.executable, "-m", "zhner.cli", "export", str(directory), "-o", str(path), *extra], env=env,
                       check=True, capture_output=True)
    return graphs


def test_texts(directory: Path, env: dict) -> list[str]:
    code = ("import json, sys\nfrom zhner.tagger import Tagger\nfrom zhner.train.corpora import load_splits\n"
            "t = Tagger.load(sys.argv[1]); splits, _ = load_splits(t.config)\n"
            "print(json.dumps([''.join(s.tokens) for s in splits['test'].sentences], ensure_ascii=False))")
    out = subprocess.run([sys.executable, "-c", code, str(directory)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def measure(name: str, tmp: Path, env: dict, runs: int) -> dict:
    from zhner.shipped import shipped_dir

    source = Path(name) if Path(name).is_dir() else shipped_dir(name)  # a candidate's run directory, or a shipped name
    directory = tmp / source.name
    shutil.copytree(source, directory, ignore=shutil.ignore_patterns("checkpoint.pt", "*.onnx"))
    own_files = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    graphs = export(directory, env)
    texts = test_texts(directory, env)
    texts_file = tmp / f"{directory.name}.texts.json"
    texts_file.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    f1 = {path: python(SCORE, str(directory), "-" if path == "torch" else str(graphs[path]), env=env) for path in PATHS}
    speed = {}
    for path in PATHS:
        for batch in (1, 32):
            kind = "torch" if path == "torch" else "runtime"
            graph = str(graphs.get(path, "-"))
            speed[f"{path}_b{batch}"] = round(
                python(THROUGHPUT, kind, str(directory), graph, str(texts_file), str(batch), env=env)["sentences_per_cpu_s"], 1)
    starts = {"torch": [], "runtime": []}
    for _ in range(runs):
        starts["torch"].append(first_answer("torch", directory, env)["first_answer_s"])
        starts["runtime"].append(first_answer("onnx", directory, env)["first_answer_s"])
    return {
        "model": name,
        "directory_bytes": own_files,
        "onnx_bytes": {k: p.stat().st_size for k, p in graphs.items()},
        "test_strict_f1": f1,
        "int8_f1_change": {c: round(f1["onnx_int8"][c]["f1_strict"] - f1["torch"][c]["f1_strict"], 2) for c in f1["torch"]},
        "sentences_per_cpu_s": speed,
        "test_sentences": len(texts),
        "first_answer_s": {k: {"best": round(min(v), 2), "median": round(statistics.median(v), 2)} for k, v in starts.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="shipped names or model directories")
    parser.add_argument("--runs", type=int, default=3)
    harness.output_options(parser, "shipped_models.json")
    args = parser.parse_args()
    env = harness.tree_env(REPO)
    provenance = harness.Run(note=args.note)
    harness.use_checkout()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, Path(tmp), env, args.runs) for name in args.models]
    result = {
        "benchmark": "shipped_models",
        "rows": rows,
    }
    write_result(provenance, result, args.output)


if __name__ == "__main__":
    main()

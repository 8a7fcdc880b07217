"""Cold start and memory of the torch-free runtime (zhner.runtime) against the PyTorch path, on the shipped model.

    python benchmarks/resources/runtime_onnx.py            # writes benchmarks/results/runtime_onnx.json

The shipped model is copied to a temporary directory and exported there (`zhner export`). Each measurement is a fresh
process, --runs times (best and median): the time from starting the interpreter to the first answer for one sentence,
the process's CPU time (user + sys: what the start costs when other processes share the cores) and its peak RSS, for
  - python_torch:  `zhner.load(DIR).predict([...])` (PyTorch; the lexicon automaton read from the user cache),
  - python_onnx:   `zhner.runtime.RuntimeTagger.load(DIR).predict([...])`,
  - cli_torch / cli_onnx: `zhner predict -m DIR --text ...` with --runtime torch / onnx;
then, in one process each, sentences per second over the Resume test set (477 sentences, batch 32, one thread) and
whether both paths give the same entities. The machine's load average is recorded before and after.
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
from harness import SENTENCE, first_answer, write_result  # noqa: E402

REPO = harness.REPO
CHILD_USAGE = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, capture_output=True)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}))
"""

THROUGHPUT = r"""
import json, sys, time
kind, directory, texts_file = sys.argv[1:4]
texts = json.loads(open(texts_file, encoding="utf-8").read())
if kind == "torch":
    import zhner
    tagger = zhner.load(directory)
else:
    from zhner.runtime import RuntimeTagger
    tagger = RuntimeTagger.load(directory)
tagger.predict(texts[:32])
start = time.process_time()
out = tagger.predict(texts, batch_size=32, confidence=False)  # both without scores: the same records
cpu = time.process_time() - start
out = [[e if isinstance(e, dict) else e.to_dict() for e in row] for row in out]  # zhner.load's Entity, the runtime's dicts
print(json.dumps({"sentences_per_cpu_s": len(texts) / cpu, "entities": out}, ensure_ascii=False))
"""


def cli(runtime: str, directory: Path, env: dict) -> dict:
    command = [sys.executable, "-m", "zhner.cli", "predict", "-m", str(directory), "--runtime", runtime, "--text", SENTENCE]
    out = subprocess.run([sys.executable, "-c", CHILD_USAGE, *command], env=env, check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    return {"first_answer_s": result["wall_s"], "cpu_s": result["cpu_s"], "rss_mb": result["rss_mb"]}


def summary(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if isinstance(rows[0][k], float)]
    out = {k: {"best": round(min(r[k] for r in rows), 3), "median": round(statistics.median(r[k] for r in rows), 3)}
           for k in keys}
    return out | {k: rows[0][k] for k in rows[0] if k not in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    harness.output_options(parser, "runtime_onnx.json")
    args = parser.parse_args()
    env = harness.tree_env(REPO)
    provenance = harness.Run(note=args.note)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "model"
        shutil.copytree(REPO / "zhner" / "resources" / "default_model", directory)
        subprocess.run([sys.executable, "-m", "zhner.cli", "export", str(directory)], env=env, check=True, capture_output=True)
        runs = {name: [] for name in ("python_torch", "python_onnx", "cli_torch", "cli_onnx")}
        for _ in range(args.runs):  # interleaved, so that a change in the machine's load hits every path alike
            runs["python_torch"].append(first_answer("torch", directory, env))
            runs["python_onnx"].append(first_answer("onnx", directory, env))
            runs["cli_torch"].append(cli("torch", directory, env))
            runs["cli_onnx"].append(cli("onnx", directory, env))
        texts_file = Path(tmp) / "texts.json"
        harness.use_checkout()
        texts = harness.split_texts("resume")
        texts_file.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        speed = {}
        for kind in ("torch", "onnx"):
            out = subprocess.run([sys.executable, "-c", THROUGHPUT, kind, str(directory), str(texts_file)], env=env,
                                 check=True, capture_output=True, text=True)
            speed[kind] = json.loads(out.stdout)
    result = {
        "benchmark": "runtime_onnx",
        "model": "zhner/resources/default_model (FLAT, exported with zhner export)",
        "sentence": SENTENCE,
        "runs": args.runs,
        "first_answer": {name: summary(rows) for name, rows in runs.items()},
        "resume_test_sentences_per_cpu_s": {k: round(v["sentences_per_cpu_s"], 1) for k, v in speed.items()},
        "resume_test_same_entities": speed["torch"]["entities"] == speed["onnx"]["entities"],
    }
    write_result(provenance, result, args.output)


if __name__ == "__main__":
    main()

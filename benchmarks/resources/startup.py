"""Start-up time of `zhner predict` on one line, and where it goes.

    python benchmarks/resources/startup.py                         # this checkout, writes benchmarks/results/startup.json
    python benchmarks/resources/startup.py --repo /tmp/old --output /tmp/old.json   # another checkout, same measurement

Wall time of `python -m zhner.cli predict ONE_LINE_FILE` with the shipped model (best and median of --runs, each a
fresh process), then the phases in a fresh process: `import torch`, the rest of `import zhner.tagger`, `Tagger.load`
(of which reading lexicon.txt), and the first `predict` (which builds, or reads from the user cache, the lexicon's
Aho-Corasick automaton). `python -X importtime -m zhner.cli predict FILE` gives the import tree.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

REPO = harness.REPO

PHASES = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import zhner.tagger as T
from zhner.lexicon.lexicon import Lexicon
t2 = time.perf_counter()
d = T.default_model_dir()
Lexicon.load(d / "lexicon.txt")
t3 = time.perf_counter()
tagger = T.Tagger.load(d)
t4 = time.perf_counter()
tagger.predict(["张三毕业于北京大学。"])
t5 = time.perf_counter()
print(json.dumps({"import_torch_s": t1 - t0, "import_zhner_rest_s": t2 - t1, "read_lexicon_s": t3 - t2,
                  "tagger_load_s": t4 - t3, "first_predict_s": t5 - t4}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(REPO), help="the checkout to measure")
    parser.add_argument("--runs", type=int, default=5)
    harness.output_options(parser, "startup.json")
    args = parser.parse_args()
    provenance = harness.Run(repo=Path(args.repo), note=args.note)
    env = harness.tree_env(Path(args.repo))
    with tempfile.TemporaryDirectory() as tmp:
        line = Path(tmp) / "one.txt"
        line.write_text("张三毕业于北京大学。\n", encoding="utf-8")
        walls = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "zhner.cli", "predict", str(line)], cwd=args.repo, env=env, check=True,
                           capture_output=True)
            walls.append(time.perf_counter() - start)
    phases = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", PHASES], cwd=args.repo, env=env, check=True, capture_output=True, text=True)
        phases.append(json.loads(out.stdout))
    result = provenance.record({
        "benchmark": "startup",
        "repo": args.repo,
        "predict_one_line_wall_s": {"best": round(min(walls), 2), "median": round(statistics.median(walls), 2)},
        "phases_median_s": {k: round(statistics.median(p[k] for p in phases), 2) for k in phases[0]},
    })
    print(json.dumps(result, ensure_ascii=False))
    harness.write(args.output, result, echo=False)


if __name__ == "__main__":
    main()

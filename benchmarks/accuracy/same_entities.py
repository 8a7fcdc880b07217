"""Do two versions of zhner find the same entities? The shipped models tag the first N test sentences of MSRA, Weibo
and Resume (and one long MSRA text) with this tree and with a git revision (written to a temporary directory by
`git archive`, run in a subprocess with it first on the path), and every entity's (start, end, type) is compared, and
its score to 4 places.

    OMP_NUM_THREADS=1 python benchmarks/accuracy/same_entities.py --base main             # PyTorch path
    OMP_NUM_THREADS=1 python benchmarks/accuracy/same_entities.py --base main --runtime onnx --runtime-base torch

`--runtime onnx` tags this tree's side with the torch-free runtime (its graph exported into the cache on first use);
`--runtime-base` says how the base side tags (default: as this side). Writes benchmarks/results/same_entities.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

RESULTS = harness.RESULTS


def tag(models: list[str], per_corpus: int, runtime: str, batch: int) -> dict:
    """{model: {corpus: [[[start, end, type, score], ...] per sentence]}} with the zhner on sys.path."""
    import torch

    import zhner

    torch.set_num_threads(1)
    out = {"zhner": zhner.__file__}
    texts = {name: harness.split_texts(name, "test", per_corpus) for name in ("msra", "weibo", "resume")}
    texts["long"] = [harness.long_text(20_000)]
    for model in models:
        if runtime == "onnx":
            from zhner.export import cache_graph
            from zhner.runtime import load_runtime

            cache_graph(model)  # exported into the cache on first use, before any timing
            tagger = load_runtime(model)
            run = lambda ts: tagger.predict(ts, batch_size=batch, confidence=True)  # noqa: E731
        else:
            tagger = harness.load(model)
            run = lambda ts: [[e.to_dict() for e in ents] for ents in tagger.predict(ts, batch_size=batch)]  # noqa: E731
        out[model] = {
            corpus: [[[e["start"], e["end"], e["type"], e.get("score")] for e in ents] for ents in run(ts)]
            for corpus, ts in texts.items()
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="git revision to compare with")
    parser.add_argument("--models", nargs="+", default=["zh-small", "zh-accurate"])
    parser.add_argument("--sentences", type=int, default=400, help="test sentences per corpus")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runtime", default="torch", choices=["torch", "onnx"])
    parser.add_argument("--runtime-base", default=None, choices=["torch", "onnx"])
    parser.add_argument("--tag-only", help=argparse.SUPPRESS)  # internal: the subprocess writes its entities here
    parser.add_argument("--out", default=str(RESULTS / "same_entities.json"))
    args = parser.parse_args()
    if args.tag_only:
        Path(args.tag_only).write_text(json.dumps(tag(args.models, args.sentences, args.runtime, args.batch)))
        return
    provenance = harness.Run()
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        trees = harness.two_trees(args.base, Path(tmp), (args.runtime_base or args.runtime, args.runtime))
        base_dir = trees[0][0]
        for side, (root, runtime, env) in zip(("base", "this"), trees):
            path = Path(tmp) / f"{side}.json"
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--tag-only", str(path),
                            "--models", *args.models, "--sentences", str(args.sentences), "--batch", str(args.batch),
                            "--runtime", runtime], env=env, check=True, cwd=root)
            results[side] = json.loads(path.read_text())
    base, this = results["base"], results["this"]
    assert Path(base["zhner"]).resolve().is_relative_to(base_dir.resolve()), base["zhner"]
    report = {}
    for model in args.models:
        for corpus in base[model]:
            a, b = base[model][corpus], this[model][corpus]
            spans_differ = sum({tuple(e[:3]) for e in x} != {tuple(e[:3]) for e in y} for x, y in zip(a, b))
            score_diffs = [abs(ea[3] - eb[3]) for x, y in zip(a, b) for ea, eb in zip(x, y)
                           if ea[:3] == eb[:3] and ea[3] is not None and eb[3] is not None]
            report[f"{model} {corpus}"] = {
                "sentences": len(a), "entities": sum(map(len, a)), "sentences_with_other_entities": spans_differ,
                "max_score_difference": round(max(score_diffs, default=0.0), 4),
            }
            print(f"{model:12} {corpus:7} {len(a):5} sentences {sum(map(len, a)):5} entities: "
                  f"{spans_differ} differ, scores within {max(score_diffs, default=0.0):.4f}")
    out = {"base": f"{args.base} ({harness.commit(args.base)})", "runtime": args.runtime,
           "runtime_base": args.runtime_base or args.runtime, "comparison": report}
    harness.write(args.out, provenance.record(out), echo=False)


if __name__ == "__main__":
    main()

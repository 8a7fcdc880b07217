"""Does a model trained with an unconstrained CRF (FLAT's release, `model.preset=compat`) score better when its Viterbi
is restricted to well-formed tag paths? Re-scores the saved best models of run sets on test, without retraining.

    python benchmarks/accuracy/constrained_decoding.py runs/acc/fr_compat [RUN_SET ...] [--split test] [--json OUT]

For every seed: test F1 strict / lenient as trained (unconstrained Viterbi) and with the scheme's transition constraints
put into the CRF at decoding time only (the trained scores are unchanged). Per run set: means and a paired t-test.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from zhner.data.registry import load_dataset
from zhner.evaluate.significance import describe, paired_t_test
from zhner.nn.crf import allowed_transitions
from zhner.tagger import Tagger


def constrain_decoding(tagger: Tagger) -> None:
    """Put the scheme's constraints into the CRF's decoding masks (training's stay as they were)."""
    crf = tagger.model.crf
    crf.decode_start_allowed, crf.decode_trans_allowed, crf.decode_end_allowed = allowed_transitions(
        tagger.featurizer.tags, tagger.featurizer.scheme
    )


def rescore(run_dir: Path, split: str) -> dict:
    tagger = Tagger.load(run_dir)
    cfg = tagger.config.data
    corpus = load_dataset(cfg.dataset, cfg.data_dir, msra_dev=cfg.msra_dev)[split]
    free = tagger.evaluate(corpus)
    constrain_decoding(tagger)
    constrained = tagger.evaluate(corpus)
    return {
        "seed": tagger.config.train.seed,
        "unconstrained": {"f1_strict": free["strict"]["f1"], "f1_lenient": free["lenient"]["f1"]},
        "constrained": {"f1_strict": constrained["strict"]["f1"], "f1_lenient": constrained["lenient"]["f1"]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_sets", nargs="+", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = {"split": args.split, "command": "python benchmarks/accuracy/constrained_decoding.py " + " ".join(sys.argv[1:]), "sets": {}}
    for run_set in args.run_sets:
        seeds = [rescore(d.parent, args.split) for d in sorted(run_set.glob("seed*/metrics.json"))]
        a = [s["constrained"]["f1_strict"] for s in seeds]
        b = [s["unconstrained"]["f1_strict"] for s in seeds]
        summary = {
            "seeds": seeds,
            "unconstrained_strict": describe(b),
            "unconstrained_lenient": describe([s["unconstrained"]["f1_lenient"] for s in seeds]),
            "constrained_strict": describe(a),
            "constrained_minus_unconstrained": paired_t_test(a, b),
        }
        out["sets"][str(run_set)] = summary
        t = summary["constrained_minus_unconstrained"]
        print(
            f"{run_set}: unconstrained strict {summary['unconstrained_strict']['mean']:.2f} / lenient "
            f"{summary['unconstrained_lenient']['mean']:.2f}; constrained {summary['constrained_strict']['mean']:.2f} "
            f"(diff {t['mean_diff']:+.2f}, p {t['p']}) over {len(seeds)} seeds"
        )
    if args.json:
        args.json.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

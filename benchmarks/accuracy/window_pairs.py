"""Whether the shipped models tag as well with over-long sentences cut into windows of PIECE_CHARS (256) as of --base
characters (512, the size before): each model with PyTorch on the MSRA, Weibo and Resume test sets, strict PER/LOC/ORG
F1 as benchmarks/speed/peers.py scores it (the same gold mapping), and a paired approximate randomization test over
the sentences (zhner.evaluate.significance) on each set. Only sentences longer than the smaller size can change.

    OMP_NUM_THREADS=1 python benchmarks/accuracy/window_pairs.py                 # both shipped models, 512 against 256
    OMP_NUM_THREADS=1 python benchmarks/accuracy/window_pairs.py --models zh-small --base 1024 --out /tmp/x.json

Writes benchmarks/results/window_pairs.json: per model and set the two F1s, their difference, p, the sentences longer
than the window and the sentences whose entities changed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))  # peers.py's test sets and gold mapping
import harness  # noqa: E402
from peers import LAC_TYPES, test_sets  # noqa: E402

harness.use_checkout()


def tagged(tagger, texts: list[str], piece_chars: int, batch: int) -> list[list[tuple]]:
    """(start, end, type) of the PER/LOC/ORG entities of each text, over-long sentences cut into `piece_chars` windows."""
    tagger.piece_chars = lambda memory_mb=None: piece_chars  # the instance's window, as Tagger.piece_chars would give
    try:
        found = tagger.predict(texts, batch_size=batch, confidence=False)
    finally:
        del tagger.piece_chars
    return [[(e["start"], e["end"], e["type"]) for e in entities if e["type"] in LAC_TYPES] for entities in found]


def table(result: dict) -> str:
    """The docs' table: per model and test set, F1 with each window size, the difference and p."""
    new, old = result["windows"]
    lines = [f"| model | test set | sentences over {new} | changed | F1, windows of {old} | F1, windows of {new} | "
             "difference (p) |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['model']} | {r['corpus']} | {r['longer_than_window']} | {r['sentences_changed']} | "
                     f"{r[f'f1_{old}']:.2f} | {r[f'f1_{new}']:.2f} | {r['difference']:+.2f} ({r['p']:.2f}) |")
    return "\n".join(lines)


def main() -> None:
    from zhner.data.longtext import PIECE_CHARS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=512, help="the window size compared with PIECE_CHARS")
    harness.sentence_pair_options(parser, "window_pairs.json")
    args = parser.parse_args()
    provenance = harness.Run()
    data = test_sets(args.sentences)
    rows = []
    for model in args.models:
        tagger = harness.load(model)
        for corpus, (texts, gold) in data.items():
            new, old = (tagged(tagger, texts, size, args.batch) for size in (PIECE_CHARS, args.base))
            test, changed = harness.paired_sentence_test(gold, new, old, args.resamples, args.seed)
            rows.append({"model": model, "corpus": corpus, "sentences": len(texts),
                         "longer_than_window": sum(len(t) > PIECE_CHARS for t in texts),
                         f"f1_{args.base}": round(100 * test["f1_b"], 2), f"f1_{PIECE_CHARS}": round(100 * test["f1_a"], 2),
                         "difference": round(100 * test["diff"], 2), "p": round(test["p"], 4),
                         "sentences_changed": changed})
            print(f"{model} {corpus}: {args.base} {rows[-1][f'f1_{args.base}']}, {PIECE_CHARS} "
                  f"{rows[-1][f'f1_{PIECE_CHARS}']} ({rows[-1]['difference']:+.2f}, p {rows[-1]['p']}), "
                  f"{changed} of {rows[-1]['longer_than_window']} long sentences changed", flush=True)
    out = provenance.record({
        "metric": "strict span F1 over PER/LOC/ORG, gold mapped as in benchmarks/speed/peers.py",
        "test": f"paired approximate randomization over sentences, {args.resamples} resamples, seed {args.seed}",
        "windows": [PIECE_CHARS, args.base], "runtime": "torch", "batch": args.batch, "rows": rows,
    })
    harness.write(args.out, out, echo=False)


if __name__ == "__main__":
    main()

"""What cutting batches by length saves: tagging mixed-length sentences with and without `budget_batches`'s
min_ratio (a sentence shorter than min_ratio x the batch's longest starts a new batch; 0 = the old behaviour).

    python benchmarks/speed/batch_padding.py -m runs/tener_resume

Groups of 1, 8 and 32 sentences (what the HTTP micro-batcher hands the model) from the Resume/MSRA test mix,
timed in CPU seconds of this process, so that other jobs on the machine move the figures less than wall time would.
"""
from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
import zhner.tagger as tagger_module  # noqa: E402
from zhner.data.batching import budget_batches  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--sentences", type=int, default=640)
    args = parser.parse_args()
    tagger = tagger_module.Tagger.load(args.model)
    texts = harness.test_sentences()[: args.sentences]
    rows = []
    for ratio in (0.0, 0.5):
        tagger_module.budget_batches = partial(budget_batches, min_ratio=ratio)  # what Tagger.tag calls
        for group in (1, 8, 32):
            with harness.clocked() as clock:
                for k in range(0, len(texts), group):
                    tagger.predict(texts[k : k + group], 32, confidence=False)  # the tag path its results measured
            rows.append({"min_ratio": ratio, "group": group, "sentences_per_cpu_s": round(len(texts) / clock.cpu_s, 1)})
            print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()

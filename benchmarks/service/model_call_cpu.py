"""CPU time of the model call alone (Tagger.piece_spans, as the service's micro-batcher calls it) per sentence, by batch
size, on load_test.py's sentences: the part of a request's server CPU that is the model, the rest being HTTP, JSON and
asyncio. CPU time (not wall time), so that other work on the machine changes it little.

    python benchmarks/service/model_call_cpu.py [-m MODEL_DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
REPO = harness.REPO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=str(REPO / "zhner" / "resources" / "default_model"))
    parser.add_argument("--sentences", type=int, default=1024)
    args = parser.parse_args()
    tagger = harness.load(args.model)
    sentences = harness.test_sentences()[: args.sentences]
    tagger.piece_spans(sentences[:64], 64)  # warm-up: the lexicon's automaton, the allocator
    cpu_ms = {}
    for batch in (1, 8, 32):
        with harness.clocked() as clock:
            for i in range(0, len(sentences), batch):
                tagger.piece_spans(sentences[i : i + batch], batch)
        cpu_ms[batch] = round(1000 * clock.cpu_s / len(sentences), 3)
    print(json.dumps({"model_cpu_ms_per_sentence_by_batch": cpu_ms, "sentences": len(sentences)}))


if __name__ == "__main__":
    main()

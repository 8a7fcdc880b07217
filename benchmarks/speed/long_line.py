"""One long line against the same text split into sentences, through `zhner predict`'s code path (predict_stream).

    python benchmarks/speed/long_line.py                       # the shipped model, 20,000 characters, writes benchmarks/results/long_line.json
    python benchmarks/speed/long_line.py -m runs/x --chars 200000 --output /tmp/ll.json

The text is MSRA test sentences joined until --chars characters; "split" is the same text cut after each sentence end
(one line per sentence, what a user who splits first would feed). Both files are tagged in this process (model loaded
once, so start-up is not in the figures), timed in CPU seconds of this process (other jobs on a shared machine move
them less than wall time), best of --repeats. The entities of both must agree (offsets shifted to the long line's).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
REPO = harness.REPO
from zhner.data.longtext import SENTENCE_END  # noqa: E402
from zhner.serve.predict import predict_stream  # noqa: E402
from zhner.tagger import Tagger, default_model_dir  # noqa: E402


def sentences(text: str) -> list[str]:
    cuts = [0] + [m.end() for m in SENTENCE_END.finditer(text) if m.end() < len(text)] + [len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:])]


def timed(tagger: Tagger, lines: list[str], repeats: int) -> tuple[float, list[dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        source, output = Path(tmp) / "in.txt", Path(tmp) / "out.jsonl"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        best = float("inf")
        for _ in range(repeats):
            with harness.clocked() as clock:
                predict_stream(tagger, str(source), output)
            best = min(best, clock.cpu_s)
            records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
            output.unlink()
    return best, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None, help="model directory (default: the shipped model)")
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    harness.output_options(parser, "long_line.json")
    args = parser.parse_args()
    provenance = harness.Run(note=args.note)
    tagger = Tagger.load(args.model or default_model_dir())
    text = harness.long_text(args.chars).replace("\n", "")  # one line (MSRA test sentences hold no line breaks)
    parts = sentences(text)
    one_s, (one,) = timed(tagger, [text], args.repeats)
    split_s, split = timed(tagger, parts, args.repeats)
    shifted, offset = [], 0
    for part, record in zip(parts, split):
        shifted += [e | {"start": e["start"] + offset, "end": e["end"] + offset} for e in record["entities"]]
        offset += len(part)
    result = {
        "benchmark": "long_line",
        "model_dir": str(args.model or "the shipped model"),
        "chars": len(text),
        "sentences": len(parts),
        "piece_chars": getattr(tagger, "piece_chars", tagger.max_chars)(),
        "one_line_cpu_s": round(one_s, 3),
        "split_cpu_s": round(split_s, 3),
        "ratio": round(one_s / split_s, 3),
        "same_entities": one["entities"] == shifted,
        "entities": len(one["entities"]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}",
    }
    result = provenance.record(result)
    print(json.dumps(result, ensure_ascii=False))
    harness.write(args.output, result, echo=False)


if __name__ == "__main__":
    main()

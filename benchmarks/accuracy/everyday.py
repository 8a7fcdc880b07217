"""The shipped models on everyday sentences (benchmarks/accuracy/everyday.txt: 40 hand-labelled sentences of today's news,
business, sport, travel and chat, with names MSRA's 1998 news never saw), strict span P / R / F1 and every miss.

    OMP_NUM_THREADS=1 python benchmarks/accuracy/everyday.py                 # zh-small and zh-accurate
    OMP_NUM_THREADS=1 python benchmarks/accuracy/everyday.py -m runs/x zh-small --output /tmp/everyday.json

Writes benchmarks/results/everyday.json (or --output) and prints a table. Prediction is deterministic: no seed.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import zhner
from zhner.evaluate.metrics import per_type_prf, span_prf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

HERE = Path(__file__).resolve().parent
MENTION = re.compile(r"\[([^\[\]|]+)\|([A-Z]+)\]")
Span = tuple[int, int, str]


def parse_line(line: str) -> tuple[str, list[Span]]:
    """'[雷军|PER]是[小米公司|ORG]的创始人。' -> (the plain text, its spans (start, end, type), end exclusive)."""
    text, spans, last = [], [], 0
    for m in MENTION.finditer(line):
        text.append(line[last : m.start()])
        start = sum(map(len, text))
        text.append(m.group(1))
        spans.append((start, start + len(m.group(1)), m.group(2)))
        last = m.end()
    text.append(line[last:])
    plain = "".join(text)
    if "[" in plain or "]" in plain:
        raise ValueError(f"unbalanced mention markup: {line!r}")
    return plain, spans


def read_sentences(path: Path) -> list[tuple[str, list[Span]]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [parse_line(line) for line in lines if line.strip() and not line.startswith("#")]


def score(model: str, sentences: list[tuple[str, list[Span]]]) -> dict:
    tagger = zhner.load(model)
    texts = [text for text, _ in sentences]
    pred = [[(e.start, e.end, e.type) for e in row] for row in tagger.predict(texts)]
    gold = [spans for _, spans in sentences]
    prf = span_prf(gold, pred)
    misses = [
        {"text": text, "gold": [f"{text[s:e]}|{t}" for s, e, t in g], "predicted": [f"{text[s:e]}|{t}" for s, e, t in p]}
        for text, g, p in zip(texts, gold, pred) if set(g) != set(p)
    ]
    return {
        "model": model,
        "p": round(100 * prf.p, 2), "r": round(100 * prf.r, 2), "f1": round(100 * prf.f1, 2),
        "per_type_f1": {t: round(100 * v.f1, 2) for t, v in per_type_prf(gold, pred).items()},
        "sentences_right": len(texts) - len(misses), "sentences": len(texts), "mentions": prf.n_gold,
        "misses": misses,
    }


def table(rows: list[dict]) -> str:
    lines = ["| model | P | R | F1 | sentences fully right |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['p']:.2f} | {r['r']:.2f} | {r['f1']:.2f} | {r['sentences_right']} / {r['sentences']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--models", nargs="+", default=["zh-small", "zh-accurate"], help="shipped names or directories")
    parser.add_argument("--sentences", type=Path, default=HERE / "everyday.txt")
    parser.add_argument("--output", type=Path, default=harness.RESULTS / "everyday.json")
    args = parser.parse_args()
    provenance = harness.Run()
    sentences = read_sentences(args.sentences)
    rows = [score(str(m), sentences) for m in args.models]
    out = {
        "what": "the shipped models on benchmarks/accuracy/everyday.txt (hand-labelled everyday sentences), strict span P/R/F1",
        "deterministic": True,
        "rows": rows,
    }
    harness.write(args.output, provenance.record(out), echo=False)
    print(table(rows))
    for r in rows:
        for miss in r["misses"]:
            print(f"{r['model']}: {miss['text']}  gold {miss['gold']}  predicted {miss['predicted']}")


if __name__ == "__main__":
    main()

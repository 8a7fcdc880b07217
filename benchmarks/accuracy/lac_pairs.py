"""Frozen LAC features (model.char_features) against the same models without them (issue 34): `zhner compare` of run
sets trained with the same config, recipe and seeds, kept in benchmarks/results/lac_pairs.json.

    python benchmarks/accuracy/lac_pairs.py A_RUNS:B_RUNS:WHAT ...   # runs `zhner compare A_RUNS B_RUNS` on each, writes the file
    python benchmarks/accuracy/lac_pairs.py --table                  # prints the markdown table of the file

Each row keeps the command and zhner compare's JSON (mean ± std per set, two-sided paired t-test A - B over the common
seeds); the table shows test strict F1.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from zhner.evaluate.significance import compare, read_runs

RESULTS = Path(__file__).resolve().parents[1] / "results"
FILE = RESULTS / "lac_pairs.json"


def pair(spec: str) -> dict:
    a, b, what = spec.split(":", 2)
    return {"a": a, "b": b, "what": what, "command": f"zhner compare {a} {b} --json", "comparison": compare(read_runs(a), read_runs(b))}


def _mean_std(d: dict) -> str:
    return f"{d['mean']:.2f}" + ("" if d["std"] is None else f" ± {d['std']:.2f}")


def table(result: dict) -> str:
    lines = [
        "| A | B | what A − B measures | seeds | A: test F1 | B: test F1 | A − B | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        c = row["comparison"]
        f1 = c["metrics"]["test.f1_strict"]
        p = f1["paired"]["p"]
        seeds = ", ".join(map(str, c["paired_seeds"]))
        a, b = (_mean_std(f1[k]) for k in ("a", "b"))
        p_text = "-" if p is None else f"{p:.3f}"
        lines.append(f"| `{row['a']}` | `{row['b']}` | {row['what']} | {seeds} | {a} | {b} | {f1['paired']['mean_diff']:+.2f} | {p_text} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="*", help="A_RUNS:B_RUNS:WHAT")
    parser.add_argument("--note", default=None, help="how the runs were trained (commit, threads, machine)")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if not args.table:
        out = {"metric": "test strict F1 (all of zhner compare's metrics kept)", "rows": [pair(p) for p in args.pairs]}
        FILE.write_text(json.dumps(out | ({"note": args.note} if args.note else {}), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(json.loads(FILE.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()

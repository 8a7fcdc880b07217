"""Variant-against-baseline findings over several seeds: mean ± std of test F1 and a paired t-test per variant.

    python benchmarks/findings.py NAME --base default=runs/acc/fr_default VARIANT=RUN_SET ... \
        --command "zhner train flat_resume -o RUN_SET --seeds 3 --set train.epochs=12 [--set ...]" [--note "..."]
    python benchmarks/findings.py --table          # markdown tables of every findings_*.json, for the README

A RUN_SET is a `--seeds` directory (seed*/metrics.json). Only finished seeds count; each variant is paired with the
baseline on the seeds both have. Writes benchmarks/results/findings_NAME.json (per-seed scores, means, differences,
p-values), which records the command of every row.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zhner.evaluate.metrics import headline
from zhner.evaluate.significance import describe, paired_t_test

RESULTS = Path(__file__).resolve().parent / "results"
METRICS = ("f1_strict", "f1_lenient")


def finished_seeds(run_set: Path) -> dict[int, dict]:
    """seed -> {"test": headline, "dev": headline, "best_epoch", "epochs_run", "warnings"} of the finished runs of a set."""
    runs = {}
    for path in sorted(run_set.glob("seed*/metrics.json")) or sorted(run_set.glob("metrics.json")):
        m = json.loads(path.read_text(encoding="utf-8"))
        if m.get("status") == "running" or not m.get("test"):
            continue
        runs[m["seed"]] = {
            "test": headline(m["test"]),
            "dev": headline(m["dev"]),
            "best_epoch": m["best_epoch"],
            "epochs_run": m["epochs_run"],
            "warnings": m.get("warnings", []),
        }
    return runs


def row(label: str, runs: dict[int, dict], base: dict[int, dict] | None) -> dict:
    seeds = sorted(runs)
    out: dict = {"variant": label, "seeds": seeds, "per_seed": {s: runs[s]["test"] for s in seeds}}
    out["best_epoch"] = [runs[s]["best_epoch"] for s in seeds]
    out["warnings"] = {s: runs[s]["warnings"] for s in seeds if runs[s]["warnings"]}
    for metric in METRICS:
        d = describe([runs[s]["test"][metric] for s in seeds])
        out[metric] = {"mean": round(d["mean"], 2), "std": None if d["std"] is None else round(d["std"], 2)}
    d = describe([runs[s]["dev"]["f1_strict"] for s in seeds])
    out["dev_f1_strict"] = round(d["mean"], 2)
    if base is not None:
        paired = sorted(set(runs) & set(base))
        t = paired_t_test([runs[s]["test"]["f1_strict"] for s in paired], [base[s]["test"]["f1_strict"] for s in paired])
        out["vs_base"] = {
            "paired_seeds": paired,
            "mean_diff": None if t["mean_diff"] is None else round(t["mean_diff"], 2),
            "p": None if t["p"] is None else round(t["p"], 4),
        }
    return out


def parse_pair(text: str) -> tuple[str, Path]:
    if "=" not in text:
        raise SystemExit(f"{text!r}: expected LABEL=RUN_SET")
    label, path = text.split("=", 1)
    if not Path(path).is_dir():
        raise SystemExit(f"{path}: no such run set")
    return label, Path(path)


def fmt(m: dict) -> str:
    return f"{m['mean']:.2f}" + ("" if m["std"] is None else f" ± {m['std']:.2f}")


def table(result: dict) -> str:
    lines = [
        f"**{result['name']}** ({result.get('note', '')})",
        "",
        "| variant | test F1 strict | test F1 lenient | dev F1 | vs base (strict) | p (paired t) | seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        vs = r.get("vs_base")
        diff = "" if vs is None or vs["mean_diff"] is None else f"{vs['mean_diff']:+.2f}"
        p = "" if vs is None or vs["p"] is None else f"{vs['p']:.3f}"
        lines.append(
            f"| {r['variant']} | {fmt(r['f1_strict'])} | {fmt(r['f1_lenient'])} | {r['dev_f1_strict']:.2f} | {diff} | {p} "
            f"| {len(r['seeds'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?")
    ap.add_argument("variants", nargs="*", help="LABEL=RUN_SET")
    ap.add_argument("--base", help="LABEL=RUN_SET, the baseline every variant is paired with")
    ap.add_argument("--command", default="", help="the command that trained the run sets (recorded)")
    ap.add_argument("--note", default="")
    ap.add_argument("--table", action="store_true", help="print the markdown table of every findings file")
    args = ap.parse_intermixed_args()
    if args.table:
        for path in sorted(RESULTS.glob("findings_*.json")):
            print(table(json.loads(path.read_text(encoding="utf-8"))) + "\n")
        return
    if not args.name or not args.base:
        ap.error("NAME and --base are required (or --table)")
    base_label, base_dir = parse_pair(args.base)
    base = finished_seeds(base_dir)
    rows = [row(base_label, base, None) | {"run_set": str(base_dir)}]
    for label, path in map(parse_pair, args.variants):
        runs = finished_seeds(path)
        if not runs:
            print(f"{path}: no finished seed, skipped", file=sys.stderr)
            continue
        rows.append(row(label, runs, base) | {"run_set": str(path)})
    result = {"name": args.name, "command": args.command, "note": args.note, "rows": rows}
    out = RESULTS / f"findings_{args.name}.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(table(result))


if __name__ == "__main__":
    main()

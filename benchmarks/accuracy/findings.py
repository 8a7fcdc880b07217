"""Variant-against-baseline findings over several seeds: mean ± std of test F1 and a paired t-test per variant.

    python benchmarks/accuracy/findings.py NAME --base default=runs/acc/fr_default VARIANT=RUN_SET ... \
        --command "zhner train flat_resume -o RUN_SET --seeds 3 --set train.epochs=12 [--set ...]" [--note "..."]
    python benchmarks/accuracy/findings.py --table          # markdown tables of every findings_*.json, for the README

A RUN_SET is a `--seeds` directory (seed*/metrics.json), or `findings_NAME.json#N`: row N of an earlier findings file
(its per-seed test scores; for a baseline whose run directories are gone), or several of these joined by "+". Only
finished seeds count; each variant is paired with the baseline on the seeds both have. `--metrics mcc,accuracy`
reports a classifier's numbers (the first metric is the one tested and the dev column's). Writes
benchmarks/results/findings_NAME.json (per-seed scores, means, differences, p-values), which records the command of
every row.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zhner.evaluate.metrics import headline
from zhner.evaluate.significance import describe, paired_t_test

RESULTS = Path(__file__).resolve().parents[1] / "results"
METRICS = ("f1_strict", "f1_lenient")  # the default --metrics (tagging)


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


def row(label: str, runs: dict[int, dict], base: dict[int, dict] | None, metrics: tuple[str, ...] = METRICS) -> dict:
    seeds = sorted(runs)
    key = metrics[0]
    out: dict = {"variant": label, "seeds": seeds, "per_seed": {s: runs[s]["test"] for s in seeds}}
    out["best_epoch"] = [runs[s]["best_epoch"] for s in seeds]
    out["warnings"] = {s: runs[s]["warnings"] for s in seeds if runs[s]["warnings"]}
    for metric in metrics:
        d = describe([runs[s]["test"][metric] for s in seeds])
        out[metric] = {"mean": round(d["mean"], 2), "std": None if d["std"] is None else round(d["std"], 2)}
    d = describe([runs[s]["dev"][key] for s in seeds])
    out[f"dev_{key}"] = round(d["mean"], 2)
    if base is not None:
        paired = sorted(set(runs) & set(base))
        t = paired_t_test([runs[s]["test"][key] for s in paired], [base[s]["test"][key] for s in paired])
        out["vs_base"] = {
            "paired_seeds": paired,
            "mean_diff": None if t["mean_diff"] is None else round(t["mean_diff"], 2),
            "p": None if t["p"] is None else round(t["p"], 4),
        }
    return out


def earlier_row(spec: str, metrics: tuple[str, ...]) -> dict[int, dict]:
    """"findings_NAME.json#N" -> row N of an earlier findings file as finished seeds, for a baseline whose run
    directories are gone. Only the dev mean was recorded, so every seed carries it."""
    name, _, index = spec.partition("#")
    path = RESULTS / Path(name).name
    try:
        old = json.loads(path.read_text(encoding="utf-8"))["rows"][int(index)]
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise SystemExit(f"{spec}: no such findings row ({e})")
    dev = {metrics[0]: old[f"dev_{metrics[0]}"]}
    return {
        int(seed): {"test": test, "dev": dev, "best_epoch": epoch, "epochs_run": None,
                    "warnings": old["warnings"].get(seed, [])}
        for (seed, test), epoch in zip(old["per_seed"].items(), old["best_epoch"])
    }


def parse_pair(text: str, metrics: tuple[str, ...]) -> tuple[str, str, dict[int, dict]]:
    """LABEL=SOURCE -> (label, source, finished seeds); SOURCE is a run set, findings_NAME.json#N, or several of them
    joined by "+" (e.g. an earlier row's seed 42 and a run set of seeds 43-44), no seed in two of them."""
    if "=" not in text:
        raise SystemExit(f"{text!r}: expected LABEL=RUN_SET")
    label, source = text.split("=", 1)
    runs: dict[int, dict] = {}
    for part in source.split("+"):
        if ".json#" in part:
            found = earlier_row(part, metrics)
        elif Path(part).is_dir():
            found = finished_seeds(Path(part))
        else:
            raise SystemExit(f"{part}: no such run set")
        twice = sorted(set(found) & set(runs))
        if twice:
            raise SystemExit(f"{source}: seed {twice[0]} is in two of its parts")
        runs |= found
    return label, source, runs


def fmt(m: dict) -> str:
    return f"{m['mean']:.2f}" + ("" if m["std"] is None else f" ± {m['std']:.2f}")


def table(result: dict) -> str:
    metrics = result.get("metrics", list(METRICS))
    names = {"f1_strict": "F1 strict", "f1_lenient": "F1 lenient", "mcc": "MCC", "accuracy": "accuracy"}
    label = lambda m: names.get(m, m)  # noqa: E731
    lines = [
        f"**{result['name']}** ({result.get('note', '')})",
        "",
        "| variant | " + " | ".join(f"test {label(m)}" for m in metrics) + f" | dev {label(metrics[0])} | vs base "
        f"({label(metrics[0])}) | p (paired t) | seeds |",
        "|---|" + "---|" * len(metrics) + "---|---|---|---|",
    ]
    for r in result["rows"]:
        vs = r.get("vs_base")
        diff = "" if vs is None or vs["mean_diff"] is None else f"{vs['mean_diff']:+.2f}"
        p = "" if vs is None or vs["p"] is None else f"{vs['p']:.3f}"
        cells = " | ".join(fmt(r[m]) for m in metrics)
        lines.append(f"| {r['variant']} | {cells} | {r[f'dev_{metrics[0]}']:.2f} | {diff} | {p} | {len(r['seeds'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?")
    ap.add_argument("variants", nargs="*", help="LABEL=RUN_SET")
    ap.add_argument("--base", help="LABEL=RUN_SET, the baseline every variant is paired with")
    ap.add_argument("--command", default="", help="the command that trained the run sets (recorded)")
    ap.add_argument("--note", default="")
    ap.add_argument("--metrics", default=",".join(METRICS), help="test metrics to report; the first is tested (e.g. mcc,accuracy)")
    ap.add_argument("--table", action="store_true", help="print the markdown table of every findings file")
    args = ap.parse_intermixed_args()
    if args.table:
        for path in sorted(RESULTS.glob("findings_*.json")):
            print(table(json.loads(path.read_text(encoding="utf-8"))) + "\n")
        return
    if not args.name or not args.base:
        ap.error("NAME and --base are required (or --table)")
    metrics = tuple(args.metrics.split(","))
    base_label, base_source, base = parse_pair(args.base, metrics)
    rows = [row(base_label, base, None, metrics) | {"run_set": base_source}]
    for label, source, runs in (parse_pair(v, metrics) for v in args.variants):
        if not runs:
            print(f"{source}: no finished seed, skipped", file=sys.stderr)
            continue
        rows.append(row(label, runs, base, metrics) | {"run_set": source})
    result = {"name": args.name, "command": args.command, "note": args.note, "metrics": list(metrics), "rows": rows}
    out = RESULTS / f"findings_{args.name}.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(table(result))


if __name__ == "__main__":
    main()

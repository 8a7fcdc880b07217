"""ACT-S's sparsity curve (Zhang et al., Sec. 5.3, Figure 5): test F1 against k, the number of English words each
Chinese query keeps in the top-k mask Tkm (Eq. 6), over several seeds, paired with the config's k.

    python benchmarks/accuracy/acts_sparsity.py 1=runs/sets/w_k1 8=findings_acts_weibo.json#0 32=runs/sets/w_k32 \
        all=runs/sets/w_nogs --base 8 --command "zhner train acts_weibo ... --set model.topk=K" \
        --json benchmarks/results/acts_sparsity_weibo.json --png benchmarks/results/acts_sparsity_weibo.png

Each point is K=SOURCE: K an integer, or `all` for no top-k mask (-GS); SOURCE a run set (seed*/metrics.json) or a row
of an earlier findings file (`findings_NAME.json#N`), as in findings.py. Every point is paired with --base on the
seeds both have (t-test on test strict F1).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from findings import parse_pair, row

METRICS = ("f1_strict", "f1_lenient")


def point_key(k: str) -> float:
    return float("inf") if k == "all" else int(k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("points", nargs="+", help="K=SOURCE, K an integer or 'all' (no top-k)")
    ap.add_argument("--base", required=True, help="the K every other point is paired with (the config's)")
    ap.add_argument("--command", default="", help="the command that trained the run sets (recorded)")
    ap.add_argument("--note", default="")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--png", type=Path)
    args = ap.parse_args()
    sources = {k: parse_pair(f"{k}={s}", METRICS) for k, s in (p.split("=", 1) for p in args.points)}
    if any(k != "all" and not k.isdigit() for k in sources):
        raise SystemExit(f"{list(sources)}: each K is an integer or 'all'")
    if args.base not in sources:
        raise SystemExit(f"--base {args.base}: not one of the points {list(sources)}")
    base = sources[args.base][2]
    points = []
    for k in sorted(sources, key=point_key):
        _, source, runs = sources[k]
        r = row(f"k={k}", runs, None if k == args.base else base, METRICS)
        points.append({"k": k, "run_set": source} | r)
    out = {"command": args.command, "note": args.note, "base_k": args.base, "metrics": list(METRICS), "points": points,
           "script": "python benchmarks/accuracy/acts_sparsity.py " + " ".join(sys.argv[1:])}
    tmp = args.json.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    tmp.replace(args.json)
    if args.png:
        plot(points, args.png)
    for p in points:
        vs = p.get("vs_base") or {}
        print(f"k={p['k']}: {p['f1_strict']['mean']:.2f} ± {p['f1_strict']['std'] or 0:.2f} ({len(p['seeds'])} seeds)"
              + (f", {vs['mean_diff']:+.2f} vs k={args.base}, p {vs['p']}" if vs else ""))


def plot(points: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    x = list(range(len(points)))  # categorical: k grows to the right, "all" last
    means = [p["f1_strict"]["mean"] for p in points]
    stds = [p["f1_strict"]["std"] or 0.0 for p in points]
    ax.errorbar(x, means, yerr=stds, marker="o", ms=4, capsize=3)
    ax.set_xticks(x, [str(p["k"]) if p["k"] != "all" else "all\n(-GS)" for p in points])
    ax.set_xlabel("k (English words kept per Chinese query)")
    ax.set_ylabel("test F1 strict")
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()

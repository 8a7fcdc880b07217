"""Plot a `zhner sweep` summary: test (and dev) F1 against the swept value, mean +- std over seeds (the ATSSA paper's
Figures 6-7), and print it as a Markdown table.

    python benchmarks/accuracy/plot_sweep.py runs/sweep_topk/sweep.json -o benchmarks/results/atssa_topk_resume.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def table(summary: dict) -> str:
    key = summary["param"]
    lines = [f"| {key} | test F1 strict | dev F1 strict | seeds |", "|---|---|---|---|"]
    for run in summary["runs"]:
        cells = []
        for metric in ("test.f1_strict", "dev.f1_strict"):
            d = run[metric]
            cells.append("-" if d["mean"] is None else f"{d['mean']:.2f}" + (f" ± {d['std']:.2f}" if d["std"] is not None else ""))
        lines.append(f"| {run['value']} | {cells[0]} | {cells[1]} | {run['test.f1_strict']['n']} |")
    return "\n".join(lines)


def plot(summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [run["value"] for run in summary["runs"]]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    xs = values if numeric else list(range(len(values)))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for metric, label in (("test.f1_strict", "test"), ("dev.f1_strict", "dev")):
        means = [run[metric]["mean"] for run in summary["runs"]]
        stds = [run[metric]["std"] or 0.0 for run in summary["runs"]]
        ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label=f"{label} F1 (strict)")
    if not numeric:
        ax.set_xticks(xs, [str(v) for v in values])
    ax.set_xlabel(summary["param"])
    ax.set_ylabel("F1 (%)")
    n = max(run["test.f1_strict"]["n"] for run in summary["runs"])
    ax.set_title(f"{summary['param']}: {n} seed(s) per value" + (", mean ± std" if n > 1 else ""), fontsize=10)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summary", type=Path, help="sweep.json written by zhner sweep")
    parser.add_argument("-o", "--output", type=Path, required=True, help="PNG to write")
    args = parser.parse_args(argv)
    try:
        summary = json.loads(args.summary.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: {args.summary}: {exc}", file=sys.stderr)
        return 2
    plot(summary, args.output)
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

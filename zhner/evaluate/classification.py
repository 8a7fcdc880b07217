"""Sentence classification metrics: accuracy, Matthews correlation (CoLA's metric), macro-F1, per-label P/R/F1 and
F0.5 of a positive label (error detection weighs precision twice as much as recall).

Percentages rounded to 2 decimals, as NERScorer; MCC in percent too (CoLA tables print 100 x MCC).
"""
from __future__ import annotations

import math
from collections import Counter


def _f(beta: float, p: float, r: float) -> float:
    b2 = beta * beta
    return (1 + b2) * p * r / (b2 * p + r) if p + r > 0 else 0.0


def matthews(confusion: dict[tuple[str, str], int], labels: list[str]) -> float:
    """Multi-class MCC (Gorodkin 2004) from a (gold, pred) -> count table; the binary phi coefficient for two labels.
    0 when a marginal is constant (every prediction the same label), as scikit-learn returns."""
    n = sum(confusion.values())
    correct = sum(confusion.get((k, k), 0) for k in labels)
    gold = {k: sum(confusion.get((k, p), 0) for p in labels) for k in labels}
    pred = {k: sum(confusion.get((g, k), 0) for g in labels) for k in labels}
    cov = correct * n - sum(gold[k] * pred[k] for k in labels)
    var_pred = n * n - sum(v * v for v in pred.values())
    var_gold = n * n - sum(v * v for v in gold.values())
    if var_pred == 0 or var_gold == 0:
        return 0.0
    return cov / math.sqrt(var_pred * var_gold)


class ClassificationScorer:
    """Accumulates (gold, predicted) labels; `result()` gives every metric. `positive` names the label F0.5 is
    computed for (default: "1" when it is a label, else the last label)."""

    def __init__(self, labels: list[str], positive: str | None = None):
        self.labels = list(labels)
        self.positive = positive if positive is not None else ("1" if "1" in labels else self.labels[-1])
        self.confusion: Counter = Counter()

    def add(self, gold: str, pred: str) -> None:
        self.confusion[(gold, pred)] += 1

    def result(self) -> dict:
        labels = sorted(set(self.labels) | {k for pair in self.confusion for k in pair})
        n = sum(self.confusion.values())
        per_label = {}
        for k in labels:
            tp = self.confusion.get((k, k), 0)
            n_pred = sum(v for (_, p), v in self.confusion.items() if p == k)
            n_gold = sum(v for (g, _), v in self.confusion.items() if g == k)
            p, r = (tp / n_pred if n_pred else 0.0), (tp / n_gold if n_gold else 0.0)
            per_label[k] = {"p": _pct(p), "r": _pct(r), "f1": _pct(_f(1, p, r)), "f05": _pct(_f(0.5, p, r)), "support": n_gold}
        gold_labels = [k for k in labels if per_label[k]["support"]]
        correct = sum(self.confusion.get((k, k), 0) for k in labels)
        return {
            "accuracy": _pct(correct / n if n else 0.0),
            "mcc": _pct(matthews(self.confusion, labels)),
            "macro_f1": round(sum(per_label[k]["f1"] for k in gold_labels) / max(1, len(gold_labels)), 2),
            "f05": per_label.get(self.positive, {}).get("f05", 0.0),
            "positive": self.positive,
            "per_label": per_label,
            "n_sentences": n,
        }


def _pct(x: float) -> float:
    return round(100 * x, 2)


def format_classification_report(result: dict) -> str:
    lines = [
        f"sentences: {result['n_sentences']}",
        f"accuracy {result['accuracy']:.2f}  MCC {result['mcc']:.2f}  macro-F1 {result['macro_f1']:.2f}  "
        f"F0.5({result['positive']}) {result['f05']:.2f}",
        "",
    ]
    width = max([5, *(len(k) for k in result["per_label"])])
    lines.append(f"{'label':<{width}}  {'precision':>9}  {'recall':>9}  {'f1':>9}  {'support':>7}")
    for k, m in result["per_label"].items():
        lines.append(f"{k:<{width}}  {m['p']:>9.2f}  {m['r']:>9.2f}  {m['f1']:>9.2f}  {m['support']:>7}")
    return "\n".join(lines)

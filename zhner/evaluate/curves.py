"""`zhner plot`: training curves of one or more runs, read from each run's log.jsonl (one record per epoch, written by
the trainer): the training loss and the dev metric that selects the best epoch, one line per run, the best epoch marked.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zhner.errors import ZhnerError
from zhner.evaluate.attention import pyplot, save_png
from zhner.fileio import MODEL_FILE, json_value, parse_json, read_bytes, utf8_lines

LOG, METRICS = "log.jsonl", "metrics.json"  # = zhner.train.rundir's names (evaluate/ sits below train/)
DEFAULT_METRIC = "f1_strict"
METRIC_NAMES = {"f1_strict": "F1 (strict)", "f1_lenient": "F1 (lenient)", "macro_f1": "macro-F1", "f05": "F0.5"}


@dataclass
class Curve:
    """One run's curves: per epoch, the training loss and the dev metric (percent)."""

    name: str
    metric: str
    epochs: list[int]
    loss: list[float]
    dev: list[float]

    @property
    def best_epoch(self) -> int:
        return self.epochs[max(range(len(self.dev)), key=self.dev.__getitem__)]


def read_curve(run: str | Path) -> Curve:
    """The curves of a run directory, from its log.jsonl; the dev metric is the one its metrics.json says selected the
    best epoch (strict F1 without one). A missing log or a bad line is an error naming the file and line."""
    run = Path(run)
    if not run.is_dir():
        raise ZhnerError("no such run directory", run)
    log = run / LOG
    if not log.is_file():
        hint = " (a --seeds directory? give its seed directories)" if any(run.glob(f"seed*/{LOG}")) else ""
        raise ZhnerError(f"no {LOG} in this run directory{hint}", run)
    metric = _selection_metric(run / METRICS)
    epochs, loss, dev = [], [], []
    for lineno, line in utf8_lines(log, "a training log"):
        if not line.strip():
            continue
        record = json_value(line, log, lineno)
        values = _epoch_values(record, metric)
        if values is None:
            raise ZhnerError(f'expected an epoch record with "epoch", "train_loss" and a dev "{metric}"', log, lineno)
        epochs.append(values[0])
        loss.append(values[1])
        dev.append(values[2])
    if not epochs:
        raise ZhnerError("no epoch recorded yet", log)
    return Curve(run.name or str(run), metric, epochs, loss, dev)


def _selection_metric(path: Path) -> str:
    if not path.is_file():
        return DEFAULT_METRIC
    text = read_bytes(path, MODEL_FILE).decode("utf-8", errors="replace")
    try:
        metric = parse_json(text).get("metric")
    except (ValueError, AttributeError):  # TooDeep is a ValueError
        raise ZhnerError("corrupt metrics file (not a JSON object)", path) from None
    return metric if isinstance(metric, str) else DEFAULT_METRIC


def _epoch_values(record: object, metric: str) -> tuple[int, float, float] | None:
    """(epoch, train loss, dev metric) of a log record; None when it is not one. The dev entry is keyed "dev", or
    "dev (test used as dev)" for MSRA's papers' setting."""
    if not isinstance(record, dict):
        return None
    dev = next((v for k, v in record.items() if k.startswith("dev") and isinstance(v, dict)), None)
    epoch, loss = record.get("epoch"), record.get("train_loss")
    score = dev.get(metric) if dev else None
    if not isinstance(epoch, int) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (loss, score)):
        return None
    return epoch, float(loss), float(score)


def plot_curves(curves: list[Curve], path: str | Path) -> Path:
    """Two panels, training loss and dev metric per epoch, one line per run (its best epoch circled); PNG at `path`,
    written atomically."""
    plt = pyplot()
    fig, (loss_ax, dev_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for curve in curves:
        line = loss_ax.plot(curve.epochs, curve.loss, marker=".", label=curve.name)[0]
        dev_ax.plot(curve.epochs, curve.dev, marker=".", color=line.get_color(), label=curve.name)
        best = curve.epochs.index(curve.best_epoch)
        dev_ax.plot([curve.best_epoch], [curve.dev[best]], marker="o", markersize=10, fillstyle="none", color=line.get_color())
    metrics = sorted({METRIC_NAMES.get(c.metric, c.metric) for c in curves})
    loss_ax.set(xlabel="epoch", ylabel="training loss (per sentence)", title="training loss")
    dev_ax.set(xlabel="epoch", ylabel=f"dev {' / '.join(metrics)} (%)", title="dev score (circle: best epoch, the one kept)")
    for ax in (loss_ax, dev_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    dev_ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig, Path(path))

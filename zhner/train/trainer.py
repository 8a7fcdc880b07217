"""The training loop: optimiser and schedule, gradient clipping, dev-based model selection, early stopping and the
time budget, weight averaging, data parallelism under torchrun. The run comes assembled from its config
(zhner.train.assemble.prepare); what is kept in its directory -- checkpoints to resume from, the per-epoch log,
metrics.json -- is zhner.train.rundir's.

$ZHNER_SLOW_STEP_S (seconds) sleeps after each step: the interruption test uses it to land a kill mid-epoch.
"""
from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from tqdm import tqdm

from zhner.config import Config, TrainConfig
from zhner.data.batching import length_batches
from zhner.errors import ZhnerError
from zhner.fileio import FileKind, check_output_dir, check_regular
from zhner.pipeline import METRICS, WEIGHTS
from zhner.train import distributed
from zhner.train.assemble import Run, log_info, prepare
from zhner.train.averaging import WeightAverage
from zhner.train.rundir import (
    CHECKPOINT, LOG, append_log, claimed, fresh_state, output_path, resume, run_metrics, save_checkpoint,
)


def lr_lambda(config: Config, steps_per_epoch: int) -> Callable[[int], float]:
    tc = config.train
    total = max(1, tc.epochs * steps_per_epoch)
    warmup = tc.warmup * total if tc.warmup < 1 else tc.warmup

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if tc.schedule == "linear":
            return max(0.0, (total - step) / max(1.0, total - warmup))
        if tc.schedule == "inverse":
            return 1.0 / (1.0 + tc.decay * (step // steps_per_epoch))
        return 1.0

    return factor


def make_optimizer(model: torch.nn.Module, config: Config) -> torch.optim.Optimizer:
    tc = config.train
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    # SLA / WLA's gates (W_g, b_g of Eq. 5: in BERT's self-attention, or TENER's selector) start untrained: with
    # train.gate_lr they get a rate of their own; else they train with the encoder around them (the param groups --
    # and so checkpoints -- are then as before gate_lr existed)
    gate = {n for n, _ in named if ".self.gate." in n or ".selector.gate." in n} if tc.gate_lr else set()
    bert = [(n, p) for n, p in named if ".bert." in f".{n}" and n not in gate]
    params: list = [{"params": [p for n, p in named if ".bert." not in f".{n}" and n not in gate]}]
    if bert and tc.bert_layer_decay:  # one group per depth below the top layer, each at its decayed rate
        depth = bert_depths(model)
        for d in sorted({depth[n] for n, _ in bert}):
            params.append({"params": [p for n, p in bert if depth[n] == d],
                           "lr": (tc.bert_lr or tc.lr) * tc.bert_layer_decay ** d})
    elif bert:  # BERT fine-tunes at its own rate (train.bert_lr) when one is set
        params.append({"params": [p for _, p in bert], "lr": tc.bert_lr or tc.lr})
    if gate:
        params.append({"params": [p for n, p in named if n in gate], "lr": tc.gate_lr})
    if tc.optimizer == "sgd":
        return torch.optim.SGD(params, lr=tc.lr, momentum=tc.momentum, weight_decay=tc.weight_decay)
    # The fused kernel is the same update (parameters agree to 3e-7 after 200 steps) in one pass over each tensor: on
    # FLAT's MSRA tables (94k bigrams, 78k words) the per-tensor loop took 65% of a training step, and fused trains
    # 2.2x faster on one thread (README "Speed"). SGD keeps its loop: fused gains 8% there, and changing its rounding
    # would move every published SGD figure in its last digits.
    return torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, fused=_fused_supported(params))


def bert_depths(model: torch.nn.Module) -> dict[str, int]:
    """Each BERT parameter's name -> how many of its encoder's layers lie above it: 0 for the top layer (and the pooler,
    which reads it), L for the embeddings of an L-layer encoder. Frozen layers count too (bert_frozen_layers), so a
    layer's depth does not depend on what trains. A model may hold two encoders (ACT-S: e5 or BERT features on the
    Chinese side, the English encoder): each is counted on its own, by the name before its `.model.`."""
    names = [n for n, _ in model.named_parameters() if ".bert." in f".{n}"]
    layer = {n: re.search(r"\.encoder\.layer\.(\d+)\.", n) for n in names}
    encoder = {n: n.split(".model.")[0] for n in names}
    layers: dict[str, int] = {}
    for n, found in layer.items():
        if found:
            layers[encoder[n]] = max(layers.get(encoder[n], 0), int(found.group(1)) + 1)
    depths = {}
    for n in names:
        top = layers.get(encoder[n], 0)
        depths[n] = top - 1 - int(layer[n].group(1)) if layer[n] else top if ".embeddings." in n else 0
    return depths


def _fused_supported(groups: list[dict]) -> bool:
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])


def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, tc: TrainConfig, scale: float = 1.0
) -> torch.Tensor:
    """One optimiser step on one batch, with the configured gradient clipping; returns the loss (the batch's mean).
    `scale` multiplies the loss that is back-propagated (a process's share of a global batch, see train/distributed.py)."""
    loss = model(batch)
    optimizer.zero_grad(set_to_none=True)
    (loss * scale if scale != 1.0 else loss).backward()
    if tc.clip_value:
        torch.nn.utils.clip_grad_value_(model.parameters(), tc.clip_value)
    if tc.clip_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)
    optimizer.step()
    return loss


def train(
    config: Config,
    out_dir: str | Path,
    progress: bool | None = None,
    log: Callable[[str], None] = log_info,
    overwrite: bool = False,
    device: str = "auto",
) -> dict:
    """Train (or resume) a run in `out_dir`; returns the final metrics (also written to metrics.json).
    A directory that already holds a finished model is refused unless `overwrite`.
    Under torchrun (WORLD_SIZE > 1) each process trains on its share of every global batch (train/distributed.py);
    process 0 alone evaluates, writes the run directory and logs. `device`: auto, cpu or cuda (see zhner.device)."""
    ctx = distributed.setup(device)
    if not ctx.is_main:
        log, progress = (lambda _: None), False
    out_dir = output_path(out_dir, "out_dir") if isinstance(out_dir, str) else out_dir  # Path("") would be "."
    if ctx.is_main:  # the others never touch the directory: their probe (create, then remove) would race process 0's
        check_output_dir(out_dir)
    if (out_dir / WEIGHTS).exists() and not (out_dir / CHECKPOINT).exists() and not overwrite:
        raise ZhnerError("already holds a trained model; choose another output directory or pass --overwrite", out_dir)
    if ctx.is_main and not overwrite and os.path.lexists(out_dir / CHECKPOINT):  # a FIFO or device: before the data
        check_regular(out_dir / CHECKPOINT, FileKind("a checkpoint", 2**50))
    # process 0 holds the directory: a second training into it fails at once, not after loading the data
    with claimed(out_dir, (CHECKPOINT, LOG, METRICS)) if ctx.is_main else nullcontext():
        run = prepare(config, log)  # data, vocabularies and the model first: a bad config or corpus leaves no directory
        if ctx.is_main:
            out_dir.mkdir(parents=True, exist_ok=True)
        return _train_run(run, out_dir, ctx, progress, log, overwrite)


def _train_run(
    run: Run, out_dir: Path, ctx: distributed.Context, progress: bool | None, log: Callable[[str], None], overwrite: bool
) -> dict:
    """The training loop of `train`, in a run directory this process holds: epochs until the last, early stopping or
    the time budget; then metrics.json, and the checkpoint removed (kept when the budget stopped the run)."""
    config, tc = run.config, run.config.train
    model = run.tagger.model.to(ctx.device)
    if ctx.world > 1:
        torch.manual_seed(tc.seed * 1000 + ctx.rank)  # each process its own dropout stream
        log(f"data parallel: {ctx.world} processes on {ctx.device.type}, {tc.batch_size} sentences per global batch")
    step_model = distributed.wrap(model, ctx)
    data = _EpochData(run)
    # = ceil(sentences / batch_size) unless a batch is over the cell budget (then one epoch's count stands for all)
    steps_per_epoch = len(data.batches(0))
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config, steps_per_epoch))
    # only process 0 evaluates and saves, so only it keeps the average
    average = WeightAverage(model, tc.average_epochs * steps_per_epoch) if tc.average_epochs and ctx.is_main else None
    state = resume(out_dir, model, optimizer, scheduler, config, average, overwrite, ctx.is_main, log)
    loop = _Loop(run, ctx, out_dir, log, model, step_model, optimizer, scheduler, average, state or fresh_state())
    loop.fresh_log = state is None  # a fresh run in a used directory replaces the old log with its first line, not before
    state = loop.state

    progress = sys.stderr.isatty() if progress is None else progress
    stop_reason = "completed"
    if _budget_spent(tc, state):
        log(f"the time budget of {tc.max_minutes:g} minutes is spent ({state['elapsed'] / 60:.1f} minutes trained); "
            "raise train.max_minutes to go on")
        stop_reason = "time_budget"
    while state["epoch"] < tc.epochs and stop_reason == "completed":
        epoch = state["epoch"]
        batches = data.batches(epoch)
        items, replaced = data.items(epoch)
        loss_sum, n_sent, seconds = loop.train_epoch(batches, items, progress)
        if not ctx.is_main:  # process 0 evaluates and saves; wait for its decision to go on or stop
            state.update(epoch=epoch + 1, batch=0)
            if distributed.agree(False, ctx):
                break
            continue
        record, dev, score = loop.evaluate(loss_sum, n_sent, seconds, replaced)
        loop.log_epoch(record, dev, score)
        stop_reason = loop.end_epoch()
        if distributed.agree(stop_reason != "completed", ctx):
            break

    if ctx.is_main:
        run.tagger.metrics = loop.metrics(stop_reason)
        run.tagger.save_metrics(out_dir)
        if stop_reason != "time_budget":
            loop.checkpoint.unlink(missing_ok=True)
    del step_model, loop
    distributed.finish(ctx)
    return run.tagger.metrics if ctx.is_main else {}


class _EpochData:
    """The encoded training sentences of each epoch and their batches: with train.mention_replacement an epoch's
    sentences are the training set with some mentions swapped (the same for the same seed and epoch: a resumed run
    replays them); else every epoch's are the training set's."""

    def __init__(self, run: Run):
        self.run, self.tc = run, run.config.train
        self.sentences = run.splits["train"].sentences
        self.base = run.featurizer.encode_all(self.sentences)
        self.cached: dict[int, tuple[list[dict], int]] = {}

    def items(self, epoch: int) -> tuple[list[dict], int]:
        """The encoded sentences of the epoch, and how many mentions were swapped in them."""
        if self.run.replacer is None:
            return self.base, 0
        if epoch not in self.cached:
            self.cached.clear()
            changed_sentences, changed, replaced = self.run.replacer.epoch(self.sentences, epoch)
            items = list(self.base)
            for i, item in zip(changed, self.run.featurizer.encode_all([changed_sentences[i] for i in changed])):
                items[i] = item
            self.cached[epoch] = (items, replaced)
        return self.cached[epoch]

    def batches(self, epoch: int) -> list[list[int]]:
        """The epoch's batches (sentence indices), shuffled by (seed, epoch) and grouped by length."""
        seed = self.tc.seed * 100_003 + epoch
        lengths = [it["n"] for it in self.items(epoch)[0]]
        return length_batches(lengths, self.tc.batch_size, shuffle=True, seed=seed, max_cells=self.tc.max_batch_cells)


class _Loop:
    """What the epochs of one run share: the model and its optimiser, schedule and weight average, the training state
    (position, best epoch; what a checkpoint holds) and where the run is written."""

    def __init__(
        self, run: Run, ctx: distributed.Context, out_dir: Path, log: Callable[[str], None], model: torch.nn.Module,
        step_model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
        average: WeightAverage | None, state: dict,
    ):
        self.run, self.ctx, self.out_dir, self.log = run, ctx, out_dir, log
        self.config, self.tc, self.tagger = run.config, run.config.train, run.tagger
        self.model, self.step_model, self.optimizer, self.scheduler = model, step_model, optimizer, scheduler
        self.average, self.state = average, state
        self.checkpoint = out_dir / CHECKPOINT
        self.fresh_log = True
        self.lexicon_saved = False  # the lexicon never changes within a run: saved with the first best model only
        data = self.config.data
        self.dev_label = "dev" + (" (test used as dev)" if data.msra_dev == "test" and data.dataset == "msra" else "")
        self.slow_step = float(os.environ.get("ZHNER_SLOW_STEP_S", "0"))
        self.started = time.perf_counter() - state["elapsed"]

    def save_checkpoint(self) -> None:
        save_checkpoint(self.checkpoint, self.model, self.optimizer, self.scheduler, self.state, self.config, self.average)

    def train_epoch(self, batches: list[list[int]], items: list[dict], progress: bool) -> tuple[float, int, float]:
        """The epoch's steps from where the state stands (a resumed run: mid-epoch), a checkpoint every
        train.checkpoint_every steps; returns the summed loss and sentence count (over all processes) and the seconds."""
        state, tc, ctx = self.state, self.tc, self.ctx
        self.model.train()
        # the part of this epoch run before an interruption (its loss and seconds) counts in the epoch's log line;
        # under torchrun only process 0's share of it was saved
        resumed = ctx.is_main and state["batch"] > 0
        loss_sum, n_sent, seconds_before = state.get("epoch_loss", (0.0, 0, 0.0)) if resumed else (0.0, 0, 0.0)
        t0 = time.perf_counter() - seconds_before
        bar = tqdm(total=len(batches), initial=state["batch"], desc=f"epoch {state['epoch'] + 1}", disable=not progress,
                   leave=False)
        for b in range(state["batch"], len(batches)):
            part, scale = distributed.shard(batches[b], ctx)
            batch = _to(self.run.featurizer.collate([items[i] for i in part]), ctx.device)
            loss = train_step(self.step_model, self.optimizer, batch, tc, scale)
            self.scheduler.step()
            if self.average is not None:
                self.average.update()
            real = len(part) if scale else 0  # a borrowed sentence (weight 0) does not count
            loss_sum += loss.item() * real
            n_sent += real
            state["step"] += 1
            state["batch"] = b + 1
            bar.update(1)
            if self.slow_step:
                time.sleep(self.slow_step)
            if ctx.is_main and state["step"] % tc.checkpoint_every == 0 and state["batch"] < len(batches):
                state["elapsed"] = time.perf_counter() - self.started
                state["epoch_loss"] = (loss_sum, n_sent, time.perf_counter() - t0)
                self.save_checkpoint()
        bar.close()
        seconds = time.perf_counter() - t0
        loss_sum, n_sent = distributed.sum_over_processes([loss_sum, n_sent], ctx)
        return loss_sum, n_sent, seconds

    def evaluate(self, loss_sum: float, n_sent: int, seconds: float, replaced: int) -> tuple[dict, dict, float]:
        """Score the epoch's model on dev (with weight averaging, the average: training goes on from the last step);
        a better one than the best so far is scored on test and saved. Returns the epoch's log record, the dev
        metrics and the selection score."""
        state, tagger, run, tc = self.state, self.tagger, self.run, self.tc
        epoch = state["epoch"]
        with self.average.applied() if self.average is not None else nullcontext():
            dev = tagger.evaluate(run.splits["dev"], tc.eval_batch_size)
            record = {
                "epoch": epoch + 1,
                "step": state["step"],
                "lr": self.optimizer.param_groups[0]["lr"],
                "train_loss": loss_sum / max(1, n_sent),
                "train_sentences_per_s": n_sent / max(seconds, 1e-9),
                **({"bert_unk_pieces": run.unk_pieces} if run.unk_pieces else {}),
                **({"mentions_replaced": replaced} if run.replacer is not None else {}),
                self.dev_label: tagger.task.headline(dev),
            }
            score = tagger.task.select(dev)  # the task's selection metric (tagging: strict F1)
            if score > state["best_f1"]:
                test = tagger.evaluate(run.splits["test"], tc.eval_batch_size)
                state.update(best_f1=score, best_epoch=epoch + 1, bad_epochs=0)
                state["best"] = {"dev": dev, "test": test}
                if run.parts:  # a union: each corpus's own test score too
                    state["best"]["test_per_corpus"] = {
                        name: tagger.task.headline(tagger.evaluate(splits["test"], tc.eval_batch_size))
                        for name, splits in run.parts.items()
                    }
                record["test"] = tagger.task.headline(test)
                tagger.metrics = self.metrics("running")
                tagger.save(self.out_dir, lexicon=not self.lexicon_saved)
                self.lexicon_saved = True
            else:
                state["bad_epochs"] += 1
        return record, dev, score

    def log_epoch(self, record: dict, dev: dict, score: float) -> None:
        """The epoch's line in log.jsonl (with a collapse warning when dev F1 has stayed 0) and in the log."""
        state, tc, task = self.state, self.tc, self.tagger.task
        record["best_epoch"] = state["best_epoch"]
        record["seconds"] = round(time.perf_counter() - self.started, 2)
        warning = _collapse_warning(state, dev, tc.collapse_epochs, self.dev_label) if task.kind == "tagging" else None
        if warning:
            record["warning"] = warning
            self.log(f"warning: {warning}")
        append_log(self.out_dir / LOG, record, self.fresh_log)
        self.fresh_log = False
        self.log(
            f"epoch {state['epoch'] + 1}/{tc.epochs} loss {record['train_loss']:.4f} {self.dev_label} {task.metric} "
            f"{score:.2f} (best {state['best_f1']:.2f} @ {state['best_epoch']}) {record['train_sentences_per_s']:.0f} sent/s"
        )

    def end_epoch(self) -> str:
        """Move the state past the epoch; returns why training stops (early_stopping, time_budget) or "completed" to go
        on. A checkpoint is saved when epochs remain and the run may continue (a time budget's stop included: the same
        command with a larger budget continues it)."""
        state, tc = self.state, self.tc
        state.update(epoch=state["epoch"] + 1, batch=0, elapsed=time.perf_counter() - self.started, epoch_loss=(0.0, 0, 0.0))
        stop_reason = "completed"
        if tc.patience and state["bad_epochs"] >= tc.patience:
            stop_reason = "early_stopping"
        elif _budget_spent(tc, state):
            stop_reason = "time_budget"
        if state["epoch"] < tc.epochs and stop_reason in ("completed", "time_budget"):
            self.save_checkpoint()
        return stop_reason

    def metrics(self, status: str) -> dict:
        return run_metrics(self.config, self.tagger.task, self.state, self.started, status, self.dev_label)


def _budget_spent(tc: TrainConfig, state: dict) -> bool:
    """Whether the run's training time has passed `train.max_minutes` with epochs still to go (a run that has trained
    all its epochs is complete, whatever its budget)."""
    return bool(tc.max_minutes) and state["elapsed"] > tc.max_minutes * 60 and state["epoch"] < tc.epochs


def _collapse_warning(state: dict, dev: dict, patience: int | None, dev_label: str) -> str | None:
    """A run whose dev F1 stays at 0 (typically a model that tags nothing, all-O) is reported, once, after `patience`
    epochs, and again if it ends that way (see rundir.run_metrics); it is not stopped, since a slow start can still escape."""
    state["zero_epochs"] = state.get("zero_epochs", 0) + 1 if dev["strict"]["f1"] == 0 else 0
    if not patience or state["zero_epochs"] != patience:
        return None
    what = "tags nothing (all-O)" if dev["n_pred"] == 0 else f"predicts {dev['n_pred']} entities, none right"
    state.setdefault("warnings", []).append(f"{dev_label} F1 0 for epochs {state['epoch'] + 2 - patience}-{state['epoch'] + 1}")
    return (
        f"{dev_label} F1 has been 0 for {patience} epochs (the model {what}): it is not learning; check the learning "
        f"rate and schedule, or wait if the loss still falls (a slow start)"
    )


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return batch if device.type == "cpu" else {k: v.to(device, non_blocking=True) for k, v in batch.items()}

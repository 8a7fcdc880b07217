"""`zhner bench`: training and inference throughput of a config's model on its dataset, one thread unless configured."""
from __future__ import annotations

import resource
import time

import torch

from zhner.config import Config
from zhner.data.batching import length_batches
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer, train_step


def _timed_loop(batches: list, step, budget_s: float, warmup: int = 2) -> tuple[int, float]:
    """Run `step(batch) -> sentences done` over the batches (cycling) for about `budget_s` seconds, after `warmup`
    untimed batches; returns (sentences, seconds)."""
    for b in batches[:warmup]:
        step(b)
    n, start, i = 0, time.perf_counter(), 0
    while True:
        n += step(batches[i % len(batches)])
        i += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s and i >= 3:
            return n, elapsed


def run_bench(config: Config, train_seconds: float = 15.0, infer_seconds: float = 8.0) -> dict:
    run = prepare(config, log=lambda _: None)
    tagger, featurizer, tc = run.tagger, run.featurizer, run.config.train
    model = tagger.model

    items = [featurizer.encode(s) for s in run.splits["train"]]
    lengths = [it["n"] for it in items]
    order = length_batches(lengths, tc.batch_size, shuffle=True, seed=0, max_cells=tc.max_batch_cells)
    batches = [featurizer.collate([items[i] for i in idx]) for idx in order]
    optimizer = make_optimizer(model, run.config)

    def one_step(batch: dict) -> int:
        train_step(model, optimizer, batch, tc)
        return int(batch["mask"].shape[0])

    model.train()
    n_train, t_train = _timed_loop(batches, one_step, train_seconds)

    model.eval()
    test = run.splits["test"].sentences
    result = {
        "model": run.config.model.name,
        "dataset": run.config.data.dataset,
        "threads": torch.get_num_threads(),
        "train_batch_size": tc.batch_size,
        "train_sentences_per_s": round(n_train / t_train, 1),
    }
    for bs in (1, 16):
        groups = [[test[i] for i in idx] for idx in length_batches([len(t) for t in test], bs, shuffle=True, seed=1)]
        n, t = _timed_loop(groups, lambda g: len(tagger.predictions(g, batch_size=bs)), infer_seconds)
        result[f"infer_sentences_per_s_b{bs}"] = round(n / t, 1)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result

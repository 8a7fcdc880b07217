"""`zhner bench`: training and inference throughput of a config's model on its dataset, one thread unless configured."""
from __future__ import annotations

import resource
import time

import torch

from zhner.data.batching import length_batches
from zhner.train.config import Config
from zhner.train.trainer import make_optimizer, prepare


def _timed_loop(batches: list, step, budget_s: float, warmup: int = 2) -> tuple[int, float]:
    """Run `step(batch)` over the batches (cycling) for about `budget_s` seconds; returns (sentences, seconds)."""
    for b in batches[:warmup]:
        step(b)
    n, start, i = 0, time.perf_counter(), 0
    while True:
        b = batches[i % len(batches)]
        step(b)
        n += len(b)
        i += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s and i >= 3:
            return n, elapsed


def run_bench(config: Config, train_seconds: float = 15.0, infer_seconds: float = 8.0) -> dict:
    run = prepare(config, log=lambda _: None)
    tagger, featurizer, tc = run.tagger, run.featurizer, run.config.train
    model = tagger.model

    items = [featurizer.encode(s.chars, s.tags) for s in run.splits["train"]]
    batches = [featurizer.collate([items[i] for i in idx]) for idx in length_batches([len(it["chars"]) for it in items], tc.batch_size, shuffle=True, seed=0)]
    optimizer = make_optimizer(model, run.config)

    def train_step(batch: dict) -> None:
        loss = model(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if tc.clip_value:
            torch.nn.utils.clip_grad_value_(model.parameters(), tc.clip_value)
        optimizer.step()

    model.train()
    # `len(batch)` must count sentences: wrap each batch so the loop can count them
    sized = [_Sized(b) for b in batches]
    n_train, t_train = _timed_loop(sized, lambda b: train_step(b.batch), train_seconds)

    model.eval()
    test = [s.chars for s in run.splits["test"]]
    result = {
        "model": run.config.model.name,
        "dataset": run.config.data.dataset,
        "threads": torch.get_num_threads(),
        "train_batch_size": tc.batch_size,
        "train_sentences_per_s": round(n_train / t_train, 1),
    }
    for bs in (1, 16):
        groups = [[test[i] for i in idx] for idx in length_batches([len(t) for t in test], bs, shuffle=True, seed=1)]
        n, t = _timed_loop(groups, lambda g: tagger.tag(g, batch_size=bs), infer_seconds)
        result[f"infer_sentences_per_s_b{bs}"] = round(n / t, 1)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


class _Sized:
    def __init__(self, batch: dict):
        self.batch = batch

    def __len__(self) -> int:
        return int(self.batch["mask"].shape[0])

"""Data-parallel training: the shards of a global batch, and two CPU processes under torchrun (gloo) ending with the
weights of one process, up to float rounding (dropout 0: see zhner/train/distributed.py)."""
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from cli_runner import run_zhner
from conftest import REPO, TINY_TENER
from zhner.train.distributed import Context, shard


def test_shards_split_a_batch_and_weight_the_global_mean():
    batch = [7, 3, 9, 1, 4]
    for world in (1, 2, 3):
        parts = [shard(batch, Context(rank, world)) for rank in range(world)]
        assert sorted(i for part, _ in parts for i in part) == sorted(batch)
        # mean_r * n_r * P / G averaged over P processes = the global mean: the weights sum to P
        assert sum(scale for _, scale in parts) == pytest.approx(world)
        for part, scale in parts:
            assert scale == pytest.approx(len(part) * world / len(batch))
    (part, scale) = shard([5], Context(1, 2))
    assert part == [5] and scale == 0.0  # an empty share runs a borrowed sentence with weight 0


NO_DROPOUT = ["model.dropout=0", "model.fc_dropout=0", "model.embed_dropout=0"]
# 46 sentences in batches of 5: the last global batch has a single sentence, so process 1 borrows one with weight 0
SETTINGS = [o for o in TINY_TENER if not o.startswith(("data.max_train", "train.batch_size"))] + NO_DROPOUT + [
    "data.max_train_sentences=46",
    "train.batch_size=5",
]


def _train(out, nproc, shared_env, extra=()):
    args = ["train", "tener_resume", "-o", str(out)] + [a for o in [*SETTINGS, *extra] for a in ("--set", o)]
    if nproc == 1:  # the reference: a process of its own, forked with torch already imported (tests/cli_runner.py)
        return run_zhner(*args, cwd=REPO, timeout=600)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "zhner.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=shared_env, timeout=600)


# with weight averaging only process 0 keeps the average, and the model it saves is still the one-process model's
@pytest.mark.parametrize("extra", [[], ["train.average_epochs=1"]], ids=["last-weights", "averaged"])
def test_two_processes_train_like_one(tmp_path, extra):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    one, two = tmp_path / "one", tmp_path / "two"
    res1 = _train(one, 1, env, extra)
    assert res1.returncode == 0, res1.stderr
    res2 = _train(two, 2, env, extra)
    assert res2.returncode == 0, res2.stderr
    assert "data parallel: 2 processes on cpu" in res2.stderr
    assert len(res2.stdout.strip().splitlines()) == 1  # only process 0 prints the summary

    w1, w2 = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert w1.keys() == w2.keys()
    for name in w1:
        assert torch.allclose(w1[name], w2[name], atol=1e-5, rtol=1e-4), (name, (w1[name] - w2[name]).abs().max())
    log1 = [json.loads(line) for line in (one / "log.jsonl").read_text().splitlines()]
    log2 = [json.loads(line) for line in (two / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log1] == [r["step"] for r in log2] == [10, 20]  # 10 global batches per epoch
    for r1, r2 in zip(log1, log2):
        assert r2["train_loss"] == pytest.approx(r1["train_loss"], rel=1e-5)
    assert log1[1]["train_loss"] < log1[0]["train_loss"]  # it trained: the weights compared are not the initial ones

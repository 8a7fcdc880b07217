"""Data-parallel training over several processes (torchrun), with DistributedDataParallel: gloo on CPU, nccl on GPUs.

    torchrun --standalone --nproc-per-node 2 -m zhner.cli train CONFIG -o DIR

Every process builds the same model from the same seed and walks the same sequence of global batches (`train.batch_size`
sentences each, as in one process); process r takes the sentences r, r + P, r + 2P, ... of each global batch (P processes).
The loss of the global batch is the mean NLL over its G sentences, (1/G) sum_i nll_i. Process r computes the mean over
its n_r sentences, m_r; DDP averages the gradients of the P processes, so each process back-propagates
m_r * n_r * P / G: the average over processes of n_r P / G grad m_r is (1/G) sum_r grad(n_r m_r), the gradient of the
global mean. Clipping and the optimiser step come after the average, on identical gradients, so every process keeps
identical weights, equal to one process's up to float rounding (sums in another order, shards padded to their own length).

A process whose share of a small last batch is empty runs a real sentence with weight 0, so that it still joins the
gradient average. Dropout draws differ (each process has its own random stream and sees other tensor shapes): with dropout
the runs agree in distribution, not in value. Only process 0 evaluates, saves, logs and checkpoints; the others wait.
"""
from __future__ import annotations

import atexit
import gc
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from zhner.device import resolve_device

# rank 0 evaluates dev and test while the other processes wait in a collective: allow a long evaluation (MSRA, CPU)
_TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class Context:
    """Where this process stands: rank among world processes, and its device."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(device: str = "auto") -> Context:
    """The process group of a torchrun launch (WORLD_SIZE > 1 in the environment), joined once; a single process
    otherwise. `device` (zhner.device): auto = the GPU when CUDA is available, else the CPU; under torchrun each
    process takes the GPU of its LOCAL_RANK."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    chosen = resolve_device(device)
    cuda = chosen.type == "cuda"
    index = local_rank if world > 1 or chosen.index is None else chosen.index
    device = torch.device("cuda", index) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", timeout=_TIMEOUT)
        atexit.register(_leave)  # a run that fails still leaves the group before the interpreter tears down
    return Context(rank, world, device)


def finish(ctx: Context) -> None:
    """The normal end of a run, in every process once the DDP wrapper is dropped: wait until all processes get here
    (process 0 writes the run's files last), then leave the group together. A process that left while process 0 was
    still writing aborted at exit now and then ("terminate called without an active exception", rank 1: 2 of 45
    two-process runs with weight averaging beside other jobs; 0 of 77 since)."""
    if ctx.world == 1 or not dist.is_initialized():
        return
    gc.collect()  # DDP's reducer, freed here rather than at interpreter exit, holds the group
    dist.barrier()
    dist.destroy_process_group()


def _leave() -> None:
    if dist.is_initialized():  # no barrier: after a crash the others would wait for it until the timeout
        dist.destroy_process_group()


def wrap(model: torch.nn.Module, ctx: Context) -> torch.nn.Module:
    """The module the training step calls: the model itself in one process, else DDP around it (DDP also makes every
    process start from rank 0's weights)."""
    if ctx.world == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)


def shard(indices: list[int], ctx: Context) -> tuple[list[int], float]:
    """This process's sentences of a global batch and the factor that turns their mean loss into its share of the
    global mean under DDP's gradient average: n_r * P / G (see the module docstring). An empty share borrows the batch's
    first sentence with factor 0."""
    part = indices[ctx.rank :: ctx.world]
    if not part:
        return indices[:1], 0.0
    return part, len(part) * ctx.world / len(indices)


def sum_over_processes(values: list[float], ctx: Context) -> list[float]:
    """Element-wise sum of a few numbers over the processes (e.g. an epoch's loss sum and sentence count)."""
    if ctx.world == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t)
    return t.tolist()


def agree(flag: bool, ctx: Context) -> bool:
    """Process 0's decision (e.g. stop training), sent to every process; it also waits for process 0 to get there."""
    if ctx.world == 1:
        return flag
    t = torch.tensor([int(flag)], device=ctx.device)
    dist.broadcast(t, src=0)
    return bool(t.item())

"""Weight averaging: evaluate and save a moving average of the weights instead of the last step's.

A short, high-rate schedule ends with weights that still jump from batch to batch; averaging the iterates (Polyak &
Juditsky 1992) takes out much of that noise at the cost of one copy of the parameters and one lerp per step. The
average starts as the plain mean of the steps so far and becomes an exponential moving average once `horizon` steps
have passed, so the first epochs are not pulled towards the initial weights.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class WeightAverage:
    """A running average of `model`'s trainable weights over about the last `horizon` optimiser steps."""

    def __init__(self, model: torch.nn.Module, horizon: float) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]  # frozen weights never change
        self.average = [p.detach().clone() for p in self.params]
        self.horizon = max(1.0, horizon)
        self.updates = 0

    @torch.no_grad()
    def update(self) -> None:
        """Fold in the current weights: a running mean for the first `horizon` steps, then decay 1 - 1/horizon."""
        self.updates += 1
        weight = max(1.0 / self.horizon, 1.0 / self.updates)
        # one fused call over every tensor, as torch.optim's own multi-tensor updates do (no_grad: no detached copies)
        torch._foreach_lerp_(self.average, self.params, weight)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The model holds the averaged weights inside the block and its own weights again after it."""
        self._swap()
        try:
            yield
        finally:
            self._swap()

    def _swap(self) -> None:
        for p, a in zip(self.params, self.average):
            p.data, a.data = a.data, p.data

    def state_dict(self) -> dict:
        """What a checkpoint keeps: the averaged tensors and how many steps they cover."""
        return {"average": self.average, "updates": self.updates}

    def load_state_dict(self, saved: dict) -> None:
        """Put back a checkpoint's average; one of another model's shapes is a ValueError."""
        if len(saved["average"]) != len(self.average) or any(
            s.shape != a.shape for s, a in zip(saved["average"], self.average)
        ):
            raise ValueError("the saved average does not match the model's parameters")
        for a, s in zip(self.average, saved["average"]):
            a.copy_(s)
        self.updates = int(saved["updates"])

"""An exponential moving average of a model's weights (Polyak averaging), evaluated and saved in place of the raw weights.

With a short schedule the raw weights at the end of an epoch are one noisy point of an SGD walk; their running average
sits nearer the middle of the region the walk explores, which is what a long schedule's small steps buy. `train.ema` is
the per-step decay d: the average spans about 1 / (1 - d) steps. It starts from zero and is divided by 1 - d^t after t
steps (the bias correction of Adam's moments), so the initial weights do not linger in it and d is the decay from the
first step on.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class WeightAverage:
    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = decay
        self.updates = 0
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.shadow = [torch.zeros_like(p.detach()) for p in self._params(model)]

    def _params(self, model: torch.nn.Module) -> list[torch.Tensor]:
        params = dict(model.named_parameters())
        return [params[n] for n in self.names]

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """After an optimiser step: shadow <- d * shadow + (1 - d) * weights."""
        self.updates += 1
        for s, p in zip(self.shadow, self._params(model)):
            s.lerp_(p.detach(), 1.0 - self.decay)

    @torch.no_grad()
    def averaged(self) -> list[torch.Tensor]:
        """The bias-corrected average, one tensor per parameter (in `names` order); needs one update at least."""
        correction = 1.0 - self.decay**self.updates
        return [s / correction for s in self.shadow]

    @contextmanager
    def swapped_in(self, model: torch.nn.Module) -> Iterator[None]:
        """The averaged weights in the model for the block's duration (evaluate, save); the trained ones after it.
        Before the first update there is no average: the block sees the trained weights."""
        params = self._params(model)
        with torch.no_grad():
            trained = [p.detach().clone() for p in params]
            for p, a in zip(params, self.averaged() if self.updates else trained):
                p.copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, t in zip(params, trained):
                    p.copy_(t)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "updates": self.updates, "names": self.names, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        if state["names"] != self.names or [s.shape for s in state["shadow"]] != [s.shape for s in self.shadow]:
            raise ValueError("the averaged weights are of another model")
        self.updates = state["updates"]
        for s, saved in zip(self.shadow, state["shadow"]):
            s.copy_(saved)

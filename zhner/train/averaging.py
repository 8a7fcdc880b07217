"""An exponential moving average of a model's weights (Polyak averaging), evaluated and saved in place of the raw weights.

With a short schedule the raw weights at the end of an epoch are one noisy point of an SGD walk; their running average
sits nearer the middle of the basin the walk explores, which is what a long schedule's decaying learning rate buys.
`train.ema` is the per-step decay. The effective decay grows from 0.1 to it as min(decay, (1 + t) / (10 + t)) so that
the first steps do not keep the initial weights in the average for long.
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
        self.shadow = [p.detach().clone() for p in self._params(model)]

    def _params(self, model: torch.nn.Module) -> list[torch.Tensor]:
        params = dict(model.named_parameters())
        return [params[n] for n in self.names]

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """After an optimiser step: shadow <- d * shadow + (1 - d) * weights."""
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for s, p in zip(self.shadow, self._params(model)):
            s.lerp_(p.detach(), 1.0 - d)

    @contextmanager
    def swapped_in(self, model: torch.nn.Module) -> Iterator[None]:
        """The averaged weights in the model for the block's duration (evaluate, save); the trained ones after it."""
        params = self._params(model)
        with torch.no_grad():
            trained = [p.detach().clone() for p in params]
            for p, s in zip(params, self.shadow):
                p.copy_(s)
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

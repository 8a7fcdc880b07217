"""Weight matrices stored as int8 with one float16 scale per row (`model.bert_int8_weights`): a quarter of float32.

Symmetric and per row (a linear layer's output channel, an embedding table's token): s = max|w_row| / 127,
q = round(w / s) in [-127, 127], w ~ q s. The largest rounding error of a weight is half a step, s / 2. Used for
storage only: a model trains and runs in float32, and its weights are dequantised when it is loaded.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

SCALE = ".int8_scale"  # the state key of a quantised tensor's scales: KEY + SCALE, float16 [rows]


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, C] float -> codes int8 [R, C] and scales float16 [R]. A row of zeros gets scale 0 (it dequantises to zeros)."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127).half()  # [R], rounded to what is stored before it is used
    step = scale.float()
    safe = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round(w / safe[:, None]).clamp(-127, 127).to(torch.int8)  # [R, C]
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes int8 [R, C], scales [R] -> float32 [R, C]."""
    return q.float() * scale.float()[:, None]


def quantize_state(state: dict[str, torch.Tensor], keep: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """`state` with every 2-D floating tensor whose key `keep(key)` selects replaced by its int8 codes, and its scales
    added under KEY + SCALE."""
    out = {}
    for key, value in state.items():
        if keep(key) and value.is_floating_point() and value.dim() == 2:
            out[key], out[key + SCALE] = quantize_rows(value)
        else:
            out[key] = value
    return out


def dequantize_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `quantize_state`; a scale without its codes, or codes and scales that do not fit, is a
    ValueError naming the key."""
    out = dict(state)
    for key in [k for k in state if k.endswith(SCALE)]:
        name = key[: -len(SCALE)]
        q, scale = out.pop(name, None), out.pop(key)
        if q is None or q.dtype != torch.int8 or q.dim() != 2 or scale.dim() != 1 or scale.shape[0] != q.shape[0]:
            raise ValueError(f"{key}: int8 scales without int8 codes [rows, columns] of as many rows under {name}")
        out[name] = dequantize_rows(q, scale)
    return out

"""Sinusoidal position encodings (Vaswani et al. 2017), used for relative distances by TENER, FLAT and NFLAT."""
from __future__ import annotations

import math

import torch


def sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """Encode (possibly negative) integer positions: [*] -> [*, dim], as [sin(p w_k); cos(p w_k)] for k = 0 .. dim/2 - 1
    with w_k = 10000^(-k / (dim/2 - 1)) (fastNLP's form, as TENER's and FLAT's releases; Vaswani's has -2k/dim); an odd dim
    gets a zero last column.

    FLAT Eq. 9-10 and TENER's relative embedding use this form; sin is odd in p, so the encoding knows direction.
    """
    half = dim // 2
    inv_freq = torch.exp(torch.arange(half, dtype=torch.float32, device=positions.device) * (-math.log(10000.0) / max(half - 1, 1)))
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # [*, half]
    enc = torch.cat([angles.sin(), angles.cos()], dim=-1)
    if dim % 2:
        enc = torch.nn.functional.pad(enc, (0, 1))
    return enc


def relative_table(max_distance: int, dim: int) -> torch.Tensor:
    """Encodings of distances -max_distance..max_distance: [2 * max_distance + 1, dim]; row d + max_distance is distance d."""
    return sinusoid(torch.arange(-max_distance, max_distance + 1), dim)

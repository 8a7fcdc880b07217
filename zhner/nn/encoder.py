"""The post-norm Transformer layer (residual + LayerNorm after each sublayer) around any attention module -- TENER's and
ATSSA's relative self-attention, FLAT's span attention (FLAT Eq. 11), NFLAT's inter-attention (NFLAT Eq. 9-10) -- and
TENER's encoder built from it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from zhner.nn.tener_attention import RelativeSelfAttention


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderLayer(nn.Module):
    """x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x))) (NFLAT Eq. 9-10; with `memory`, x attends to it).

    residual=False reproduces FLAT's release, whose post-processing adds the sublayer output to itself: LN(2 * sublayer).
    The attention may update only the first Q rows of x (FLAT's last layer needs the characters only): the layer returns
    those Q rows."""

    def __init__(self, attention: nn.Module, d_model: int, d_ff: int, dropout: float, residual: bool = True):
        super().__init__()
        self.attention = attention
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.residual = residual

    def forward(self, x: torch.Tensor, *args: Any, memory: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        """x [B, N, D] -> [B, Q, D]; args and kwargs go to the attention after x: TENER's (mask [B, N]), FLAT's (positions,
        allowed, num_queries Q, span_mask). memory [B, M, D]: cross-attention `attention.attend(x, memory, *args)`, Q = N."""
        if memory is None:
            a = self.dropout(self.attention(x, *args, **kwargs))  # [B, Q, D]
        else:
            a = self.dropout(self.attention.attend(x, memory, *args, **kwargs))  # [B, N, D]
        x = x[:, : a.shape[1]]  # [B, Q, D]
        x = self.norm1(x + a if self.residual else a + a)
        f = self.dropout(self.ffn(x))
        return self.norm2(x + f if self.residual else f + f)


def tener_encoder(
    d_model: int,
    heads: int,
    layers: int,
    ff_ratio: float,
    dropout: float,
    scaled: bool,
    selector: Callable[[], nn.Module | None] = lambda: None,
) -> nn.ModuleList:
    """TENER's encoder: `layers` post-norm layers of relative self-attention (tener_attention.py) with an FFN of
    ff_ratio x d_model; `selector` makes each layer's key selector (ATSSA's selective attention; none for TENER)."""
    return nn.ModuleList(
        EncoderLayer(
            RelativeSelfAttention(d_model, heads, dropout, scaled, selector()), d_model, int(ff_ratio * d_model), dropout
        )
        for _ in range(layers)
    )

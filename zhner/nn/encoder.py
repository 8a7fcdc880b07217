"""Post-norm Transformer layers (residual + LayerNorm after each sublayer), with any self-attention module, and TENER's
encoder built from them."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from zhner.nn.tener_attention import RelativeSelfAttention


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerLayer(nn.Module):
    """x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x)))."""

    def __init__(self, attention: nn.Module, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.attention = attention
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


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
        TransformerLayer(
            RelativeSelfAttention(d_model, heads, dropout, scaled, selector()), d_model, int(ff_ratio * d_model), dropout
        )
        for _ in range(layers)
    )

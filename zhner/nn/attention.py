"""TENER's relative multi-head self-attention (Yan et al. 2019, "TENER: Adapting Transformer Encoder for NER", Eq. 15-19).

    A_ij = (Q_i + u) K_j^T + (Q_i + v) R_{i-j}^T + K_j R_{i-j}^T

Q, K, V are projections of the input; R_{i-j} is the unprojected sinusoid of the distance i - j (query minus key); u and v are
learned per-head biases. The last term is the extra key-position term of TENER's release. As in TENER, the score is not
scaled by 1/sqrt(d) (sharper attention suits NER) and there is no output projection.

An optional `selector` (e.g. `zhner.nn.selective_attention.SelectiveAttention`, ATSSA) replaces the masked softmax:
it receives the raw scores, the layer input (its queries) and the masks, and returns the attention weights.
"""
from __future__ import annotations

import torch
from torch import nn

from zhner.nn.position import sinusoid
from zhner.nn.selective_attention import SelectiveAttention


class RelativeSelfAttention(nn.Module):
    def __init__(
        self, d_model: int, heads: int, dropout: float = 0.15, scaled: bool = False, selector: SelectiveAttention | None = None
    ):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.u = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        self.v = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        self.dropout = nn.Dropout(dropout)
        self.scale = self.head_dim**-0.5 if scaled else 1.0
        self.selector = selector

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, L, D], mask [B, L] (True = real token) -> [B, L, D]."""
        B, L, _ = x.shape
        H, d = self.heads, self.head_dim
        q, k, v = self.qkv(x).view(B, L, 3, H, d).permute(2, 0, 3, 1, 4)  # each [B, H, L, d]

        # All 2L-1 distances once, then each (i, j) picks its own: distance i - j sits at column i - j + L - 1.
        rel = sinusoid(torch.arange(-(L - 1), L, device=x.device), d).to(x.dtype)  # [2L-1, d]
        idx = (torch.arange(L, device=x.device)[:, None] - torch.arange(L, device=x.device)[None, :]) + L - 1  # [L, L]

        content = torch.matmul(q + self.u[:, None], k.transpose(-1, -2))  # [B, H, L, L]
        q_pos = torch.matmul(q + self.v[:, None], rel.t())  # [B, H, L, 2L-1]
        k_pos = torch.matmul(k, rel.t())  # [B, H, L(key), 2L-1]
        position = q_pos.gather(-1, idx.expand(B, H, L, L)) + k_pos.gather(-1, idx.t().expand(B, H, L, L)).transpose(-1, -2)
        scores = (content + position) * self.scale  # [B, H, L, L]

        if self.selector is not None:
            attn = self.selector(scores, x, mask[:, None, :], mask)
        else:
            attn = torch.softmax(scores.masked_fill(~mask[:, None, None, :], float("-inf")), dim=-1)
        attn = self.dropout(attn)
        out = torch.matmul(attn, v)  # [B, H, L, d]
        return out.transpose(1, 2).reshape(B, L, H * d)

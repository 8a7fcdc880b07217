"""TENER's relative multi-head self-attention (Yan et al. 2019, "TENER: Adapting Transformer Encoder for NER", Eq. 15-19).

    A_ij = (Q_i + u) K_j^T + (Q_i + v) R_{i-j}^T + K_j R_{i-j}^T

Q, K, V are projections of the input; R_{i-j} is the unprojected sinusoid of the distance i - j (query minus key); u and v are
learned per-head biases. The last term is the extra key-position term of TENER's release. As in TENER, the score is not
scaled by 1/sqrt(d) (sharper attention suits NER) and there is no output projection.

An optional `selector` replaces the masked softmax: it receives the raw scores, the layer input (its queries), the masks
and any keyword inputs `forward` was given besides them, and returns the attention weights (attention dropout and V
follow as without it). Two exist: ATSSA's `zhner.nn.selective_attention.SelectiveAttention`, and SLA / WLA's
`zhner.nn.local_attention.GatedLocalSelector` (which reads `local_mask`).

Memory: the release (and this module's first version) scores every query against all 2L-1 distances ([B, H, L, 2L-1], twice)
and gathers; at L = 3,000 and 8 heads that is over 1 GB before the [B, H, L, L] scores exist. Instead, with
R_t = [sin(t w) ; cos(t w)] and the angle-difference identities
    sin((i-j)w) = s_i c_j - c_i s_j,   cos((i-j)w) = c_i c_j + s_i s_j    (s_i = sin(i w), c_i = cos(i w)),
both position terms split into a query-side and a key-side factor: with (q_i + v) = [a_i ; b_i] and K_j = [e_j ; f_j],
    (q_i + v) . R_{i-j} = (a_i s_i + b_i c_i) . c_j + (b_i s_i - a_i c_i) . s_j
    K_j . R_{i-j}       = s_i . (e_j c_j + f_j s_j) + c_i . (f_j c_j - e_j s_j)
so all of A is ONE matmul of [B, H, L, 3d] query features with [B, H, L, 3d] key features, and nothing bigger than the
[B, H, L, L] scores is ever built. Same values up to float rounding (tests/test_nflat.py checks it against the gather form).

Being a plain dot product, it also fits `scaled_dot_product_attention`, whose CPU flash kernel never stores [B, H, L, L]
(measured at L = 3,000, 8 heads, forward + backward: 60 MB against 870 MB). That kernel wants V as wide as Q and K and has
no dropout, so V is zero-padded to 3d, and the explicit softmax remains for training with attention dropout, and for
sentences shorter than FUSED_MIN_LENGTH, where the [B, H, L, L] scores are small and the padded V costs more time
(B 16, L 50, inference: 10.3 ms fused against 7.2 ms explicit).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

FUSED_MIN_LENGTH = 256  # characters: from here on, scaled_dot_product_attention's kernel (see above) when it can be used


def _angles(length: int, half: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """sin(i w_k), cos(i w_k) for positions i < length: [length, half] each, w_k as in zhner.nn.position.sinusoid.
    In float64: i w reaches thousands of radians, where float32 would lose ~1e-4 of the angle."""
    inv_freq = torch.exp(torch.arange(half, dtype=torch.float32, device=device) * (-math.log(10000.0) / max(half - 1, 1)))
    angles = torch.arange(length, dtype=torch.float64, device=device)[:, None] * inv_freq.double()[None, :]
    return angles.sin(), angles.cos()


class RelativeSelfAttention(nn.Module):
    def __init__(
        self, d_model: int, heads: int, dropout: float = 0.15, scaled: bool = False, selector: nn.Module | None = None
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

    def forward(self, x: torch.Tensor, mask: torch.Tensor, **selector_inputs: torch.Tensor) -> torch.Tensor:
        """x [B, L, D], mask [B, L] (True = real token) -> [B, L, D]. `selector_inputs` (e.g. SLA's local_mask [B, L, L])
        go to the selector."""
        B, L, _ = x.shape
        H, d = self.heads, self.head_dim
        q, k, v = self.qkv(x).view(B, L, 3, H, d).permute(2, 0, 3, 1, 4)  # each [B, H, L, d]

        half = d // 2  # an odd head_dim's last sinusoid dimension is 0 (see sinusoid), so it adds nothing
        s, c = (t.to(x.dtype) for t in _angles(L, half, x.device))  # [L, half]
        qv = q + self.v[:, None]
        a, b = qv[..., :half], qv[..., half : 2 * half]  # [B, H, L, half]
        e, f = k[..., :half], k[..., half : 2 * half]
        s_, c_ = s.expand(B, H, L, half), c.expand(B, H, L, half)
        query_side = torch.cat([q + self.u[:, None], a * s + b * c, b * s - a * c, s_, c_], dim=-1)  # [B, H, L, d + 4 half]
        key_side = torch.cat([k, c_, s_, e * c + f * s, f * c - e * s], dim=-1)
        exporting = torch.compiler.is_exporting()  # no branching on data or sizes: the graph must hold for any input
        keep = None if not exporting and bool(mask.all()) else mask[:, None, None, :]  # [B, 1, 1, L]

        explicit = self.selector is not None or (self.training and self.dropout.p > 0) or exporting or L < FUSED_MIN_LENGTH
        if explicit:
            scores = torch.matmul(query_side, key_side.transpose(-1, -2))  # [B, H, L, L]: content + both position terms
            if self.scale != 1.0:
                scores = scores.mul_(self.scale)
            if self.selector is not None:  # ATSSA, SLA: the selector turns raw scores into weights (it applies the mask)
                attn = self.selector(scores, x, mask[:, None, :], mask, **selector_inputs)
            else:
                attn = torch.softmax(scores.masked_fill_(~keep, float("-inf")) if keep is not None else scores, dim=-1)
            out = torch.matmul(self.dropout(attn), v)  # [B, H, L, d]
        else:
            wide_v = F.pad(v, (0, query_side.shape[-1] - d))  # [B, H, L, d + 4 half], see above
            out = F.scaled_dot_product_attention(query_side, key_side, wide_v, attn_mask=keep, scale=self.scale)[..., :d]
        return out.transpose(1, 2).reshape(B, L, H * d)

"""NFLAT's InterFormer (Wu et al., "NFLAT: Non-Flat-Lattice Transformer for Chinese Named Entity Recognition", Eq. 1-10):
one sequence (characters) attends to another (lexicon words); the output has the first sequence's length.

    Q = X^C W_q,  K = X^W W_k,  V = X^W W_v                                                     Eq. 1
    InterAtt = softmax(mask(A)) V,  A_ij = (Q_i + u)^T K_j + (Q_i + v)^T R*_ij                    Eq. 2-3
    R_ij = ReLU(W_r [p_{h_i^c - h_j^w} ; p_{t_i^c - t_j^w}])                                      Eq. 4 (FLAT's ff_two)
    multi-head (Eq. 7-8), then FFN (Eq. 9), each sublayer LayerNorm(X + SubModule(X)) (Eq. 10).

This is FLAT's Eq. 11 attention with queries and keys from different sequences, so it reuses FLAT's modules
(zhner/nn/span_position.py's `SpanPositionEncoding` with separate key spans, zhner/nn/flat_attention.py's
`FlatRelativeAttention.attend`, zhner/nn/encoder.py's `EncoderLayer` with `memory`), set up
as the release has it: K projected, unscaled, no output projection, a real residual, R*_ij = W_{k,R} R_ij folded into
the query. Memory: scores are [B, H, n, m + 1], never [B, H, n + m, n + m] as in FLAT.

`<non_word>` (Section V-C): a learned key vector prepended to every sentence's words, at relative distance 0 from every
character (R of (0, 0)), so a character without a useful word can put its attention there and no softmax row is empty.
Ablations (Table IV): rpe=False drops the position term (-RPE), non_word=False drops the extra key (-TAG).
"""
from __future__ import annotations

import torch
from torch import nn

from zhner.nn.encoder import EncoderLayer
from zhner.nn.flat_attention import FlatRelativeAttention
from zhner.nn.span_position import DensePositions, SpanPositionEncoding, SpanPositions


class InterFormer(nn.Module):
    """Layers of inter-attention + FFN: x [B, n, D] (spans x_heads, x_tails) attends to y [B, m, D] (spans y_heads, y_tails,
    mask y_mask) -> [B, n, D]. Positions are computed once and shared by the layers; y is not updated (as in the release)."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        d_ff: int,
        layers: int = 1,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        rpe: bool = True,
        non_word: bool = True,
        scaled: bool = False,
    ):
        super().__init__()
        self.position = SpanPositionEncoding(d_model, "ff_two") if rpe else None
        # <non_word>: one learned key, scaled like a unit-norm input row
        self.non_word = nn.Parameter(torch.randn(d_model) / d_model**0.5) if non_word else None
        self.layers = nn.ModuleList(
            EncoderLayer(
                FlatRelativeAttention(
                    d_model, heads, attn_dropout, scaled=scaled, project_k=True, out_proj=False, relative=rpe
                ),
                d_model,
                d_ff,
                dropout,
            )
            for _ in range(layers)
        )

    def positions(
        self,
        x_heads: torch.Tensor,
        x_tails: torch.Tensor,
        y_heads: torch.Tensor,
        y_tails: torch.Tensor,
        max_distance: int,
        traceable: bool = False,
    ) -> SpanPositions | DensePositions | None:
        """R of Eq. 4 for every (x span, y span) pair (+ the <non_word> column): index [B, n, (1 +) m], or with
        `traceable` R itself [B, n, (1 +) m, D] (no data-dependent sizes: the form torch.export traces); None with -RPE."""
        if self.position is None:
            return None
        encode = self.position.dense if traceable else self.position
        return encode(x_heads, x_tails, max_distance, y_heads, y_tails, zero_key=self.non_word is not None)

    def keys(self, y: torch.Tensor, y_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The key sequence and which keys exist: ([<non_word> ; y] [B, 1 + m, D], allowed [B, 1, 1 + m]) or (y, y_mask)."""
        if self.non_word is None:
            return y, y_mask[:, None, :]
        B = y.shape[0]
        y = torch.cat([self.non_word.to(y.dtype).expand(B, 1, -1), y], dim=1)
        return y, torch.cat([y_mask.new_ones(B, 1), y_mask], dim=1)[:, None, :]

    def forward(
        self,
        x: torch.Tensor,
        x_heads: torch.Tensor,
        x_tails: torch.Tensor,
        y: torch.Tensor,
        y_heads: torch.Tensor,
        y_tails: torch.Tensor,
        y_mask: torch.Tensor,
        max_distance: int,
        traceable: bool = False,
    ) -> torch.Tensor:
        positions = self.positions(x_heads, x_tails, y_heads, y_tails, max_distance, traceable)
        keys, allowed = self.keys(y, y_mask)  # [B, K, D], [B, 1, K]
        for layer in self.layers:
            x = layer(x, positions, allowed, memory=keys)  # [B, n, D]
        return x

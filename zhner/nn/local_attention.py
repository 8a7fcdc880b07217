"""Gated local self-attention: SLA (Li et al., "Improving BERT with Syntax-aware Local Attention", Section 3) and its
window baseline WLA -- the same module, fed a different mask -- for BERT (`GatedLocalSelfAttention`) and, beyond the
paper, for TENER's relative attention over Chinese characters (`GatedLocalSelector`).

    S^glb = softmax(Q K^T / sqrt(d) + padding)                        BERT's own attention
    S^loc = softmax(Q K^T / sqrt(d) + padding + M^loc)                Eq. 4 (M^loc: Eq. 3, zhner.syntax.local_mask)
    g_i   = sigmoid(W_g h_i + b_g)                                    Eq. 5, one gate per token per layer
    A_i   = (g_i S^loc_i + (1 - g_i) S^glb_i) V                       Eq. 6

Reading of Eq. 6: g_i is a scalar per query token i (shared by all heads of the layer), computed from the layer's
input h_i; it multiplies the *local* distribution of row i and (1 - g_i) the global one, so g = 0 is exactly BERT
("if all the outputs of gated units are equal to 0, we could obtain the standard Transformer attention"). The mixture
of two distributions is a distribution: rows still sum to one. Dropout is applied to the mixed probabilities, as
BERT applies it to its own.

Q, K, V are `BertSelfAttention`'s (its `scores` and `mix`), so a pretrained BERT's weights load unchanged; the gate
(`gate.weight`, `gate.bias`) is the only new parameter, listed in `new_parameters` for the weight loader
(`BertModel.load_pretrained_weights`).

TENER (`GatedLocalSelector`, beyond the paper): the same Eq. 4-6 with TENER's relative scores
A_ij = (Q_i + u) K_j^T + (Q_i + v) R_{i-j}^T + K_j R_{i-j}^T (unscaled by default) in place of Q K^T / sqrt(d), over
characters (no [CLS] / [SEP]). It plugs into `zhner.nn.tener_attention.RelativeSelfAttention` as its `selector` (the
hook ATSSA uses): it receives the raw scores and the layer input h, and returns the mixed weights, which TENER's own
attention dropout and V then take. g_i is computed from the attention layer's input h_i, as for BERT.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from zhner.errors import ZhnerError
from zhner.nn.bert import BertConfig, BertSelfAttention, SelfAttentionFactory

KINDS = ("window", "syntax")


def check_kind(kind: str) -> None:
    """"window" | "syntax" (the mask the batch brings); anything else is an error naming model.local_attention."""
    if kind not in KINDS:
        raise ZhnerError(f"unknown local attention {kind!r}: one of none, {', '.join(KINDS)}", "model.local_attention")


def gate_bias(gate: nn.Linear, gate_init: float) -> None:
    """Eq. 5's W_g, b_g at their start: W_g = 0 and sigmoid(b_g) = gate_init, so every gate starts at gate_init."""
    if not 0 < gate_init < 1:
        raise ZhnerError(f"gate_init must lie strictly between 0 and 1, not {gate_init}", "model.gate_init")
    nn.init.zeros_(gate.weight)
    nn.init.constant_(gate.bias, math.log(gate_init / (1 - gate_init)))


def gated_mixture(
    scores: torch.Tensor, local_mask: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 4-6's attention weights from scores that already carry the padding (an added bias or a fill):
    scores [B, h, L, L], local_mask [B, L, L] bool (True = query i may attend to key j), g [B, L, 1] (Eq. 5)
    -> (g S^loc + (1 - g) S^glb, S^glb, S^loc), each [B, h, L, L]."""
    glob = torch.softmax(scores, dim=-1)  # [B, h, L, L]: S^glb
    # Eq. 4: M^loc as a fill with the dtype's minimum, not an added -inf, so that a row with nothing allowed (a
    # padded query) is uniform instead of NaN
    local = torch.softmax(scores.masked_fill(~local_mask[:, None], torch.finfo(scores.dtype).min), dim=-1)  # S^loc
    g4 = g[:, None]  # [B, 1, L, 1]: one gate per query row, shared by the heads
    return g4 * local + (1 - g4) * glob, glob, local  # Eq. 6's weights: rows still sum to one


class GatedLocalSelfAttention(BertSelfAttention):
    """BERT self-attention mixed with a locally masked copy of itself by a per-token gate (Eq. 4-6).

    forward(hidden [B, L, H], bias [B, 1, 1|L, L], local_mask [B, L, L] bool (True = query i may attend to key j))
        -> (context [B, L, H], mixed probs [B, h, L, L])
    `gate_init` sets b_g so that every gate starts at that value (W_g starts at zero): 0.5 mixes evenly, 0.01 starts
    from (almost) plain BERT. With `record = True` the last call's gates and both distributions are kept in `last`.
    """

    new_parameters = ("gate.weight", "gate.bias")

    def __init__(self, config: BertConfig, gate_init: float = 0.5, kind: str = "syntax"):
        super().__init__(config)
        self.kind = kind
        self.gate = nn.Linear(config.hidden_size, 1)  # W_g, b_g (Eq. 5)
        gate_bias(self.gate, gate_init)  # sigmoid(b_g) = gate_init
        self.record = False
        self.last: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (g [B, L], S^glb, S^loc)

    def forward(
        self, hidden: torch.Tensor, bias: torch.Tensor, local_mask: torch.Tensor | None = None, **attention_inputs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if local_mask is None:
            raise ZhnerError(f"{self.kind} local attention needs the batch's local_mask (the 'syntax' field)", "model.local_attention")
        B, L, _ = hidden.shape
        if local_mask.shape != (B, L, L):
            raise ValueError(f"local_mask has shape {tuple(local_mask.shape)}, expected {(B, L, L)}")
        scores = self.scores(hidden) + bias  # [B, h, L, L]: Q K^T / sqrt(d) + padding
        g = torch.sigmoid(self.gate(hidden))  # [B, L, 1]: Eq. 5
        probs, glob, local = gated_mixture(scores, local_mask, g)  # [B, h, L, L]: Eq. 4 and 6
        if self.record:
            self.last = (g.squeeze(-1).detach(), glob.detach(), local.detach())
        return self.mix(self.dropout(probs), hidden), probs  # [B, L, H]


def local_attention_factory(kind: str, gate_init: float = 0.5) -> SelfAttentionFactory:
    """`BertModel(config, self_attention=local_attention_factory("syntax", 0.5))`: a gated local self-attention in every
    layer. `kind` ("window" | "syntax") only names the mask the batch brings; the module is the same."""
    check_kind(kind)
    return lambda config, layer_index: GatedLocalSelfAttention(config, gate_init, kind)


class GatedLocalSelector(nn.Module):
    """SLA / WLA inside TENER's relative self-attention, as its `selector` (zhner.nn.tener_attention): Eq. 4-6 over
    TENER's scores, one gate per query character per layer (shared by the heads).

    forward(scores [B, h, L, L] raw, x [B, L, D] the layer input (h_i of Eq. 5), allowed [B, 1, L] (True = a real key),
            query_mask [B, L], local_mask [B, L, L] bool (True = query i may attend to key j))
        -> weights [B, h, L, L], to which TENER applies its attention dropout before V.
    S^glb is TENER's own masked softmax; S^loc adds Eq. 3's mask; g = 0 (or an all-True mask) is plain TENER. `gate_init`,
    `record` and `last` as in `GatedLocalSelfAttention`.
    """

    def __init__(self, d_model: int, gate_init: float = 0.5, kind: str = "syntax"):
        super().__init__()
        check_kind(kind)
        self.kind = kind
        self.gate = nn.Linear(d_model, 1)  # W_g, b_g (Eq. 5)
        gate_bias(self.gate, gate_init)  # sigmoid(b_g) = gate_init
        self.record = False
        self.last: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (g [B, L], S^glb, S^loc)

    def forward(
        self,
        scores: torch.Tensor,
        x: torch.Tensor,
        allowed: torch.Tensor,
        query_mask: torch.Tensor,
        local_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if local_mask is None:
            raise ZhnerError(f"{self.kind} local attention needs the batch's local_mask (the 'syntax' field)", "model.local_attention")
        B, _, L, K = scores.shape
        if local_mask.shape != (B, L, K):
            raise ValueError(f"local_mask has shape {tuple(local_mask.shape)}, expected {(B, L, K)}")
        # padding as TENER masks it, but with the dtype's minimum: a row without a real key stays finite
        padded = scores.masked_fill(~allowed[:, None], torch.finfo(scores.dtype).min)  # [B, h, L, L]
        g = torch.sigmoid(self.gate(x[:, :L]))  # [B, L, 1]: Eq. 5 from the layer input h_i
        weights, glob, local = gated_mixture(padded, local_mask, g)  # [B, h, L, L]: Eq. 4 and 6
        if self.record:
            self.last = (g.squeeze(-1).detach(), glob.detach(), local.detach())
        return weights


def local_selector_factory(kind: str, d_model: int, gate_init: float = 0.5) -> Callable[[], GatedLocalSelector | None]:
    """`tener_encoder(..., selector=local_selector_factory(kind, d_model, gate_init))`: a gated local selector in every
    TENER layer for kind "window" | "syntax", none (plain TENER) for "none"."""
    if kind == "none":
        return lambda: None
    check_kind(kind)
    return lambda: GatedLocalSelector(d_model, gate_init, kind)

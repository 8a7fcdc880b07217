"""Gated local self-attention for BERT: SLA (Li et al., "Improving BERT with Syntax-aware Local Attention", Section 3)
and its window baseline WLA -- the same module, fed a different mask.

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
"""
from __future__ import annotations

import math

import torch
from torch import nn

from zhner.errors import ZhnerError
from zhner.nn.bert import BertConfig, BertSelfAttention, SelfAttentionFactory

KINDS = ("window", "syntax")


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
        if not 0 < gate_init < 1:
            raise ZhnerError(f"gate_init must lie strictly between 0 and 1, not {gate_init}", "model.gate_init")
        self.kind = kind
        self.gate = nn.Linear(config.hidden_size, 1)  # W_g, b_g (Eq. 5)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, math.log(gate_init / (1 - gate_init)))  # sigmoid(b_g) = gate_init
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
        glob = torch.softmax(scores, dim=-1)  # [B, h, L, L]: S^glb
        # Eq. 4: M^loc as a fill with the dtype's minimum, not an added -inf, so that a row with nothing allowed (a
        # padded query) is uniform instead of NaN
        local = torch.softmax(scores.masked_fill(~local_mask[:, None], torch.finfo(scores.dtype).min), dim=-1)  # S^loc
        g = torch.sigmoid(self.gate(hidden))  # [B, L, 1]: Eq. 5
        g4 = g[:, None]  # [B, 1, L, 1]: one gate per query row, shared by the heads
        probs = g4 * local + (1 - g4) * glob  # [B, h, L, L]: Eq. 6's weights
        if self.record:
            self.last = (g.squeeze(-1).detach(), glob.detach(), local.detach())
        return self.mix(self.dropout(probs), hidden), probs  # [B, L, H]


def local_attention_factory(kind: str, gate_init: float = 0.5) -> SelfAttentionFactory:
    """`BertModel(config, self_attention=local_attention_factory("syntax", 0.5))`: a gated local self-attention in every
    layer. `kind` ("window" | "syntax") only names the mask the batch brings; the module is the same."""
    if kind not in KINDS:
        raise ZhnerError(f"unknown local attention {kind!r}: one of none, {', '.join(KINDS)}", "model.local_attention")
    return lambda config, layer_index: GatedLocalSelfAttention(config, gate_init, kind)

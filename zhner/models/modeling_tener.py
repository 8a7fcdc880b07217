"""TENER (Yan et al. 2019): char + bigram embeddings -> Linear -> relative-attention Transformer encoder -> CRF.

Defaults follow the authors' release (see DESIGN.md): unscaled attention with the extra key-position term, post-norm,
FFN 2H, digits normalised to '0'; per-dataset sizes live in configs/tener_<dataset>.yaml. One measured exception: the
CRF trains without transition constraints (the release constrains it) and decodes with them.

Beyond the SLA paper: `local_attention: window | syntax` (LocalAttentionSettings) puts SLA / WLA's gated local attention
(zhner.nn.local_attention.GatedLocalSelector, Eq. 4-6) into every layer's relative attention, over characters: the
batch's `local_mask` [B, L, L] (zhner.models.fields.SyntaxField; for syntax, udchinese trees in which every character
shares its jieba word's node). With `none` the model, its state_dict and its fast attention paths are TENER's.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from zhner.models.base import (
    Dropout, LocalAttentionSettings, ModelConfig, Positive, Ratio, SequenceTagger, attention_bytes, char_input, local_inputs,
)
from zhner.nn.encoder import tener_encoder
from zhner.nn.local_attention import local_selector_factory


class TENERConfig(ModelConfig, LocalAttentionSettings):
    name: Literal["tener"] = "tener"
    heads: Positive = 4
    head_dim: Positive = 64
    layers: Positive = 2
    ff_ratio: Ratio = 2.0
    dropout: Dropout = 0.15  # inside the encoder
    fc_dropout: Dropout = 0.4  # before the output layer
    scaled: bool = False
    # The CRF trained without transition constraints from zero (as FLAT's release), decoded under them: on Resume +1.60
    # (p 0.02), and on Weibo all 3 seeds trained where the constrained CRF stayed at all-O on one (README, "Accuracy
    # findings"; 3 seeds, shortened schedules)
    crf_init: Literal["zero", "normal"] = "zero"
    crf_constraints: bool = False
    constrained_decoding: bool | None = True


class TENER(SequenceTagger):
    def __init__(self, config: TENERConfig):
        super().__init__(config)
        vocab_sizes, num_tags = config.vocab_sizes, config.num_labels
        self.config = config
        d_model = config.heads * config.head_dim
        self.embed = char_input(config)
        self.in_proj = nn.Linear(self.embed.out_dim, d_model)
        selector = local_selector_factory(config.local_attention, d_model, config.gate_init)  # SLA / WLA; none: TENER
        self.layers = tener_encoder(
            d_model, config.heads, config.layers, config.ff_ratio, config.dropout, config.scaled, selector
        )
        self.fc_dropout = nn.Dropout(config.fc_dropout)
        self.out = nn.Linear(d_model, num_tags)

    def inference_bytes(self, length: int) -> int:
        # [H, L, L] scores counted as if materialised (they are when training with attention dropout; the fused
        # inference kernel needs less): a conservative bound that also keeps the quadratic time of one call in check.
        # Local attention keeps about twice as many: S^glb, the masked copy, S^loc and the mixture besides the scores
        local = self.config.local_attention != "none"
        return super().inference_bytes(length) + (2 if local else 1) * attention_bytes(self.config.heads, length, length)

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["mask"]  # [B, L]
        x = self.in_proj(self.embed(batch["chars"], batch.get("bigrams"), batch.get("bert_ids"), batch.get("char_features")))  # [B, L, D]
        local = local_inputs(self.config, batch)  # SLA / WLA: local_mask [B, L, L]
        for layer in self.layers:
            x = layer(x, mask, **local)
        return self.out(self.fc_dropout(x))  # [B, L, T]

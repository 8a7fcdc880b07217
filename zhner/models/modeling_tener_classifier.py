"""A sentence classifier on TENER's character encoder (Yan et al. 2019): char + bigram embeddings (LAC vectors) ->
relative-attention Transformer encoder -> mean and max over the characters -> labels. A text longer than `window`
characters is read in consecutive windows whose logits are averaged by their character counts (attention memory grows
with the square of the length: a 20,000-character text in one piece would need gigabytes).

Not from a paper: the Chinese classifier that pretrained character vectors make possible here, where no pretrained
Chinese BERT can be had (ChnSentiCorp; the SLA paper's Chinese classification task uses BERT-base). The encoder is
TENER's (zhner.nn.encoder.tener_encoder); pooling both the mean and the max keeps a long review's strongest cue and its
overall tone.

`local_attention: window | syntax` adds SLA / WLA's gated local attention to every layer, as for `tener`
(zhner.models.modeling_tener); a long text's windows each read their block of the character mask.
"""
from __future__ import annotations

from typing import Literal

from pydantic import model_validator

import torch
from torch import nn

from zhner.models.base import (
    CharInputConfig, Dropout, LocalAttentionSettings, Positive, Ratio, SequenceClassifier, attention_bytes, char_input,
    local_inputs,
)
from zhner.nn.encoder import tener_encoder
from zhner.nn.local_attention import local_selector_factory


class TENERClassifierConfig(CharInputConfig, LocalAttentionSettings):
    name: Literal["tener_classifier"] = "tener_classifier"
    heads: Positive = 4
    head_dim: Positive = 32
    layers: Positive = 1
    ff_ratio: Ratio = 2.0
    dropout: Dropout = 0.15  # inside the encoder
    fc_dropout: Dropout = 0.3  # before the output layer
    scaled: bool = False
    window: Positive = 512  # characters read at once

    @model_validator(mode="after")
    def _no_bert(self) -> "TENERClassifierConfig":
        if self.bert is not None or self.bert_config is not None:
            raise ValueError("tener_classifier reads characters and bigrams; for BERT use bert_classifier")
        return self


class TENERClassifier(SequenceClassifier):
    def __init__(self, config: TENERClassifierConfig):
        super().__init__()
        self.config = config
        d_model = config.heads * config.head_dim
        self.embed = char_input(config)
        self.in_proj = nn.Linear(self.embed.out_dim, d_model)
        selector = local_selector_factory(config.local_attention, d_model, config.gate_init)  # SLA / WLA; none: TENER
        self.layers = tener_encoder(
            d_model, config.heads, config.layers, config.ff_ratio, config.dropout, config.scaled, selector
        )
        self.fc_dropout = nn.Dropout(config.fc_dropout)
        self.out = nn.Linear(2 * d_model, config.num_labels)

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        return self.embed.tables()

    def bert_encoder(self) -> nn.Module | None:
        return self.embed.bert

    def inference_bytes(self, length: int) -> int:
        window = min(length, self.config.window)
        local = self.config.local_attention != "none"  # S^glb, S^loc and their mixture besides the scores
        return (2 if local else 1) * attention_bytes(self.config.heads, window, window)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["mask"]  # [B, L]
        W = self.config.window
        if mask.shape[1] <= W:
            return self.window_logits(batch)
        B = mask.shape[0]
        total = torch.zeros(B, self.config.num_labels, device=mask.device)
        for start in range(0, mask.shape[1], W):
            part = {k: batch[k][:, start : start + W] for k in ("chars", "bigrams", "mask") if k in batch}
            if "local_mask" in batch:  # [B, L, L] -> this window's block [B, w, w]
                part["local_mask"] = batch["local_mask"][:, start : start + W, start : start + W]
            n = part["mask"].sum(1)  # [B] characters of each text in this window
            rows = (n > 0).nonzero().squeeze(1)  # texts that reach this window
            logits = self.window_logits({k: v[rows] for k, v in part.items()})  # [R, C]
            total[rows] += logits * n[rows, None]
        return total / mask.sum(1, keepdim=True).clamp(min=1)  # [B, C]

    def window_logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits of texts of at most `window` characters (what ONNX export traces)."""
        mask = batch["mask"]  # [B, L]
        x = self.in_proj(self.embed(batch["chars"], batch.get("bigrams"), None, batch.get("char_features")))  # [B, L, D]
        local = local_inputs(self.config, batch)  # SLA / WLA: local_mask [B, L, L]
        for layer in self.layers:
            x = layer(x, mask, **local)
        m = mask.unsqueeze(-1)  # [B, L, 1]
        mean = (x * m).sum(1) / m.sum(1).clamp(min=1)  # [B, D]
        top = x.masked_fill(~m, float("-inf")).amax(1)  # [B, D]
        return self.out(self.fc_dropout(torch.cat([mean, top], dim=-1)))  # [B, C]

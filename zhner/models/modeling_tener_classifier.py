"""A sentence classifier on TENER's character encoder (Yan et al. 2019): char + bigram embeddings (LAC vectors) ->
relative-attention Transformer encoder -> mean and max over the characters -> labels.

Not from a paper: the Chinese classifier that pretrained character vectors make possible here, where no pretrained
Chinese BERT can be had (ChnSentiCorp; the SLA paper's Chinese classification task uses BERT-base). The encoder is
TENER's (zhner.nn.encoder.tener_encoder); pooling both the mean and the max keeps a long review's strongest cue and its
overall tone.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from zhner.models.base import CharInputConfig, Dropout, Positive, Ratio, SequenceClassifier, attention_bytes, char_input
from zhner.nn.encoder import tener_encoder


class TENERClassifierConfig(CharInputConfig):
    name: Literal["tener_classifier"] = "tener_classifier"
    heads: Positive = 4
    head_dim: Positive = 32
    layers: Positive = 1
    ff_ratio: Ratio = 2.0
    dropout: Dropout = 0.15  # inside the encoder
    fc_dropout: Dropout = 0.3  # before the output layer
    scaled: bool = False


class TENERClassifier(SequenceClassifier):
    def __init__(self, config: TENERClassifierConfig):
        super().__init__()
        self.config = config
        d_model = config.heads * config.head_dim
        self.embed = char_input(config)
        self.in_proj = nn.Linear(self.embed.out_dim, d_model)
        self.layers = tener_encoder(d_model, config.heads, config.layers, config.ff_ratio, config.dropout, config.scaled)
        self.fc_dropout = nn.Dropout(config.fc_dropout)
        self.out = nn.Linear(2 * d_model, config.num_labels)

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        return self.embed.tables()

    def bert_encoder(self) -> nn.Module | None:
        return self.embed.bert

    def inference_bytes(self, length: int) -> int:
        return attention_bytes(self.config.heads, length, length)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["mask"]  # [B, L]
        x = self.in_proj(self.embed(batch["chars"], batch.get("bigrams"), batch.get("bert_ids")))  # [B, L, D]
        for layer in self.layers:
            x = layer(x, mask)
        m = mask.unsqueeze(-1)  # [B, L, 1]
        mean = (x * m).sum(1) / m.sum(1).clamp(min=1)  # [B, D]
        top = x.masked_fill(~m, float("-inf")).amax(1)  # [B, D]
        return self.out(self.fc_dropout(torch.cat([mean, top], dim=-1)))  # [B, C]

"""ATSSA (COLING 2022, "Adaptive Threshold Selective Self-Attention for Chinese NER"), non-BERT version:

    chars [B, L] -> [char emb ; bigram emb] (dropout)                        x_i
    words [B, W] -> word emb (dropout) -> word-fusion layer (Eq. 13-15)      x^w_i  (zhner/nn/word_fusion.py)
    [x_i ; x^w_i] -> Linear -> context-encoding layers: relative self-attention (Eq. 5, TENER's module) whose softmax is
    replaced by the adaptive-threshold selection (Eq. 7-12, zhner/nn/selective_attention.py) -> Linear -> CRF
    loss = mean NLL + lambda * mean over sentences of sum over layers of ||z||_1 / L                         (Eq. 19)

Ablations of the paper's Table 4 are config switches: -SSA `selective: false` (plain attention), -topk `topk: 0`,
-AF `alpha: 1`, -DT `dynamic_threshold: false` (a fixed threshold 0). Figures 6-7 sweep `topk` and `alpha`.
The context encoder uses zhner's TENER attention module, which adds TENER's key-position term to Eq. 5 and is unscaled
by default like the FLAT release the paper builds on (alpha = 50 was tuned on unscaled scores).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from zhner.errors import ZhnerError
from zhner.models.base import (
    Dropout, ModelConfig, Positive, SequenceTagger, add_word_types, char_input, word_type_embedding,
)
from zhner.nn.encoder import tener_encoder
from zhner.nn.selective_attention import SelectiveAttention
from zhner.nn.word_fusion import WordFusion


class ATSSAConfig(ModelConfig):
    name: Literal["atssa"] = "atssa"
    heads: int = Field(8, ge=1)
    head_dim: int = Field(12, ge=1)
    layers: int = Field(1, ge=1)
    ff_ratio: float = Field(4.0, gt=0)  # Table 2: FFN size in [4, 6, 8] x heads x head_dim
    dropout: Dropout = 0.15  # FFN, sublayer outputs and attention weights
    fc_dropout: Dropout = 0.3  # before the output layer
    scaled: bool = False  # 1/sqrt(head_dim) on the context-encoding scores
    word_dim: Positive | None = None  # None = char_dim (word vectors are composed from character vectors)
    selective: bool = True  # False: plain softmax attention (ablation -SSA, the baseline of the significance test)
    topk: int = Field(3, ge=0)  # Eq. 8's floor; 0 removes it (ablation -topk)
    alpha: float = Field(50.0, gt=0)  # Eq. 9's amplification factor; 1 = ablation -AF
    tau: float = Field(1.0, gt=0)  # Gumbel-softmax temperature, Eq. 17
    dynamic_threshold: bool = True  # False: fixed threshold 0 (ablation -DT)
    l1: float = Field(4e-6, ge=0)  # lambda of Eq. 19
    # The CRF trained without transition constraints from zero, decoded under them, as TENER, FLAT and NFLAT: Resume
    # +0.47 (p 0.30, 8 epochs), Weibo +2.42 (p 0.13, 20 epochs; ahead in every seed), 3 seeds each (README, "Accuracy
    # findings"; findings_atssa_{resume,weibo}_crf.json)
    crf_init: Literal["zero", "normal"] = "zero"
    crf_constraints: bool = False
    constrained_decoding: bool | None = True


class ATSSA(SequenceTagger):
    def __init__(self, config: ATSSAConfig):
        super().__init__(config)
        vocab_sizes, num_tags = config.vocab_sizes, config.num_labels
        if "words" not in vocab_sizes:
            raise ZhnerError("ATSSA needs a lexicon: set embeddings.lexicon (e.g. jieba)", "config")
        self.config = config
        d_model = config.heads * config.head_dim
        word_dim = config.word_dim or config.char_dim
        self.embed = char_input(config)
        self.words = nn.Embedding(vocab_sizes["words"], word_dim, padding_idx=0)
        self.word_types = word_type_embedding(config, word_dim)  # embeddings.word_types (issue 50); None without
        self.word_dropout = nn.Dropout(config.embed_dropout)
        self.fusion = WordFusion(self.embed.out_dim, word_dim, d_model, config.heads)
        self.in_proj = nn.Linear(self.embed.out_dim + d_model, d_model)  # [x_i ; x^w_i] -> d_model
        self.layers = tener_encoder(
            d_model, config.heads, config.layers, config.ff_ratio, config.dropout, config.scaled, lambda: self._selector(d_model)
        )
        self.fc_dropout = nn.Dropout(config.fc_dropout)
        self.out = nn.Linear(d_model, num_tags)

    def _selector(self, d_model: int) -> SelectiveAttention | None:
        c = self.config
        if not c.selective:
            return None
        return SelectiveAttention(d_model, c.heads, c.topk, c.alpha, c.tau, c.dynamic_threshold)

    def selectors(self) -> list[SelectiveAttention]:
        """The selective mechanism of each layer, in order (empty for the -SSA ablation)."""
        return [layer.attention.selector for layer in self.layers if layer.attention.selector is not None]

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        return self.embed.tables() | {"words": self.words}

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if "words" not in batch:
            raise ZhnerError("ATSSA needs lexicon words in the batch (a featurizer built with a lexicon)")
        mask = batch["mask"]  # [B, L]
        x = self.embed(batch["chars"], batch.get("bigrams"), batch.get("bert_ids"), batch.get("char_features"))  # [B, L, d_char]
        # the word embedding of Eq. 13, plus its type embedding with embeddings.word_types
        words = self.word_dropout(add_word_types(self.words(batch["words"]), self.word_types, batch))  # [B, W, d_word]
        xw = self.fusion(x, words, batch["word_starts"], batch["word_ends"], batch["word_mask"])  # [B, L, D]
        h = self.in_proj(torch.cat([x, xw], dim=-1))  # [B, L, D]
        for layer in self.layers:
            h = layer(h, mask)
        return self.out(self.fc_dropout(h))  # [B, L, T]

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 19: mean NLL + lambda * mean over sentences of the layers' ||z||_1 / L."""
        nll = super().forward(batch)
        selectors = self.selectors()
        if not selectors or not self.config.l1:
            return nll
        return nll + self.config.l1 * sum(s.last.l1 for s in selectors).mean()

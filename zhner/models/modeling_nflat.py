"""NFLAT (Wu et al., "NFLAT: Non-Flat-Lattice Transformer for Chinese NER"): characters take in the lexicon words matched
in the sentence through an InterFormer (zhner/nn/interformer.py), then a TENER encoder over characters only, then a CRF.

    chars [B, n] -> [char emb ; bigram emb] -> Dropout(char) -> Linear -> X^C [B, n, D]   heads = tails = 0..n-1
    words [B, m] -> word emb (+ type emb) -> Dropout(word) -> Linear -> X^W [B, m, D]      heads/tails = word_starts/ends
      (embeddings.word_types: a type embedding per lexicon word added to its vector, X^W of Eq. 1)
    X^C = InterFormer(X^C attends to [<non_word> ; X^W])   scores [B, H, n, 1 + m]        (Eq. 1-10)
    X^C = TENER encoder(X^C)                               scores [B, H', n, n]           (Section IV-B)
    -> Linear -> emissions [B, n, T] -> CRF

FLAT's lattice self-attention is (n + m)^2 per head; NFLAT's is n (m + 1) + n^2 (Section V-F).
Following the release: 1 InterFormer + 1 TENER layer (`layers` sets both), FFN 2H, unscaled attention, `less_head` halves
the TENER heads (is_less_head). Per-dataset values live in configs/nflat_<dataset>.yaml.

Beyond the SLA paper: `local_attention: window | syntax` (LocalAttentionSettings) puts SLA / WLA's gated local attention
(zhner.nn.local_attention.GatedLocalSelector, Eq. 4-6) into the character layer (the TENER encoder) over the batch's
`local_mask` [B, n, n], as in TENER; the InterFormer (characters to words) is left as it is. With `none`, NFLAT is
unchanged.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from zhner.errors import ZhnerError
from zhner.models.base import (
    FLOAT,
    WORDS_PER_CHAR,
    Dropout,
    LocalAttentionSettings,
    ModelConfig,
    Positive,
    SequenceTagger,
    add_word_types,
    attention_bytes,
    char_input,
    local_inputs,
    word_type_embedding,
)
from zhner.nn.encoder import EncoderLayer
from zhner.nn.interformer import InterFormer
from zhner.nn.local_attention import local_selector_factory
from zhner.nn.tener_attention import RelativeSelfAttention


class NFLATConfig(ModelConfig, LocalAttentionSettings):
    name: Literal["nflat"] = "nflat"
    heads: int = Field(8, ge=1)  # inter-attention heads
    head_dim: int = Field(16, ge=1)
    layers: int = Field(1, ge=1)  # InterFormer layers, and TENER layers
    less_head: bool = False  # TENER encoder with heads // 2 (the release's is_less_head = 2)
    ff_ratio: float = Field(2.0, gt=0)
    dropout: Dropout = 0.2  # FFN and sublayer outputs in both encoders
    attn_dropout: Dropout = 0.0  # on the attention weights of both encoders
    fc_dropout: Dropout = 0.0  # before the output layer
    word_dropout: Dropout = 0.5  # on word embeddings (embed_dropout is the character one)
    rpe: bool = True  # False: no relative position in inter-attention (Table IV, -RPE)
    non_word: bool = True  # False: no <non_word> key (Table IV, -TAG)
    scaled: bool = False  # 1/sqrt(head_dim) on both encoders' scores; the release's are unscaled
    word_dim: Positive | None = None  # None = char_dim (word vectors are composed from character vectors)
    # The CRF trained without transition constraints from zero, decoded under them, as FLAT's and TENER's defaults:
    # measured +0.96 on Resume (p 0.09) and +1.46 on Weibo (p 0.37), dev +2.7 there (3 seeds, shortened schedules;
    # README, "Accuracy findings")
    crf_init: Literal["zero", "normal"] = "zero"
    crf_constraints: bool = False
    constrained_decoding: bool | None = True


class NFLAT(SequenceTagger):
    def __init__(self, config: NFLATConfig):
        super().__init__(config)
        vocab_sizes, num_tags = config.vocab_sizes, config.num_labels
        if "words" not in vocab_sizes:
            raise ZhnerError("NFLAT needs a lexicon: set embeddings.lexicon (e.g. jieba)", "config")
        self.config = config
        d_model = config.heads * config.head_dim
        d_ff = int(config.ff_ratio * d_model)
        self_heads = config.heads // 2 if config.less_head else config.heads
        if self_heads < 1 or d_model % self_heads:
            raise ZhnerError(f"model.less_head: {config.heads} // 2 heads do not divide d_model {d_model}", "config")
        word_dim = config.word_dim or config.char_dim
        self.embed = char_input(config)
        self.words = nn.Embedding(vocab_sizes["words"], word_dim, padding_idx=0)
        self.word_types = word_type_embedding(config, word_dim)  # embeddings.word_types (issue 50); None without
        self.word_dropout = nn.Dropout(config.word_dropout)
        self.char_proj = nn.Linear(self.embed.out_dim, d_model)
        self.word_proj = nn.Linear(word_dim, d_model)
        self.interformer = InterFormer(
            d_model, config.heads, d_ff, config.layers, config.dropout, config.attn_dropout,
            config.rpe, config.non_word, config.scaled,
        )
        selector = local_selector_factory(config.local_attention, d_model, config.gate_init)  # SLA / WLA; none: NFLAT
        self.encoder = nn.ModuleList(
            EncoderLayer(
                RelativeSelfAttention(d_model, self_heads, config.attn_dropout, config.scaled, selector()),
                d_model,
                d_ff,
                config.dropout,
            )
            for _ in range(config.layers)
        )
        self.fc_dropout = nn.Dropout(config.fc_dropout)
        self.out = nn.Linear(d_model, num_tags)

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        return self.embed.tables() | {"words": self.words}

    def inference_bytes(self, length: int) -> int:
        keys = math.ceil(WORDS_PER_CHAR * length) + 1  # words and <non_word>
        D = self.config.heads * self.config.head_dim
        inter = attention_bytes(self.config.heads, length, keys) + 8 * length * keys  # scores, position rows (int64)
        table = 2 * FLOAT * (2 * length + 1) * 16 * D  # R rows for (distance, word length), and a copy
        tener = attention_bytes(self.encoder[0].attention.heads, length, length)  # as TENER.inference_bytes
        tener *= 2 if self.config.local_attention != "none" else 1  # S^glb, the masked copy, S^loc and the mixture
        return super().inference_bytes(length) + inter + table + tener

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._emissions(batch, traceable=False)

    def traceable_emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The same emissions with R of Eq. 4 stored per (character, word) pair: no data-dependent sizes, so it exports."""
        return self._emissions(batch, traceable=True)

    def _emissions(self, batch: dict[str, torch.Tensor], traceable: bool) -> torch.Tensor:
        if "words" not in batch:
            raise ZhnerError("NFLAT needs lexicon words in the batch (a featurizer built with a lexicon)")
        chars, mask = batch["chars"], batch["mask"]  # [B, n]
        B, n = chars.shape
        x = self.char_proj(self.embed(chars, batch.get("bigrams"), batch.get("bert_ids"), batch.get("char_features")))  # [B, n, D]
        # X^W of Eq. 1: the word's vector, plus its type embedding with embeddings.word_types
        w = self.word_proj(self.word_dropout(add_word_types(self.words(batch["words"]), self.word_types, batch)))  # [B, m, D]
        positions = torch.arange(n, device=chars.device).expand(B, n)  # a character's head and tail are its index
        x = self.interformer(
            x, positions, positions, w, batch["word_starts"], batch["word_ends"], batch["word_mask"], n - 1, traceable
        )
        local = local_inputs(self.config, batch)  # SLA / WLA: local_mask [B, n, n]
        for layer in self.encoder:
            x = layer(x, mask, **local)
        return self.out(self.fc_dropout(x))  # [B, n, T]

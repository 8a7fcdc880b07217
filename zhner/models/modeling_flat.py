"""FLAT (Li et al., ACL 2020): characters and the lexicon words matched in the sentence as one flat sequence of spans,
a Transformer encoder with span relative position encoding (Eq. 4-11, see zhner/nn/span_position.py and
zhner/nn/flat_attention.py), CRF over characters.

    chars [B, L] -> [char emb ; bigram emb] -> Linear -> [B, L, D]   heads = tails = 0..L-1
    words [B, W] -> word emb (+ type emb) -> Linear -> [B, W, D]     heads = word_starts, tails = word_ends
      (word_embedding "chars": a word's vector is the mean of its characters' rows of the char table, so there is no word
       table and any lexicon word works at prediction time, seen in training or not -- a small model to ship)
      (embeddings.word_types: a type embedding per lexicon word -- jieba's tag, LAC's reading, or both summed -- added
       to the word's vector: the word token's E_x of Eq. 3 / 11; zhner.nn.embedding.TypeEmbedding)
    flat = [chars ; words] [B, N = L + W, D], span mask = [mask ; word_mask]
    -> encoder layers -> first L positions -> Linear -> emissions [B, L, T] -> CRF

Presets: "default" is the release's attention (unscaled, K the layer input, no output projection) with a real residual,
and trains the CRF as the release does (zero-initialised, no transition constraints in the likelihood) but decodes it
under the tag scheme's constraints, so that its output is always well-formed (README, "Accuracy findings", for what each
choice measured); "compat" reproduces the authors' release (DESIGN.md, FLAT V0): LayerNorm(2 * sublayer) instead of a
residual, the same attention, zero-initialised CRF without constraints in training or decoding.
Sizes and optimisation per dataset live in configs/flat_<dataset>.yaml.
"""
from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import nn
from torch.nn import functional as F

from zhner.errors import ZhnerError
from zhner.models.base import (
    FLOAT,
    WORDS_PER_CHAR,
    Dropout,
    ModelConfig,
    Positive,
    SequenceTagger,
    add_word_types,
    attention_bytes,
    char_input,
    word_type_embedding,
)
from zhner.nn.encoder import EncoderLayer
from zhner.nn.flat_attention import FlatRelativeAttention, span_attention_mask
from zhner.nn.span_position import SpanPositionEncoding

# what preset "compat" sets (fields the user sets explicitly keep their value, so ablations on top of compat work)
COMPAT = {
    "residual": False,
    "scaled": False,
    "project_k": False,
    "out_proj": False,
    "crf_init": "zero",
    "crf_constraints": False,
    "constrained_decoding": False,
}


class FLATConfig(ModelConfig):
    name: Literal["flat"] = "flat"
    heads: int = Field(8, ge=1)
    head_dim: int = Field(20, ge=1)
    layers: int = Field(1, ge=1)
    ff_ratio: float = Field(3.0, gt=0)
    dropout: Dropout = 0.15  # FFN and sublayer outputs
    attn_dropout: Dropout = 0.0  # on the attention weights
    fc_dropout: Dropout = 0.3  # before the output layer (the release's "output" dropout)
    position_fusion: Literal["ff_two", "ff_four", "head"] = "ff_two"
    preset: Literal["default", "compat"] = "default"
    msm: bool = False  # mask attention from characters to their self-matched words (Table 2, FLAT_msm)
    mld: bool = False  # mask attention between spans more than 10 characters apart (FLAT_mld)
    residual: bool = True  # False (compat): LayerNorm(2 * sublayer), the release's missing residual
    # The release's attention: no 1/sqrt(head_dim), K the layer input, no output projection. Ahead of the textbook form
    # (all three True) in the mean at the release's 50 epochs on Resume and Weibo (5 seeds each), significant on neither;
    # README, "Accuracy findings".
    scaled: bool = False
    project_k: bool = False
    out_proj: bool = False
    word_dim: Positive | None = None  # None = char_dim (word vectors are composed from character vectors)
    word_embedding: Literal["table", "chars"] = "table"  # chars: mean of the word's character embeddings, no word table
    # The CRF as the release trains it (zero-initialised, no transition constraints in the likelihood), decoded under the
    # constraints so that the output is well-formed: measured ~1 F1 above a constrained, normal-initialised CRF on Resume
    # (3 seeds; README, "Accuracy findings"). The residual stays: without it training never leaves all-O on Weibo.
    crf_init: Literal["zero", "normal"] = "zero"
    crf_constraints: bool = False
    constrained_decoding: bool | None = True

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") == "compat":
            data = dict(data)
            for key, value in COMPAT.items():
                data.setdefault(key, value)
        return data


class FLAT(SequenceTagger):
    def __init__(self, config: FLATConfig):
        super().__init__(config)
        vocab_sizes, num_tags = config.vocab_sizes, config.num_labels
        if config.word_embedding == "table" and "words" not in vocab_sizes:
            raise ZhnerError("FLAT needs a lexicon: set embeddings.lexicon (e.g. jieba)", "config")
        if config.word_embedding == "chars" and config.word_dim not in (None, config.char_dim):
            raise ZhnerError("model.word_dim: composed word vectors have the char table's width; leave it unset", "config")
        self.config = config
        d_model = config.heads * config.head_dim
        word_dim = config.word_dim or config.char_dim
        self.embed = char_input(config)
        self.words = nn.Embedding(vocab_sizes["words"], word_dim, padding_idx=0) if config.word_embedding == "table" else None
        self.word_types = word_type_embedding(config, word_dim)  # embeddings.word_types (issue 50); None without
        self.word_dropout = nn.Dropout(config.embed_dropout)
        self.char_proj = nn.Linear(self.embed.out_dim, d_model)
        self.word_proj = nn.Linear(word_dim, d_model)
        self.position = SpanPositionEncoding(d_model, config.position_fusion)
        self.layers = nn.ModuleList(
            EncoderLayer(
                FlatRelativeAttention(
                    d_model, config.heads, config.attn_dropout, config.scaled, config.project_k, config.out_proj
                ),
                d_model,
                int(config.ff_ratio * d_model),
                config.dropout,
                config.residual,
            )
            for _ in range(config.layers)
        )
        self.fc_dropout = nn.Dropout(config.fc_dropout)
        self.out = nn.Linear(d_model, num_tags)
        # set by zhner.export to the lexicon's longest word + 1: a one-layer model then traces R of character queries
        # over (distance, key length) (CharQueryPositions) instead of per pair (DensePositions, [B, N, N, D]), with the
        # key lengths of each batch an input of the graph (`key_lengths`, zhner.runtime.features.key_length_range)
        self.export_word_lengths: int | None = None

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        return self.embed.tables() | ({"words": self.words} if self.words is not None else {})

    def word_vectors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, W, word_dim]: rows of the word table, or the mean of each word's character embeddings (word_embedding chars),
        taken as a difference of prefix sums over the sentence: sum(chars[s..e]) = C[e + 1] - C[s]."""
        if self.words is not None:
            return self.words(batch["words"])
        chars = self.embed.chars(batch["chars"])  # [B, L, C]
        prefix = F.pad(chars.cumsum(dim=1), (0, 0, 1, 0))  # [B, L + 1, C], prefix[:, i] = sum of chars[:, :i]
        starts, ends = batch["word_starts"], batch["word_ends"]  # [B, W]
        width = chars.shape[-1]
        total = prefix.gather(1, (ends + 1)[..., None].expand(-1, -1, width)) - prefix.gather(
            1, starts[..., None].expand(-1, -1, width)
        )  # [B, W, C]
        return total / (ends - starts + 1)[..., None].to(total.dtype)

    def lattice(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The flat lattice of a batch: (x [B, N, D], heads [B, N], tails [B, N], span mask [B, N]), N = L + W."""
        if "word_starts" not in batch:
            raise ZhnerError("FLAT needs lexicon words in the batch (a featurizer built with a lexicon)")
        chars, mask = batch["chars"], batch["mask"]  # [B, L]
        B, L = chars.shape
        x_chars = self.char_proj(self.embed(chars, batch.get("bigrams"), batch.get("bert_ids"), batch.get("char_features")))  # [B, L, D]
        # a word token's embedding E_x (Eq. 3 / 11): its vector, plus its type embedding with embeddings.word_types
        x_words = self.word_proj(self.word_dropout(add_word_types(self.word_vectors(batch), self.word_types, batch)))  # [B, W, D]
        positions = torch.arange(L, device=chars.device).expand(B, L)  # a character's head and tail are its index
        heads = torch.cat([positions, batch["word_starts"]], dim=1)  # [B, N]
        tails = torch.cat([positions, batch["word_ends"]], dim=1)  # [B, N]
        span_mask = torch.cat([mask, batch["word_mask"]], dim=1)  # [B, N]
        return torch.cat([x_chars, x_words], dim=1), heads, tails, span_mask

    def inference_bytes(self, length: int) -> int:
        N = length + math.ceil(WORDS_PER_CHAR * length)  # spans
        D = self.config.heads * self.config.head_dim
        scores = attention_bytes(self.config.heads, N if self.config.layers > 1 else length, N)  # last layer: characters
        index = 8 * length * N if self.config.layers == 1 else 8 * N * N  # the pairs' position rows (int64)
        table = 2 * FLOAT * (2 * length + 1) * 33 * D  # R rows for (distance, length difference), and a copy
        return super().inference_bytes(length) + scores + index + table

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._emissions(batch, traceable=False)

    def traceable_emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The same emissions with no data-dependent sizes, so that they export: with `export_word_lengths` set (one
        layer), R over (distance, key length) for the character queries (CharQueryPositions); else R stored per pair
        (DensePositions)."""
        return self._emissions(batch, traceable=True)

    def _emissions(self, batch: dict[str, torch.Tensor], traceable: bool) -> torch.Tensor:
        x, heads, tails, span_mask = self.lattice(batch)
        L = batch["chars"].shape[1]
        # R of Eq. 8, shared by the layers
        if traceable and len(self.layers) == 1 and self.export_word_lengths:  # the characters are the only queries
            # key lengths 0..K-1: the graph's input key_lengths (K from the batch's longest word), else the lexicon's
            key_lengths = batch.get("key_lengths")
            if key_lengths is None:
                key_lengths = torch.arange(self.export_word_lengths, device=heads.device)
            positions = self.position.char_queries(heads, tails, L, key_lengths)
        elif traceable:
            positions = self.position.dense(heads, tails, max_distance=L - 1)
        elif len(self.layers) == 1 and not torch.is_grad_enabled():  # inference, one layer: character queries only
            positions = self.position(heads[:, :L], tails[:, :L], max_distance=L - 1, key_heads=heads, key_tails=tails)
            positions.chars = L
        else:
            positions = self.position(heads, tails, max_distance=L - 1)
            positions.chars = L
        allowed = span_attention_mask(heads, tails, span_mask, L, self.config.msm, self.config.mld)
        for n, layer in enumerate(self.layers):
            # the output reads characters only: the last layer computes just their queries (exact, and ~W/N cheaper)
            x = layer(x, positions, allowed, num_queries=L if n == len(self.layers) - 1 else None)
        return self.out(self.fc_dropout(x))  # [B, L, T]

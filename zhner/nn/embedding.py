"""Character (+ bigram) (+ BERT) input embeddings shared by the character-level taggers."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from zhner.nn.bert_features import BertCharFeatures


class CharBigramEmbedding(nn.Module):
    """[char emb ; bigram emb (; BERT features) (; frozen features)] with dropout: chars [B, L], bigrams [B, L],
    bert_ids [B, L + 2], features [B, L, feature_dim] -> [B, L, char_dim + bigram_dim (+ BERT hidden) (+ feature_dim)].
    BERT is there when `bert_config` is given (FLAT Table 4); the frozen features (LAC's, zhner.models.fields.LacField)
    when `feature_dim` > 0: they come with the batch and have no parameter here."""

    def __init__(
        self,
        n_chars: int,
        char_dim: int,
        n_bigrams: int,
        bigram_dim: int,
        dropout: float,
        bert_config: dict | None = None,
        bert_trainable: bool = True,
        feature_dim: int = 0,
        bert_frozen_layers: int = 0,
    ):
        super().__init__()
        self.chars = nn.Embedding(n_chars, char_dim, padding_idx=0)
        self.bigrams = nn.Embedding(n_bigrams, bigram_dim, padding_idx=0) if bigram_dim else None
        self.bert = BertCharFeatures(bert_config, bert_trainable, frozen_layers=bert_frozen_layers) if bert_config else None
        self.dropout = nn.Dropout(dropout)
        self.feature_dim = feature_dim
        self.out_dim = char_dim + bigram_dim + (self.bert.hidden if self.bert is not None else 0) + feature_dim

    def tables(self) -> dict[str, nn.Embedding]:
        """The tables that pretrained vectors can initialise, by vocabulary name."""
        return {"chars": self.chars} | ({"bigrams": self.bigrams} if self.bigrams is not None else {})

    def forward(
        self,
        chars: torch.Tensor,
        bigrams: torch.Tensor | None,
        bert_ids: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        parts = [self.chars(chars)]
        if self.bigrams is not None:
            parts.append(self.bigrams(bigrams))
        if self.bert is not None:
            if bert_ids is None:
                raise ValueError("this model reads BERT features: the batch needs bert_ids (a featurizer with a BERT vocabulary)")
            parts.append(self.bert(bert_ids, (chars != 0).sum(1)))
        if self.feature_dim:
            if features is None:
                raise ValueError("this model reads frozen character features: the batch needs char_features (model.char_features)")
            parts.append(features.to(parts[0].dtype))  # [B, L, feature_dim], no gradient flows into them
        return self.dropout(torch.cat(parts, dim=-1))


def load_matrix(embedding: nn.Embedding, matrix: np.ndarray) -> None:
    """Copy pretrained rows into an embedding table (shapes must agree); the padding row stays zero."""
    if tuple(matrix.shape) != tuple(embedding.weight.shape):
        raise ValueError(f"pretrained matrix {matrix.shape} does not fit embedding {tuple(embedding.weight.shape)}")
    with torch.no_grad():
        embedding.weight.copy_(torch.from_numpy(np.asarray(matrix, dtype=np.float32)))
        if embedding.padding_idx is not None:
            embedding.weight[embedding.padding_idx].zero_()


class TypeEmbedding(nn.Module):
    """A type embedding per lexicon word (issue 50), one table per type source, summed: word_types [B, W, S] (each
    source's type id, 0 at padding) -> [B, W, dim], added to the word's own vector where it enters the lattice (FLAT's
    token embedding E_x of Eq. 3 / Eq. 11 for a word token, NFLAT's X^W of Eq. 1). The tables start at zero, so training
    starts from the model without types and learns how far to trust them."""

    def __init__(self, sizes: list[int], dim: int):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(n, dim, padding_idx=0) for n in sizes)
        for table in self.tables:
            nn.init.zeros_(table.weight)

    def forward(self, word_types: torch.Tensor) -> torch.Tensor:
        out = self.tables[0](word_types[..., 0])
        for s in range(1, len(self.tables)):
            out = out + self.tables[s](word_types[..., s])
        return out

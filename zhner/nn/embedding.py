"""Character (+ bigram) input embeddings shared by the character-level taggers."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


class CharBigramEmbedding(nn.Module):
    """[char emb ; bigram emb] with dropout: chars [B, L], bigrams [B, L] -> [B, L, char_dim + bigram_dim]."""

    def __init__(self, n_chars: int, char_dim: int, n_bigrams: int, bigram_dim: int, dropout: float):
        super().__init__()
        self.chars = nn.Embedding(n_chars, char_dim, padding_idx=0)
        self.bigrams = nn.Embedding(n_bigrams, bigram_dim, padding_idx=0) if bigram_dim else None
        self.dropout = nn.Dropout(dropout)
        self.out_dim = char_dim + bigram_dim

    def tables(self) -> dict[str, nn.Embedding]:
        """The tables that pretrained vectors can initialise, by vocabulary name."""
        return {"chars": self.chars} | ({"bigrams": self.bigrams} if self.bigrams is not None else {})

    def forward(self, chars: torch.Tensor, bigrams: torch.Tensor | None) -> torch.Tensor:
        x = self.chars(chars)
        if self.bigrams is not None:
            x = torch.cat([x, self.bigrams(bigrams)], dim=-1)
        return self.dropout(x)


def load_matrix(embedding: nn.Embedding, matrix: np.ndarray) -> None:
    """Copy pretrained rows into an embedding table (shapes must agree); the padding row stays zero."""
    if tuple(matrix.shape) != tuple(embedding.weight.shape):
        raise ValueError(f"pretrained matrix {matrix.shape} does not fit embedding {tuple(embedding.weight.shape)}")
    with torch.no_grad():
        embedding.weight.copy_(torch.from_numpy(np.asarray(matrix, dtype=np.float32)))
        if embedding.padding_idx is not None:
            embedding.weight[embedding.padding_idx].zero_()

"""BiLSTM-CRF over characters (+ bigrams): the character baseline of Lattice LSTM (Zhang & Yang 2018)."""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from zhner.models.base import ModelConfig, SequenceTagger, char_input


class BiLSTMCRFConfig(ModelConfig):
    name: Literal["bilstm_crf"] = "bilstm_crf"
    hidden: int = 200  # per direction
    layers: int = 1
    dropout: float = 0.5


class BiLSTMCRF(SequenceTagger):
    def __init__(self, config: BiLSTMCRFConfig, vocab_sizes: dict[str, int], num_tags: int, constraints=None):
        super().__init__(num_tags, constraints if config.crf_constraints else None, config.crf_init)
        self.config = config
        self.embed = char_input(config, vocab_sizes)
        self.lstm = nn.LSTM(
            self.embed.out_dim,
            config.hidden,
            num_layers=config.layers,
            bidirectional=True,
            batch_first=True,
            dropout=config.dropout if config.layers > 1 else 0.0,
        )
        self.dropout = nn.Dropout(config.dropout)
        self.out = nn.Linear(2 * config.hidden, num_tags)

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["mask"]  # [B, L]
        x = self.embed(batch["chars"], batch.get("bigrams"), batch.get("bert_ids"))  # [B, L, E]
        lengths = mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # [B, L, 2H]
        return self.out(self.dropout(out))  # [B, L, T]

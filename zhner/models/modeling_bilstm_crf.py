"""BiLSTM-CRF over characters (+ bigrams): the character baseline of Lattice LSTM (Zhang & Yang 2018)."""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from zhner.errors import ZhnerError
from zhner.models.base import Dropout, ModelConfig, Positive, SequenceTagger, char_input


class BiLSTMCRFConfig(ModelConfig):
    name: Literal["bilstm_crf"] = "bilstm_crf"
    hidden: Positive = 200  # per direction
    layers: Positive = 1
    dropout: Dropout = 0.5


class BiLSTMCRF(SequenceTagger):
    def __init__(self, config: BiLSTMCRFConfig):
        super().__init__(config)
        vocab_sizes, num_tags = config.vocab_sizes, config.num_labels
        self.config = config
        self.embed = char_input(config)
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
        x = self.embed(batch["chars"], batch.get("bigrams"), batch.get("bert_ids"), batch.get("char_features"))  # [B, L, E]
        lengths = mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # [B, L, 2H]
        return self.out(self.dropout(out))  # [B, L, T]

    def traceable_emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The packed-sequence result without packing (packing does not trace): the LSTM runs on left-aligned input, whose
        forward direction never sees padding before a token, and on right-aligned input (padding first), whose backward
        direction never does; each run gives its padding-free half. Exact for one layer (a second layer would need both
        halves of the first), at twice the LSTM cost."""
        if self.config.layers != 1:
            raise ZhnerError("exporting BiLSTM-CRF supports model.layers=1 only", "config")
        mask = batch["mask"]  # [B, L]
        x = self.embed(batch["chars"], batch.get("bigrams"), batch.get("bert_ids"), batch.get("char_features"))  # [B, L, E]
        L, H = x.shape[1], self.config.hidden
        shift = L - mask.sum(1, keepdim=True)  # [B, 1] padding length
        positions = torch.arange(L, device=x.device)[None, :]  # [1, L]
        # right-aligned position s holds token s - shift; left-aligned token t sits at right-aligned t + shift
        to_right = (positions - shift).clamp(min=0)[..., None]  # [B, L, 1]
        x_right = x.gather(1, to_right.expand(-1, -1, x.shape[2])).masked_fill((positions < shift)[..., None], 0.0)
        forward, _ = self.lstm(x)  # [B, L, 2H]
        backward, _ = self.lstm(x_right)  # [B, L, 2H]
        from_right = (positions + shift).clamp(max=L - 1)[..., None]  # [B, L, 1]
        backward = backward[..., H:].gather(1, from_right.expand(-1, -1, H))  # [B, L, H]
        out = torch.cat([forward[..., :H], backward], dim=-1).masked_fill(~mask[..., None], 0.0)  # [B, L, 2H]
        return self.out(self.dropout(out))  # [B, L, T]

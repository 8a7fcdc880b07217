"""BERT character features for the character taggers (FLAT Table 4's BERT+FLAT, BERT-CRF), fine-tuned, frozen, or
partly frozen with its first K layers' output memoised.

    BertCharFeatures    bert_ids [B, L + 2] -> character features [B, L, hidden], windowed past BERT's 512 positions
    bert_token          one character's vocabulary entry
    memo_disabled       frozen encoders run on every row instead of reading their memo (ONNX export traces this)

Chinese BERT vocabularies hold one token per CJK character, so for the character taggers a sentence of L characters is
[CLS] c_1 .. c_L [SEP] and the output at position i + 1 is character i's feature: no word-piece alignment is needed (a
character missing from the vocabulary is [UNK]). Word-piece input (English, SLA) goes through `zhner.data.wordpiece`.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from zhner.errors import ZhnerError
from zhner.nn.bert import BertConfig, BertModel, SelfAttentionFactory
from zhner.nn.memo import RowMemo

__all__ = ["BertCharFeatures", "bert_token", "memo_disabled"]


def bert_token(char: str) -> str:
    """The vocabulary entry of one character, as BERT's basic tokenizer would produce it (lower-cased; for Chinese BERT
    accents are stripped too, but the characters that matter -- CJK, digits, ASCII -- have none)."""
    return char.lower()


class BertCharFeatures(nn.Module):
    """bert_ids [B, L + 2] ([CLS] chars [SEP], padded), lengths [B] -> character features [B, L, hidden].

    BERT sees at most `max_position_embeddings` positions (512): a longer sentence is cut into consecutive windows of at
    most 510 characters, each wrapped in [CLS] .. [SEP], and the window outputs are concatenated -- nothing is truncated.
    Built from the config dict alone (saved in the model directory), so loading a trained model needs no checkpoint; the
    trainer copies the pretrained weights in once, before training (`zhner.train.trainer`). The encoder is `self.model`,
    so the state-dict keys are `model.` + Hugging Face's names, as in directories saved when this used transformers.

    Frozen (`trainable` false, and no SLA / WLA gate in it): the encoder runs in eval mode (no dropout), without a
    graph, and its outputs are memoised per distinct row of ids (`zhner.nn.memo.RowMemo`, float16), so each sentence
    is encoded once; no gradient reaches it and the optimiser never sees its weights. `memo_disabled` runs it on every
    row instead (ONNX export traces that path); both give the same float16-rounded outputs.

    Partly frozen (`frozen_layers` K > 0): the embeddings and the first K layers are frozen the same way (eval mode, no
    graph, their output at layer K memoised per row, [CLS] and [SEP] included); only layers K .. N - 1 train, so a
    training step runs N - K layers forward and backward instead of N, and a saved model needs to store only those
    (zhner.pipeline reads the frozen ones back from the wheel they came from). K = N is the frozen encoder.
    """

    def __init__(
        self, bert_config: dict, trainable: bool = True, self_attention: SelfAttentionFactory | None = None,
        frozen_layers: int = 0,
    ):
        super().__init__()
        config = BertConfig.from_dict(bert_config, "model.bert_config")
        if not 0 <= frozen_layers <= config.num_hidden_layers:
            raise ZhnerError(
                f"{frozen_layers} is not between 0 and the encoder's {config.num_hidden_layers} layers", "model.bert_frozen_layers"
            )
        if frozen_layers and self_attention is not None:
            raise ZhnerError("cannot freeze layers of an SLA / WLA encoder: its gates train in every layer", "model.bert_frozen_layers")
        self.model = BertModel(config, add_pooling_layer=False, self_attention=self_attention)
        self.hidden = config.hidden_size
        self.window = config.max_position_embeddings - 2  # characters per BERT call
        if config.cls_token_id is None or config.sep_token_id is None:
            raise ZhnerError("the BERT config lacks cls_token_id / sep_token_id", "model.bert_config")
        self.cls_id, self.sep_id = int(config.cls_token_id), int(config.sep_token_id)
        self.pad_id = int(config.pad_token_id or 0)
        if not trainable:  # a frozen BERT; SLA / WLA's new gates (`new_parameters`) still train
            self.model.requires_grad_(False)
            for module in self.model.modules():
                for name in getattr(module, "new_parameters", ()):
                    module.get_parameter(name).requires_grad_(True)
        self.frozen_layers = frozen_layers if trainable and frozen_layers < config.num_hidden_layers else 0
        if frozen_layers:  # the embeddings and the first K layers; K = N freezes the whole encoder, as trainable false
            self.model.embeddings.requires_grad_(False)
            self.model.encoder.layer[:frozen_layers].requires_grad_(False)
        self.memo = RowMemo()  # a frozen encoder's outputs by row; not part of the state
        self.use_memo = True  # false: a frozen encoder runs on every row (see memo_disabled)
        # new weights, new outputs: loading into this module, a model holding it, or the encoder alone (the trainer's
        # load_pretrained_weights) empties the memo
        self.model.register_load_state_dict_post_hook(self._weights_loaded)

    def _weights_loaded(self, module: nn.Module, keys: object) -> None:
        self.memo.clear()

    @property
    def frozen(self) -> bool:
        """No weight of the encoder trains: its outputs are a fixed function of the ids."""
        return not any(p.requires_grad for p in self.model.parameters())

    def forward(self, bert_ids: torch.Tensor, lengths: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """bert_ids [B, L + 2], lengths [B] -> [B, L, H]. `local_mask` [B, L + 2, L + 2] (SLA / WLA, True = may
        attend) goes to every layer's self-attention; a long input's windows each get their block of it."""
        if local_mask is not None or not self.frozen:
            return self.encode(bert_ids, lengths, local_mask)
        if self.use_memo:
            return self.memo.features(bert_ids, lengths, self.frozen_encode, self.model.embeddings.word_embeddings.weight.dtype)
        out = self.frozen_encode(bert_ids, lengths)  # [B, L, H]
        return out.to(torch.float16).to(out.dtype)  # rounded as the memo keeps it, so that both paths agree

    def frozen_encode(self, bert_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The frozen encoder in eval mode (no dropout), without a graph: [B, L, H] in float32."""
        was_training = self.model.training
        if was_training:
            self.model.eval()
        with torch.no_grad():
            out = self.encode(bert_ids, lengths)
        if was_training:
            self.model.train()
        return out

    def encode(self, bert_ids: torch.Tensor, lengths: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder on every row, windowed past `self.window` characters: [B, L, H]."""
        B, L = bert_ids.shape[0], bert_ids.shape[1] - 2
        if L <= self.window:
            mask = torch.arange(L + 2, device=bert_ids.device)[None, :] < (lengths[:, None] + 2)  # [B, L+2]
            return self.last_hidden(bert_ids, mask, local_mask)[:, 1 : L + 1]  # [B, L, H]
        return torch.cat([self._window(bert_ids, lengths, s, local_mask) for s in range(0, L, self.window)], dim=1)

    def last_hidden(self, ids: torch.Tensor, mask: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer over one window of rows: ids [B, W] ([CLS] pieces [SEP], padded), attention mask [B, W] (True
        up to each row's [SEP]) -> [B, W, H]. A partly frozen encoder reads its first K layers' output from the memo."""
        if not self.frozen_layers:
            inputs = {"local_mask": local_mask} if local_mask is not None else None
            return self.model(input_ids=ids, attention_mask=mask.long(), attention_inputs=inputs).last_hidden_state
        lengths = mask.sum(1) - 2  # [B]: pieces of each row
        dtype = self.model.embeddings.word_embeddings.weight.dtype
        if self.use_memo:
            x = self.memo.features(ids, lengths, self.frozen_prefix, dtype, ends=True)  # [B, W, H]
        else:
            x = self.frozen_prefix(ids, lengths).to(torch.float16).to(dtype)  # rounded as the memo keeps it
        bias = self.model.mask_bias(mask, ids, x.dtype)  # [B, 1, 1, W]
        for layer in self.model.encoder.layer[self.frozen_layers :]:
            x, _ = layer(x, bias)
        return x  # [B, W, H]

    def frozen_prefix(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The embeddings and the first `frozen_layers` layers in eval mode, without a graph: ids [b, W], lengths [b]
        -> [b, W, H] in float32, every position ([CLS] and [SEP] too; padding's rows are never read)."""
        mask = torch.arange(ids.shape[1], device=ids.device)[None, :] < (lengths[:, None] + 2)  # [b, W]
        modules = [self.model.embeddings, *self.model.encoder.layer[: self.frozen_layers]]
        was_training = [m.training for m in modules]
        for m in modules:
            m.eval()
        with torch.no_grad():
            x = self.model.embeddings(ids, torch.zeros_like(ids))  # [b, W, H]
            bias = self.model.mask_bias(mask, ids, x.dtype)
            for layer in self.model.encoder.layer[: self.frozen_layers]:
                x, _ = layer(x, bias)
        for m, training in zip(modules, was_training):
            m.train(training)
        return x

    def window_ids(self, bert_ids: torch.Tensor, lengths: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pieces start .. start + w - 1 of each row re-wrapped in [CLS] .. [SEP]: ids [B, w + 2], attention mask
        [B, w + 2], and each row's piece count n [B] in this window."""
        B, L = bert_ids.shape[0], bert_ids.shape[1] - 2
        w = min(self.window, L - start)
        chars = bert_ids[:, 1 + start : 1 + start + w]  # [B, w]
        n = (lengths - start).clamp(0, w)  # real pieces of each row in this window
        ids = torch.full((B, w + 2), self.pad_id, dtype=bert_ids.dtype, device=bert_ids.device)
        pos = torch.arange(w, device=bert_ids.device)[None, :]
        ids[:, 1 : w + 1] = torch.where(pos < n[:, None], chars, torch.full_like(chars, self.pad_id))
        ids[:, 0] = self.cls_id
        ids[torch.arange(B), n + 1] = self.sep_id
        mask = torch.arange(w + 2, device=bert_ids.device)[None, :] < (n[:, None] + 2)  # [B, w + 2]
        return ids, mask, n

    def _window(self, bert_ids: torch.Tensor, lengths: torch.Tensor, start: int, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Characters start .. start + window - 1 of each sentence, re-wrapped in [CLS] .. [SEP]: [B, w, H]."""
        ids, mask, n = self.window_ids(bert_ids, lengths, start)
        w = ids.shape[1] - 2
        window_mask = self.window_local_mask(local_mask, start, w, n) if local_mask is not None else None
        return self.last_hidden(ids, mask, window_mask)[:, 1 : w + 1]

    @staticmethod
    def window_local_mask(local_mask: torch.Tensor, start: int, w: int, n: torch.Tensor) -> torch.Tensor:
        """The block of a local mask [B, L + 2, L + 2] for pieces start .. start + w - 1, re-wrapped like the window's
        ids: [B, w + 2, w + 2], the window's [CLS] (index 0) and [SEP] (index n + 1) rows and columns always allowed.
        Tokens of the sentence outside the window are not in it: each window attends within itself, as BERT does."""
        B = local_mask.shape[0]
        out = torch.zeros(B, w + 2, w + 2, dtype=torch.bool, device=local_mask.device)
        out[:, 1 : w + 1, 1 : w + 1] = local_mask[:, 1 + start : 1 + start + w, 1 + start : 1 + start + w]
        rows = torch.arange(B, device=local_mask.device)
        out[:, 0, :] = out[:, :, 0] = True  # [CLS]
        out[rows, n + 1, :] = True  # [SEP] row
        out[rows, :, n + 1] = True  # [SEP] column
        return out  # [B, w + 2, w + 2]


@contextmanager
def memo_disabled(model: nn.Module) -> Iterator[None]:
    """Within it, every frozen BertCharFeatures of `model` runs its encoder on every row instead of reading its memo
    (a Python dict is no part of a traced graph: zhner.export traces this path)."""
    features = [m for m in model.modules() if isinstance(m, BertCharFeatures)]
    before = [m.use_memo for m in features]
    for m in features:
        m.use_memo = False
    try:
        yield
    finally:
        for m, use in zip(features, before):
            m.use_memo = use

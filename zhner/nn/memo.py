"""A bounded memo of a frozen encoder's outputs, one entry per distinct input row.

A frozen BERT in eval mode (no dropout) is a deterministic function of its piece ids, so its outputs for a sentence
need computing once: training's later epochs, the dev and test passes of every epoch and repeated texts read them
back. `RowMemo.features` keys each row by its ids up to its length (so padding and the batch it came in do not
matter), runs `encode` on the rows it has not seen, keeps their outputs in float16 and gives the batch back padded
with zeros. Used by `zhner.nn.bert_features.BertCharFeatures` for every frozen BERT: the character taggers' (FLAT,
NFLAT, ... with `model.bert_trainable: false`), BERT-CRF's, and ACT-S's English side; and for a partly frozen one
(`model.bert_frozen_layers` K), the output of its embeddings and first K layers, [CLS] and [SEP] included (`ends`).

Not part of a model's state: a memo is cleared when weights are loaded into its encoder, and holds at most `max_rows`
rows (a long-running service sees endless new texts; when full it is emptied and refills). A plain dict: safe because
a model runs on one thread (training, or the service's model thread).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

MEMO_ROWS = 100_000  # rows kept at most: about 3 GB at 40 pieces x 384 in float16


class RowMemo:
    """ids [B, P + 2] ([CLS] pieces [SEP], padded), lengths [B] (pieces of each row) -> outputs [B, P, H]."""

    def __init__(self, max_rows: int | None = None):
        self.max_rows = max_rows  # None: MEMO_ROWS, read at each call (tests lower it)
        self.rows: dict[tuple[int, ...], torch.Tensor] = {}  # a row's ids -> its outputs [n, H], float16

    def __len__(self) -> int:
        return len(self.rows)

    def clear(self) -> None:
        self.rows.clear()

    def features(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor,
        encode: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        dtype: torch.dtype = torch.float32,
        ends: bool = False,
    ) -> torch.Tensor:
        """The outputs [B, P, H] in `dtype`, zero past each row's length; `encode(ids [b, w + 2], lengths [b]) ->
        [b, w, H]` runs on the rows not seen before only (none when all were). `ends`: the outputs at [CLS] and [SEP]
        too (a partly frozen encoder's layer K, which the layers above it read): `encode` gives [b, w + 2, H] and the
        result is [B, P + 2, H]."""
        B, P = ids.shape[0], ids.shape[1] - 2
        n = lengths.tolist()
        keys = [tuple(row[: n[b] + 2]) for b, row in enumerate(ids.tolist())]
        found = {b: self.rows[keys[b]] for b in range(B) if keys[b] in self.rows}  # taken before any eviction
        new = [b for b in range(B) if b not in found]
        if new:
            found |= self._encode_new(ids, lengths, new, [keys[b] for b in new], encode, 2 if ends else 0)
        hidden = next(iter(found.values())).shape[-1]
        out = torch.zeros(B, P + 2 if ends else P, hidden, dtype=dtype, device=ids.device)  # [B, P (+ 2), H]
        for b, row in found.items():
            out[b, : row.shape[0]] = row.to(device=ids.device, dtype=dtype)
        return out

    def _encode_new(
        self, ids: torch.Tensor, lengths: torch.Tensor, new: list[int], keys: list[tuple[int, ...]],
        encode: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], ends: int = 0,
    ) -> dict[int, torch.Tensor]:
        """Encodes rows `new` of the batch (cut to their own longest row), stores and returns them by batch index;
        each keeps its length + `ends` outputs."""
        index = torch.tensor(new, device=ids.device)
        width = int(lengths[index].max()) + 2
        out = encode(ids[index, :width], lengths[index])  # [b, width - 2 + ends, H]
        limit = MEMO_ROWS if self.max_rows is None else self.max_rows
        if len(self.rows) + len(new) > limit:
            self.rows.clear()
        rows = {}
        for i, (b, key) in enumerate(zip(new, keys)):
            rows[b] = out[i, : int(lengths[b]) + ends].to(torch.float16)  # [n (+ 2), H]
            if len(self.rows) < limit:
                self.rows[key] = rows[b]
        return rows

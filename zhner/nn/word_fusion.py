"""ATSSA's word-fusion layer (COLING 2022, Sec. 4.2, Eq. 13-15): each character attends to the lexicon words
that contain it, with relative positions from the character to the word's head and tail.

    S(x_i)   = {w_jk in D : j <= i <= k}                                   Eq. 13 (the words containing character i)
    d_hh     = i - head[w],   d_tt = i - tail[w]                           Eq. 14
    R_i,w    = W_r [p_hh ; p_tt]                                           Eq. 15 (linear: no ReLU, unlike FLAT's Eq. 8)
    A_i,w    = q_i k_w + q_i R_i,w + u k_w + v R_i,w                       Eq. 5 with R split into heads
    x^w_i    = softmax_w(A_i,w) v_w over S(x_i);  a learned "none" vector when S(x_i) is empty

Cost: a character lies inside few words (C, at most ~10 with jieba's dictionary), so each character gathers only its own
words ([B, L, C]) instead of scoring all W words of the sentence. Because i lies inside w, d_hh is in [0, l] and d_tt in
[-l, 0] (l = longest word - 1): W_r is applied to the two small sinusoid tables once, and R is a gather-and-sum.
Scores are scaled by 1/sqrt(d_head) (the paper does not say; FLAT's release does not scale, we do, as FLAT's default).
"""
from __future__ import annotations

import torch
from torch import nn

from zhner.nn.position import sinusoid


def words_per_char(
    word_starts: torch.Tensor, word_ends: torch.Tensor, word_mask: torch.Tensor, length: int, keep_all: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 13 as indices: for each character, the (positions in the word list of the) words containing it.

    word_starts, word_ends (inclusive), word_mask [B, W] -> (index [B, L, C] into W, valid [B, L, C]); C = the most words
    any character of the batch lies in (at least 1); with `keep_all`, C = W and index = 0..W-1 (no size or op that
    depends on the data, for torch.export). Words keep their (start, end) order."""
    i = torch.arange(length, device=word_starts.device)[None, :, None]  # [1, L, 1]
    contains = (word_starts[:, None, :] <= i) & (i <= word_ends[:, None, :]) & word_mask[:, None, :]  # [B, L, W]
    if keep_all:  # every word is a candidate, in place
        return torch.arange(contains.shape[-1], device=contains.device).expand_as(contains), contains
    C = max(1, int(contains.sum(-1).max()))
    # stable sort puts the containing words first, in their original order
    index = torch.sort((~contains).to(torch.int8), dim=-1, stable=True).indices[..., :C]  # [B, L, C]
    return index, contains.gather(-1, index)


class WordFusion(nn.Module):
    """chars [B, L, d_char], words [B, W, d_word] + word spans -> x^w [B, L, d_model] (Eq. 13-15)."""

    def __init__(self, d_char: int, d_word: int, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.q = nn.Linear(d_char, d_model)
        self.kv = nn.Linear(d_word, 2 * d_model)
        self.w_r = nn.Linear(2 * d_model, d_model)  # W_r of Eq. 15 (column blocks: p_hh, p_tt)
        self.u = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        self.v = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        self.none = nn.Parameter(torch.zeros(d_model))  # x^w of a character inside no word
        self.dropout = nn.Dropout(dropout)

    def relative(self, d_hh: torch.Tensor, d_tt: torch.Tensor, longest: int) -> torch.Tensor:
        """R of Eq. 15 for d_hh in [0, longest], d_tt in [-longest, 0] (any shape) -> [*, d_model]."""
        D = self.d_model
        w_hh, w_tt = self.w_r.weight[:, :D], self.w_r.weight[:, D:]  # [D, D] each
        table = sinusoid(torch.arange(-longest, longest + 1, device=d_hh.device), D).to(w_hh.dtype)  # [2l+1, D]
        hh = table @ w_hh.t() + self.w_r.bias  # W_r^hh p_d + b, row d + longest
        tt = table @ w_tt.t()  # W_r^tt p_d
        return hh[d_hh + longest] + tt[d_tt + longest]

    def forward(
        self,
        chars: torch.Tensor,
        words: torch.Tensor,
        word_starts: torch.Tensor,
        word_ends: torch.Tensor,
        word_mask: torch.Tensor,
    ) -> torch.Tensor:
        B, L, _ = chars.shape
        H, d = self.heads, self.head_dim
        exporting = torch.compiler.is_exporting()  # no data-dependent sizes: the graph must hold for any input
        index, valid = words_per_char(word_starts, word_ends, word_mask, L, keep_all=exporting)  # [B, L, C]
        C = index.shape[-1]
        q = self.q(chars).view(B, L, H, d)
        k, v = self.kv(words).view(B, -1, 2, H, d).unbind(2)  # [B, W, H, d] each

        def gather(t: torch.Tensor) -> torch.Tensor:  # [B, W, ...] -> [B, L, C, ...], each character's own words
            flat = index.reshape(B, L * C)
            return t.gather(1, flat.view(B, L * C, *([1] * (t.dim() - 2))).expand(B, L * C, *t.shape[2:])).view(B, L, C, *t.shape[2:])

        i = torch.arange(L, device=chars.device)[None, :, None]  # [1, L, 1]
        d_hh = (i - gather(word_starts)).masked_fill(~valid, 0)  # Eq. 14, [B, L, C]
        d_tt = (i - gather(word_ends)).masked_fill(~valid, 0)
        if exporting:  # words lie inside the sentence: l <= L - 1
            longest = L - 1
        else:
            longest = int((word_ends - word_starts).masked_fill(~word_mask, 0).max()) if word_mask.any() else 0
        R = self.relative(d_hh, d_tt, longest).view(B, L, C, H, d)  # Eq. 15
        kc = gather(k)  # [B, L, C, H, d]
        scores = torch.einsum("blhd,blchd->bhlc", q + self.u, kc) + torch.einsum("blhd,blchd->bhlc", q + self.v, R)
        scores = (scores * d**-0.5).masked_fill(~valid[:, None], float("-inf"))  # [B, H, L, C]
        has_word = valid.any(-1)  # [B, L]
        attn = torch.softmax(scores.masked_fill(~has_word[:, None, :, None], 0.0), dim=-1)  # empty rows: no NaN
        out = torch.einsum("bhlc,blchd->blhd", self.dropout(attn), gather(v)).reshape(B, L, self.d_model)
        return torch.where(has_word[..., None], out, self.none)  # [B, L, d_model]

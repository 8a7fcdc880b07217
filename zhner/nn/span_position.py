"""FLAT's span relative position encoding (Li et al., ACL 2020, "FLAT: Chinese NER Using Flat-Lattice Transformer",
Eq. 4-10): the four relative distances of two spans, their sinusoids, and the fused R_ij of Eq. 8 that the attention of
zhner/nn/flat_attention.py (Eq. 11) reads.

A flat lattice is a sequence of N spans (characters, then lexicon words), each with a head (first character index) and a
tail (last character index, inclusive). For spans i (query) and j (key), Eq. 4-7:

    d_hh = head[i] - head[j]    d_ht = head[i] - tail[j]    d_th = tail[i] - head[j]    d_tt = tail[i] - tail[j]

and the relative position encoding of the pair (Eq. 8), with p_d the sinusoid of distance d (Eq. 9-10, d_model wide):

    R_ij = ReLU(W_r [p_hh ; p_th ; p_ht ; p_tt] + b_r)                              fusion "ff_four"
    R_ij = ReLU(W_r [p_hh ; p_tt] + b_r)                                            fusion "ff_two" (the release's default)
    R_ij = ReLU(W_r p_hh + b_r)                                                     fusion "head" (FLAT_head, Table 3)

Cost (exactly the equations above, computed in a cheaper order):
1. Distances are integers in [-M, M] (M = longest sentence - 1, widened by the longest word for d_th / d_ht / d_tt).
   Instead of materialising the [B, N, N, 4 d_model] concatenation and multiplying it by W_r, each distance kind's sinusoid
   TABLE [2M+1, d_model] goes through its own column block of W_r once (W_r [p_a ; p_b] = W_r^a p_a + W_r^b p_b), and the
   pre-activation of R_ij is a gather-and-sum of projected rows. This equals Eq. 8 because the Linear is applied before the
   ReLU (the ReLU comes after the sum).
2. With l = tail - head, all four distances are functions of (d_hh, l_i, l_j), and a batch holds few distinct span lengths
   (n_l ~ 4-8). So the sum and the ReLU are taken once per distinct (d_hh, l_i, l_j) -- a [(2M+1) n_l^2, d_model] table --
   and each pair only stores the row index of its value ([B, N, N] integers). ff_two needs only (d_hh, l_i - l_j):
   a [(2M+1) n_delta, d_model] table over the length differences that occur. Computed once per forward, shared by the layers.
3. The attention multiplies R_ij by queries already folded through W_{k,R} (see flat_attention.py): `position_scores`
   gathers the R rows a few queries at a time and drops them after use (`_GatheredScores`), so no [B, N, N, d_model]
   tensor is ever stored, in the forward or the backward.

Queries and keys may be two different span sequences: NFLAT's inter-attention (zhner/nn/interformer.py) has character
queries and lexicon-word keys, with R_ij from (head_i - head_j, tail_i - tail_j) of a character i and a word j (NFLAT Eq. 4),
the same ff_two fusion: `SpanPositionEncoding(..., key_heads=, key_tails=)`. FLAT's self-attention is the case keys = queries.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from zhner.nn.position import sinusoid

Fusion = Literal["ff_four", "ff_two", "head"]
# the distance kinds each fusion concatenates, in the order of Eq. 8
FUSION_KINDS: dict[str, tuple[str, ...]] = {
    "ff_four": ("hh", "th", "ht", "tt"),
    "ff_two": ("hh", "tt"),
    "head": ("hh",),
}


def span_distances(
    heads: torch.Tensor, tails: torch.Tensor, key_heads: torch.Tensor | None = None, key_tails: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Eq. 4-7, query minus key: heads/tails [B, N] (keys [B, M], default the queries) -> {"hh", "ht", "th", "tt"}: [B, N, M],
    entry [b, i, j] for query i, key j."""
    key_heads, key_tails = (heads, tails) if key_heads is None else (key_heads, key_tails)
    h_q, t_q = heads[:, :, None], tails[:, :, None]
    h_k, t_k = key_heads[:, None, :], key_tails[:, None, :]
    return {"hh": h_q - h_k, "ht": h_q - t_k, "th": t_q - h_k, "tt": t_q - t_k}


@dataclass
class SpanPositions:
    """R of Eq. 8 for a batch, factored as R_ij = table[index[b, i, j]]: table [P, D] holds R for every distinct value of
    what R depends on, index [B, N, N] picks each pair's row. `dense()` materialises [B, N, N, D]; attention never needs it."""

    table: torch.Tensor
    index: torch.Tensor
    # spans 0..chars-1 are characters (head = tail = their index) on both sides: set by FLAT, it allows the inference
    # path `char_query_scores` for character queries
    chars: int | None = None

    def dense(self) -> torch.Tensor:
        return F.embedding(self.index, self.table)

    def scores(self, qr: torch.Tensor) -> torch.Tensor:
        """qr [B, Q, H, D] (queries through W_{k,R}) . R_ij -> [B, Q, N, H]."""
        return position_scores(qr, self)

    def char_query_scores(self, qv: torch.Tensor, w_r: torch.Tensor) -> torch.Tensor:
        """(q_i + v) . (W_{k,R} R_ij) for character queries i < Q <= chars: qv [B, Q, H, d], w_r [H, d, D] -> [B, H, Q, N].

        Inference only (no autograd Function behind it). The table goes through W_{k,R} once, [P, D] -> [P, H d], so a
        pair costs H d multiply-adds (not H D as `scores` after folding W_{k,R} into the query). A character key j is at
        d_hh = i - j with length difference 0, so its row depends on i - j alone: the scores of every query against
        every distance are one matmul, [B, H, Q, 2L - 1], and the [B, H, Q, L] character block is a strided view of it
        (Transformer-XL's relative shift), gathered nothing. Word keys gather their projected rows a few queries at a
        time. The same sums as `scores`, taken in another order: equal up to float rounding."""
        B, Q, H, d = qv.shape
        L, index = self.chars, self.index
        if L is None or Q > L or index.shape[1] < L:
            raise ValueError("char_query_scores needs character queries and the index of every character query")
        N = index.shape[2]
        projected = torch.matmul(self.table, w_r.reshape(H * d, -1).t())  # [P, H d]: W_{k,R} R for each distinct R
        # table rows of character pairs by distance d = i - j, from j - i = L-1 down to -(L-1) (read off the index:
        # query 0 against key j is d = -j, query i against key 0 is d = i), so column c is j - i + L - 1
        rows = torch.cat([index[0, 0, 1:L].flip(0), index[0, :L, 0]]).flip(0)  # [2L - 1]
        per_distance = projected[rows].view(2 * L - 1, H, d).permute(1, 2, 0)  # [H, d, 2L - 1]
        heads_first = qv.transpose(1, 2)  # [B, H, Q, d]
        by_distance = torch.matmul(heads_first, per_distance)  # [B, H, Q, 2L - 1]
        out = qv.new_empty(B, H, Q, N)
        sB, sH, sQ, _ = by_distance.stride()  # pair (i, j) is column j - i + L - 1 of row i: step sQ - 1 per row
        out[..., :L] = by_distance.as_strided((B, H, Q, L), (sB, sH, sQ - 1, 1), by_distance.storage_offset() + L - 1)
        W = N - L
        if W:
            words = index[:, :Q, L:].reshape(B * Q, W)
            flat_q = qv.reshape(B * Q, 1, H, d)
            word_scores = qv.new_empty(B * Q, W, H)
            step = _chunk_rows(qv, W * H * d)
            for s in range(0, B * Q, step):
                R = projected.index_select(0, words[s : s + step].reshape(-1)).view(-1, W, H, d)  # [step, W, H, d]
                torch.sum(R.mul_(flat_q[s : s + step]), -1, out=word_scores[s : s + step])
            out[..., L:] = word_scores.view(B, Q, W, H).permute(0, 3, 1, 2)
        return out


@dataclass
class DensePositions:
    """R of Eq. 8 stored per pair, R [B, N, N, D]: the traceable form (`SpanPositionEncoding.dense`) used for export,
    whose shapes follow from the input shapes alone, with no data-dependent table size and no custom autograd Function.
    Memory B N^2 D, so it suits inference on bounded batches, not training on long sentences."""

    R: torch.Tensor

    def scores(self, qr: torch.Tensor) -> torch.Tensor:
        """qr [B, Q, H, D] . R_ij -> [B, Q, N, H]."""
        R = self.R[:, : qr.shape[1]]  # [B, Q, N, D]
        return torch.matmul(qr, R.transpose(-1, -2)).transpose(-1, -2)  # [B, Q, H, N] -> [B, Q, N, H]


@dataclass
class CharQueryPositions:
    """R of Eq. 8 for character queries against a lattice's keys (its L characters, then W words), in a form that
    traces for export with no data-dependent size: `table` [2L - 1, K, D] holds R for every distance d_hh = -(L-1)..L-1
    (row d + L - 1) and key length l = tail - head = 0..K-1 (column; K - 1 the lexicon's longest word), and
    `word_index` [B, L, W] each (character, word) pair's row of the flattened table. Built by
    `SpanPositionEncoding.char_queries`; its `char_query_scores` computes what SpanPositions.char_query_scores does."""

    table: torch.Tensor
    word_index: torch.Tensor

    def char_query_scores(self, qv: torch.Tensor, w_r: torch.Tensor) -> torch.Tensor:
        """(q_i + v) . (W_{k,R} R_ij) for all L character queries: qv [B, L, H, d], w_r [H, d, D] -> [B, H, L, L + W].
        Character keys: one matmul against every distance, then Transformer-XL's relative shift as pad, flatten, slice
        and reshape (pair (i, j) is column j - i + L - 1 of row i); word keys: their projected rows gathered."""
        B, Q, H, d = qv.shape
        rows, K, D = self.table.shape
        projected = torch.matmul(self.table.reshape(rows * K, D), w_r.reshape(H * d, D).t())  # [rows K, H d]
        per_distance = projected.view(rows, K, H, d)[:, 0].flip(0).permute(1, 2, 0)  # [H, d, 2L - 1], j - i ascending
        heads_first = qv.transpose(1, 2)  # [B, H, L, d]
        by_distance = F.pad(torch.matmul(heads_first, per_distance), (0, 1))  # [B, H, L, 2L]
        width = by_distance.shape[-1] - 1  # 2L - 1
        flat = by_distance.reshape(B, H, Q * (width + 1))[:, :, Q - 1 : Q - 1 + Q * width]
        chars = flat.reshape(B, H, Q, width)[..., :Q]  # [B, H, L, L]
        W = self.word_index.shape[2]
        # per head: the pairs' rows [B L, W, d] times the query [B L, d, 1], one pass over the gathered rows (a
        # broadcast multiply and a sum made three in onnxruntime)
        by_head = projected.view(rows * K, H, d).transpose(0, 1)  # [H, rows K, d]
        words = by_head.index_select(1, self.word_index.reshape(-1)).view(H, B * Q, W, d)
        word_scores = torch.matmul(words, qv.permute(2, 0, 1, 3).reshape(H, B * Q, d, 1))  # [H, B L, W, 1]
        word_scores = word_scores.view(H, B, Q, W).transpose(0, 1)  # [B, H, L, W]
        return torch.cat([chars, word_scores], dim=-1)


class SpanPositionEncoding(nn.Module):
    """heads, tails [B, N] -> SpanPositions (R of Eq. 8, d_model wide), computed once per forward, shared by the layers.

    With l = tail - head (a span's length - 1, 0 for characters) the four distances of a pair are functions of
    (d = d_hh, l_i, l_j): d_th = d + l_i, d_ht = d - l_j, d_tt = d + l_i - l_j. So R takes at most (2M+1) x n_l x n_l
    distinct values (n_l = distinct span lengths in the batch, typically 4-8), against B x N x N pairs: the table is built
    for those, and pairs index it. ff_two's R depends on (d, l_i - l_j) only, FLAT_head's on d only."""

    def __init__(self, d_model: int, fusion: Fusion = "ff_two"):
        super().__init__()
        if fusion not in FUSION_KINDS:
            raise ValueError(f"unknown position fusion {fusion!r}; expected one of {', '.join(FUSION_KINDS)}")
        self.d_model, self.fusion = d_model, fusion
        self.kinds = FUSION_KINDS[fusion]
        self.fuse = nn.Linear(len(self.kinds) * d_model, d_model)  # W_r, b_r of Eq. 8

    def sinusoid_table(self, max_distance: int, device=None) -> torch.Tensor:
        """p_d for d = -max_distance..max_distance (Eq. 9-10): [2M+1, d_model]; row d + M is distance d."""
        return sinusoid(torch.arange(-max_distance, max_distance + 1, device=device), self.d_model)

    def projected_tables(self, max_distance: int) -> torch.Tensor:
        """W_r^kind p_d for every kind and distance: [n_kinds, 2M+1, d_model], the bias b_r added to the first kind.
        W_r [p_a ; p_b ; ...] = W_r^a p_a + W_r^b p_b + ... with W_r^k the k-th column block of W_r."""
        table = self.sinusoid_table(max_distance, self.fuse.weight.device).to(self.fuse.weight.dtype)  # [K, D]
        n, D = len(self.kinds), self.d_model
        weight = self.fuse.weight.view(D, n, D).transpose(0, 1)  # [n, D_out, D_in]: the column block of each kind
        projected = torch.matmul(table, weight.transpose(1, 2))  # [n, K, D_out]
        return torch.cat([projected[:1] + self.fuse.bias, projected[1:]], dim=0)

    def forward(
        self,
        heads: torch.Tensor,
        tails: torch.Tensor,
        max_distance: int,
        key_heads: torch.Tensor | None = None,
        key_tails: torch.Tensor | None = None,
        zero_key: bool = False,
    ) -> SpanPositions:
        """Query spans heads, tails [B, N] and key spans key_heads, key_tails [B, M] (default: the queries), all long within
        [0, max_distance] (= longest sentence - 1) -> SpanPositions with index [B, N, M].
        zero_key: prepend one key at distance 0 from every query (NFLAT's <non_word>): index [B, N, 1 + M]."""
        M = max_distance
        key_heads, key_tails = (heads, tails) if key_heads is None else (key_heads, key_tails)
        d_hh = heads[:, :, None] - key_heads[:, None, :]  # [B, N, M], Eq. 4
        if self.kinds == ("hh",):  # FLAT_head: R_ij = ReLU(W_r p_hh + b_r)
            return _with_zero_key(SpanPositions(torch.relu(self.projected_tables(M)[0]), d_hh + M), M, zero_key)
        if self.kinds == ("hh", "tt"):  # ff_two: R depends on (d_hh, delta = d_tt - d_hh = l_i - l_j) only
            q_len, k_len = torch.unique(tails - heads), torch.unique(key_tails - key_heads)
            # only the deltas that occur (NFLAT's character queries: -l_j for the word lengths present, ~8 values)
            deltas = torch.unique(torch.cat([(q_len[:, None] - k_len[None, :]).flatten(), q_len.new_zeros(1)]))  # [n_d]
            longest = int(max(q_len.max(), k_len.max()))
            M2 = M + longest  # d_tt = d_hh + delta reaches beyond +-M in the table (not in real pairs)
            tables = self.projected_tables(M2)  # [2, 2*M2+1, D]
            d = torch.arange(-M, M + 1, device=heads.device)[:, None]  # [2M+1, 1]
            pre = tables[0][(d + M2).expand(-1, deltas.numel())]  # [2M+1, n_d, D]; built in place: it is the big one
            table = pre.add_(tables[1][d + deltas[None, :] + M2]).relu_().reshape(-1, self.d_model)
            delta_id = torch.full((2 * longest + 1,), -1, dtype=torch.long, device=heads.device)
            delta_id[deltas + longest] = torch.arange(deltas.numel(), device=heads.device)  # delta -> its column
            if q_len.numel() == 1:  # queries of one length (FLAT's character queries): the delta is the key's alone
                key_column = delta_id[q_len - (key_tails - key_heads) + longest]  # [B, M]
                # (d_hh + M) n_d + column, as two broadcast terms: one pass over [B, N, M] instead of several
                index = (heads * deltas.numel())[:, :, None] + ((M - key_heads) * deltas.numel() + key_column)[:, None, :]
            else:
                d_tt = tails[:, :, None] - key_tails[:, None, :]  # Eq. 7
                index = (d_hh + M) * deltas.numel() + delta_id[d_tt - d_hh + longest]  # [B, N, M]
            zero = M * deltas.numel() + int(delta_id[longest])  # the row of (d_hh, d_tt) = (0, 0)
            return _with_zero_key(SpanPositions(table, index), zero, zero_key)
        if zero_key:  # all four distances 0 needs a query span of length 1 (a character); only ff_two/head are needed
            raise ValueError(f"zero_key needs position fusion ff_two or head, not {self.fusion}")
        N = heads.shape[1]
        both = torch.cat([tails - heads, key_tails - key_heads], dim=1)
        lengths, both_id = torch.unique(both, sorted=True, return_inverse=True)  # [n_l], [B, N + M]
        length_id, key_length_id = both_id[:, :N], both_id[:, N:]
        n_l, longest = lengths.numel(), int(lengths[-1])
        M2 = M + longest  # d + l_i and d - l_j reach beyond +-M
        tables = self.projected_tables(M2)  # [n, 2*M2+1, D]
        d = torch.arange(-M, M + 1, device=heads.device)[:, None, None]  # [2M+1, 1, 1]
        l_q, l_k = lengths[None, :, None], lengths[None, None, :]  # [1, n_l, 1], [1, 1, n_l]
        offsets = {"hh": d, "th": d + l_q, "ht": d - l_k, "tt": d + l_q - l_k}  # Eq. 4-7 in terms of (d, l_i, l_j)
        pre = sum(tables[k][(offsets[kind] + M2).expand(-1, n_l, n_l)] for k, kind in enumerate(self.kinds))
        table = torch.relu(pre).reshape(-1, self.d_model)  # [(2M+1) * n_l * n_l, D], Eq. 8
        index = ((d_hh + M) * n_l + length_id[:, :, None]) * n_l + key_length_id[:, None, :]  # [B, N, M]
        return SpanPositions(table, index)

    def char_queries(
        self, heads: torch.Tensor, tails: torch.Tensor, num_chars: int, key_lengths: torch.Tensor
    ) -> CharQueryPositions:
        """The traceable R for the characters of a lattice (heads, tails [B, L + W]: L characters, then words) as
        queries, against every span: the table over distances and key lengths l = tail - head = 0..K-1, `key_lengths`
        [K] = arange(K) (words longer than that are read as that long). The exported graph takes it as an input, so
        that K follows the batch's longest word, not the lexicon's: the table and its projection through W_{k,R},
        [2L - 1, K, D], shrink with it (a 512-character piece 13% cheaper in onnxruntime). With a character query (l_i = 0) the
        distances of Eq. 4-7 are d_hh = d_th = d and d_ht = d_tt = d - l_j: R depends on (d, l_j) alone, for every
        fusion."""
        L, K = num_chars, key_lengths.shape[0]
        M2 = L - 1 + K - 1
        tables = self.projected_tables(M2)  # [n, 2 M2 + 1, D]
        d = torch.arange(-(L - 1), L, device=heads.device)[:, None]  # [2L - 1, 1]
        lengths = key_lengths.to(d.dtype)[None, :]  # [1, K]
        offsets = {"hh": d, "th": d, "ht": d - lengths, "tt": d - lengths}
        pre = sum(tables[k][(offsets[kind] + M2).expand(-1, K)] for k, kind in enumerate(self.kinds))  # [2L - 1, K, D]
        word_heads, word_tails = heads[:, L:], tails[:, L:]  # [B, W]
        word_lengths = (word_tails - word_heads).clamp(0, K - 1)
        queries = torch.arange(L, device=heads.device)[None, :, None]  # [1, L, 1]
        word_index = (queries - word_heads[:, None, :] + L - 1) * K + word_lengths[:, None, :]  # [B, L, W]
        return CharQueryPositions(torch.relu(pre), word_index)

    def dense(
        self,
        heads: torch.Tensor,
        tails: torch.Tensor,
        max_distance: int,
        key_heads: torch.Tensor | None = None,
        key_tails: torch.Tensor | None = None,
        zero_key: bool = False,
    ) -> DensePositions:
        """R of Eq. 8 for every (query, key) pair, [B, N, M, D] (keys default to the queries): each kind's distance (all
        within [-M, M], since heads and tails are character indices in [0, M]) picks its row of W_r^kind p (see
        `projected_tables`), the rows are summed, then ReLU. zero_key prepends NFLAT's <non_word> column (every distance 0)."""
        M = max_distance
        tables = self.projected_tables(M)  # [n, 2M+1, D]
        dist = span_distances(heads, tails, key_heads, key_tails)  # Eq. 4-7, each [B, N, M]
        pre = sum(F.embedding(dist[kind] + M, tables[k]) for k, kind in enumerate(self.kinds))  # [B, N, M, D]
        if zero_key:
            zero = tables[:, M].sum(0)  # [D]: distance 0 in every kind
            pre = torch.cat([zero.expand(pre.shape[0], pre.shape[1], 1, -1), pre], dim=2)  # [B, N, 1 + M, D]
        return DensePositions(torch.relu(pre))

    def naive(
        self, heads: torch.Tensor, tails: torch.Tensor, key_heads: torch.Tensor | None = None, key_tails: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Eq. 8 as written (concatenate the kinds' sinusoids [B, N, M, n*D], Linear, ReLU): the reference for tests."""
        dist = span_distances(heads, tails, key_heads, key_tails)
        cat = torch.cat([sinusoid(dist[kind], self.d_model) for kind in self.kinds], dim=-1)
        return torch.relu(self.fuse(cat.to(self.fuse.weight.dtype)))


def _with_zero_key(positions: SpanPositions, zero_row: int, zero_key: bool) -> SpanPositions:
    """Prepend a key column that points every query at table row `zero_row` (R of distance 0)."""
    if not zero_key:
        return positions
    index = positions.index
    column = index.new_full((index.shape[0], index.shape[1], 1), zero_row)
    return SpanPositions(positions.table, torch.cat([column, index], dim=2))


_CHUNK_ELEMENTS = 1 << 18  # CPU: gathered R elements per chunk of query rows (1 MiB of float32: stays in a core's L2 cache)
_CHUNK_ELEMENTS_GPU = 1 << 26  # elsewhere few large launches beat cache locality (256 MiB of float32 per chunk)


def _chunk_rows(t: torch.Tensor, per_row: int) -> int:
    return max(1, (_CHUNK_ELEMENTS if t.device.type == "cpu" else _CHUNK_ELEMENTS_GPU) // per_row)


class _GatheredScores(torch.autograd.Function):
    """scores[r, j, h] = qr[r, h, :] . table[index[r, j], :] for query rows r (= (b, i) flattened) and keys j.

    R_ij = table[index] is gathered a few query rows at a time, used while it sits in cache, and dropped: the [B, N, N, D]
    R is never stored (the backward gathers it again) and memory stays O(B N^2 H)."""

    @staticmethod
    def forward(ctx, qr: torch.Tensor, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        rows, H, D = qr.shape
        N = index.shape[1]
        out = qr.new_empty(rows, N, H)
        step = _chunk_rows(qr, N * D)
        for s in range(0, rows, step):
            R = table.index_select(0, index[s : s + step].reshape(-1)).view(-1, N, D)  # [step, N, D]
            torch.bmm(R, qr[s : s + step].transpose(1, 2), out=out[s : s + step])
        ctx.save_for_backward(qr, table, index)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        qr, table, index = ctx.saved_tensors
        rows, H, D = qr.shape
        N = index.shape[1]
        grad = grad.contiguous()
        grad_qr = torch.empty_like(qr) if ctx.needs_input_grad[0] else None
        grad_table = torch.zeros_like(table) if ctx.needs_input_grad[1] else None
        step = _chunk_rows(qr, N * D)
        for s in range(0, rows, step):
            idx = index[s : s + step].reshape(-1)
            g = grad[s : s + step]  # [step, N, H]
            if grad_qr is not None:
                R = table.index_select(0, idx).view(-1, N, D)
                torch.bmm(g.transpose(1, 2), R, out=grad_qr[s : s + step])
            if grad_table is not None:
                grad_table.index_add_(0, idx, torch.bmm(g, qr[s : s + step]).view(-1, D))
        return grad_qr, grad_table, None


def position_scores(qr: torch.Tensor, positions: SpanPositions) -> torch.Tensor:
    """qr [B, Q, H, D] (the first Q spans' queries, already through W_{k,R}) . R_ij -> [B, Q(query), N(key), H]."""
    B, Q, H, D = qr.shape
    table, index = positions.table, positions.index[:, :Q]  # [P, D], [B, Q, N]
    N = index.shape[-1]
    if table.shape[0] <= N:  # few distinct R values: score each once, then pick per pair (TENER's way)
        per_row = torch.matmul(qr, table.t())  # [B, Q, H, P]
        return per_row.gather(-1, index[:, :, None, :].expand(B, Q, H, N)).transpose(2, 3)
    scores = _GatheredScores.apply(qr.reshape(B * Q, H, D), table, index.reshape(B * Q, N))
    return scores.view(B, Q, N, H)

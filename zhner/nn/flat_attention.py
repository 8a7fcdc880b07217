"""FLAT's span relative position encoding and relative self-attention (Li et al., ACL 2020, "FLAT: Chinese NER Using
Flat-Lattice Transformer", Eq. 4-11), plus its encoder layer and attention masks.

A flat lattice is a sequence of N spans (characters, then lexicon words), each with a head (first character index) and a
tail (last character index, inclusive). For spans i (query) and j (key), Eq. 4-7:

    d_hh = head[i] - head[j]    d_ht = head[i] - tail[j]    d_th = tail[i] - head[j]    d_tt = tail[i] - tail[j]

and the relative position encoding of the pair (Eq. 8), with p_d the sinusoid of distance d (Eq. 9-10, d_model wide):

    R_ij = ReLU(W_r [p_hh ; p_th ; p_ht ; p_tt] + b_r)                              fusion "ff_four"
    R_ij = ReLU(W_r [p_hh ; p_tt] + b_r)                                            fusion "ff_two" (the release's default)
    R_ij = ReLU(W_r p_hh + b_r)                                                     fusion "head" (FLAT_head, Table 3)

The attention score (Eq. 11, Transformer-XL form) of head h, with q = W_q x, k = W_{k,E} x and W_{k,R} a [d_head, d_model]
slice per head:

    A*_ij = (q_i + u) . k_j + (q_i + v) . (W_{k,R} R_ij)

Cost. Distances are integers in [-M, M] (M = longest sentence - 1), so instead of materialising the [B, N, N, 4 d_model]
concatenation and multiplying it by W_r, each distance kind's sinusoid TABLE [2M+1, d_model] goes through its own column
slice of W_r once (W_r [p_a ; p_b] = W_r^a p_a + W_r^b p_b), and R_ij is a gather-and-sum of those projected rows followed by
the ReLU. This is exactly Eq. 8 because the Linear comes before the nonlinearity. It is computed once per forward and shared
by every layer. The "head" fusion depends on d_hh only, so R stays a [2M+1, d_model] table and is never expanded to pairs.
Likewise W_{k,R} is folded into the query, (q_i + v) . (W_{k,R} R_ij) = (W_{k,R}^T (q_i + v)) . R_ij, so the per-layer
position term is one batched matmul against R (B N^2 H d_model multiply-adds) instead of projecting every R_ij
(B N^2 d_model^2); a bias on W_{k,R} would add a per-query constant that softmax ignores, so it has none.

Options reproduce the authors' release (DESIGN.md): `scaled=False` (no 1/sqrt(d_head)), `project_k=False` (K = the input,
W_{k,E} = identity), `out_proj=False` (no output projection).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from zhner.nn.encoder import FeedForward
from zhner.nn.position import sinusoid

Fusion = Literal["ff_four", "ff_two", "head"]
# the distance kinds each fusion concatenates, in the order of Eq. 8
FUSION_KINDS: dict[str, tuple[str, ...]] = {
    "ff_four": ("hh", "th", "ht", "tt"),
    "ff_two": ("hh", "tt"),
    "head": ("hh",),
}
MLD_DISTANCE = 10  # FLAT_mld (Table 2): no attention between spans whose heads are more than 10 characters apart


def span_distances(heads: torch.Tensor, tails: torch.Tensor) -> dict[str, torch.Tensor]:
    """Eq. 4-7, query minus key: heads/tails [B, N] -> {"hh", "ht", "th", "tt"}: [B, N, N], entry [b, i, j] for query i, key j."""
    h_q, t_q = heads[:, :, None], tails[:, :, None]
    h_k, t_k = heads[:, None, :], tails[:, None, :]
    return {"hh": h_q - h_k, "ht": h_q - t_k, "th": t_q - h_k, "tt": t_q - t_k}


@dataclass
class SpanPositions:
    """R of Eq. 8 for a batch, in one of two layouts:
    dense: `dense` [B, N, N, D] (R_ij itself);
    table: `table` [K, D] and `index` [B, N, N] (R_ij = table[index[b, i, j]]), used when R depends on d_hh only."""

    dense: torch.Tensor | None = None
    table: torch.Tensor | None = None
    index: torch.Tensor | None = None


class SpanPositionEncoding(nn.Module):
    """heads, tails [B, N] -> SpanPositions (R of Eq. 8, d_model wide), computed once per forward, shared by the layers."""

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
        """W_r^kind p_d for every kind and distance: [n_kinds, 2M+1, d_model], the bias b_r added to the first kind."""
        table = self.sinusoid_table(max_distance, self.fuse.weight.device).to(self.fuse.weight.dtype)  # [K, D]
        n, D = len(self.kinds), self.d_model
        weight = self.fuse.weight.view(D, n, D).transpose(0, 1)  # [n, D_out, D_in]: the column slice of each kind
        projected = torch.matmul(table, weight.transpose(1, 2))  # [n, K, D_out]
        return torch.cat([projected[:1] + self.fuse.bias, projected[1:]], dim=0)

    def forward(self, heads: torch.Tensor, tails: torch.Tensor, max_distance: int) -> SpanPositions:
        """heads, tails [B, N] (long, within [0, max_distance]) -> SpanPositions; max_distance = longest sentence - 1."""
        tables = self.projected_tables(max_distance)  # [n, K, D]
        n, K, D = tables.shape
        if self.fusion == "head":  # R_ij = ReLU(W_r p_hh + b_r): a [K, D] table indexed by d_hh
            index = heads[:, :, None] - heads[:, None, :] + max_distance  # [B, N, N]
            return SpanPositions(table=torch.relu(tables[0]), index=index)
        dist = span_distances(heads, tails)
        # one row index per kind into the stacked tables [n*K, D]: kind k's distance d sits at row k*K + d + M
        index = torch.stack([dist[kind] + (k * K + max_distance) for k, kind in enumerate(self.kinds)], dim=-1)  # [B,N,N,n]
        B, N = heads.shape
        summed = F.embedding_bag(index.view(-1, n), tables.reshape(n * K, D), mode="sum")  # gather + sum: [B*N*N, D]
        return SpanPositions(dense=torch.relu_(summed).view(B, N, N, D))

    def naive(self, heads: torch.Tensor, tails: torch.Tensor) -> torch.Tensor:
        """Eq. 8 as written (concatenate the kinds' sinusoids [B, N, N, n*D], Linear, ReLU): the reference for tests."""
        dist = span_distances(heads, tails)
        cat = torch.cat([sinusoid(dist[kind], self.d_model) for kind in self.kinds], dim=-1)
        return torch.relu(self.fuse(cat.to(self.fuse.weight.dtype)))


def span_attention_mask(
    heads: torch.Tensor,
    tails: torch.Tensor,
    span_mask: torch.Tensor,
    num_chars: int,
    msm: bool = False,
    mld: bool = False,
) -> torch.Tensor:
    """Which key each query may attend to (True = allowed): [B, 1, N] (keys only) or [B, N, N] with msm/mld.

    span_mask [B, N] marks real spans; spans 0..num_chars-1 are characters, the rest words.
    msm (FLAT_msm, Table 2): a character does not attend to its self-matched words (the words that contain it).
    mld (FLAT_mld): no attention between spans whose heads are more than 10 characters apart.
    A span always keeps itself, so no row of real spans is empty."""
    allowed = span_mask[:, None, :]  # [B, 1, N]
    if msm:
        N = heads.shape[1]
        is_char = torch.arange(N, device=heads.device) < num_chars  # [N]
        # query character i (head = tail = i) inside key word j: head[j] <= i <= tail[j]
        inside = (heads[:, None, :] <= heads[:, :, None]) & (heads[:, :, None] <= tails[:, None, :])  # [B, N, N]
        self_matched = inside & is_char[None, :, None] & ~is_char[None, None, :]
        allowed = allowed & ~self_matched
    if mld:
        allowed = allowed & ((heads[:, :, None] - heads[:, None, :]).abs() <= MLD_DISTANCE)
    return allowed


class FlatRelativeAttention(nn.Module):
    """Multi-head self-attention over spans with Eq. 11's scores.

    forward(x [B, N, D], positions: SpanPositions, allowed [B, 1, N] or [B, N, N]) -> [B, N, D]."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float = 0.0,
        scaled: bool = True,
        project_k: bool = True,
        out_proj: bool = True,
    ):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.project_k = project_k
        self.qkv = nn.Linear(d_model, (3 if project_k else 2) * d_model)  # W_q, (W_{k,E}), W_v
        self.w_r = nn.Parameter(torch.empty(heads, self.head_dim, d_model))  # W_{k,R}: [d_head, d_model] per head
        nn.init.kaiming_uniform_(self.w_r.view(d_model, d_model), a=5**0.5)  # as nn.Linear(d_model, d_model)
        self.u = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        self.v = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        self.dropout = nn.Dropout(dropout)
        self.scale = self.head_dim**-0.5 if scaled else 1.0
        self.out = nn.Linear(d_model, d_model) if out_proj else None

    def position_scores(self, q: torch.Tensor, positions: SpanPositions) -> torch.Tensor:
        """(q_i + v) . W_{k,R} R_ij for every head: q [B, N, H, d] -> [B, N(query), H, N(key)]."""
        B, N, H, _ = q.shape
        # W_{k,R} folded into the query: q'_ih = W_{k,R,h}^T (q_ih + v_h), [B, N, H, D]
        qr = torch.einsum("bnhd,hdD->bnhD", q + self.v, self.w_r)
        if positions.dense is not None:
            R = positions.dense  # [B, N, N, D]
            D = R.shape[-1]
            scores = torch.bmm(qr.reshape(B * N, H, D), R.reshape(B * N, N, D).transpose(1, 2))  # [B*N, H, N]
            return scores.view(B, N, H, N)
        table, index = positions.table, positions.index  # [K, D], [B, N, N]
        per_distance = torch.matmul(qr, table.t())  # [B, N, H, K]
        return per_distance.gather(-1, index[:, :, None, :].expand(B, N, H, N))

    def forward(self, x: torch.Tensor, positions: SpanPositions, allowed: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        H, d = self.heads, self.head_dim
        if self.project_k:
            q, k, v = self.qkv(x).view(B, N, 3, H, d).unbind(2)  # each [B, N, H, d]
        else:
            q, v = self.qkv(x).view(B, N, 2, H, d).unbind(2)
            k = x.view(B, N, H, d)
        content = torch.matmul((q + self.u).transpose(1, 2), k.permute(0, 2, 3, 1))  # [B, H, N, N]
        position = self.position_scores(q, positions).transpose(1, 2)  # [B, H, N, N]
        scores = content + position
        if self.scale != 1.0:
            scores = scores * self.scale
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        attn = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(attn, v.transpose(1, 2)).transpose(1, 2).reshape(B, N, D)  # [B, N, D]
        return self.out(out) if self.out is not None else out


class FlatEncoderLayer(nn.Module):
    """Post-norm layer: x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x))).

    residual=False reproduces the release, whose post-processing adds the sublayer output to itself: LN(2 * sublayer)."""

    def __init__(self, attention: FlatRelativeAttention, d_model: int, d_ff: int, dropout: float, residual: bool = True):
        super().__init__()
        self.attention = attention
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.residual = residual

    def forward(self, x: torch.Tensor, positions: SpanPositions, allowed: torch.Tensor) -> torch.Tensor:
        a = self.dropout(self.attention(x, positions, allowed))
        x = self.norm1(x + a if self.residual else a + a)
        f = self.dropout(self.ffn(x))
        return self.norm2(x + f if self.residual else f + f)

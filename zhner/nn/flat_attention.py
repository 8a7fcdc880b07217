"""FLAT's relative self-attention over spans and its attention masks (Li et al., ACL 2020, "FLAT: Chinese NER Using
Flat-Lattice Transformer", Eq. 11, Table 2); R_ij, the span relative position encoding of Eq. 4-10, is in
zhner/nn/span_position.py.

The attention score (Eq. 11, Transformer-XL form) of head h, with q = W_q x, k = W_{k,E} x and W_{k,R} a [d_head, d_model]
slice per head:

    A*_ij = (q_i + u) . k_j + (q_i + v) . (W_{k,R} R_ij)

Cost (exactly the equation above, computed in a cheaper order):
1. W_{k,R} is folded into the query: (q_i + v) . (W_{k,R} R_ij) = (W_{k,R}^T (q_i + v)) . R_ij, so the position term is a
   batched product of [B, N, H, d_model] queries with the gathered R rows (B N^2 H d_model multiply-adds) rather than a
   projection of every R_ij (B N^2 d_model^2); `SpanPositions.scores` takes that product without storing the
   [B, N, N, d_model] R (span_position.py). A bias on W_{k,R} would add a per-query constant that softmax ignores, so it
   has none.
2. The model's last layer computes only the character queries (its word outputs would be discarded).

Options reproduce the authors' release (DESIGN.md): `scaled=False` (no 1/sqrt(d_head)), `project_k=False` (K = the input,
W_{k,E} = identity), `out_proj=False` (no output projection). The post-norm layer around it is zhner/nn/encoder.py's
`EncoderLayer`.

Queries and keys may be two different span sequences: NFLAT's inter-attention (zhner/nn/interformer.py) has character
queries and lexicon-word keys (NFLAT Eq. 1-4); `FlatRelativeAttention.attend(queries, keys)` serves both, FLAT's
self-attention is the case keys = queries.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from zhner.nn.selective_attention import SelectiveAttention
from zhner.nn.span_position import CharQueryPositions, DensePositions, SpanPositions

MLD_DISTANCE = 10  # FLAT_mld (Table 2): no attention between spans whose heads are more than 10 characters apart


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
    A span always keeps itself, so no row is empty (an empty row would make NaNs that reach real spans through V)."""
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
    if msm or mld:  # a padding query may have lost every key: let each span see itself (real queries never see padding)
        allowed = allowed | torch.eye(heads.shape[1], dtype=torch.bool, device=heads.device)
    return allowed


class FlatRelativeAttention(nn.Module):
    """Multi-head attention over spans with Eq. 11's scores (NFLAT Eq. 1-3, 7-8 for two sequences).

    forward(x [B, N, D], positions, allowed, num_queries Q) -> [B, Q, D]: self-attention (FLAT).
    attend(queries [B, Q, D], keys [B, N, D], positions or None, allowed) -> [B, Q, D]: any two sequences (NFLAT)."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float = 0.0,
        scaled: bool = True,
        project_k: bool = True,
        out_proj: bool = True,
        relative: bool = True,
        selector: SelectiveAttention | None = None,
    ):
        """relative=False: no position term and no W_{k,R}, v (NFLAT's -RPE ablation)."""
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.project_k = project_k
        self.qkv = nn.Linear(d_model, (3 if project_k else 2) * d_model)  # W_q, (W_{k,E}), W_v
        # created in this order (W_{k,R}, u, v) so that seeds give FLAT the same initial weights as before NFLAT
        self.w_r = self.v = None
        if relative:
            self.w_r = nn.Parameter(torch.empty(heads, self.head_dim, d_model))  # W_{k,R}: [d_head, d_model] per head
            nn.init.kaiming_uniform_(self.w_r.view(d_model, d_model), a=5**0.5)  # as nn.Linear(d_model, d_model)
        self.u = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        if relative:
            self.v = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))
        self.dropout = nn.Dropout(dropout)
        self.scale = self.head_dim**-0.5 if scaled else 1.0
        self.out = nn.Linear(d_model, d_model) if out_proj else None
        self.selector = selector  # ATSSA's selective mechanism instead of the masked softmax (needs span_mask)

    def position_scores(self, q: torch.Tensor, positions: SpanPositions | DensePositions) -> torch.Tensor:
        """(q_i + v) . W_{k,R} R_ij for every head: q [B, Q, H, d] -> [B, H, Q(query), N(key)]."""
        if isinstance(positions, CharQueryPositions):  # the exported graph's character queries
            return positions.char_query_scores(q + self.v, self.w_r)
        chars = getattr(positions, "chars", None)
        if chars is not None and q.shape[1] <= chars and not torch.is_grad_enabled():  # inference: character queries
            return positions.char_query_scores(q + self.v, self.w_r)
        # W_{k,R} folded into the query: q'_ih = W_{k,R,h}^T (q_ih + v_h), [B, Q, H, D]
        qr = torch.einsum("bqhd,hdD->bqhD", q + self.v, self.w_r)
        return positions.scores(qr).permute(0, 3, 1, 2)

    def forward(
        self,
        x: torch.Tensor,
        positions: SpanPositions | DensePositions,
        allowed: torch.Tensor,
        num_queries: int | None = None,
        span_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B, N, D] -> [B, Q, D], the outputs of the first Q = num_queries spans (default all N); every span is a key.
        allowed: [B, 1, N] or [B, N, N] (True = query may attend to key), see `span_attention_mask`.
        span_mask [B, N] (real spans) is needed only with a selector (its L1 term counts real queries)."""
        Q = x.shape[1] if num_queries is None else num_queries
        query_mask = span_mask[:, :Q] if span_mask is not None else None
        return self.attend(x[:, :Q], x, positions, allowed if allowed.shape[1] == 1 else allowed[:, :Q], query_mask)

    def attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        positions: SpanPositions | DensePositions | None,
        allowed: torch.Tensor,
        query_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """queries [B, Q, D] attend to keys [B, N, D] -> [B, Q, D] (NFLAT Eq. 1-3: Q from one sequence, K, V from the other).
        positions: R of the (query, key) pairs, index [B, Q, N]; None drops the position term (NFLAT's -RPE ablation).
        allowed [B, 1, N] or [B, Q, N]. A query with no allowed key gets a zero output (NFLAT -TAG on a sentence without
        lexicon words: the release zeroes such rows after its softmax). A selector (ATSSA) needs self-attention (the
        queries are the first Q keys) and query_mask [B, Q]."""
        (B, Q, D), N = queries.shape, keys.shape[1]
        H, d = self.heads, self.head_dim
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(queries, weight[:D], bias[:D]).view(B, Q, H, d)  # W_q
        kv = F.linear(keys, weight[D:], bias[D:])
        if self.project_k:
            k, v = kv.view(B, N, 2, H, d).unbind(2)  # [B, N, H, d] each
        else:  # the release: K is the layer input itself
            k, v = keys.reshape(B, N, H, d), kv.view(B, N, H, d)
        if (positions is None) != (self.w_r is None):
            raise ValueError("positions are required exactly when the attention is relative")
        exporting = torch.compiler.is_exporting()  # no branching on data: the graph must hold for any input
        key_columns = exporting and self.selector is None and allowed.shape[1] == 1  # see _key_mask_columns
        query, key = q + self.u, k
        if key_columns:
            query, key, has_key = self._key_mask_columns(query, key, allowed)
        scores = torch.matmul(query.transpose(1, 2), key.permute(0, 2, 3, 1))  # [B, H, Q, N]: (q_i + u) . k_j
        if positions is not None:
            scores = scores.add_(self.position_scores(q, positions))  # + (q_i + v) . W_{k,R} R_ij, Eq. 11 / NFLAT Eq. 3
        if self.scale != 1.0:
            scores = scores.mul_(self.scale)
        if self.selector is not None:
            if query_mask is None:
                raise ValueError("FlatRelativeAttention with a selector needs span_mask")
            attn = self.selector(scores, keys, allowed, query_mask)
        elif key_columns:  # masked keys score -inf already; a row with no key at all is zeroed on its output below
            attn = torch.softmax(scores, dim=-1)
        else:
            has_key = allowed.any(-1, keepdim=True)  # [B, 1|Q, 1]
            empty_rows = exporting or not bool(has_key.all())
            if empty_rows:  # let empty rows see everything (a finite softmax), then zero their weights below
                allowed = allowed | ~has_key
            if exporting or not bool(allowed.all()):
                scores = scores.masked_fill_(~allowed[:, None], float("-inf"))
            attn = torch.softmax(scores, dim=-1)
            if empty_rows:
                attn = attn * has_key[:, None]
        attn = self.dropout(attn)
        out = torch.matmul(attn, v.transpose(1, 2)).transpose(1, 2).reshape(B, Q, D)  # [B, Q, D]
        if key_columns:
            out = out * has_key.to(out.dtype)  # [B, 1, 1]: zero weights give a zero output
        return self.out(out) if self.out is not None else out

    @staticmethod
    def _key_mask_columns(
        query: torch.Tensor, key: torch.Tensor, allowed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The exported graph's key mask (allowed [B, 1, N]) as one more column of the product that computes the
        scores: (q_i + u ; 1) . (k_j ; 0 or -inf) = (q_i + u) . k_j, or -inf for a masked key. onnxruntime's masked
        fill and its multiply by has_key each took a pass over [B, H, Q, N] (5.1% and 0.7% of zh-accurate's graph on
        MSRA's test set). query [B, Q, H, d], key [B, N, H, d] -> [B, Q, H, d + 1], [B, N, H, d + 1], has_key [B, 1, 1]:
        a row with no key at all sees every key (a finite softmax), and `attend` zeroes its output."""
        (B, N, H, _), dtype = key.shape, query.dtype
        has_key = allowed.any(-1, keepdim=True)  # [B, 1, 1]
        visible = allowed | ~has_key
        bias = torch.zeros(visible.shape, dtype=dtype, device=key.device)
        bias = bias.masked_fill(~visible, float("-inf"))  # [B, 1, N]
        query = torch.cat([query, torch.ones_like(query[..., :1])], dim=-1)
        key = torch.cat([key, bias.view(B, N, 1, 1).expand(B, N, H, 1)], dim=-1)
        return query, key, has_key

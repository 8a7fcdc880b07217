"""ACT-S: the Adapted Cross-Transformer with Global Sparse Attention (Zhang et al., "bilingual enhancement for Chinese
NER", Sec. 3.3, Eq. 3-11). Queries come from one sequence X [n, d], keys and values from another Y [m, d]:

    Q^(h), K^(h), V^(h) = X W_q^(h), Y W_k^(h), Y W_v^(h)                                    Eq. 3
    Ã^(h)_uv = Q_u K_v^T + Q_u R_{u-v}^T + K_v R_{u-v}^T + α K_v^T + β R_{u-v}^T             Eq. 4
    R_{u-v} = [..., sin((u - v) w_p), cos((u - v) w_p), ...]                                  Eq. 5
    A^(h)_uv = Tkm(Ã^(h)_uv, k): Ã_uv if it is among the k largest of row u, else C << 0     Eq. 6-7
    Atten = [softmax(A^(1)) V^(1); ...; softmax(A^(Nh)) V^(Nh)] W^o                          Eq. 8-9
    Ô = LN(X + Atten),  O = LN(Ô + FFN(Ô))                                                   Eq. 10-11

Eq. 4 is TENER's relative score (zhner/nn/tener_attention.py: (Q + u) K^T + (Q + v) R^T + K R^T with α = u, β = v), with
the key bias term K_v R_{u-v}^T (the paper's "KB") between two different sequences. What is the same as zhner's other
modules is reused: the sinusoid of zhner/nn/position.py (the fastNLP form TENER, FLAT and MECT use; our copy of Eq. 5 prints
its base garbled, "10^{6p/dk}", so we take MECT's, which the paper says it follows) and the post-norm layer of
zhner/nn/encoder.py (`EncoderLayer`: exactly Eq. 10-11, with dropout on each sublayer). The scores are new here: NFLAT's
cross-attention (flat_attention.py) has span distances and a projected R, not Eq. 4's unprojected R with the key term.

Relative distance. The paper: "u is the index of the word in the target language and v is the token in the other
language". We read it literally: u - v is the difference of the two positions in their own sequences, 0-based, counted
after [CLS] / [SEP] are dropped (Sec. 3.2): character u of the Chinese sentence and English word v (after APW: word, not
piece). No alignment or length rescaling is applied -- the paper defines none, and the sinusoid gives the model the
signed offset to learn a rough monotone alignment from. Within one language (the intra block) it is TENER's i - j.

Like TENER (and unlike Vaswani's), the scores are not scaled by 1/sqrt(d_k): Eq. 8 has none. Padding keys are masked
(-inf) before the top-k, so k counts real keys; k larger than the number of real keys keeps them all (plain attention).
A query row with no real key at all (an empty translation: the paper's Fig. 4) gets zero attention output, never NaN.

Ablations (Table 2): topk 0 / None (-GS: plain softmax), relative=False (-RA: no R terms, so no β and no key bias),
key_bias=False (-KB: no K_v R_{u-v}^T; it has no parameters of its own).
"""
from __future__ import annotations

import torch
from torch import nn

from zhner.nn.encoder import EncoderLayer
from zhner.nn.position import sinusoid


def topk_mask(scores: torch.Tensor, k: int | None, allowed: torch.Tensor) -> torch.Tensor:
    """Tkm (Eq. 6) as a mask: scores [..., Lq, Lk], allowed [..., Lq | 1, Lk] (True = a real key) -> bool [..., Lq, Lk],
    True for exactly min(k, real keys) entries per row: the largest allowed scores (ties broken by torch.topk's order, so
    a row never keeps more than k). k 0 / None: all allowed keys."""
    allowed = allowed.expand_as(scores)
    if not k:
        return allowed
    Lk = scores.shape[-1]
    # k -inf columns after the keys let topk take k whatever Lk is, with no branch on it (so the graph exports with a
    # dynamic Lk): with Lk <= k every real key is kept, as without a mask
    masked = scores.masked_fill(~allowed, float("-inf"))
    padded = torch.cat([masked, masked.new_full((*masked.shape[:-1], k), float("-inf"))], dim=-1)  # [..., Lq, Lk + k]
    index = padded.topk(k, dim=-1).indices  # [..., Lq, k]
    keep = torch.zeros(padded.shape, dtype=torch.bool, device=scores.device).scatter_(-1, index, True)[..., :Lk]
    return keep & allowed  # a row with fewer than k real keys picked some -inf padding: drop those


class ACTSAttention(nn.Module):
    """Multi-head attention with Eq. 4's scores and Eq. 6's top-k mask, and the output projection W^o (Eq. 9).

    attend(x [B, n, D], y [B, m, D], y_mask [B, m]) -> [B, n, D]: x attends to y (ACT-S_cn, ACT-S_en).
    forward(x [B, n, D], mask [B, n]) -> [B, n, D]: x attends to itself (the intra-Chinese block)."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        topk: int | None = None,
        relative: bool = True,
        key_bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, d_model // heads
        self.topk, self.relative, self.key_bias = topk, relative, key_bias and relative
        self.q = nn.Linear(d_model, d_model, bias=False)  # W_q^(h) of every head, Eq. 3
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.alpha = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim)))  # α, per head
        self.beta = nn.Parameter(nn.init.xavier_normal_(torch.empty(heads, self.head_dim))) if relative else None  # β
        self.out = nn.Linear(d_model, d_model)  # W^o, Eq. 9
        self.dropout = nn.Dropout(dropout)
        self.last_attention: torch.Tensor | None = None  # [B, H, n, m] of the last call, for inspection

    def split(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.heads, self.head_dim).transpose(1, 2)  # [B, H, L, d]

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Eq. 4: q [B, H, n, d], k [B, H, m, d] -> Ã [B, H, n, m]."""
        n, m = q.shape[2], k.shape[2]
        scores = torch.matmul(q + self.alpha[:, None], k.transpose(-1, -2))  # Q_u K_v^T + α K_v^T
        if self.relative:
            u = torch.arange(n, device=q.device)
            v = torch.arange(m, device=q.device)
            R = sinusoid(u[:, None] - v[None, :], self.head_dim).to(q.dtype)  # [n, m, d]: R_{u-v}, Eq. 5
            scores = scores + torch.einsum("bhnd,nmd->bhnm", q + self.beta[:, None], R)  # Q_u R^T + β R^T
            if self.key_bias:
                scores = scores + torch.einsum("bhmd,nmd->bhnm", k, R)  # K_v R_{u-v}^T: the key bias (KB)
        return scores

    def attend(self, x: torch.Tensor, y: torch.Tensor, y_mask: torch.Tensor) -> torch.Tensor:
        B, n, D = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(y)), self.split(self.v(y))  # [B, H, n|m, d]
        scores = self.scores(q, k)  # [B, H, n, m]
        allowed = y_mask[:, None, None, :]  # [B, 1, 1, m]
        keep = topk_mask(scores, self.topk, allowed)  # [B, H, n, m], Eq. 6-7
        has_key = keep.any(-1, keepdim=True)  # [B, H, n, 1]: False only when y has no real element
        attn = torch.softmax(scores.masked_fill(~(keep | ~has_key), float("-inf")), dim=-1)  # an empty row: uniform ...
        attn = attn * has_key  # ... then zero
        self.last_attention = attn.detach()
        out = torch.matmul(self.dropout(attn), v)  # [B, H, n, d], Eq. 8
        return self.out(out.transpose(1, 2).reshape(B, n, D))  # [B, n, D], Eq. 9

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.attend(x, x, mask)


class ACTSBlock(nn.Module):
    """One ACT-S (Eq. 3-11): ACTSAttention inside zhner's post-norm layer (LN(X + Atten), LN(Ô + FFN(Ô))).
    forward(x [B, n, D], y [B, m, D], y_mask [B, m]) -> [B, n, D]."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        d_ff: int,
        topk: int | None = None,
        relative: bool = True,
        key_bias: bool = True,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
    ):
        super().__init__()
        self.layer = EncoderLayer(ACTSAttention(d_model, heads, topk, relative, key_bias, attn_dropout), d_model, d_ff, dropout)

    @property
    def attention(self) -> ACTSAttention:
        return self.layer.attention

    def forward(self, x: torch.Tensor, y: torch.Tensor, y_mask: torch.Tensor) -> torch.Tensor:
        return self.layer(x, y_mask, memory=y)

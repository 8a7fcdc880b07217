"""Adaptive-threshold selective self-attention (ATSSA; COLING 2022, Sec. 4.1 and 4.3, Eq. 7-12, 16-17, 19).

Given the raw scores A [B, H, Q, K] of any attention module, each query i of each head keeps only the keys whose score
reaches its own threshold, and the softmax runs over the kept keys:

    T_i   = W_t [x_i ; mp(x) ; x_i * mp(x) ; x_i - mp(x)]             Eq. 7  (one threshold per head: W_t has H outputs)
    T~_i  = min(topk_i, T_i)                                           Eq. 8  (topk_i: k-th largest score of row i)
    b_ij  = sigmoid(alpha (A_ij - T~_i))                               Eq. 9
    z_ij ~ Bernoulli(b_ij)                                             Eq. 10 (training: Gumbel-softmax, Eq. 16-17)
    Attn  = softmax(A') V,  A'_ij = A_ij if z_ij = 1 else -inf         Eq. 11-12
    loss += lambda ||z||_1 / L                                         Eq. 19

Choices the paper leaves open (DESIGN.md: ATSSA has no released code):
- mp(x) is the mean of x over the keys the query may attend to (the whole real sequence for an unmasked query).
- top-k runs over real (allowed) keys only; a row with fewer than k real keys keeps all of them.
- Training draws z by a two-class Gumbel-softmax with temperature tau and a straight-through hard sample (the forward
  uses the 0/1 sample, the backward the soft one). With classes (1: keep, 0: drop) and logits log b, log(1 - b), the
  soft "keep" weight of Eq. 17 is sigmoid((log b - log(1 - b) + g_1 - g_0) / tau) and log b - log(1 - b) is exactly
  alpha (A - T~): computing it in that form never takes log(0) when alpha is large.
- The top-k keys are always kept in training too ("force the model to keep at least k keys", Sec. 4.1): Eq. 8 alone only
  gives them b >= 1/2, and a Bernoulli sample that drops a row's best keys makes the straight-through gradient of Eq. 12
  explode (d w / d z_j = exp(A_j) / sum_kept exp(A), unbounded when the kept keys score far below a dropped one; measured:
  1e29 after two SGD steps on Resume). Keeping the row's best key bounds it by 1. Without the floor (-topk) this guard is
  gone, as in the paper, and gradient clipping is what keeps training alive.
- Inference is deterministic: z_ij = [A_ij >= T~_i].
- Eq. 12's masked softmax is written as w_ij = z_ij exp(A_ij - m_i) / sum_j z_ij exp(A_ij - m_i) (m_i: the row's largest
  real score): identical for 0/1 z, and differentiable in z, which the straight-through estimator needs. A row that keeps
  no key gets all-zero weights instead of NaNs (the query reads nothing): this happens only without the top-k floor.
- ||z||_1 / L is taken per sentence (z summed over heads, real queries and keys, divided by the number of real queries L),
  then averaged over the batch like the NLL.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Selection:
    """What one selective attention call produced: weights and z [B, H, Q, K] (z: bool at inference; in training float
    0/1 carrying the straight-through gradient), threshold T~ [B, H, Q], query_mask [B, Q]."""

    weights: torch.Tensor
    z: torch.Tensor
    threshold: torch.Tensor
    query_mask: torch.Tensor

    @property
    def l1(self) -> torch.Tensor:
        """Eq. 19's ||z||_1 / L per sentence, before lambda: [B] (computed on demand: inference does not need it)."""
        qm = self.query_mask.to(self.weights.dtype)  # [B, Q]
        return (self.z.sum((1, 3)) * qm).sum(-1) / qm.sum(-1).clamp_min(1.0)


class SelectiveAttention(nn.Module):
    """Turns raw attention scores into selective attention weights; plugs into an attention module as its `selector`.

    topk=0 removes the top-k floor (ablation -topk), alpha=1 is ablation -AF, dynamic_threshold=False fixes T_i = 0
    (ablation -DT). `last` keeps the latest Selection so that a model can add the L1 term to its loss and plots can show
    what was selected, without changing what the attention module returns."""

    def __init__(self, d_model: int, heads: int, topk: int = 3, alpha: float = 50.0, tau: float = 1.0, dynamic_threshold: bool = True):
        super().__init__()
        if topk < 0 or alpha <= 0 or tau <= 0:
            raise ValueError(f"need topk >= 0, alpha > 0, tau > 0 (got {topk}, {alpha}, {tau})")
        self.heads, self.topk, self.alpha, self.tau = heads, topk, alpha, tau
        self.threshold = nn.Linear(4 * d_model, heads) if dynamic_threshold else None  # W_t of Eq. 7
        self.last: Selection | None = None

    def thresholds(self, x: torch.Tensor, allowed: torch.Tensor, num_queries: int) -> torch.Tensor:
        """T of Eq. 7: x [B, K, D] (the first Q rows are the queries), allowed [B, 1|Q, K] -> [B, H, Q]."""
        B = x.shape[0]
        if self.threshold is None:  # ablation -DT: a fixed threshold 0
            return x.new_zeros(B, self.heads, num_queries)
        keep = allowed.to(x.dtype)  # [B, 1|Q, K]
        pooled = torch.matmul(keep, x) / keep.sum(-1, keepdim=True).clamp_min(1.0)  # mp(x): [B, 1|Q, D]
        xq = x[:, :num_queries]  # [B, Q, D]
        pooled = pooled.expand_as(xq)
        match = torch.cat([xq, pooled, xq * pooled, xq - pooled], dim=-1)  # the matching vector, [B, Q, 4D]
        return self.threshold(match).transpose(1, 2)  # [B, H, Q]

    def forward(self, scores: torch.Tensor, x: torch.Tensor, allowed: torch.Tensor, query_mask: torch.Tensor) -> torch.Tensor:
        """scores [B, H, Q, K] (raw, before any masking), x [B, K, D] (the layer input; its first Q rows are the queries),
        allowed [B, 1|Q, K] (True = the query may attend to the key), query_mask [B, Q] (True = a real query)
        -> attention weights [B, H, Q, K]; the full Selection is kept in `self.last`."""
        Q = scores.shape[2]
        allowed = allowed[:, None]  # [B, 1, 1|Q, K]
        real = scores.masked_fill(~allowed, float("-inf"))  # [B, H, Q, K]
        threshold = self.thresholds(x, allowed[:, 0], Q)  # T, [B, H, Q]
        if self.training:
            weights, z, threshold = self._sample(scores, real, allowed, threshold)
        else:
            weights, z, threshold = self._select(real, threshold)
        self.last = Selection(weights, z, threshold, query_mask)
        return weights

    def _kth(self, real: torch.Tensor) -> torch.Tensor:
        """topk_i of Eq. 8 over real keys: real [..., K] (masked keys -inf) -> [...]. A row with fewer than k real keys
        gets the lowest finite float, below every real score and above the masked keys: it keeps all its real keys."""
        if torch.compiler.is_exporting():  # k -inf columns instead of a branch on K: the graph holds for any K
            real = torch.cat([real, real.new_full((*real.shape[:-1], self.topk), float("-inf"))], dim=-1)
        kth = real.topk(min(self.topk, real.shape[-1]), dim=-1).values[..., -1]
        return kth.clamp_min(torch.finfo(real.dtype).min)

    def _select(self, real: torch.Tensor, threshold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Inference: z = [A >= T~] and a masked softmax (Eq. 8, 11-12), in as few passes over [B, H, Q, K] as we can:
        a row with at least k keys >= T has topk_i >= T_i, so T~_i = T_i; only the other rows need their k-th score."""
        keep = real >= threshold[..., None]  # z of Eq. 8-9 with T~ = T; masked keys are -inf: never kept
        if self.topk:
            short = keep.sum(-1) < self.topk  # rows where T~_i = topk_i < T_i, [B, H, Q]
            if torch.compiler.is_exporting():  # no data-dependent branch or size: every row's k-th score
                threshold = torch.where(short, self._kth(real), threshold)
                keep = real >= threshold[..., None]
            elif short.any():
                threshold = threshold.masked_scatter(short, self._kth(real[short]))
                keep = real >= threshold[..., None]
        weights = torch.softmax(real.masked_fill(~keep, float("-inf")), dim=-1)  # Eq. 11-12
        if not self.topk:  # without the floor a row can keep nothing: it reads nothing (its softmax is NaN)
            weights = weights.nan_to_num(0.0)
        return weights, keep, threshold

    def _sample(
        self, scores: torch.Tensor, real: torch.Tensor, allowed: torch.Tensor, threshold: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Training: z from the Gumbel-softmax of Eq. 9 and 17 with a straight-through hard sample; the top-k keys kept."""
        forced = None
        if self.topk:
            kth = self._kth(real)  # [B, H, Q]
            threshold = torch.minimum(kth, threshold)  # Eq. 8
            forced = real >= kth[..., None]  # the top-k keys of each row
        margin = (scores - threshold[..., None]).masked_fill(~allowed, 0.0)  # A_ij - T~_i, finite for real keys
        u = torch.rand(2, *margin.shape, dtype=margin.dtype, device=margin.device).clamp_(1e-10, 1.0 - 1e-7)
        g = -torch.log(-torch.log(u))  # two Gumbel(0, 1) samples per pair, Eq. 17's g_1, g_0
        soft = torch.sigmoid((self.alpha * margin + g[0] - g[1]) / self.tau)  # Eq. 9 + 17, class "keep"
        hard = (soft >= 0.5).to(soft.dtype)  # Eq. 16's argmax
        z = hard + soft - soft.detach()  # straight-through
        if forced is not None:  # the top-k keys are kept, not just likely (see the module docstring)
            z = torch.where(forced, torch.ones_like(z), z)
        z = z * allowed  # masked keys are never selected
        row_max = real.amax(-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).min)  # m_i, [B, H, Q, 1]
        e = torch.exp(real - row_max) * z  # masked keys: exp(-inf) = 0
        weights = e / e.sum(-1, keepdim=True).clamp_min(1e-30)  # Eq. 11-12, differentiable in z
        return weights, z, threshold

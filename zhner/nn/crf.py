"""A vectorised linear-chain conditional random field (Lafferty et al. 2001) for sequence tagging.

For emissions e [B, L, T] and a tag path y_1..y_n (n = the sequence's length under the mask), the path score is

    s(y) = start[y_1] + sum_{i=1..n} e_i[y_i] + sum_{i=2..n} trans[y_{i-1}, y_i] + end[y_n]

and p(y) = exp(s(y)) / Z, with log Z computed by the forward algorithm (a logsumexp recursion over [B, T, T] per step) and
the best path by the Viterbi algorithm (the same recursion with max, then a backtrace through stored backpointers).
`transitions` is indexed [from, to], like pytorch-crf's.

Optional constraints (see `allowed_transitions`) forbid starts, transitions and ends that break a tag scheme; a forbidden
one gets the score `DISALLOWED` (-1e4), a large finite negative constant rather than -inf, so that no logsumexp or gradient
ever sees inf - inf, in both the likelihood and Viterbi.

Masks are left-aligned: mask [B, L] is True on real tokens, and every sequence has at least one (mask[:, 0] all True).
The time loop runs L steps, each one batched over the whole batch and all tags. Emissions must be finite (no -inf
masking of tags: use constraints). The likelihood supports first-order gradients only (no double backward).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from zhner.data.schemes import SCHEMES, check_tag, split_tag
from zhner.decoding import viterbi as numpy_viterbi

DISALLOWED = -1e4  # score of a forbidden start / transition / end
# Terms more than this far below the maximum are raised to it inside logsumexp. Their true share, exp(-60) ~ 1e-26 each,
# is below float64's precision for any realistic tag count, so log Z and its gradient are unchanged to working precision;
# the clamp keeps exp() off its underflow path, which on CPU is ~10x slower and would otherwise hit every DISALLOWED entry.
_LSE_FLOOR = -60.0
_INSIDE = {"bio": "I", "bioes": "I", "bmes": "M"}  # the prefix that continues an entity, per scheme


def allowed_transitions(tags: list[str], scheme: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(start_allowed [T], trans_allowed [T, T] (from -> to), end_allowed [T]) bool tensors for `tags` in `scheme`.

    BIO: I-X only after B-X or I-X, never first. BIOES/BMES: the inside tag (I or M) and E-X only after B-X or inside-X;
    B-X and inside-X must be followed by inside-X or E-X; a sequence starts only with O/B/S and ends only with O/E/S.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tag scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    for tag in tags:
        check_tag(tag, scheme)
    parsed = [split_tag(tag) for tag in tags]
    inside = _INSIDE[scheme]
    T = len(tags)
    start = torch.ones(T, dtype=torch.bool)
    end = torch.ones(T, dtype=torch.bool)
    trans = torch.ones(T, T, dtype=torch.bool)
    # Continuing tags (I/M, and E outside BIO) need an open entity of the same type right before them.
    continuing = {inside} if scheme == "bio" else {inside, "E"}
    # After B-X or inside-X an entity of type X is open; BIOES/BMES must continue or close it, BIO may stop there.
    opening = {"B", inside}
    for j, (pj, lj) in enumerate(parsed):
        if pj in continuing:
            start[j] = False
        if scheme != "bio" and pj in opening:
            end[j] = False
        for i, (pi, li) in enumerate(parsed):
            open_before = pi in opening  # i leaves an entity of type li open
            if pj in continuing:
                trans[i, j] = open_before and li == lj
            elif scheme != "bio" and open_before:
                trans[i, j] = False  # an open BIOES/BMES entity must be continued or closed
    return start, trans, end


def unconstrained(num_tags: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Allowed masks that allow every start, transition and end."""
    return (
        torch.ones(num_tags, dtype=torch.bool),
        torch.ones(num_tags, num_tags, dtype=torch.bool),
        torch.ones(num_tags, dtype=torch.bool),
    )


class _LogSumExpDim1(torch.autograd.Function):
    """logsumexp over dim 1 of [B, T, T] (the "from" axis) -> [B, T]; its gradient is the softmax over that axis."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        top = x.amax(dim=1, keepdim=True)  # [B, 1, T]
        prob = (x - top).clamp_(min=_LSE_FLOOR).exp_()  # [B, T, T] unnormalised
        total = prob.sum(dim=1, keepdim=True)  # [B, 1, T]
        ctx.save_for_backward(prob.div_(total))  # softmax over "from"
        return (total.log_() + top).squeeze(1)  # [B, T]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (prob,) = ctx.saved_tensors
        return grad.unsqueeze(1) * prob  # [B, T, T]


class CRF(nn.Module):
    """Linear-chain CRF over `num_tags` tags: parameters `transitions` [T, T] (from, to), `start` [T], `end` [T].

    `constraints` = (start_allowed [T], trans_allowed [T, T], end_allowed [T]) bool tensors (see `allowed_transitions`),
    kept as buffers (all True when None). `init` = 'zero' (as FLAT's release) or 'normal' (std 0.1).
    `decode_constraints`: other constraints for decoding only (Viterbi, n-best, confidences), e.g. a CRF trained without
    constraints that must still output well-formed tags; None = decode under `constraints`. They are rebuilt with the
    model from its config, not saved with the weights.
    """

    def __init__(
        self,
        num_tags: int,
        constraints: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        init: str = "zero",
        decode_constraints: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ):
        super().__init__()
        if num_tags < 1:
            raise ValueError(f"num_tags must be positive, got {num_tags}")
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [T, T] from -> to
        self.start = nn.Parameter(torch.zeros(num_tags))  # [T]
        self.end = nn.Parameter(torch.zeros(num_tags))  # [T]
        if init == "normal":
            for p in (self.transitions, self.start, self.end):
                nn.init.normal_(p, std=0.1)
        elif init != "zero":
            raise ValueError(f"unknown CRF init {init!r}; expected 'zero' or 'normal'")

        start_ok, trans_ok, end_ok = self._check_constraints(constraints)
        self.register_buffer("start_allowed", start_ok)  # [T]
        self.register_buffer("trans_allowed", trans_ok)  # [T, T]
        self.register_buffer("end_allowed", end_ok)  # [T]
        decode = (None,) * 3 if decode_constraints is None else self._check_constraints(decode_constraints)
        for name, value in zip(("start", "trans", "end"), decode):
            self.register_buffer(f"decode_{name}_allowed", value, persistent=False)

    def _check_constraints(self, constraints) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        T = self.num_tags
        if constraints is None:
            return unconstrained(T)
        start_ok, trans_ok, end_ok = (torch.as_tensor(c, dtype=torch.bool).clone() for c in constraints)
        if start_ok.shape != (T,) or end_ok.shape != (T,) or trans_ok.shape != (T, T):
            raise ValueError(
                f"constraints must have shapes [{T}], [{T}, {T}], [{T}]; got "
                f"{list(start_ok.shape)}, {list(trans_ok.shape)}, {list(end_ok.shape)}"
            )
        return start_ok, trans_ok, end_ok

    def allowed(self, decoding: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(start [T], trans [T, T], end [T]) allowed masks for training (the likelihood) or for decoding."""
        if decoding and self.decode_start_allowed is not None:
            return self.decode_start_allowed, self.decode_trans_allowed, self.decode_end_allowed
        return self.start_allowed, self.trans_allowed, self.end_allowed

    def scores(self, decoding: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(start [T], trans [T, T], end [T]) with forbidden entries replaced by DISALLOWED."""
        forbid = torch.tensor(DISALLOWED, dtype=self.start.dtype, device=self.start.device)
        start_ok, trans_ok, end_ok = self.allowed(decoding)
        return (
            torch.where(start_ok, self.start, forbid),
            torch.where(trans_ok, self.transitions, forbid),
            torch.where(end_ok, self.end, forbid),
        )

    def extra_repr(self) -> str:
        return f"num_tags={self.num_tags}"

    # ---- helpers -------------------------------------------------------------------------------------------------

    def _potentials(
        self, emissions: torch.Tensor, mask: torch.Tensor, decoding: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Check shapes; return (emissions, mask as bool, start [T], trans [T, T], end [T]) in one compute dtype,
        with forbidden starts / transitions / ends (for training, or for `decoding`) replaced by DISALLOWED."""
        if emissions.dim() != 3 or emissions.size(2) != self.num_tags:
            raise ValueError(f"emissions must be [B, L, {self.num_tags}], got {list(emissions.shape)}")
        if mask.shape != emissions.shape[:2]:
            raise ValueError(f"mask must be {list(emissions.shape[:2])}, got {list(mask.shape)}")
        if emissions.size(1) == 0:
            raise ValueError("emissions have no time steps (L = 0)")
        mask = mask.bool()
        if not bool(mask[:, 0].all()):
            raise ValueError("mask[:, 0] must be all True: every sequence needs at least one token, left-aligned")
        # Compute in the wider of the emission and parameter dtypes (float64 stays float64; half is lifted to float32).
        dtype = torch.promote_types(emissions.dtype, self.transitions.dtype)
        emissions = emissions.to(dtype)
        forbid = emissions.new_tensor(DISALLOWED)
        start_ok, trans_ok, end_ok = self.allowed(decoding)
        start = torch.where(start_ok, self.start.to(dtype), forbid)  # [T]
        trans = torch.where(trans_ok, self.transitions.to(dtype), forbid)  # [T, T]
        end = torch.where(end_ok, self.end.to(dtype), forbid)  # [T]
        return emissions, mask, start, trans, end

    # ---- likelihood ----------------------------------------------------------------------------------------------

    def forward(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor, reduction: str = "mean"
    ) -> torch.Tensor:
        """Negative log-likelihood -log p(tags | emissions) = log Z - s(tags).

        emissions [B, L, T], tags [B, L] (padding positions may hold any value, e.g. -100), mask [B, L].
        reduction: 'mean' (over the batch), 'sum', or 'none' ([B]).
        """
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"unknown reduction {reduction!r}; expected 'mean', 'sum' or 'none'")
        emissions, mask, start, trans, end = self._potentials(emissions, mask)
        nll = self._log_partition(emissions, mask, start, trans, end) - self._score(
            emissions, tags, mask, start, trans, end
        )  # [B]
        if reduction == "mean":
            return nll.mean()
        if reduction == "sum":
            return nll.sum()
        return nll

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor, decoding: bool = False) -> torch.Tensor:
        """log Z per sequence [B], by the forward algorithm (over the paths allowed in training, or in `decoding`)."""
        return self._log_partition(*self._potentials(emissions, mask, decoding))

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Score s(tags) of the given (gold) paths [B]."""
        emissions, mask, start, trans, end = self._potentials(emissions, mask)
        return self._score(emissions, tags, mask, start, trans, end)

    @staticmethod
    def _log_partition(
        emissions: torch.Tensor, mask: torch.Tensor, start: torch.Tensor, trans: torch.Tensor, end: torch.Tensor
    ) -> torch.Tensor:
        # Forward algorithm: alpha_i[j] = log sum_k exp(alpha_{i-1}[k] + trans[k, j]) + e_i[j];
        # log Z = logsumexp_j(alpha_n[j] + end[j]). Past a sequence's end, alpha is carried unchanged.
        alpha = start + emissions[:, 0]  # [B, T]
        for i in range(1, emissions.size(1)):
            step = alpha.unsqueeze(2) + trans  # [B, T, T] (from, to)
            nxt = _LogSumExpDim1.apply(step) + emissions[:, i]  # [B, T]
            alpha = torch.where(mask[:, i].unsqueeze(1), nxt, alpha)  # [B, T]
        return torch.logsumexp(alpha + end, dim=1)  # [B]

    @staticmethod
    def _score(
        emissions: torch.Tensor,
        tags: torch.Tensor,
        mask: torch.Tensor,
        start: torch.Tensor,
        trans: torch.Tensor,
        end: torch.Tensor,
    ) -> torch.Tensor:
        if tags.shape != mask.shape:
            raise ValueError(f"tags must be {list(mask.shape)}, got {list(tags.shape)}")
        tags = tags.long().masked_fill(~mask, 0)  # [B, L], padding -> a valid index, masked out below
        zero = emissions.new_zeros(())
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # [B, L] e_i[y_i]
        emit = torch.where(mask, emit, zero).sum(1)  # [B]
        step = trans[tags[:, :-1], tags[:, 1:]]  # [B, L-1] trans[y_{i-1}, y_i]
        step = torch.where(mask[:, 1:], step, zero).sum(1)  # [B]
        last = mask.long().sum(1, keepdim=True) - 1  # [B, 1] index of each sequence's last token
        last_tag = tags.gather(1, last).squeeze(1)  # [B]
        return start[tags[:, 0]] + emit + step + end[last_tag]  # [B]

    # ---- decoding ------------------------------------------------------------------------------------------------

    def viterbi_tensor(self, emissions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Best path per sequence by Viterbi: (paths [B, L] long, padded with 0; their scores [B])."""
        emissions, mask, start, trans, end = self._potentials(emissions, mask, decoding=True)
        B, L, T = emissions.shape
        # delta_i[j] = max_k (delta_{i-1}[k] + trans[k, j]) + e_i[j], with backpointer psi_i[j] = the argmax k.
        # Past a sequence's end, delta is carried and psi is the identity, so the backtrace walks straight through padding.
        identity = torch.arange(T, device=emissions.device).expand(B, T)  # [B, T]
        delta = start + emissions[:, 0]  # [B, T]
        backpointers = []  # L-1 tensors [B, T]
        for i in range(1, L):
            best, arg = (delta.unsqueeze(2) + trans).max(dim=1)  # [B, T] each, max over "from"
            keep = mask[:, i].unsqueeze(1)  # [B, 1]
            delta = torch.where(keep, best + emissions[:, i], delta)  # [B, T]
            backpointers.append(torch.where(keep, arg, identity))  # [B, T]
        scores, tag = (delta + end).max(dim=1)  # [B], [B]: best final tag
        # Backtrace: y_{i-1} = psi_i[y_i], one batched gather per step.
        path = [tag]
        for psi in reversed(backpointers):
            tag = psi.gather(1, tag.unsqueeze(1)).squeeze(1)  # [B]
            path.append(tag)
        paths = torch.stack(path[::-1], dim=1)  # [B, L]
        return paths.masked_fill(~mask, 0), scores

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Viterbi best path per sequence, as lists trimmed to each sequence's length. On the CPU the same recursion
        runs in numpy (zhner.decoding.viterbi: the same float operations, so the same paths), a few times faster
        per step than torch's small-tensor ops."""
        if emissions.device.type == "cpu":
            emissions, mask, start, trans, end = self._potentials(emissions, mask, decoding=True)
            lengths = mask.long().sum(1).tolist()
            e, start, trans, end = (t.detach().numpy() for t in (emissions, start, trans, end))
            return numpy_viterbi(e, lengths, start, trans, end)
        paths, _ = self.viterbi_tensor(emissions, mask)
        lengths = mask.long().sum(1).tolist()
        return [row[:n] for row, n in zip(paths.tolist(), lengths)]

    # ---- marginals and n-best ------------------------------------------------------------------------------------

    @torch.no_grad()
    def forward_backward(self, emissions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(alpha [B, L, T], beta [B, L, T], log Z [B]): alpha_i[t] = log of the summed scores of every prefix y_1..y_i
        with y_i = t (emission i included), beta_i[t] = the same for every suffix after i given y_i = t (end score
        included), so that P(y_i = t) = exp(alpha_i[t] + beta_i[t] - log Z). Positions past a sequence's end carry
        alpha and hold beta = end; they are never asked about."""
        emissions, mask, start, trans, end = self._potentials(emissions, mask, decoding=True)
        B, L, T = emissions.shape
        alphas = [start + emissions[:, 0]]  # each [B, T]
        for i in range(1, L):
            nxt = torch.logsumexp(alphas[-1].unsqueeze(2) + trans, dim=1) + emissions[:, i]  # sum over "from"
            alphas.append(torch.where(mask[:, i].unsqueeze(1), nxt, alphas[-1]))
        log_z = torch.logsumexp(alphas[-1] + end, dim=1)  # [B]
        last = end.expand(B, T)
        betas = [last]
        for i in range(L - 2, -1, -1):
            # beta_i[t] = logsumexp_u(trans[t, u] + e_{i+1}[u] + beta_{i+1}[u]); at a sequence's last token, beta = end
            nxt = torch.logsumexp(trans + (emissions[:, i + 1] + betas[-1]).unsqueeze(1), dim=2)  # sum over "to"
            betas.append(torch.where(mask[:, i + 1].unsqueeze(1), nxt, last))
        return torch.stack(alphas, 1), torch.stack(betas[::-1], 1), log_z

    @torch.no_grad()
    def subpath_log_probs(
        self, emissions: torch.Tensor, mask: torch.Tensor, queries: list[tuple[int, int, list[int]]]
    ) -> torch.Tensor:
        """log P(y_i .. y_{i+m-1} = tags | emissions) for each query (sequence b, first position i, tags of length m >= 1,
        inside the sequence): alpha at i, the path's own emissions and transitions over the span, beta at its end,
        minus log Z -- one batched gather for all queries. [Q]"""
        alpha, beta, log_z = self.forward_backward(emissions, mask)
        emissions, _, _, trans, _ = self._potentials(emissions, mask, decoding=True)
        if not queries:
            return emissions.new_zeros(0)
        device = emissions.device
        m = max(len(tags) for _, _, tags in queries)
        b = torch.tensor([q[0] for q in queries], device=device)  # [Q]
        i = torch.tensor([q[1] for q in queries], device=device)  # [Q]
        n = torch.tensor([len(q[2]) for q in queries], device=device)  # [Q]
        tags = torch.tensor([q[2] + [0] * (m - len(q[2])) for q in queries], device=device)  # [Q, M]
        steps = torch.arange(m, device=device)
        inside = steps.unsqueeze(0) < n.unsqueeze(1)  # [Q, M]
        pos = (i.unsqueeze(1) + steps).clamp(max=emissions.size(1) - 1)  # [Q, M]
        emit = emissions[b.unsqueeze(1), pos, tags]  # [Q, M]
        step = trans[tags[:, :-1], tags[:, 1:]]  # [Q, M-1]
        zero = emit.new_zeros(())
        inner = torch.where(inside[:, 1:], emit[:, 1:] + step, zero).sum(1)  # positions 2..m of the span
        last_tag = tags.gather(1, (n - 1).unsqueeze(1)).squeeze(1)
        return alpha[b, i, tags[:, 0]] + inner + beta[b, i + n - 1, last_tag] - log_z[b]

    @torch.no_grad()
    def nbest(self, emissions: torch.Tensor, mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k best paths per sequence by k-best Viterbi: (paths [B, k, L] long, padded with 0; scores [B, k], best
        first). A sequence with fewer than k paths gets -inf scores for the missing ones (their paths are filler).
        delta_i[t, r] is the r-th best score of a prefix ending in tag t; a step ranks the T*k extensions of each tag."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        emissions, mask, start, trans, end = self._potentials(emissions, mask, decoding=True)
        B, L, T = emissions.shape
        delta = emissions.new_full((B, T, k), float("-inf"))
        delta[:, :, 0] = start + emissions[:, 0]
        identity = torch.arange(T * k, device=emissions.device).view(1, T, k).expand(B, T, k)  # (t, r) -> itself
        backpointers = []  # L-1 tensors [B, T, k] of flat (previous tag * k + rank) indices
        for i in range(1, L):
            cand = (delta.unsqueeze(3) + trans.unsqueeze(1)).reshape(B, T * k, T)  # [B, (from, rank), to]
            best, arg = cand.topk(k, dim=1)  # [B, k, T] each
            keep = mask[:, i].view(B, 1, 1)
            delta = torch.where(keep, best.transpose(1, 2) + emissions[:, i].unsqueeze(2), delta)
            backpointers.append(torch.where(keep, arg.transpose(1, 2), identity))
        scores, flat = (delta + end.view(1, T, 1)).reshape(B, T * k).topk(k, dim=1)  # [B, k]
        path = [flat]
        for psi in reversed(backpointers):
            flat = psi.reshape(B, T * k).gather(1, flat)  # [B, k]
            path.append(flat)
        paths = torch.stack(path[::-1], dim=2) // k  # [B, k, L] tags
        return paths.masked_fill(~mask.unsqueeze(1), 0), scores

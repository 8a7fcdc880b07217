"""A CRF's inference in numpy, without torch: the torch-free runtime's, and zhner.nn.crf's on the CPU (a few times
faster than torch's loop). The best tag path (Viterbi) and the probability of a span's tags (forward-backward), as
zhner.nn.crf.CRF computes them (viterbi_tensor, subpath_log_probs) over the scores an exported graph returns: start [T],
transitions [T, T] (from, to) and end [T], forbidden entries already set to a large negative score."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def viterbi(emissions: np.ndarray, lengths: Sequence[int], start: np.ndarray, trans: np.ndarray, end: np.ndarray) -> list[list[int]]:
    """Best tag path per sequence, emissions [B, L, T] (float32), trans [T, T] (from, to); the recursion of
    CRF.viterbi_tensor: delta_i[j] = max_k (delta_{i-1}[k] + trans[k, j]) + e_i[j], ties to the lowest index.
    All sequences step together, so a batch costs one loop over its longest sequence, not one per sequence; each
    step is four numpy calls (add, argmax, max, add). Past a sequence's end its steps go on unused: its last delta is
    read at its own last position, and its walk back stays on its last tag until it reaches that position."""
    B = len(lengths)
    if B == 0:
        return []
    L = max(lengths)
    e = emissions[:B, :L]
    T = e.shape[2]
    last = np.asarray(lengths) - 1  # [B]
    deltas = np.empty((L, B, T), dtype=np.result_type(e, trans, start))
    deltas[0] = start + e[:, 0]  # [B, T]
    back = np.empty((max(L - 1, 0), B, T), dtype=np.intp)
    step = np.empty((B, T, T), dtype=deltas.dtype)
    to_from = np.ascontiguousarray(trans.T)  # [T(to), T(from)]: each step reduces over its last, contiguous axis
    for i in range(1, L):
        np.add(deltas[i - 1][:, None, :], to_from, out=step)  # [B, T(to), T(from)]
        step.argmax(axis=2, out=back[i - 1])  # [B, T]
        np.add(step.max(axis=2), e[:, i], out=deltas[i])  # the max is the entry at the argmax, exactly
    rows = np.arange(B)
    tag = (deltas[last, rows] + end).argmax(axis=1)  # [B]: each sequence's best last tag
    path = np.empty((B, L), dtype=np.intp)
    path[:, L - 1] = tag
    for i in range(L - 2, -1, -1):
        inside = i < last  # sequences whose position i + 1 is real: step back through its pointer
        tag = np.where(inside, back[i, rows, tag], tag)
        path[:, i] = tag  # past a sequence's end its last tag, cut off below
    return [row[:n] for row, n in zip(path.tolist(), lengths)]


class BatchCRF:
    """Forward-backward scores of a batch (emissions [B, L, T], sentence b its first lengths[b] rows): log P of any run
    of tags of any sentence, for all of them in one vectorised step (`subpath_log_probs`). In float64;
    the recursions run on probabilities rescaled at every step (alpha_i = (alpha_{i-1} exp(trans)) * exp(e_i), each row
    divided by its sum, the logs of the divisors added up), one matrix product per step for the whole batch instead of
    a logsumexp over [B, T, T]. Forbidden entries (DISALLOWED) become exact zeros."""

    def __init__(self, emissions: np.ndarray, lengths: Sequence[int], start: np.ndarray, trans: np.ndarray, end: np.ndarray):
        B = len(lengths)
        L = max(lengths)
        e = emissions[:B, :L].astype(np.float64)
        self.e, self.trans = e, trans.astype(np.float64)
        top = e.max(axis=2, keepdims=True)  # [B, L, 1]
        scaled = np.exp(e - top)  # [B, L, T], each row's largest entry 1
        t_top = self.trans.max()
        e_trans = np.exp(self.trans - t_top)  # [T, T]
        live = np.asarray(lengths)[:, None] > np.arange(L)[None, :]  # [B, L]
        with np.errstate(divide="ignore"):  # log 0 = -inf: a forbidden tag
            # forward: alpha_i = log(a_i) + c_i, a_i summing to 1
            a = np.exp(start + e[:, 0] - (start + e[:, 0]).max(axis=1, keepdims=True))
            total = a.sum(axis=1, keepdims=True)
            a /= total
            c = (start + e[:, 0]).max(axis=1, keepdims=True) + np.log(total)  # [B, 1]
            alpha_p, alpha_c = np.empty((B, L, e.shape[2])), np.empty((B, L, 1))
            alpha_p[:, 0], alpha_c[:, 0] = a, c
            for i in range(1, L):
                nxt = (a @ e_trans) * scaled[:, i]
                total = nxt.sum(axis=1, keepdims=True)
                keep = live[:, i : i + 1]
                a = np.where(keep, nxt / total, a)
                c = np.where(keep, c + t_top + top[:, i] + np.log(total), c)
                alpha_p[:, i], alpha_c[:, i] = a, c
            self.alpha = np.log(alpha_p) + alpha_c
            end_top = end.max()
            last_p = np.exp(end - end_top).astype(np.float64)  # beta at a sentence's last token: end
            self.log_z = (np.log((a * last_p).sum(axis=1)) + c[:, 0] + end_top)  # [B]
            # backward: beta_i[k] = logsumexp_j(trans[k, j] + e_{i+1}[j] + beta_{i+1}[j]); end at the last token
            last_total = last_p.sum()
            b_p = np.broadcast_to(last_p / last_total, a.shape).copy()
            last_c = np.full((B, 1), end_top + np.log(last_total))
            d = last_c.copy()
            beta_p, beta_c = np.empty_like(alpha_p), np.empty_like(alpha_c)
            beta_p[:, L - 1], beta_c[:, L - 1] = b_p, d
            for i in range(L - 2, -1, -1):
                nxt = (scaled[:, i + 1] * b_p) @ e_trans.T
                total = nxt.sum(axis=1, keepdims=True)
                keep = live[:, i + 1 : i + 2]
                b_p = np.where(keep, nxt / total, last_p / last_total)
                d = np.where(keep, d + t_top + top[:, i + 1] + np.log(total), last_c)
                beta_p[:, i], beta_c[:, i] = b_p, d
            self.beta = np.log(beta_p) + beta_c

    def subpath_log_probs(self, queries: Sequence[tuple[int, int, Sequence[int]]]) -> np.ndarray:
        """log P(y_i .. y_{i+m-1} = tags) of sentence b for each query (b, i, tags), tags inside the sentence: [Q]."""
        if not queries:
            return np.zeros(0)
        m = max(len(q[2]) for q in queries)
        b = np.array([q[0] for q in queries])
        i = np.array([q[1] for q in queries])
        n = np.array([len(q[2]) for q in queries])
        tags = np.array([list(q[2]) + [0] * (m - len(q[2])) for q in queries])  # [Q, M]
        steps = np.arange(m)
        inside = steps[None, :] < n[:, None]
        pos = np.minimum(i[:, None] + steps, self.e.shape[1] - 1)
        emit = self.e[b[:, None], pos, tags]  # [Q, M]
        step = self.trans[tags[:, :-1], tags[:, 1:]]  # [Q, M-1]
        inner = np.where(inside[:, 1:], emit[:, 1:] + step, 0.0).sum(axis=1)
        last_tag = tags[np.arange(len(queries)), n - 1]
        return self.alpha[b, i, tags[:, 0]] + inner + self.beta[b, i + n - 1, last_tag] - self.log_z[b]


def span_queries(paths: Sequence[Sequence[int]], spans: Sequence[Sequence[tuple]], lengths: Sequence[int],
                 labels: Sequence[str], scheme: str) -> tuple[list[tuple[int, int, list[int]]], list[tuple[int, int]]]:
    """The forward-backward queries that score each decoded span (sentence b's spans from its path): P(the span's
    characters carry its tags), and in BIO minus P(the next character continues it as I-X), whose end is then not a
    span end. (queries, per span (its query, BIO's or -1)), as Tagger._scored_spans asks them."""
    index = {t: k for k, t in enumerate(labels)}
    queries: list[tuple[int, int, list[int]]] = []
    pairs: list[tuple[int, int]] = []
    for b, (path, found) in enumerate(zip(paths, spans)):
        for start, end, label, *_ in found:
            queries.append((b, start, list(path[start:end])))
            inside = index.get(f"I-{label}")
            if scheme == "bio" and end < lengths[b] and inside is not None:
                queries.append((b, start, list(path[start:end]) + [inside]))
                pairs.append((len(queries) - 2, len(queries) - 1))
            else:
                pairs.append((len(queries) - 1, -1))
    return queries, pairs


def scored_spans(crf: BatchCRF, paths: Sequence[Sequence[int]], spans: Sequence[Sequence[tuple]], lengths: Sequence[int],
                 labels: Sequence[str], scheme: str) -> list[list[tuple]]:
    """Each sentence's (start, end, type) spans with their probability under the CRF, clipped to [0, 1]."""
    queries, pairs = span_queries(paths, spans, lengths, labels, scheme)
    probs = np.exp(crf.subpath_log_probs(queries)).tolist()
    scores = iter(probs[q] - (probs[x] if x >= 0 else 0.0) for q, x in pairs)
    return [[(s, e, t, min(1.0, max(0.0, next(scores)))) for s, e, t, *_ in found] for found in spans]


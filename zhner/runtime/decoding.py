"""Decoding a CRF in numpy: the best tag path (Viterbi) and the probability of a span's tags (forward-backward), as
zhner.nn.crf.CRF computes them (viterbi_tensor, subpath_log_probs) over the scores an exported graph returns: start [T],
transitions [T, T] (from, to) and end [T], forbidden entries already set to a large negative score."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def viterbi(emissions: np.ndarray, lengths: Sequence[int], start: np.ndarray, trans: np.ndarray, end: np.ndarray) -> list[list[int]]:
    """Best tag path per sequence, emissions [B, L, T] (float32), trans [T, T] (from, to); the recursion of
    CRF.viterbi_tensor: delta_i[j] = max_k (delta_{i-1}[k] + trans[k, j]) + e_i[j], ties to the lowest index."""
    paths = []
    for b, n in enumerate(lengths):
        e = emissions[b, :n]  # [n, T]
        delta = start + e[0]  # [T]
        back = np.empty((max(n - 1, 0), e.shape[1]), dtype=np.int64)
        for i in range(1, n):
            step = delta[:, None] + trans  # [T(from), T(to)]
            back[i - 1] = step.argmax(axis=0)
            delta = step.max(axis=0) + e[i]
        tag = int((delta + end).argmax())
        path = [tag]
        for psi in back[::-1]:
            tag = int(psi[tag])
            path.append(tag)
        paths.append(path[::-1])
    return paths


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return (np.log(np.exp(x - top).sum(axis=axis, keepdims=True)) + top).squeeze(axis)


class SentenceCRF:
    """Forward-backward scores of one sentence (emissions [n, T], float64 for the sums): log P of any run of tags."""

    def __init__(self, emissions: np.ndarray, start: np.ndarray, trans: np.ndarray, end: np.ndarray):
        e = emissions.astype(np.float64)
        self.e, self.trans = e, trans.astype(np.float64)
        n, T = e.shape
        self.alpha, self.beta = np.empty((n, T)), np.empty((n, T))
        self.alpha[0] = start + e[0]
        for i in range(1, n):  # alpha_i[j] = logsumexp_k(alpha_{i-1}[k] + trans[k, j]) + e_i[j]
            self.alpha[i] = _logsumexp(self.alpha[i - 1][:, None] + self.trans, 0) + e[i]
        self.beta[n - 1] = end
        for i in range(n - 2, -1, -1):  # beta_i[k] = logsumexp_j(trans[k, j] + e_{i+1}[j] + beta_{i+1}[j])
            self.beta[i] = _logsumexp(self.trans + (e[i + 1] + self.beta[i + 1])[None, :], 1)
        self.log_z = float(_logsumexp(self.alpha[n - 1] + end, 0))

    def subpath_log_prob(self, first: int, tags: Sequence[int]) -> float:
        """log P(y_first .. y_{first+m-1} = tags)."""
        score = self.alpha[first, tags[0]]
        for k in range(1, len(tags)):
            score += self.trans[tags[k - 1], tags[k]] + self.e[first + k, tags[k]]
        return float(score + self.beta[first + len(tags) - 1, tags[-1]] - self.log_z)


def entity(text: str, start: int, end: int, label: str, *score: float) -> dict:
    """One entity record of `predict`: {"type", "start", "end", "text"(, "score" to 4 places)}."""
    record = {"type": label, "start": start, "end": end, "text": text[start:end]}
    if score:
        record["score"] = round(score[0], 4)
    return record

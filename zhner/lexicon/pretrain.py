"""Vectors pretrained on raw text: skip-gram with negative sampling (SGNS; Mikolov et al. 2013, "Distributed
Representations of Words and Phrases and their Compositionality", Eqs. 4-5), for characters, bigrams or words.

The papers' lattice models start from vectors trained this way on gigaword (characters, bigrams) and CTB (words), which
cannot be had here; `zhner vectors` trains the same kind of table on whatever raw Chinese text a user has, and writes a
word2vec text file for `embeddings.bigram_vectors` / `word_vectors` (a row found there is used as it is, the tokens it
lacks are composed from the character vectors, `zhner.lexicon.vectors.embedding_matrix`), or, with LAC's characters
first, for `embeddings.char_vectors`. The trained rows and the composed ones share a dimension, not a space: a table
that mixes them starts from two unrelated geometries.

A unit's sequence is what its embedding table sees in a model: characters (digits mapped to 0 as the models read them),
the forward bigrams of `zhner.data.vocab.bigrams` (each position's c_i c_{i+1}, the last closed by <eos>), or the
words of jieba's segmentation (the default lexicon's own dictionary). Each token is trained on the tokens of its own
sequence within `window` positions (the window shrunk at random per token, as word2vec does), with frequent tokens
subsampled (word2vec's keep probability sqrt(t/f) + t/f) and `negatives` noise tokens drawn from counts^0.75.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from zhner.data.vocab import bigrams, normalize_char
from zhner.errors import ZhnerError
from zhner.lexicon.table import Vectors

UNITS = ("char", "bigram", "word")


@dataclass(frozen=True)
class SkipGramConfig:
    dim: int = 128
    window: int = 5
    negatives: int = 5
    min_count: int = 5  # rarer tokens get no row: a model composes them from characters instead
    epochs: int = 5
    lr: float = 0.025  # word2vec's starting rate, decayed linearly to 0
    subsample: float = 1e-4  # word2vec's t
    batch_size: int = 1024  # (centre, context) pairs per step
    seed: int = 0
    center: bool = True  # subtract the mean vector, which dominates SGNS tables trained on little text


def unit_sequences(texts: Iterable[str], unit: str, normalize_digits: bool = True) -> list[list[str]]:
    """Each text as the token sequence of `unit`: characters, forward bigrams, or jieba's words."""
    if unit not in UNITS:
        raise ZhnerError(f"unknown unit {unit!r}; expected one of {', '.join(UNITS)}")
    if unit == "word":
        import jieba

        jieba.setLogLevel(60)  # no "Building prefix dict" chatter on stderr
        return [[w for w in jieba.cut(text, HMM=False) if w.strip()] for text in texts if text.strip()]
    out = []
    for text in texts:
        chars = [normalize_char(c, normalize_digits) for c in text if not c.isspace()]
        if chars:
            out.append(chars if unit == "char" else bigrams(chars))
    return out


def _vocabulary(sequences: Sequence[Sequence[str]], min_count: int) -> tuple[list[str], np.ndarray]:
    counts = Counter(tok for seq in sequences for tok in seq)
    kept = sorted((t for t, n in counts.items() if n >= min_count), key=lambda t: (-counts[t], t))
    return kept, np.array([counts[t] for t in kept], dtype=np.float64)


def _pairs(stream: np.ndarray, sentence: np.ndarray, window: int, rng: np.random.Generator) -> np.ndarray:
    """(centre, context) position pairs of one epoch: every context within the centre's window, shrunk per centre to
    a uniform 1..window as word2vec does, never across a sentence boundary. [P, 2]"""
    reach = rng.integers(1, window + 1, size=len(stream))  # [N]
    pairs = []
    for d in range(1, window + 1):
        left = np.arange(len(stream) - d)  # the pair (left, left + d) in either direction
        same = sentence[left] == sentence[left + d]
        fwd = left[same & (reach[left] >= d)]  # centre left, context d to the right
        bwd = left[same & (reach[left + d] >= d)]  # centre left + d, context d to the left
        pairs.append(np.stack([fwd, fwd + d], 1))
        pairs.append(np.stack([bwd + d, bwd], 1))
    return np.concatenate(pairs)


def _sgns_step(
    centre: torch.Tensor,
    context: torch.Tensor,
    batch: torch.Tensor,
    noise: torch.Tensor,
    negatives: int,
    lr: float,
    gen: torch.Generator,
) -> float:
    """One SGD step on a batch of (centre, context) pairs, updating the tables in place; returns the summed loss.

    The gradients of Eq. 4 are written out (no autograd): with s = sigmoid, a positive pair pulls by (s(u.v) - 1) and
    each noise token n pushes by s(u.n). A row that occurs several times in the batch gets the mean of its gradients,
    not their sum, so that a frequent token's hundreds of occurrences in one batch cannot blow its row up."""
    c, o = batch[:, 0], batch[:, 1]  # [B]
    noise_ids = torch.multinomial(noise, len(batch) * negatives, True, generator=gen).view(len(batch), negatives)  # [B, K]
    u, v, n = centre[c], context[o], context[noise_ids]  # [B, D], [B, D], [B, K, D]
    pos = (u * v).sum(-1)  # [B]
    neg = torch.bmm(n, u.unsqueeze(-1)).squeeze(-1)  # [B, K]
    g_pos = torch.sigmoid(pos) - 1.0  # [B]: d(-log s(u.v)) / d(u.v)
    g_neg = torch.sigmoid(neg)  # [B, K]: d(-log s(-u.n)) / d(u.n)
    grad_u = g_pos[:, None] * v + (g_neg[:, :, None] * n).sum(1)  # [B, D]
    ctx_ids = torch.cat([o, noise_ids.reshape(-1)])  # [B + B K]
    grad_ctx = torch.cat([g_pos[:, None] * u, (g_neg[:, :, None] * u[:, None, :]).reshape(-1, u.shape[1])])  # [B + B K, D]
    for table, ids, grad in ((centre, c, grad_u), (context, ctx_ids, grad_ctx)):
        repeats = torch.bincount(ids, minlength=table.shape[0]).clamp_min(1).to(grad.dtype)  # [V]
        table.index_add_(0, ids, grad * (-lr / repeats[ids])[:, None])
    loss = -torch.nn.functional.logsigmoid(pos).sum() - torch.nn.functional.logsigmoid(-neg).sum()
    return float(loss)


def train_skipgram(
    sequences: Sequence[Sequence[str]], config: SkipGramConfig = SkipGramConfig(), log: Callable[[str], None] | None = None
) -> Vectors:
    """SGNS vectors of every token seen at least `min_count` times: the input (centre) table, as word2vec keeps."""
    tokens, counts = _vocabulary(sequences, config.min_count)
    if len(tokens) < 2:
        raise ZhnerError(f"fewer than 2 tokens occur at least {config.min_count} times (min_count): nothing to train")
    index = {t: i for i, t in enumerate(tokens)}
    ids, sent = [], []
    for s, seq in enumerate(sequences):
        row = [index[t] for t in seq if t in index]
        ids.extend(row)
        sent.extend([s] * len(row))
    stream_all, sentence_all = np.array(ids, dtype=np.int64), np.array(sent, dtype=np.int64)
    freq = counts / counts.sum()
    keep_p = np.minimum(1.0, np.sqrt(config.subsample / freq) + config.subsample / freq)  # word2vec's subsampling
    noise = torch.tensor(counts**0.75 / (counts**0.75).sum(), dtype=torch.float)

    gen = torch.Generator().manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    bound = 0.5 / config.dim
    centre = torch.empty(len(tokens), config.dim).uniform_(-bound, bound, generator=gen)  # [V, D], word2vec's init
    context = torch.zeros(len(tokens), config.dim)  # [V, D]

    def epoch_pairs() -> np.ndarray:
        kept = rng.random(len(stream_all)) < keep_p[stream_all]
        stream, sentence = stream_all[kept], sentence_all[kept]
        positions = _pairs(stream, sentence, config.window, rng)
        return stream[positions[rng.permutation(len(positions))]]  # [P, 2] token ids, shuffled

    pairs = epoch_pairs()
    if len(pairs) == 0:
        raise ZhnerError("no (centre, context) pairs to train on: too little text, or lower --min-count")
    total = math.ceil(len(pairs) / config.batch_size) * config.epochs  # the linear decay's length, from epoch 1's pairs
    step = 0
    for epoch in range(1, config.epochs + 1):
        if epoch > 1:
            pairs = epoch_pairs()
        pairs_t = torch.from_numpy(pairs)
        loss_sum = 0.0
        for start in range(0, len(pairs_t), config.batch_size):
            batch = pairs_t[start : start + config.batch_size]  # [B, 2]
            lr = config.lr * max(1e-4, 1.0 - step / total)  # total >= 1: epoch 1 had pairs
            loss_sum += _sgns_step(centre, context, batch, noise, config.negatives, lr, gen)
            step += 1
        if log:
            log(f"skip-gram epoch {epoch}/{config.epochs}: {len(pairs)} pairs, loss {loss_sum / max(1, len(pairs)):.4f}")
    matrix = centre.numpy().copy()
    if config.center:  # the first step of "all-but-the-top" (Mu and Viswanath 2018)
        matrix -= matrix.mean(0, keepdims=True)
    return Vectors(tokens, matrix)


def merge_vectors(base: Vectors | None, trained: Vectors) -> Vectors:
    """`base`'s rows (e.g. LAC characters) followed by the `trained` rows it lacks: one table to look tokens up in."""
    if base is None:
        return trained
    if base.dim != trained.dim:
        raise ZhnerError(f"vectors of {base.dim} and {trained.dim} dimensions cannot share a table: they must match")
    have = base.index()
    extra = [i for i, t in enumerate(trained.tokens) if t not in have]
    return Vectors(base.tokens + [trained.tokens[i] for i in extra], np.concatenate([base.matrix, trained.matrix[extra]]))


def nearest(vectors: Vectors, token: str, k: int = 5) -> list[tuple[str, float]]:
    """The k tokens with the highest cosine similarity to `token` (a quick look at what a table learned)."""
    row = vectors.get(token)
    if row is None:
        raise ZhnerError(f"{token!r} has no vector")
    unit = vectors.matrix / (np.linalg.norm(vectors.matrix, axis=1, keepdims=True) + 1e-12)
    sims = unit @ (row / (np.linalg.norm(row) + 1e-12))
    order = [i for i in np.argsort(-sims) if vectors.tokens[i] != token][:k]
    return [(vectors.tokens[i], float(sims[i])) for i in order]

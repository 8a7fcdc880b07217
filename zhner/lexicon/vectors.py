"""Pretrained vectors for embedding tables: choosing a source, and initialising embedding matrices from it.

- `load_vectors(spec)`: "lac" (jieba's Baidu LAC character table, `zhner.lexicon.lac`) or a word2vec text file
  (`zhner.lexicon.word2vec`, cached as .npy);
- `compose_vectors` / `embedding_matrix` give bigrams and lexicon words the mean of their characters' vectors when
  the vectors have no row of their own (the papers' gigaword bigram and CTB word tables cannot be had here; tables
  pretrained on local text come from `zhner.lexicon.pretrain`).

The Vectors table itself is `zhner.lexicon.table.Vectors`.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from zhner.data.vocab import EOS, PAD, UNK
from zhner.errors import ZhnerError
from zhner.lexicon.lac import load_lac_char_vectors
from zhner.lexicon.table import Vectors
from zhner.lexicon.word2vec import load_word2vec_text

LAC_SPECS = ("lac",)
_SPECIAL_MARKERS = (PAD, UNK, EOS)  # vocabulary markers, not characters: never composed from their letters


def load_vectors(spec: str | Path | None = None) -> Vectors:
    """"lac" (or None): jieba's LAC character table; anything else: the path of a word2vec text file."""
    if spec is None or (isinstance(spec, str) and spec.lower() in LAC_SPECS):
        return load_lac_char_vectors()
    path = Path(spec)
    if not path.exists():
        raise ZhnerError("no such vectors file (expected 'lac' or a word2vec text file)", path)
    return load_word2vec_text(path)



# -- embedding matrices --------------------------------------------------------------------------------------------


def _strip_markers(token: str) -> str:
    for marker in _SPECIAL_MARKERS:  # "国<eos>" composes from 国 only, not from the letters e, o, s
        if marker in token:
            token = token.replace(marker, "")
    return token


def _compose_into(tokens: list[str], rows: list[int], chars: Vectors, out: np.ndarray) -> int:
    """Set out[i] to the mean of token i's character vectors for i in rows; returns how many had a known char."""
    index, table, composed = chars.index(), chars.matrix, 0
    for i in rows:
        ids = [index[c] for c in _strip_markers(tokens[i]) if c in index]
        if ids:
            out[i] = table[ids].mean(axis=0)
            composed += 1
    return composed


def compose_vectors(
    tokens: list[str], chars: Vectors, rng: np.random.Generator, scale: float | None = None
) -> tuple[np.ndarray, int]:
    """Vectors for multi-character tokens (bigrams, words): the mean of their characters' vectors.

    Characters without a vector are skipped; a token with no known character gets a random vector,
    uniform in [-scale, scale] (default sqrt(3 / D), i.e. about unit norm). Returns the matrix and how many were composed.
    """
    dim = chars.dim
    scale = math.sqrt(3.0 / dim) if scale is None else scale
    out = rng.uniform(-scale, scale, size=(len(tokens), dim)).astype(np.float32)
    return out, _compose_into(tokens, list(range(len(tokens))), chars, out)


def embedding_matrix(
    vocab_tokens: list[str], vectors: Vectors | None, dim: int, rng: np.random.Generator, compose: bool
) -> tuple[np.ndarray, dict[str, int]]:
    """One row per vocabulary token: its pretrained vector if it has one, else (with `compose`) the mean of its
    characters' vectors, else uniform random in [-sqrt(3/dim), sqrt(3/dim)].

    Returns the [V, dim] float32 matrix and {"pretrained": n, "composed": n, "random": n}.
    The random draw covers all rows first, so the result depends only on the rng state, the tokens and the vectors.
    """
    scale = math.sqrt(3.0 / dim)
    matrix = rng.uniform(-scale, scale, size=(len(vocab_tokens), dim)).astype(np.float32)
    stats = {"pretrained": 0, "composed": 0, "random": len(vocab_tokens)}
    if vectors is None:
        return matrix, stats
    if vectors.dim != dim:
        raise ZhnerError(f"the pretrained vectors are {vectors.dim}-d but the embedding is {dim}-d")
    index = vectors.index()
    missing = []
    for i, tok in enumerate(vocab_tokens):
        row = index.get(tok)
        if row is None:
            missing.append(i)
        else:
            matrix[i] = vectors.matrix[row]
    stats["pretrained"] = len(vocab_tokens) - len(missing)
    if compose:
        stats["composed"] = _compose_into(vocab_tokens, missing, vectors, matrix)
    stats["random"] = len(missing) - stats["composed"]
    return matrix, stats

"""Dependency-tree distances and the local attention masks of SLA (Li et al., "Improving BERT with Syntax-aware Local
Attention", Section 3.1) and of its window baseline (WLA).

    tree_distance(heads)           dis(v_i, v_j): edges between every pair of tokens of the undirected tree     [L, L]
    neighbour_distance(heads)      Eq. 2: D(i, j) = min over k in {i-1, i, i+1} (inside the sentence) of dis(v_k, v_j)
    local_mask(heads, m)           Eq. 3 as booleans: True (M = 0, may attend) where D(i, j) <= m                [L, L]
    window_mask(L, k)              WLA: True where |i - j| <= k (a window of 2k + 1 tokens)                    [L, L]
    word_of_piece(first_piece, P)  the token each BERT piece belongs to                                         [P]
    piece_mask(mask, word_of, P)   a token mask spread over BERT's pieces, [CLS]/[SEP] never masked      [P+2, P+2]

Heads are 1-based with 0 = root (CoNLL-U's HEAD column, `Example.heads`). A parse with several roots (a text the
parser splits into sentences) is a forest: its roots are joined through the virtual root 0, so two tokens of different
sentences are dis(i, root_a) + 2 + dis(root_b, j) apart. Row i is the query, column j the key. Pure numpy: the masks
are built per sentence when a batch is collated.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zhner.errors import ZhnerError


def check_heads(heads: Sequence[int], where: str = "heads") -> np.ndarray:
    """heads as an int array, checked: every head in 0..L and no cycle (every token reaches the root 0).
    Returns the top-down order of the tokens (0-based indices, parents before children)."""
    L = len(heads)
    children: list[list[int]] = [[] for _ in range(L + 1)]  # node 0 is the virtual root, token i is node i + 1
    for i, h in enumerate(heads):
        if not isinstance(h, (int, np.integer)) or not 0 <= h <= L:
            raise ZhnerError(f"token {i + 1}: head {h!r} is not in 0..{L} (1-based heads, 0 = root)", where)
        if h == i + 1:
            raise ZhnerError(f"token {i + 1} is its own head", where)
        children[h].append(i + 1)
    order, stack = [], [0]
    while stack:  # depth-first from the virtual root: a node is listed after its parent
        node = stack.pop()
        if node:
            order.append(node - 1)
        stack.extend(children[node])
    if len(order) != L:
        cyclic = sorted(set(range(L)) - set(order))
        raise ZhnerError(f"the heads form a cycle (tokens {', '.join(str(i + 1) for i in cyclic[:5])} never reach the root)", where)
    return np.asarray(order, dtype=np.int64)


def tree_distance(heads: Sequence[int], where: str = "heads") -> np.ndarray:
    """dis(v_i, v_j) for all token pairs: [L, L] int64, symmetric, 0 on the diagonal.

    Top-down, one vectorised row per node: for a child c of p, dis(c, j) = dis(p, j) - 1 for the nodes j in c's subtree
    and dis(p, j) + 1 for all others. The virtual root 0 is row/column 0 of the work arrays and is dropped at the end."""
    order = check_heads(heads, where)
    L = len(heads)
    parent = np.asarray([0, *heads], dtype=np.int64)  # [L + 1]: parent of node n (node 0: itself)
    # below[n, j]: node j is in the subtree of node n (n is an ancestor-or-self of j), filled bottom-up
    below = np.eye(L + 1, dtype=bool)  # [L + 1, L + 1]
    for i in order[::-1]:  # children before parents
        below[parent[i + 1]] |= below[i + 1]
    depth = np.zeros(L + 1, dtype=np.int64)
    for i in order:
        depth[i + 1] = depth[parent[i + 1]] + 1
    dist = np.zeros((L + 1, L + 1), dtype=np.int64)  # [L + 1, L + 1]
    dist[0] = depth  # from the virtual root: the depth
    for i in order:  # parents before children
        n = i + 1
        dist[n] = dist[parent[n]] + np.where(below[n], -1, 1)
    return dist[1:, 1:]  # [L, L]


def neighbour_distance(heads: Sequence[int], where: str = "heads") -> np.ndarray:
    """Eq. 2: D(i, j) = min_{k in [i-1, i+1]} dis(v_k, v_j), k inside the sentence: [L, L]. Not symmetric."""
    dis = tree_distance(heads, where)  # [L, L]
    D = dis.copy()
    D[1:] = np.minimum(D[1:], dis[:-1])  # k = i - 1
    D[:-1] = np.minimum(D[:-1], dis[1:])  # k = i + 1
    return D


def local_mask(heads: Sequence[int], m: int, where: str = "heads") -> np.ndarray:
    """Eq. 3: M_ij = 0 (True: query i may attend to key j) where D(i, j) <= m, -inf (False) otherwise: bool [L, L]."""
    return neighbour_distance(heads, where) <= m


def window_mask(L: int, k: int) -> np.ndarray:
    """WLA: each token attends to the 2k + 1 tokens around it, |i - j| <= k: bool [L, L]."""
    pos = np.arange(L)
    return np.abs(pos[:, None] - pos[None, :]) <= k


def word_of_piece(first_piece: Sequence[int], P: int) -> np.ndarray:
    """The token (0-based) each of the P pieces belongs to, from each token's first piece as PieceField gives it
    (1-based: index in [CLS] pieces [SEP]): [P]. Every token has at least one piece."""
    starts = np.asarray(first_piece, dtype=np.int64) - 1  # [L] 0-based first piece
    owner = np.zeros(P, dtype=np.int64)
    owner[starts[1:]] = 1  # +1 where a new token starts
    return np.cumsum(owner)  # [P]


def piece_mask(token_mask: np.ndarray, word_of: Sequence[int] | np.ndarray, P: int) -> np.ndarray:
    """A token-level mask [L, L] -> BERT's [P + 2, P + 2] ([CLS] pieces [SEP]): every piece takes its token's row and
    column (SLA's appendix A.1: sub-words share their word's masking value), and the [CLS] / [SEP] rows and columns are
    always True (never masked out)."""
    word_of = np.asarray(word_of, dtype=np.int64)
    if word_of.shape != (P,):
        raise ValueError(f"word_of has shape {word_of.shape}, expected ({P},)")
    out = np.ones((P + 2, P + 2), dtype=bool)
    out[1 : P + 1, 1 : P + 1] = token_mask[word_of[:, None], word_of[None, :]]  # [P, P]
    return out

"""The table of pretrained vectors every reader returns: a token list and its matrix.

In a module of its own so that the readers (`word2vec`, `lac`) and the code that uses vectors (`vectors`) all
depend on it and not on each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)  # eq on numpy arrays is ambiguous; compare tokens/matrix explicitly
class Vectors:
    """A token list and its [N, D] float32 matrix (row i is the vector of tokens[i])."""

    tokens: list[str]
    matrix: np.ndarray
    _index: dict[str, int] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.matrix = np.ascontiguousarray(self.matrix, dtype=np.float32)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != len(self.tokens):
            raise ValueError(f"matrix {self.matrix.shape} does not fit {len(self.tokens)} tokens")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def index(self) -> dict[str, int]:
        """token -> row, built once; for a token listed twice the first row wins (as word2vec readers do)."""
        if self._index is None:
            index: dict[str, int] = {}
            for i, tok in enumerate(self.tokens):
                index.setdefault(tok, i)
            self._index = index
        return self._index

    def get(self, token: str) -> np.ndarray | None:
        row = self.index().get(token)
        return None if row is None else self.matrix[row]

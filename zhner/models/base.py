"""What every tagger provides: emissions -> CRF loss and Viterbi decoding over character positions."""
from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from zhner.nn.crf import CRF

FLOAT = 4  # bytes
LIVE_SCORES = 3  # [B, H, Lq, Lk]-sized tensors alive at once in an attention layer at inference (scores, softmax, a copy)
WORDS_PER_CHAR = 1.0  # lexicon matches per character assumed by memory estimates (jieba on MSRA test text: 0.54)


def attention_bytes(heads: int, queries: int, keys: int) -> int:
    """Inference memory of one attention layer's scores: LIVE_SCORES tensors of [H, queries, keys] floats."""
    return LIVE_SCORES * FLOAT * heads * queries * keys


class ModelConfig(BaseModel):
    """Fields shared by every model config; each model adds its own and a `name` literal."""

    model_config = ConfigDict(extra="forbid")
    char_dim: int = 128  # set from the pretrained vectors when they are used
    bigram_dim: int = 128  # 0 = no bigram input
    embed_dropout: float = 0.5
    crf_constraints: bool = True  # forbid transitions the tag scheme does not allow
    crf_init: str = "normal"


class SequenceTagger(nn.Module):
    """Subclasses implement `emissions(batch) -> [B, L, T]`; this class adds the CRF on top."""

    config: ModelConfig

    def __init__(self, num_tags: int, constraints=None, crf_init: str = "normal"):
        super().__init__()
        self.crf = CRF(num_tags, constraints=constraints, init=crf_init)

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        """Embedding tables the trainer fills from pretrained vectors, keyed by vocabulary ("chars", "bigrams", ...)."""
        return self.embed.tables()

    def inference_bytes(self, length: int) -> int:
        """Estimated peak memory (bytes) of tagging one text of `length` characters, from which the tagger decides where
        to cut long text (zhner.tagger.Tagger.max_chars). Models with attention add their quadratic terms; this linear
        term (a few dozen activations per character, as wide as what the output layer reads) is what every model has."""
        return 32 * FLOAT * length * self.out.in_features

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean negative log-likelihood of the gold tags."""
        return self.crf(self.emissions(batch), batch["tags"], batch["mask"], reduction="mean")

    @torch.no_grad()
    def decode(self, batch: dict[str, torch.Tensor]) -> list[list[int]]:
        return self.crf.decode(self.emissions(batch), batch["mask"])

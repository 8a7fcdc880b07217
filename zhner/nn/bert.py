"""zhner's own BERT encoder (Devlin et al. 2019), with Hugging Face's parameter names so that any local BERT checkpoint
(`config.json` + `model.safetensors` or `pytorch_model.bin` + `vocab.txt`) loads with `load_state_dict(strict=True)`,
without the transformers package.

    BertConfig          the architecture, read from a config.json dict (unknown keys ignored)
    BertModel           embeddings -> N x (self-attention, FFN), post-norm; each layer's self-attention is pluggable
    BertSelfAttention   the default self-attention; SLA / WLA / ACT-S subclass it and reuse its pretrained query/key/value

Reading a checkpoint directory is `zhner.nn.bert_checkpoint`'s (`load_pretrained`, `minilm_dir`); BERT character
features for the taggers are `zhner.nn.bert_features`' (`BertCharFeatures`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from zhner.errors import ZhnerError

__all__ = ["BertConfig", "BertOutput", "BertSelfAttention", "BertModel", "SelfAttentionFactory"]


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

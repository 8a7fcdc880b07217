"""A compact copy of e5-small for a machine that has neither the wheel nor room for 470 MB (a GPU box with a 64 MiB
transfer limit): the pieces a set of corpora can meet (both forms of each character, so `model.e5_piece` may be either)
plus the common Chinese characters, in float16. The result is an ordinary BERT directory (`model.bert: DIR`); training
from it prunes again, to its own data, as from the full one.
"""
from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import torch

from zhner.data.sentencepiece import MARK, common_chinese_chars
from zhner.errors import ZhnerError
from zhner.fileio import new_directory, replacing, staged_path
from zhner.nn.bert_checkpoint import PretrainedBert, load_pretrained

__all__ = ["character_pieces", "pack_encoder"]


def character_pieces(vocab: dict[str, int], chars: Iterable[str]) -> set[int]:
    """Ids of every piece a character can be read as: bare and marked, of the character and of its NFKC form."""
    keep = {vocab[MARK]} if MARK in vocab else set()
    for c in set(chars):
        for text in {c, unicodedata.normalize("NFKC", c)}:
            keep.update(vocab[p] for p in (text, MARK + text) if p in vocab)
    return keep


def pack_encoder(source: Path, out: Path, chars: Iterable[str], dtype: torch.dtype = torch.float16) -> PretrainedBert:
    """Write `source`'s encoder cut to the pieces of `chars` (and the common Chinese characters) into `out`, weights in
    `dtype`: config.json, model.safetensors, vocab.txt, sentencepiece.json. Atomic (zhner.fileio.new_directory: a
    temporary directory renamed over `out`, claimed first); an existing `out` (a dangling link included) is refused."""
    from safetensors.torch import save_file

    if os.path.lexists(out):
        raise ZhnerError("already exists; name a new directory", out)
    bert = load_pretrained(source)
    if bert.scores is None:
        raise ZhnerError("not a SentencePiece encoder (no sentencepiece.json): nothing to prune", source)
    small = bert.pruned(character_pieces(bert.vocab, set(chars) | common_chinese_chars()))
    pieces = sorted(small.vocab, key=small.vocab.get)
    texts = {
        "config.json": json.dumps(small.config | {"model_type": "bert"}, indent=1) + "\n",
        "vocab.txt": "".join(p + "\n" for p in pieces),
        "sentencepiece.json": json.dumps({"model": "unigram", "pieces": [[p, s] for p, s in zip(pieces, small.scores)]},
                                         ensure_ascii=False) + "\n",
    }
    with new_directory(out) as tmp:  # each file a new one of its own (exclusive, never through a link), then renamed
        with staged_path(tmp / "model.safetensors", through_special=False) as partial:
            save_file({k: v.to(dtype).contiguous() for k, v in small.weights.items()}, str(partial))
        for name, text in texts.items():
            with replacing(tmp / name) as handle:
                handle.write(text)
    return small

"""A compact copy of e5-small for a machine that has neither the wheel nor room for 470 MB (a GPU box with a 64 MiB
transfer limit): the pieces a set of corpora can meet (both forms of each character, so `model.e5_piece` may be either)
plus the common Chinese characters, in float16. The result is an ordinary BERT directory (`model.bert: DIR`); training
from it prunes again, to its own data, as from the full one.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import torch

from zhner.data.sentencepiece import MARK, common_chinese_chars
from zhner.errors import ZhnerError
from zhner.fileio import current_umask
from zhner.nn.bert import PretrainedBert, load_pretrained

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
    `dtype`: config.json, model.safetensors, vocab.txt, sentencepiece.json. Atomic (temporary directory + rename);
    an existing `out` is refused."""
    from safetensors.torch import save_file

    if out.exists():
        raise ZhnerError("already exists; name a new directory", out)
    bert = load_pretrained(source)
    if bert.scores is None:
        raise ZhnerError("not a SentencePiece encoder (no sentencepiece.json): nothing to prune", source)
    small = bert.pruned(character_pieces(bert.vocab, set(chars) | common_chinese_chars()))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        save_file({k: v.to(dtype).contiguous() for k, v in small.weights.items()}, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps(small.config | {"model_type": "bert"}, indent=1) + "\n", encoding="utf-8")
        pieces = sorted(small.vocab, key=small.vocab.get)
        (tmp / "vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
        sp = {"model": "unigram", "pieces": [[p, s] for p, s in zip(pieces, small.scores)]}
        (tmp / "sentencepiece.json").write_text(json.dumps(sp, ensure_ascii=False) + "\n", encoding="utf-8")
        mode = 0o666 & ~current_umask()
        for path in tmp.iterdir():
            path.chmod(mode)
        tmp.chmod(mode | (mode & 0o444) >> 2)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return small

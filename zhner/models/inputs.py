"""From sentences to tensors: the vocabularies a model was trained with and the batch layout models read.

A batch is a dict of tensors: chars [B, L], bigrams [B, L], mask [B, L] (True = real character), and tags [B, L] when labelled.
Lattice models add their own fields (see zhner.lexicon.lattice).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from zhner.data.corpus import Corpus
from zhner.data.schemes import all_tags, split_tag
from zhner.data.vocab import Vocab, bigrams, normalize_char


class Featurizer:
    def __init__(self, chars: Vocab, bigram_vocab: Vocab | None, tags: list[str], scheme: str, normalize_digits: bool):
        self.chars = chars
        self.bigrams = bigram_vocab
        self.tags = tags
        self.tag_index = {t: i for i, t in enumerate(tags)}
        self.scheme = scheme
        self.normalize_digits = normalize_digits

    # -- building -------------------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        splits: dict[str, Corpus],
        use_bigrams: bool,
        normalize_digits: bool,
        known_chars: set[str] | None = None,
    ) -> "Featurizer":
        """Characters and bigrams from train; from dev/test only those a pretrained table can give a vector
        (`known_chars`: the characters with a pretrained vector), so no evaluation token gets an untrained random row.
        Tags: every tag of the scheme over the types seen in any split (splits disagree on rare tags)."""
        train = splits["train"]
        norm = lambda chars: [normalize_char(c, normalize_digits) for c in chars]  # noqa: E731
        char_counts: Counter = Counter()
        bigram_counts: Counter = Counter()
        for sent in train:
            chars = norm(sent.chars)
            char_counts.update(chars)
            if use_bigrams:
                bigram_counts.update(bigrams(chars))
        extra_chars, extra_bigrams = set(), set()
        if known_chars:
            for corpus in splits.values():
                for sent in corpus:
                    chars = norm(sent.chars)
                    extra_chars.update(c for c in chars if c in known_chars)
                    if use_bigrams:
                        extra_bigrams.update(b for b in bigrams(chars) if b[0] in known_chars)
        types = {split_tag(t)[1] for corpus in splits.values() for s in corpus for t in (s.tags or []) if t != "O"}
        return cls(
            Vocab.build(char_counts, extra=extra_chars),
            Vocab.build(bigram_counts, extra=extra_bigrams) if use_bigrams else None,
            all_tags(types, train.scheme),
            train.scheme,
            normalize_digits,
        )

    def to_dict(self) -> dict:
        return {
            "chars": self.chars.to_list(),
            "bigrams": self.bigrams.to_list() if self.bigrams is not None else None,
            "tags": self.tags,
            "scheme": self.scheme,
            "normalize_digits": self.normalize_digits,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Featurizer":
        bigram_vocab = Vocab.from_list(d["bigrams"]) if d.get("bigrams") is not None else None
        return cls(Vocab.from_list(d["chars"]), bigram_vocab, list(d["tags"]), d["scheme"], bool(d["normalize_digits"]))

    def vocab_sizes(self) -> dict[str, int]:
        sizes = {"chars": len(self.chars)}
        if self.bigrams is not None:
            sizes["bigrams"] = len(self.bigrams)
        return sizes

    # -- encoding -------------------------------------------------------------------------------------------------
    def encode(self, chars: Sequence[str], tags: Sequence[str] | None = None) -> dict[str, list[int]]:
        norm = [normalize_char(c, self.normalize_digits) for c in chars]
        item = {"chars": self.chars.encode(norm)}
        if self.bigrams is not None:
            item["bigrams"] = self.bigrams.encode(bigrams(norm))
        if tags is not None:
            item["tags"] = [self.tag_index[t] for t in tags]
        return item

    def collate(self, items: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        lengths = [len(it["chars"]) for it in items]
        B, L = len(items), max(lengths)
        batch = {"mask": torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]}
        for key in ("chars", "bigrams", "tags"):
            if key in items[0]:
                out = torch.zeros(B, L, dtype=torch.long)
                for b, it in enumerate(items):
                    out[b, : lengths[b]] = torch.tensor(it[key], dtype=torch.long)
                batch[key] = out
        return batch

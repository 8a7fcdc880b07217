"""From sentences to tensors: the vocabularies a model was trained with and the batch layout models read.

A batch is a dict of tensors: chars [B, L], bigrams [B, L], mask [B, L] (True = real character), and tags [B, L] when labelled.
With a lexicon (lattice models), the lexicon words matched in each sentence, ordered by (start, end), are added:
words [B, W] (ids), word_starts [B, W], word_ends [B, W] (inclusive character index of the word's last character),
word_mask [B, W]. W is at least 1 so that models never meet an empty tensor dimension.
With a BERT vocabulary (models with BERT features): bert_ids [B, L + 2], [CLS] one token per character [SEP], then padding.
Without a word vocabulary (`word_vocab=False`: the model composes word vectors from the characters in `chars`, FLAT's
`word_embedding: chars`) there is no `words` field and any lexicon word can be matched, seen in training or not.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from zhner.data.corpus import Corpus
from zhner.data.schemes import all_tags, split_tag
from zhner.data.vocab import Vocab, bigrams, normalize_char
from zhner.lexicon.lexicon import Lexicon
from zhner.nn.bert import CLS, PAD, SEP, UNK, bert_token


class Featurizer:
    def __init__(
        self,
        chars: Vocab,
        bigram_vocab: Vocab | None,
        tags: list[str],
        scheme: str,
        normalize_digits: bool,
        lexicon: Lexicon | None = None,
        words: Vocab | None = None,
        bert_vocab: dict[str, int] | None = None,
    ):
        self.chars = chars
        self.lexicon = lexicon
        self.words = words
        self.bigrams = bigram_vocab
        self.tags = tags
        self.tag_index = {t: i for i, t in enumerate(tags)}
        self.scheme = scheme
        self.normalize_digits = normalize_digits
        self.bert_index = bert_vocab  # BERT's own vocabulary: token -> id

    # -- building -------------------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        splits: dict[str, Corpus],
        use_bigrams: bool,
        normalize_digits: bool,
        known_chars: set[str] | None = None,
        lexicon: Lexicon | None = None,
        bigram_min_count: int = 1,
        bert_vocab: dict[str, int] | None = None,
        word_vocab: bool = True,
    ) -> "Featurizer":
        """Characters and bigrams from train; from dev/test only those a pretrained table can give a vector
        (`known_chars`: the characters with a pretrained vector), so no evaluation token gets an untrained random row.
        Tags: every tag of the scheme over the types seen in any split (splits disagree on rare tags).
        Words (with a lexicon and `word_vocab`): every lexicon word matched in any split, as FLAT does -- a lexicon carries
        no labels.
        `bigram_min_count` > 1 keeps only bigrams seen that often in train (and no dev/test extras): MSRA has 313k bigrams,
        whose table dominates both the model size and the cost of each (dense) SGD step; rare bigrams map to <unk>."""
        train = splits["train"]
        norm = lambda chars: [normalize_char(c, normalize_digits) for c in chars]  # noqa: E731
        char_counts: Counter = Counter()
        bigram_counts: Counter = Counter()
        for sent in train:
            chars = norm(sent.tokens)
            char_counts.update(chars)
            if use_bigrams:
                bigram_counts.update(bigrams(chars))
        extra_chars, extra_bigrams = set(), set()
        if known_chars:
            for corpus in splits.values():
                for sent in corpus:
                    chars = norm(sent.tokens)
                    extra_chars.update(c for c in chars if c in known_chars)
                    if use_bigrams and bigram_min_count <= 1:
                        extra_bigrams.update(b for b in bigrams(chars) if b[0] in known_chars)
        types = {split_tag(t)[1] for corpus in splits.values() for s in corpus for t in (s.tags or []) if t != "O"}
        words = None
        if lexicon is not None and word_vocab:
            word_counts: Counter = Counter()
            for corpus in splits.values():
                for sent in corpus:
                    word_counts.update(w for _, _, w in lexicon.match(sent.text))
            words = Vocab.build(word_counts)
        return cls(
            Vocab.build(char_counts, extra=extra_chars),
            Vocab.build(bigram_counts, min_freq=bigram_min_count, extra=extra_bigrams) if use_bigrams else None,
            all_tags(types, train.scheme),
            train.scheme,
            normalize_digits,
            lexicon,
            words,
            bert_vocab,
        )

    def to_dict(self) -> dict:
        return {
            "chars": self.chars.to_list(),
            "bigrams": self.bigrams.to_list() if self.bigrams is not None else None,
            "tags": self.tags,
            "scheme": self.scheme,
            "normalize_digits": self.normalize_digits,
            "words": self.words.to_list() if self.words is not None else None,
            "bert_vocab": self.bert_index,
            "lexicon": self.lexicon is not None,
        }

    @classmethod
    def from_dict(cls, d: dict, lexicon: Lexicon | None = None) -> "Featurizer":
        bigram_vocab = Vocab.from_list(d["bigrams"]) if d.get("bigrams") is not None else None
        words = Vocab.from_list(d["words"]) if d.get("words") is not None else None
        return cls(
            Vocab.from_list(d["chars"]),
            bigram_vocab,
            list(d["tags"]),
            d["scheme"],
            bool(d["normalize_digits"]),
            lexicon,
            words,
            d.get("bert_vocab"),
        )

    def vocab_sizes(self) -> dict[str, int]:
        sizes = {"chars": len(self.chars)}
        if self.bigrams is not None:
            sizes["bigrams"] = len(self.bigrams)
        if self.words is not None:
            sizes["words"] = len(self.words)
        return sizes

    # -- encoding -------------------------------------------------------------------------------------------------
    def encode(self, chars: Sequence[str], tags: Sequence[str] | None = None) -> dict[str, list[int]]:
        norm = [normalize_char(c, self.normalize_digits) for c in chars]
        item = {"chars": self.chars.encode(norm)}
        if self.bigrams is not None:
            item["bigrams"] = self.bigrams.encode(bigrams(norm))
        if tags is not None:
            item["tags"] = [self.tag_index[t] for t in tags]
        if self.lexicon is not None:
            matches = self.lexicon.match("".join(chars))  # sorted by (start, end)
            if self.words is not None:
                item["words"] = self.words.encode(w for _, _, w in matches)
            item["word_starts"] = [s for s, _, _ in matches]
            item["word_ends"] = [e - 1 for _, e, _ in matches]
        if self.bert_index is not None:  # BERT reads the raw characters, not the digit-normalised ones
            get, unk = self.bert_index.get, self.bert_index[UNK]
            item["bert_ids"] = [self.bert_index[CLS]] + [get(bert_token(c), unk) for c in chars] + [self.bert_index[SEP]]
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
        if "word_starts" in items[0]:
            counts = [len(it["word_starts"]) for it in items]
            W = max(1, max(counts))
            batch["word_mask"] = torch.arange(W)[None, :] < torch.tensor(counts)[:, None]
            for key in ("words", "word_starts", "word_ends"):
                if key not in items[0]:
                    continue
                out = torch.zeros(B, W, dtype=torch.long)
                for b, it in enumerate(items):
                    if counts[b]:
                        out[b, : counts[b]] = torch.tensor(it[key], dtype=torch.long)
                batch[key] = out
        if "bert_ids" in items[0]:
            out = torch.full((B, L + 2), self.bert_index[PAD], dtype=torch.long)
            for b, it in enumerate(items):
                out[b, : lengths[b] + 2] = torch.tensor(it["bert_ids"], dtype=torch.long)
            batch["bert_ids"] = out
        return batch

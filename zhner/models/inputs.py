"""From examples to tensors: the fields a model reads (zhner.models.fields) and the task's targets.

`fields_for(config)` says which fields a model config reads; `Featurizer.build` builds their vocabularies from the
training data; `encode` / `collate` turn examples into a batch dict (see zhner.models.fields for its keys). The
task (zhner.tasks) adds the targets -- tags [B, L] or label [B] -- when the examples carry them.

vocab.json holds {"format": 2, "fields": {name: field dict}, "task": task dict}. Directories written before format 2
(one flat dict: chars, bigrams, words, bert_vocab, tags, scheme) still load: see `Featurizer.from_dict`.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from zhner.data.classification import UNITS
from zhner.data.corpus import Corpus
from zhner.data.example import Example
from zhner.data.vocab import Vocab, bigrams, normalize_char
from zhner.lexicon.lexicon import Lexicon
from zhner.models.fields import (
    BigramField, CharField, Field, LacField, LexiconField, PieceField, SyntaxField, TranslationField, field_from_dict,
)

FORMAT = 2


def fields_for(model_config: Any, use_bigrams: bool, lexicon: bool, bert_vocab: bool) -> list[str]:
    """The fields a model reads: BERT-only models (no char_dim) read word pieces alone; character taggers read
    characters, bigrams when enabled, lexicon matches with a lexicon, and pieces when they add BERT features. Models
    with local attention (SLA / WLA: model.local_attention; BERT's and TENER's) also read the local mask ("syntax").
    Bilingual models (ACT-S: model.english_bert) also read the English translation ("translation"); models with
    frozen character features (model.char_features) read LAC's ("lac")."""
    local = ["syntax"] if getattr(model_config, "local_attention", "none") != "none" else []
    if not hasattr(model_config, "char_dim"):
        return ["pieces"] + local
    names = ["chars"]
    if use_bigrams and model_config.bigram_dim:
        names.append("bigrams")
    if lexicon:
        names.append("lexicon")
    if bert_vocab:
        names.append("pieces")
    if hasattr(model_config, "english_bert"):
        names.append("translation")
    if getattr(model_config, "char_features", "none") != "none":
        names.append("lac")
    return names + local


class Featurizer:
    """The model's fields, in order, plus (optionally) the task that encodes targets (duck-typed: `has_target(example)`,
    `target(example)`, `target_key`, `collate(items, width)`, `to_dict()`; zhner.tasks)."""

    def __init__(self, fields: Sequence[Field], task: Any = None, unit: str = "char"):
        self.fields = {f.name: f for f in fields}
        self.task = task
        self.unit = unit  # how raw text becomes tokens: "char" (Chinese) or "word" (English)

    # -- the fields, by name (None when the model does not read it) -----------------------------------------------
    @property
    def chars(self) -> Vocab | None:
        return self.fields["chars"].vocab if "chars" in self.fields else None

    @property
    def bigrams(self) -> Vocab | None:
        return self.fields["bigrams"].vocab if "bigrams" in self.fields else None

    @property
    def lexicon(self) -> Lexicon | None:
        return self.fields["lexicon"].lexicon if "lexicon" in self.fields else None

    @property
    def words(self) -> Vocab | None:
        return self.fields["lexicon"].words if "lexicon" in self.fields else None

    @property
    def tags(self) -> list[str]:
        return self.task.labels

    @property
    def scheme(self) -> str | None:
        return getattr(self.task, "scheme", None)

    # -- building -------------------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        splits: dict[str, Corpus],
        names: Sequence[str],
        task: Any,
        normalize_digits: bool = True,
        known_chars: set[str] | None = None,
        lexicon: Lexicon | None = None,
        bigram_min_count: int = 1,
        bert_vocab: dict[str, int] | None = None,
        word_vocab: bool = True,
        unit: str = "char",
        lowercase: bool = True,
        local_attention: str = "none",
        local_window: int = 3,
        syntax_distance: int = 3,
        parser: str | None = None,
        english_vocab: dict[str, int] | None = None,
        english_lowercase: bool = True,
        translator: str | None = None,
        bert_scores: list[float] | None = None,
        bert_form: str = "bare",
        english_scores: list[float] | None = None,
        char_features: str = "none",
        word_types: dict[str, str] | None = None,
        extra_texts: Sequence[str] = (),
    ) -> "Featurizer":
        """Characters and bigrams from train; from dev/test only those a pretrained table can give a vector
        (`known_chars`: the characters with a pretrained vector), so no evaluation token gets an untrained random row.
        Words (with a lexicon and `word_vocab`): every lexicon word matched in any split, as FLAT does -- a lexicon
        carries no labels. `bigram_min_count` > 1 keeps only bigrams seen that often in train (and no dev/test extras):
        MSRA has 313k bigrams, whose table dominates both the model size and the cost of each (dense) SGD step.
        The syntax field (local attention) parses with `parser`, by default spaCy for words and udchinese for characters;
        its mask is over the characters (tokens) for character models, over BERT's pieces for BERT-only models.
        The translation field (ACT-S) reads the English BERT's `english_vocab`; `translator` translates, at prediction,
        examples that come without a translation. `bert_scores` / `english_scores` (a SentencePiece vocabulary's piece
        scores, e5-small's) switch the pieces to NFKC characters in `bert_form` (bare | marked) and the unigram model for
        words (zhner.data.sentencepiece). `char_features` names the frozen LAC features of the "lac" field. `word_types`
        (source -> one code per lexicon word) types the lexicon field's words (embeddings.word_types). `extra_texts` are
        texts training may show besides the splits' (train.mention_replacement's mentions): their characters with a
        pretrained vector and their lexicon words join the vocabularies, as dev/test text does."""
        norm = lambda tokens: [normalize_char(c, normalize_digits) for c in tokens]  # noqa: E731
        fields: list[Field] = []
        if "chars" in names or "bigrams" in names:
            char_counts: Counter = Counter()
            bigram_counts: Counter = Counter()
            for ex in splits["train"]:
                chars = norm(ex.tokens)
                char_counts.update(chars)
                bigram_counts.update(bigrams(chars))
            extra_chars, extra_bigrams = set(), set()
            if known_chars:
                for corpus in splits.values():
                    for ex in corpus:
                        chars = norm(ex.tokens)
                        extra_chars.update(c for c in chars if c in known_chars)
                        if bigram_min_count <= 1:
                            extra_bigrams.update(b for b in bigrams(chars) if b[0] in known_chars)
                for text in extra_texts:
                    extra_chars.update(c for c in norm(list(text)) if c in known_chars)
            if "chars" in names:
                fields.append(CharField(Vocab.build(char_counts, extra=extra_chars), normalize_digits))
            if "bigrams" in names:
                vocab = Vocab.build(bigram_counts, min_freq=bigram_min_count, extra=extra_bigrams)
                fields.append(BigramField(vocab, normalize_digits))
        if "lexicon" in names:
            words = None
            if word_vocab:
                examples = [ex for c in splits.values() for ex in c] + [Example(list(t)) for t in extra_texts]
                words = Vocab.build(LexiconField.word_counts(lexicon, examples))
            fields.append(LexiconField(lexicon, words, word_types))
        if "pieces" in names:
            fields.append(PieceField(bert_vocab, unit, lowercase, bert_scores, bert_form))
        if "syntax" in names:
            parser = parser or ("spacy" if unit == "word" else "udchinese")
            over = "tokens" if "chars" in names else "pieces"  # character models attend over characters
            fields.append(SyntaxField(local_attention, local_window, syntax_distance, parser, over))
        if "translation" in names:
            fields.append(TranslationField(english_vocab, english_lowercase, translator, scores=english_scores))
        if "lac" in names:
            fields.append(LacField(char_features))
        return cls(fields, task, unit)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "unit": self.unit,
            "fields": {name: f.to_dict() for name, f in self.fields.items()},
            "task": self.task.to_dict() if self.task is not None else None,
            "lexicon": "lexicon" in self.fields,  # whether lexicon.txt belongs to the directory
        }

    @staticmethod
    def upgrade(d: dict) -> dict:
        """A format-1 vocab.json (one flat dict) as format 2."""
        if d.get("format") == FORMAT:
            return d
        norm = bool(d["normalize_digits"])
        fields: dict[str, dict] = {"chars": {"vocab": d["chars"], "normalize_digits": norm}}
        if d.get("bigrams") is not None:
            fields["bigrams"] = {"vocab": d["bigrams"], "normalize_digits": norm}
        lexicon = bool(d.get("lexicon", d.get("words") is not None))  # older directories: a lattice model has words
        if lexicon:
            fields["lexicon"] = {"words": d.get("words")}
        if d.get("bert_vocab") is not None:
            fields["pieces"] = {"vocab": d["bert_vocab"], "unit": "char", "lowercase": True}
        task = {"kind": "tagging", "labels": list(d["tags"]), "scheme": d["scheme"]}
        return {"format": FORMAT, "unit": "char", "fields": fields, "task": task, "lexicon": lexicon}

    @classmethod
    def from_dict(cls, d: dict, lexicon: Lexicon | None = None, task: Any = None) -> "Featurizer":
        """The fields of a format-2 dict (see `upgrade`); the task is built by the caller from d["task"]."""
        fields = [field_from_dict(name, fd, lexicon) for name, fd in d["fields"].items()]
        unit = d.get("unit", "char")
        if unit not in UNITS:  # another unit would read every text as something the model never saw
            raise ValueError(f"unit {unit!r}: expected one of {', '.join(UNITS)}")
        return cls(fields, task, unit)

    def vocab_sizes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for f in self.fields.values():
            sizes.update(f.sizes())
        return sizes

    # -- encoding -------------------------------------------------------------------------------------------------
    def encode(self, example: Example | Sequence[str], labelled: bool = True) -> dict[str, list[int]]:
        """One example (or a bare token sequence) -> id lists of every field, plus its targets when it carries them
        and `labelled`."""
        if not isinstance(example, Example):
            example = Example(list(example))
        item: dict = {"n": len(example.tokens)}
        for f in self.fields.values():
            item.update(f.encode(example))
        if labelled and self.task is not None and self.task.has_target(example):
            item.update(self.task.target(example))
        return item

    def encode_all(
        self, examples: Sequence[Example | Sequence[str]], labelled: bool = True, chunk: int = 512
    ) -> list[dict[str, list[int]]]:
        """`encode` of each example; a field that computes in batches (`prepare`: LAC's features) does so first, a
        chunk of examples at a time."""
        items: list[dict] = []
        batched = [f for f in self.fields.values() if hasattr(f, "prepare")]
        for start in range(0, len(examples), chunk):
            part = examples[start : start + chunk]
            for f in batched:
                f.prepare([ex.tokens if isinstance(ex, Example) else list(ex) for ex in part])
            items.extend(self.encode(ex, labelled) for ex in part)
        return items

    def prepare(self, examples: Sequence[Example | Sequence[str]]) -> bool:
        """Let the fields that compute in batches (`prepare`: LAC's features) do so for these examples ahead of their
        `encode`; False when no field does."""
        batched = [f for f in self.fields.values() if hasattr(f, "prepare")]
        for f in batched:
            f.prepare([ex.tokens if isinstance(ex, Example) else list(ex) for ex in examples])
        return bool(batched)

    def collate(self, items: list[dict]) -> dict[str, torch.Tensor]:
        lengths = [it["n"] for it in items]
        L = max(lengths)
        batch = {"mask": torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]}
        for f in self.fields.values():
            batch.update(f.collate(items, L))
        if self.task is not None and self.task.target_key in items[0]:
            batch.update(self.task.collate(items, L))
        return batch

"""A training run assembled from its config: the corpora (zhner.train.corpora), the resources the model reads
(zhner.train.resources: vectors, lexicon, BERT, the English encoder and its translations, dependency parses), a warm
start (zhner.train.warm_start), the task, the fields and the model.

`prepare` is the recipe, step by step; each step is a function of its own, callable (and tested) alone. Nothing here
trains or writes a run directory: the loop is zhner.train.trainer, the run directory's files zhner.train.rundir.
The order of the steps is part of the result: the model is built after the seed is set and the data read, so the
same seed gives the same weights.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import numpy as np
import torch

from zhner.classifier import Classifier
from zhner.config import Config
from zhner.data.augment import MentionReplacer
from zhner.data.corpus import Corpus
from zhner.errors import ZhnerError
from zhner.lexicon.lexicon import Lexicon
from zhner.lexicon.table import Vectors
from zhner.lexicon.vectors import embedding_matrix, load_vectors
from zhner.models.inputs import Featurizer, fields_for
from zhner.nn.bert_checkpoint import PretrainedBert
from zhner.nn.embedding import load_matrix
from zhner.pipeline import Pipeline, build_model, configured
from zhner.tagger import Tagger
from zhner.tasks import SentenceClassification, SpanTagging, Task
from zhner.train.corpora import cut_long_sentences, dataset_metric, load_splits, repair_train, token_unit
from zhner.train.resources import (
    TABLE_FILES, Log, lexicon_mentions, lexicon_word_types, load_english_bert, load_lexicon, load_model_bert,
    mention_replacer, parse_splits, table_vectors, translate_splits,
)
from zhner.train.warm_start import copy_weights, extend_vocabularies, fit_scheme, load_source, source_task


@dataclass
class Run:
    """Everything a training run is made of, built from a config."""

    config: Config
    splits: dict[str, Corpus]
    featurizer: Featurizer
    tagger: Pipeline  # a Tagger or a Classifier, as the task
    parts: dict[str, dict[str, Corpus]]  # data.union: each corpus's own splits (empty without a union)
    unk_pieces: dict[str, list[int]] | None = None  # BERT input: [UNK] pieces and all pieces per split
    replacer: MentionReplacer | None = None  # train.mention_replacement: the training mentions swapped each epoch


logger = logging.getLogger("zhner.train")


def log_info(message: str) -> None:
    """The trainer's default `log`: the `zhner.train` logger at INFO (the CLI prints it to stderr; a library caller
    configures logging as it likes, and sees nothing on stdout)."""
    logger.info("%s", message)


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's global generators (torch's draws the model's initialisation and dropout)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare(config: Config, log: Log = log_info) -> Run:
    """Load data and vectors, build vocabularies and the model, initialise embeddings from pretrained vectors (and the
    whole model from a trained one with train.init_from). torch's thread count (train.threads) is the caller's to set:
    the CLI sets it; a library call leaves the process's global state alone."""
    check_layer_decay(config)
    seed_everything(config.train.seed)
    splits, parts = load_splits(config)
    source = load_source(config.train.init_from) if config.train.init_from else None  # before the slow steps: fail early
    splits["train"] = repair_train(splits["train"], log)
    splits["train"] = cut_long_sentences(splits["train"], config.train.max_length, log)
    if getattr(config.model, "local_attention", "none") == "syntax":
        parse_splits(splits, config, log)

    emb, char_model = config.embeddings, reads_chars(config)
    vectors = load_vectors(emb.char_vectors) if emb.char_vectors and char_model else None
    tables = table_vectors(emb, vectors) if char_model else {}
    config = fit_embedding_dims(config, vectors, char_model)
    lexicon = load_lexicon(emb.lexicon, emb.lexicon_max_len, emb.lexicon_min_freq) if emb.lexicon and char_model else None
    bert = load_model_bert(config, splits, lexicon, char_model, log)
    if bert is not None:
        config = _with_model(config, bert_config=bert.config)
    english = load_english_bert(config)  # ACT-S: the English encoder, and below the translations it reads
    if english is not None:
        config = _with_model(config, english_bert_config=english.config)
        translate_splits(splits, config, log)

    if source is not None:
        splits = fit_scheme(splits, source, log)
    word_types = lexicon_word_types(config, lexicon, log)
    replacer = mention_replacer(config, splits, lexicon, log)
    task = make_task(splits, config)
    if source is not None:
        task = source_task(source, task, log)
    featurizer = build_featurizer(config, splits, task, vectors, lexicon, bert, english, word_types, replacer)
    if source is not None:
        extend_vocabularies(featurizer, source)

    config = configured(config, featurizer)
    model = build_model(config, featurizer)  # after the data and vocabularies: its initialisation draws from the seed
    init_embeddings(model, featurizer, tables, config, log)
    load_encoder_weights(model, config, bert, english, log)
    if source is not None:
        copy_weights(source, model, featurizer, task, log)
    log(data_summary(config, splits, task, featurizer, lexicon))
    log(f"model {config.model.name}: {sum(p.numel() for p in model.parameters()):,} parameters")
    unk = unk_pieces(featurizer, splits, log)
    pipeline = (Tagger if task.kind == "tagging" else Classifier)(model, featurizer, config)
    return Run(config, splits, featurizer, pipeline, parts, unk, replacer)


def _with_model(config: Config, **fields) -> Config:
    """The config with these model fields replaced (those the resources decide: dimensions, BERT's config)."""
    return config.model_copy(update={"model": config.model.model_copy(update=fields)})


def check_layer_decay(config: Config) -> None:
    """train.bert_layer_decay needs a BERT encoder to decay: an error before any data is read."""
    if config.train.bert_layer_decay and not getattr(config.model, "bert", None) and not hasattr(config.model, "english_bert"):
        raise ZhnerError("sets the rates of BERT's layers, and this model has no BERT encoder (model.bert)",
                         "train.bert_layer_decay")


def reads_chars(config: Config) -> bool:
    """Whether the model reads characters (and so has an embeddings section); BERT-only models read word pieces."""
    return "char_dim" in type(config.model).model_fields


def fit_embedding_dims(config: Config, vectors: Vectors | None, char_model: bool) -> Config:
    """The model's embedding sizes as the vectors have them: pretrained characters set char_dim (and bigram_dim where
    bigram rows are composed from, or read beside, them); no bigram table without embeddings.bigrams."""
    emb = config.embeddings
    if vectors is not None:
        dims = {"char_dim": vectors.dim}
        if config.model.bigram_dim and emb.bigrams and (emb.compose_bigrams or emb.bigram_vectors):
            dims["bigram_dim"] = vectors.dim  # composed (and pretrained) bigram rows have the characters' dimension
        config = _with_model(config, **dims)
    if char_model and not emb.bigrams and config.model.bigram_dim:
        config = _with_model(config, bigram_dim=0)
    return config


def make_task(splits: dict[str, Corpus], config: Config) -> Task:
    """Span tagging for corpora with tags, sentence classification for corpora with labels."""
    if splits["train"].scheme is not None:
        return SpanTagging.build(splits)
    return SentenceClassification.build(
        splits, config.data.metric or dataset_metric(config.data.dataset), config.data.positive
    )


def build_featurizer(
    config: Config, splits: dict[str, Corpus], task: Task, vectors: Vectors | None, lexicon: Lexicon | None,
    bert: PretrainedBert | None, english: PretrainedBert | None, word_types: dict[str, str] | None,
    replacer: MentionReplacer | None,
) -> Featurizer:
    """The fields the model reads (models/inputs.py: fields_for) and their vocabularies, built from the splits and the
    resources: characters known to the vectors, the lexicon's words, BERT's and the English encoder's pieces."""
    emb, model = config.embeddings, config.model
    return Featurizer.build(
        splits,
        fields_for(model, emb.bigrams, lexicon is not None, bert is not None),
        task,
        normalize_digits=emb.normalize_digits,
        known_chars=set(vectors.tokens) if vectors is not None else None,
        lexicon=lexicon,
        bigram_min_count=emb.bigram_min_count,
        bert_vocab=bert.vocab if bert is not None else None,
        word_vocab=getattr(model, "word_embedding", "table") == "table",
        unit=token_unit(splits["train"]),
        local_attention=getattr(model, "local_attention", "none"),
        local_window=getattr(model, "local_window", 3),
        syntax_distance=getattr(model, "syntax_distance", 3),
        parser=getattr(model, "parser", None),
        english_vocab=english.vocab if english is not None else None,
        english_lowercase=getattr(model, "english_lowercase", True),
        translator=getattr(model, "translator", None),
        bert_scores=bert.scores if bert is not None else None,
        bert_form=getattr(model, "e5_piece", "bare"),
        english_scores=english.scores if english is not None else None,
        char_features=getattr(model, "char_features", "none"),
        word_types=word_types,
        extra_texts=lexicon_mentions(replacer),
    )


def init_embeddings(
    model: torch.nn.Module, featurizer: Featurizer, tables: dict[str, Vectors], config: Config, log: Log
) -> None:
    """Fill each table the model exposes (`pretrained_tables()`: vocab name -> nn.Embedding) from its vectors."""
    rng = np.random.default_rng(config.train.seed)
    vocabs = {"chars": featurizer.chars, "bigrams": featurizer.bigrams, "words": featurizer.words}
    filled = set()
    for name, table in model.pretrained_tables().items():
        vocab, vectors = vocabs.get(name), tables.get(name)
        if vocab is None or vectors is None or table.weight.shape[1] != vectors.dim:
            continue
        filled.add(name)
        compose = {"words": config.embeddings.compose_words, "bigrams": config.embeddings.compose_bigrams}.get(name, False)
        matrix, stats = embedding_matrix(vocab.itos, vectors, vectors.dim, rng, compose=compose)  # [V, D]
        if config.embeddings.normalize_vectors:
            matrix = matrix / (np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12)
        load_matrix(table, matrix)
        log(f"embeddings {name}: {stats}")
    for name, key in TABLE_FILES.items():
        if getattr(config.embeddings, key) and name not in filled:  # a file given for a table that is not there
            raise ZhnerError(
                f"this model has no {name} table of the character vectors' dimension to start from it "
                "(embeddings.bigrams false, no lexicon, model.word_embedding chars, or another word_dim?)",
                f"embeddings.{key}",
            )


def load_encoder_weights(
    model: torch.nn.Module, config: Config, bert: PretrainedBert | None, english: PretrainedBert | None, log: Log
) -> None:
    """The pretrained weights of the model's BERT (strict, except for the parameters local attention adds: SLA's
    gates) and of ACT-S's English encoder; either may be randomly initialised (bert_weights / english_weights false)."""
    if bert is not None:
        if bert.weights:
            fresh = model.bert_encoder().model.load_pretrained_weights(bert.weights, "model.bert")
            if fresh:
                log(f"bert: {len(fresh)} new tensors keep their initialisation ({fresh[0]}, ...)")
        log(f"bert {config.model.bert}: {bert.config['num_hidden_layers']} layers x {bert.config['hidden_size']}, "
            f"{len(bert.vocab)} tokens, " + ("pretrained weights" if bert.weights else "randomly initialised"))
    if english is not None:
        if english.weights:
            model.english_encoder().model.load_pretrained_weights(english.weights, "model.english_bert")
        log(f"english bert {config.model.english_bert}: {english.config['num_hidden_layers']} layers x "
            f"{english.config['hidden_size']}, {len(english.vocab)} tokens, "
            + ("pretrained weights" if english.weights else "randomly initialised"))


def data_summary(
    config: Config, splits: dict[str, Corpus], task: Task, featurizer: Featurizer, lexicon: Lexicon | None
) -> str:
    """One log line: the corpora, their sizes, the labels and the vocabularies."""
    names = " + ".join([config.data.dataset, *(p.dataset for p in config.data.union)])
    return (
        f"data {names}: train {len(splits['train'])} / dev {len(splits['dev'])} / test {len(splits['test'])} "
        f"sentences; {_labels(task)}" + (f"; {len(featurizer.chars)} chars" if featurizer.chars is not None else "")
        + (f", {len(featurizer.bigrams)} bigrams" if featurizer.bigrams is not None else "")
        + (f", {len(featurizer.words)} lexicon words ({len(lexicon)} in the lexicon)" if featurizer.words is not None else "")
        + (f", word vectors composed from characters ({len(lexicon)} lexicon words)" if lexicon and not featurizer.words else "")
    )


def _labels(task: Task) -> str:
    if task.kind == "tagging":
        return f"{len(task.labels)} tags ({task.scheme})"
    return f"{len(task.labels)} labels ({', '.join(task.labels)}), selected on {task.metric}"


def unk_pieces(featurizer: Featurizer, splits: dict[str, Corpus], log: Log) -> dict[str, list[int]] | None:
    """[UNK] pieces per split of a BERT model's input, logged as a rate."""
    field = featurizer.fields.get("pieces")
    if field is None:
        return None
    counts = {name: list(field.unknown(corpus)) for name, corpus in splits.items()}
    rates = ", ".join(f"{name} {100 * u / max(1, n):.2f}% ({u:,} of {n:,})" for name, (u, n) in counts.items())
    log(f"bert input: [UNK] pieces {rates}")
    return counts

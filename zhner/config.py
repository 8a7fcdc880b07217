"""Run configuration: pydantic models loaded from YAML, with `--set a.b=c` overrides and readable errors."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from zhner.errors import ZhnerError
from zhner.fileio import parse_yaml, read_small_text
from zhner.models import MODELS

_TYPE_NAME = re.compile(r"[A-Za-z0-9_.]+")


MAX_SEED = 2**32 - 1  # numpy's and Python's random generators take seeds in [0, 2^32)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # an infinite rate trains to NaN without a word


def _check_type_map(value: dict[str, str | None] | None) -> dict[str, str | None] | None:
    if value is None:
        return value
    if not value:  # read as "no map" before, although a map must name every type of the data
        raise ValueError("an empty map; leave it out (null) to keep the data's types")
    for source, target in value.items():
        if not _TYPE_NAME.fullmatch(source) or (target is not None and not _TYPE_NAME.fullmatch(target)):
            raise ValueError(f"{source!r}: {target!r} is not a mapping between entity type names (letters, digits, _)")
        if target == "O":  # B-O, E-O ... would be tags of an entity type named O
            raise ValueError(f"{source!r}: 'O' is the tag outside entities, not a type; map to null to drop {source!r}")
    if all(target is None for target in value.values()):
        raise ValueError("every type is mapped to null: no entity would be left to learn")
    return value


class UnionPart(_Section):
    """One more corpus trained on together with `data.dataset` (its train, dev and test are added to theirs)."""

    dataset: str  # a registry name or a folder, as data.dataset
    type_map: dict[str, str | None] | None = None  # into the main dataset's types; null drops a type (its tags -> O)

    @field_validator("type_map")
    @classmethod
    def _types(cls, value: dict[str, str | None] | None) -> dict[str, str | None] | None:
        return _check_type_map(value)


class DataConfig(_Section):
    dataset: str = "resume"  # a registry name (`zhner data list`) or a folder with train/dev/test files
    data_dir: str | None = None  # where registry datasets live (default: $ZHNER_DATA, ../shared/data, the user cache)
    msra_dev: Literal["heldout", "test"] = "heldout"  # "test" = the papers' test-as-dev, labelled as such in the log
    max_train_sentences: int | None = Field(None, ge=1)  # a prefix of train, for demos and tests
    max_eval_sentences: int | None = Field(None, ge=1)
    # rename entity types when the dataset is loaded, e.g. {NR: PER, NS: LOC, NT: ORG}; every type of the data must be
    # named; null drops a type
    type_map: dict[str, str | None] | None = None
    # further corpora trained on with this one (e.g. a general model on MSRA + Weibo + Resume); dev and test are the
    # union too, and metrics.json also reports each corpus's own test (`test_per_corpus`)
    union: list[UnionPart] = []
    # classification: the dev metric that selects the best epoch (default: the dataset's, e.g. MCC for CoLA, else accuracy)
    metric: Literal["accuracy", "mcc", "macro_f1", "f05"] | None = None
    positive: str | None = None  # classification: the label F0.5 is computed for (error detection: the error label)
    # how a folder's classification text is read: characters (Chinese) or words (English); registry datasets know theirs
    unit: Literal["char", "word"] | None = None

    @field_validator("type_map")
    @classmethod
    def _types(cls, value: dict[str, str | None] | None) -> dict[str, str | None] | None:
        return _check_type_map(value)


class EmbeddingConfig(_Section):
    char_vectors: str | None = "lac"  # "lac" (jieba's LAC table), a word2vec text file, or null for random
    normalize_vectors: bool = True  # scale pretrained rows to unit L2 norm (fastNLP's normalize_embed)
    bigrams: bool = True
    compose_bigrams: bool = True  # bigram vectors = mean of their characters' vectors (false: random, then trained)
    compose_words: bool = True  # lattice models' word table rows = mean of their characters' vectors (false: random)
    # word2vec files of pretrained bigram / lexicon-word vectors (e.g. from `zhner vectors`), char_vectors' dimension;
    # their rows come first, the tokens they lack are composed (or random). Default: char_vectors' own rows
    bigram_vectors: str | None = None
    word_vectors: str | None = None
    bigram_min_count: int = Field(1, ge=1)  # > 1: only bigrams seen this often in train (smaller, faster table)
    normalize_digits: bool = True  # every digit -> '0' (TENER)
    lexicon: str | None = None  # lattice models: "jieba", or a word list / word2vec file
    lexicon_max_len: int | None = Field(None, ge=2)  # drop lexicon words longer than this
    lexicon_min_freq: int | None = Field(None, ge=1)  # keep words counted at least this often (jieba's dict.txt counts)
    # lattice models (FLAT, NFLAT, ATSSA): a type embedding per lexicon word added to the word's vector where it enters
    # the lattice (issue 50): jieba's dictionary tag (nr / nrt / ns / nt / nz / other), LAC's reading of the word alone
    # (PER / LOC / ORG / other), or both (two embeddings summed). Not yet measured: off by default
    word_types: Literal["none", "jieba", "lac", "both"] = "none"


class TrainConfig(_Section):
    optimizer: Literal["sgd", "adamw"] = "sgd"
    lr: float = Field(1e-3, gt=0)
    bert_lr: float | None = Field(None, gt=0)  # learning rate of the BERT encoder, when the model has one (default: lr)
    # layer-wise decay of BERT's rate: of L layers, layer l trains at bert_lr * decay^(L-1-l), the embeddings at
    # bert_lr * decay^L (the top layer and the pooler at bert_lr); null: one rate for the whole encoder
    bert_layer_decay: float | None = Field(None, gt=0, le=1)
    gate_lr: float | None = Field(None, gt=0)  # SLA / WLA gates (model.local_attention); default: their encoder's rate
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(16, ge=1)
    eval_batch_size: int = Field(64, ge=1)
    epochs: int = Field(50, ge=1)
    warmup: float = Field(0.01, ge=0)  # a fraction of all steps when < 1, else a number of steps
    schedule: Literal["constant", "linear", "inverse"] = "linear"  # after warmup; inverse: lr / (1 + decay * epoch)
    decay: float = Field(0.05, ge=0)
    clip_value: float | None = Field(5.0, gt=0)
    clip_norm: float | None = Field(None, gt=0)
    # evaluate and save a moving average of the weights over about this many epochs (train/averaging.py); null: the
    # last step's weights
    average_epochs: float | None = Field(None, gt=0)
    # a model directory to start from: its labels and weights (zhner.train.warm_start)
    init_from: str | None = Field(None, min_length=1)
    patience: int | None = Field(None, ge=1)  # stop after this many epochs without a better dev F1
    seed: int = Field(42, ge=0, le=MAX_SEED)
    checkpoint_every: int = Field(200, ge=1)  # steps between resumable checkpoints
    max_minutes: float | None = Field(None, gt=0)  # stop at the end of the epoch that passes this budget
    threads: int = Field(1, ge=1)
    collapse_epochs: int | None = Field(3, ge=1)  # warn when dev F1 has been 0 this many epochs in a row (null: never)
    # sentences x longest length^2 per training batch (the [B, H, L, L] attention tensors): a batch over it is cut, a
    # longer sentence trains alone. 8M keeps every batch of 16 from Resume, Weibo and MSRA (<= 581 characters) whole.
    max_batch_cells: int = Field(8_000_000, ge=1)
    max_length: int | None = Field(None, ge=2)  # cut longer train sentences into pieces (at sentence ends, outside entities)
    # issue 50: each training mention is swapped, with this probability, for another mention of its type (each epoch
    # anew, from the run's seed; dev and test never change). Source "train": the training set's mentions; "lexicon":
    # jieba-typed lexicon words (nr / nrt -> PER, ns -> LOC, nt -> ORG) for the corpus types that
    # mention_replacement_types maps to PER / LOC / ORG (null: guessed from the type names; see zhner.data.augment).
    # Not yet measured: off by default
    mention_replacement: float = Field(0.0, ge=0, le=1)
    mention_replacement_source: Literal["train", "lexicon"] = "train"
    mention_replacement_types: dict[str, Literal["PER", "LOC", "ORG"]] | None = None
    # source lexicon: at most this many words per class (drawn with the seed) join the word vocabulary and the pool
    mention_replacement_pool: int = Field(2000, ge=1)


ModelSection = Annotated[Union[tuple(cfg for cfg, _ in MODELS.values())], Field(discriminator="name")]


class Config(_Section):
    model: ModelSection
    data: DataConfig = DataConfig()
    embeddings: EmbeddingConfig = EmbeddingConfig()
    train: TrainConfig = TrainConfig()


def parse_override(item: str, option: str = "--set") -> tuple[list[str], object]:
    """'train.lr=0.001' -> (['train', 'lr'], 0.001); the value is read as YAML (numbers, booleans, null, lists).
    Errors name `option`, the command-line option the item came from."""
    if "=" not in item:
        raise ZhnerError(f"{option} {item!r}: expected KEY=VALUE, e.g. train.lr=0.001")
    key, value = item.split("=", 1)
    path = _key_path(key, f"{option} {item!r}")
    try:
        parsed = parse_yaml(value) if value != "" else ""  # nesting over MAX_DEPTH: a YAMLError, the text kept
    except yaml.YAMLError:
        parsed = value
    return path, parsed


def _key_path(key: str, what: str, source: str | None = None) -> list[str]:
    """'train.lr' -> ['train', 'lr']; an empty key or an empty part is an error naming `what`."""
    path = key.split(".")
    if any(not part for part in path):
        raise ZhnerError(f"{what}: bad key {key!r}", source)
    return path


def _set_path(raw: dict, path: list[str], value: object, what: str, source: str | None = None) -> None:
    node = raw
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ZhnerError(f"{what}: {part!r} is not a section", source)
        node = child
    node[path[-1]] = value


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    for item in overrides:
        path, value = parse_override(item)
        _set_path(raw, path, value, f"--set {item!r}")
    return raw


def config_from_dict(raw: dict, source: str = "config") -> Config:
    if not isinstance(raw, dict):
        raise ZhnerError("expected a mapping at the top level", source)
    model = raw.get("model")
    if not isinstance(model, dict) or model.get("name") not in MODELS:
        got = model.get("name") if isinstance(model, dict) else model
        raise ZhnerError(f"model.name: unknown model {got!r}; expected one of {', '.join(MODELS)}", source)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"] if p not in MODELS)
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise ZhnerError(f"{field}: {err['msg']}{more}", source) from None


def apply_recipe(raw: dict, recipe: str | None, source: str) -> dict:
    """Take the config's `recipes:` section out of `raw` and apply the one named (its `key: value` overrides).

    A recipe is a named set of training overrides measured for that config (e.g. `fast`: fewer epochs of another
    optimiser); the section itself is not part of the config a model is saved with."""
    if not isinstance(raw, dict):
        raise ZhnerError("expected a mapping at the top level", source)
    recipes = raw.pop("recipes", None) or {}
    if not isinstance(recipes, dict) or not all(isinstance(r, dict) for r in recipes.values()):
        raise ZhnerError("recipes: expected a mapping of names to mappings of KEY: VALUE overrides", source)
    if recipe is None:
        return raw
    if recipe not in recipes:
        known = ", ".join(sorted(recipes)) or "none"
        raise ZhnerError(f"--recipe {recipe!r}: this config has no such recipe (it has: {known})", source)
    for key, value in recipes[recipe].items():
        path = _key_path(str(key), f"recipes.{recipe}", source)
        _set_path(raw, path, value, f"recipes.{recipe}.{key}", source)
    return raw


def read_yaml_config(path: Path) -> object:
    """A YAML config file parsed (not validated); every way it can be unreadable or invalid YAML, a key given twice
    included, is an error naming the file (and the line)."""
    try:
        return parse_yaml(read_small_text(path, missing="no such config file")) or {}
    except UnicodeDecodeError:
        raise ZhnerError("not valid UTF-8", path) from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise ZhnerError(f"invalid YAML: {getattr(exc, 'problem', exc)}", path, None if line is None else line + 1) from None


def load_config(path: str | Path, overrides: list[str] = (), recipe: str | None = None) -> Config:
    """Read a YAML config; then the named recipe (if any), then `overrides` (KEY=VALUE, as `--set`), are applied."""
    path = Path(path)
    raw = read_yaml_config(path)
    raw = apply_recipe(raw, recipe, str(path))
    return config_from_dict(apply_overrides(raw, list(overrides)), str(path))


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

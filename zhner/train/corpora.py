"""The corpora a config trains on, read as the trainer reads them: data.dataset and each data.union entry, their type
maps applied, truncated as data.max_*_sentences say, and the training set's broken tags repaired and its long sentences
cut. `zhner evaluate` and `zhner gates` read a model's data through the same functions, so they see what its trainer saw.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zhner.config import Config, DataConfig
from zhner.data.catalogue import DATASETS
from zhner.data.corpus import Corpus, concat_corpora, map_types, repair_tags, split_long_sentences
from zhner.data.registry import dataset_split, load_corpus, load_dataset
from zhner.errors import ZhnerError


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


def _truncate(splits: dict[str, Corpus], config: Config) -> dict[str, Corpus]:
    limits = {"train": config.data.max_train_sentences, "dev": config.data.max_eval_sentences, "test": config.data.max_eval_sentences}
    return {
        name: Corpus(c.sentences[: limits[name]], c.scheme, c.path) if limits[name] else c for name, c in splits.items()
    }


def repair_train(train: Corpus, log: Callable[[str], None]) -> Corpus:
    """A tagged training set with the sentences whose tags break its scheme (an orphan E-X, ...) re-encoded as the spans
    a lenient reading gives, so a constrained CRF never trains on a path of probability zero; the lines are logged."""
    if not train.scheme:
        return train
    train, repaired = repair_tags(train)
    if repaired:
        where = ", ".join(str(line) for line in repaired[:5]) + (", ..." if len(repaired) > 5 else "")
        count = "1 sentence breaks" if len(repaired) == 1 else f"{len(repaired)} sentences break"
        log(
            f"train: {count} the {train.scheme.upper()} scheme ({train.path}, "
            f"line{'s' if len(repaired) > 1 else ''} {where}); trained on the spans a lenient reading gives"
        )
    return train


def cut_long_sentences(train: Corpus, max_length: int | None, log: Callable[[str], None]) -> Corpus:
    """train.max_length: training sentences longer than it cut into pieces (never inside an entity where another cut
    point is in reach); the lines cut are logged."""
    if not max_length:
        return train
    train, cut = split_long_sentences(train, max_length)
    if cut.lines:
        where = ", ".join(str(line) for line in cut.lines[:5]) + (", ..." if len(cut.lines) > 5 else "")
        log(
            f"warning: train: {len(cut.lines)} sentence(s) longer than train.max_length={max_length} "
            f"cut into {cut.pieces} pieces ({train.path}, line{'s' if len(cut.lines) > 1 else ''} {where})"
            + (f"; {cut.entities_cut} entities longer than that were cut into parts" if cut.entities_cut else "")
        )
    return train


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


def dev_split(config: Config) -> Corpus:
    """The dev split of the data a model was trained on, read as its trainer read it (types mapped, unions joined)."""
    return load_splits(config)[0]["dev"]


def model_corpus(config: Config, data: str, unit: str = "char", default_split: str = "test") -> Corpus:
    """DATA (DATASET[:SPLIT] or a corpus file) in a model's entity types. A dataset the model was trained on
    (data.dataset or a data.union entry) is read as its trainer read it: that entry's type map, the config's dataset
    options; any other dataset or file goes through the first of those maps whose source types cover its own."""
    name = data.partition(":")[0]
    source = next((s for s in data_sources(config.data) if s.dataset == name), None)
    if source is None or Path(data).is_file():
        return _in_model_types(load_corpus(data, unit, default_split), config.data)
    split = dataset_split(data, default_split)[1]  # an unknown split is named before any file is looked for
    return read_source(config.data, source)[split]


def _in_model_types(corpus: Corpus, data: DataConfig) -> Corpus:
    """A corpus in the source types of one of a model's corpora (data.type_map, e.g. MSRA's NR/NS/NT, or a data.union
    entry's, e.g. Weibo's PER.NAM), mapped by the first map that covers its types; any other corpus as it is."""
    for source in data_sources(data):
        if source.type_map and corpus.types() and corpus.types() <= set(source.type_map):
            return map_types(corpus, source.type_map, source.field)
    return corpus

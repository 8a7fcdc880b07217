"""The labelled data a command scores a model on: DATASET[:SPLIT] or a corpus file, read in the model's entity types."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from zhner.errors import ZhnerError

if TYPE_CHECKING:
    from zhner.config import Config, DataConfig
    from zhner.data.corpus import Corpus


def own_dev(pipeline):
    """The dev split of the data the model was trained on, read as the trainer read it (types mapped, unions joined)."""
    from zhner.train.trainer import load_splits

    return load_splits(pipeline.config)[0]["dev"]


def corpus_for(data: str, unit: str = "char", default_split: str = "test"):
    """DATASET[:SPLIT] (default split `default_split`) or a corpus file, read in the given token unit (a model's)."""
    from zhner.data.catalogue import DATASETS, SPLITS
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import load_dataset

    name, _, split = data.partition(":")
    if not Path(data).exists() and name in DATASETS:
        if split and split not in SPLITS:
            expected = ", ".join(f"{name}:{s}" for s in SPLITS)
            raise ZhnerError(f"unknown split {split!r}; expected one of {expected}", data)
        return load_dataset(name)[split or default_split]
    return read_corpus(data, unit=unit)


def model_corpus(config: Config, data: str, unit: str = "char", default_split: str = "test") -> Corpus:
    """DATA (DATASET[:SPLIT] or a corpus file) in a model's entity types. A dataset the model was trained on
    (data.dataset or a data.union entry) is read as its trainer read it: that entry's type map, the config's dataset
    options; any other dataset or file goes through the first of those maps whose source types cover its own."""
    from zhner.data.catalogue import SPLITS
    from zhner.train.trainer import data_sources, read_source

    name, _, split = data.partition(":")
    source = next((s for s in data_sources(config.data) if s.dataset == name), None)
    if source is None or Path(data).is_file():
        return in_model_types(corpus_for(data, unit, default_split), config.data)
    if split and split not in SPLITS:
        raise ZhnerError(f"unknown split {split!r}; expected one of {', '.join(f'{name}:{s}' for s in SPLITS)}", data)
    return read_source(config.data, source)[split or default_split]


def in_model_types(corpus: Corpus, data: DataConfig) -> Corpus:
    """A corpus in the source types of one of a model's corpora (data.type_map, e.g. MSRA's NR/NS/NT, or a data.union
    entry's, e.g. Weibo's PER.NAM), mapped by the first map that covers its types; any other corpus as it is."""
    from zhner.data.corpus import map_types
    from zhner.train.trainer import data_sources

    for source in data_sources(data):
        if source.type_map and corpus.types() and corpus.types() <= set(source.type_map):
            return map_types(corpus, source.type_map, source.field)
    return corpus

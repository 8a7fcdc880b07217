"""The labelled data a command scores a model on, read as the model's trainer read it.

These read through the trainer's data sources (zhner.train), so they sit at or above that layer; the CLI is the only
layer above it that needs them.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zhner.config import Config, DataConfig
    from zhner.data.corpus import Corpus
    from zhner.pipeline import Pipeline


def own_dev(pipeline: Pipeline) -> Corpus:
    """The dev split of the data the model was trained on, read as the trainer read it (types mapped, unions joined)."""
    from zhner.train.corpora import load_splits

    return load_splits(pipeline.config)[0]["dev"]


def model_corpus(config: Config, data: str, unit: str = "char", default_split: str = "test") -> Corpus:
    """DATA (DATASET[:SPLIT] or a corpus file) in a model's entity types. A dataset the model was trained on
    (data.dataset or a data.union entry) is read as its trainer read it: that entry's type map, the config's dataset
    options; any other dataset or file goes through the first of those maps whose source types cover its own."""
    from zhner.data.registry import dataset_split, load_corpus
    from zhner.train.corpora import data_sources, read_source

    name = data.partition(":")[0]
    source = next((s for s in data_sources(config.data) if s.dataset == name), None)
    if source is None or Path(data).is_file():
        return _in_model_types(load_corpus(data, unit, default_split), config.data)
    return read_source(config.data, source)[dataset_split(data, default_split)[1]]


def _in_model_types(corpus: Corpus, data: DataConfig) -> Corpus:
    """A corpus in the source types of one of a model's corpora (data.type_map, e.g. MSRA's NR/NS/NT, or a data.union
    entry's, e.g. Weibo's PER.NAM), mapped by the first map that covers its types; any other corpus as it is."""
    from zhner.data.corpus import map_types
    from zhner.train.corpora import data_sources

    for source in data_sources(data):
        if source.type_map and corpus.types() and corpus.types() <= set(source.type_map):
            return map_types(corpus, source.type_map, source.field)
    return corpus

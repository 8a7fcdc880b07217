"""Start a run from a trained model's weights (`train.init_from: MODEL_DIR`).

Two uses: go on training a finished run with a new schedule (its checkpoint is gone once it ends), and fine-tune a
trained model - the shipped general one, say - on another corpus. The new run keeps its own config and data; from the
model it takes
- the labels: the data's entity types (or sentence labels) must be among the model's, and the run tags with the model's
  full label set, so every label-indexed weight (output layer, CRF) lines up;
- its vocabularies (characters, bigrams, lexicon words), which the run's extend: the model's rows are kept, so a model
  fine-tuned on a small corpus still knows every character it knew, and tokens new to the model keep the row the run
  gave them (its pretrained vector, or a random one);
- every other tensor as it is, which needs the same architecture: a tensor whose shape differs is an error naming it.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from zhner.classifier import Classifier
from zhner.errors import ZhnerError
from zhner.models.inputs import Featurizer
from zhner.pipeline import Pipeline
from zhner.tagger import Tagger
from zhner.tasks import Task

FIELD = "train.init_from"


def load_source(directory: str | Path) -> Pipeline:
    """The model to start from; a missing or broken directory is an error naming it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ZhnerError(f"{FIELD}: no such model directory", directory)
    return (Tagger if Pipeline.task_kind(directory) == "tagging" else Classifier).load(directory)


def source_task(source: Pipeline, task: Task) -> Task:
    """The model's task, when the data's labels fit it (same kind and scheme, labels a subset)."""
    theirs = source.task
    if theirs.kind != task.kind:
        raise ZhnerError(f"{FIELD}: the model does {theirs.kind}, this data is for {task.kind}", FIELD)
    if task.kind == "tagging" and theirs.scheme != task.scheme:
        raise ZhnerError(
            f"{FIELD}: the model tags in {theirs.scheme.upper()}, this data in {task.scheme.upper()}; "
            f"set data.scheme: {theirs.scheme}", FIELD
        )
    unknown = sorted(set(task.labels) - set(theirs.labels))
    if unknown:
        raise ZhnerError(
            f"{FIELD}: the data has labels the model lacks ({', '.join(unknown[:6])}{', ...' if len(unknown) > 6 else ''}); "
            "map its types onto the model's with data.type_map", FIELD
        )
    return theirs


VOCABULARIES = ("chars", "bigrams", "words")


def extend_vocabularies(featurizer: Featurizer, source: Pipeline) -> None:
    """Add the model's tokens the run's vocabularies lack (after the run's own, so its ids stay as they are)."""
    for name in VOCABULARIES:
        ours, theirs = getattr(featurizer, name), getattr(source.featurizer, name)
        if ours is not None and theirs is not None:
            for token in theirs.itos:
                ours.add(token)


def copy_weights(source: Pipeline, model: torch.nn.Module, featurizer: Featurizer, log: Callable[[str], None]) -> None:
    """Fill `model` (built for `featurizer`) from the source model: vocabulary tables row by token, the rest whole."""
    theirs = source.model.state_dict()
    names = {id(p): n for n, p in model.named_parameters()}
    tables = {names[id(t.weight)]: vocab for vocab, t in model.pretrained_tables().items()}
    state = model.state_dict()
    missing = sorted(set(state) - set(theirs))
    if missing:
        raise ZhnerError(f"{FIELD}: the model has no {missing[0]} (trained with another config?)", FIELD)
    for key, tensor in state.items():
        if key in tables and getattr(featurizer, tables[key], None) is not None:
            shared = _copy_rows(tensor, theirs[key], getattr(source.featurizer, tables[key]), getattr(featurizer, tables[key]), key)
            log(f"{FIELD}: {tables[key]}: {shared:,} of {tensor.shape[0]:,} rows from the model")
            continue
        if theirs[key].shape != tensor.shape:
            raise ZhnerError(
                f"{FIELD}: {key} is {list(theirs[key].shape)} in the model, {list(tensor.shape)} in this config; "
                "train with the model's own config (its config.yaml) and change only data and train", FIELD
            )
        tensor.copy_(theirs[key])
    extra = sorted(set(theirs) - set(state))
    if extra:
        raise ZhnerError(f"{FIELD}: this config has no {extra[0]} (the model was trained with another config?)", FIELD)


def _copy_rows(target: torch.Tensor, source: torch.Tensor, source_vocab, target_vocab, key: str) -> int:
    """Rows of tokens in both vocabularies (padding and unknown included); returns how many."""
    if source.shape[1:] != target.shape[1:]:
        raise ZhnerError(f"{FIELD}: {key} has rows of {source.shape[1]} in the model, {target.shape[1]} here", FIELD)
    pairs = [(i, source_vocab.stoi[tok]) for i, tok in enumerate(target_vocab.itos) if tok in source_vocab.stoi]
    if pairs:
        rows, from_rows = (torch.tensor(x) for x in zip(*pairs))
        target[rows] = source[from_rows]
    return len(pairs)

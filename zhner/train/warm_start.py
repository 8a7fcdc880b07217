"""Start a run from a trained model's weights (`train.init_from: MODEL_DIR`, or a shipped name: zh-small, zh-accurate).

Two uses: go on training a finished run with a new schedule (its checkpoint is gone once it ends), and fine-tune a
trained model - the shipped general one, say - on another corpus. The new run keeps its own config and data; from the
model it takes
- the labels: when the data's entity types (or sentence labels) are among the model's, the run keeps the model's
  label set and every label-indexed weight (output layer, CRF); otherwise it has the data's labels, and those the model
  knows (by name: `B-PER` is `B-PER`) start from the model's rows. Tagged data is read in the model's tag scheme;
- its vocabularies (characters, bigrams, lexicon words), which the run's extend: the model's rows are kept, so a model
  fine-tuned on a small corpus still knows every character it knew, and tokens new to the model keep the row the run
  gave them (its pretrained vector, or a random one);
- every other tensor as it is, which needs the same architecture: a tensor whose shape differs is an error naming it.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

import zhner
from zhner.data.corpus import Corpus, concat_corpora
from zhner.errors import ZhnerError
from zhner.models.inputs import Featurizer
from zhner.pipeline import Pipeline
from zhner.shipped import resolve_model
from zhner.tasks import Task

FIELD = "train.init_from"


def load_source(model: str | Path) -> Pipeline:
    """The model to start from: a model directory or a shipped name (zh-small, zh-accurate); a missing or broken
    directory, or an unknown name, is an error naming the field."""
    try:
        directory = Path(resolve_model(model))
    except ZhnerError as exc:
        raise ZhnerError(f"{FIELD}: {exc}") from None
    if not directory.is_dir():
        raise ZhnerError(f"{FIELD}: no such model directory", directory)
    return zhner.load(directory)


def fit_scheme(splits: dict[str, Corpus], source: Pipeline, log: Callable[[str], None]) -> dict[str, Corpus]:
    """Tagged data re-encoded in the model's tag scheme (the same spans), so that its tags are the model's."""
    scheme = getattr(source.task, "scheme", None)
    if source.task.kind != "tagging" or splits["train"].scheme in (None, scheme):
        return splits
    log(f"{FIELD}: the data's {splits['train'].scheme.upper()} tags read as {scheme.upper()}, the model's scheme")
    return {name: concat_corpora([corpus], scheme) if corpus.scheme else corpus for name, corpus in splits.items()}


def source_task(source: Pipeline, task: Task, log: Callable[[str], None]) -> Task:
    """The model's task when the data's labels are among the model's (every label-indexed weight is kept); else the
    data's, whose labels the model knows start from the model's rows and the others afresh."""
    theirs = source.task
    if theirs.kind != task.kind:
        raise ZhnerError(f"{FIELD}: the model does {theirs.kind}, this data is for {task.kind}")
    if set(task.labels) <= set(theirs.labels):
        return theirs
    known = [label for label in task.labels if label in theirs.index]
    log(f"{FIELD}: the data has labels the model lacks; {len(known)} of its {len(task.labels)} labels start from the "
        f"model's weights ({', '.join(known[:8])}{', ...' if len(known) > 8 else ''}), the others afresh")
    return task


VOCABULARIES = ("chars", "bigrams", "words")


def extend_vocabularies(featurizer: Featurizer, source: Pipeline) -> None:
    """Add the model's tokens the run's vocabularies lack (after the run's own, so its ids stay as they are)."""
    for name in VOCABULARIES:
        ours, theirs = getattr(featurizer, name), getattr(source.featurizer, name)
        if ours is not None and theirs is not None:
            for token in theirs.itos:
                ours.add(token)


def copy_weights(
    source: Pipeline, model: torch.nn.Module, featurizer: Featurizer, task: Task, log: Callable[[str], None]
) -> None:
    """Fill `model` (built for `featurizer` and `task`) from the source model: vocabulary tables row by token,
    label-indexed tensors row by label, the rest whole."""
    theirs = source.model.state_dict()
    names = {id(p): n for n, p in model.named_parameters()}
    tables = {names[id(t.weight)]: vocab for vocab, t in model.pretrained_tables().items()}
    by_label = model.label_indexed()
    label_pairs = _pairs(task.labels, source.task.index)
    state = model.state_dict()
    ours, source_name = type(model).__name__, type(source.model).__name__
    if ours != source_name:
        raise ZhnerError(f"{FIELD}: the model is a {source_name}, this config builds a {ours}")
    missing = sorted(set(state) - set(theirs))
    if missing:
        raise ZhnerError(f"{FIELD}: the model has no {missing[0]} (trained with another config?)")
    for key, tensor in state.items():
        if key in tables and getattr(featurizer, tables[key], None) is not None:
            mine, their_vocab = getattr(featurizer, tables[key]), getattr(source.featurizer, tables[key])
            _check_rows(theirs[key], tensor, key)
            shared = _copy_indexed(tensor, theirs[key], _pairs(mine.itos, their_vocab.stoi), (0,))
            log(f"{FIELD}: {tables[key]}: {shared:,} of {tensor.shape[0]:,} rows from the model")
        elif key in by_label:
            if by_label[key]:  # a tensor of learnt scores per label; () marks one the config rebuilds (CRF masks)
                _check_rows(theirs[key], tensor, key, skip=by_label[key])
                _copy_indexed(tensor, theirs[key], label_pairs, by_label[key])
        else:
            _check_rows(theirs[key], tensor, key, skip=())
            tensor.copy_(theirs[key])
    extra = sorted(set(theirs) - set(state))
    if extra:
        raise ZhnerError(f"{FIELD}: this config has no {extra[0]} (the model was trained with another config?)")


def _pairs(tokens: list[str], source_index: dict[str, int]) -> list[tuple[int, int]]:
    """(index here, index in the model) of every token both have."""
    return [(i, source_index[tok]) for i, tok in enumerate(tokens) if tok in source_index]


def _check_rows(source: torch.Tensor, target: torch.Tensor, key: str, skip: tuple[int, ...] = (0,)) -> None:
    """The dimensions not indexed by token or label (`skip`; none for a tensor copied whole) must agree."""
    kept = [d for d in range(target.dim()) if d not in skip]
    if source.dim() != target.dim() or [source.shape[d] for d in kept] != [target.shape[d] for d in kept]:
        raise ZhnerError(
            f"{FIELD}: {key} is {list(source.shape)} in the model, {list(target.shape)} in this config; "
            "train with the model's own config (its config.yaml) and change only data and train"
        )


def _copy_indexed(target: torch.Tensor, source: torch.Tensor, pairs: list[tuple[int, int]], dims: tuple[int, ...]) -> int:
    """Copy the entries whose indices along `dims` (one or two of them) are all in `pairs`; returns len(pairs)."""
    if not pairs:
        return 0
    ours, theirs = (torch.tensor(x) for x in zip(*pairs))
    if len(dims) == 1:
        target.index_copy_(dims[0], ours, source.index_select(dims[0], theirs))
    else:  # a [T, T] transition matrix: both dimensions are labels
        target[ours.unsqueeze(1), ours.unsqueeze(0)] = source[theirs.unsqueeze(1), theirs.unsqueeze(0)]
    return len(pairs)

"""train.init_from: a run that starts from a trained model's labels and weights."""
import subprocess
import sys

import pytest
import torch

from conftest import REPO, TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.tagger import Tagger
from zhner.tasks import SpanTagging
from zhner.train.trainer import prepare, train
from zhner.train.warm_start import source_task

TEXTS = ["张三，男，汉族，1965年出生，本科学历。", "北京大学毕业，现任中国银行行长。"]
RESUME_TYPES = ["CONT", "EDU", "LOC", "NAME", "ORG", "PRO", "RACE", "TITLE"]


def tiny(*extra):
    return load_config(resolve_config("tener_resume"), TINY_TENER + list(extra))


@pytest.fixture(scope="module")
def source(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("source")
    train(tiny("train.epochs=2"), out, log=lambda _: None)
    return out


def test_same_data_rebuilds_the_trained_model(source):
    logged = []
    run = prepare(tiny(f"train.init_from={source}", "train.seed=7"), logged.append)
    model = Tagger.load(source)
    theirs, ours = model.model.state_dict(), run.tagger.model.state_dict()
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key
    assert run.tagger.predict(TEXTS) == model.predict(TEXTS)
    assert any("chars:" in line and "rows from the model" in line for line in logged)


def test_other_data_keeps_shared_rows_and_the_models_labels(source):
    model = Tagger.load(source)
    # more train sentences: new characters; only NAME and ORG kept, so the data's labels are a subset of the model's
    type_map = "{" + ", ".join(f"{t}: {t if t in ('NAME', 'ORG') else 'null'}" for t in RESUME_TYPES) + "}"
    run = prepare(tiny(f"train.init_from={source}", "data.max_train_sentences=120", f"data.type_map={type_map}"), lambda _: None)
    assert run.tagger.task.labels == model.task.labels
    mine, theirs = run.featurizer.chars, model.featurizer.chars
    new = [t for t in mine.itos if t not in theirs.stoi]
    assert new and set(theirs.itos) <= set(mine.itos)  # the model's characters are all kept
    shared = theirs.itos
    # the run's own vocabulary first, with its ids, then the model's other characters
    alone = prepare(tiny("data.max_train_sentences=120", f"data.type_map={type_map}"), lambda _: None).featurizer.chars
    assert mine.itos[: len(alone)] == alone.itos and len(mine) == len(alone) + len(set(theirs.itos) - set(alone.itos))
    table, their_table = run.tagger.model.pretrained_tables()["chars"].weight, model.model.pretrained_tables()["chars"].weight
    for tok in shared:
        assert torch.equal(table[mine.stoi[tok]], their_table[theirs.stoi[tok]]), tok
    assert not any(torch.equal(table[mine.stoi[new[0]]], row) for row in their_table)


def test_labels_must_fit_the_model():
    class Source:
        task = SpanTagging(["O", "B-PER", "I-PER"], "bio")

    assert source_task(Source, SpanTagging(["O", "B-PER", "I-PER"], "bio")) is Source.task
    with pytest.raises(ZhnerError, match="labels the model lacks \\(B-LOC, I-LOC\\).*type_map"):
        source_task(Source, SpanTagging(["O", "B-LOC", "I-LOC", "B-PER", "I-PER"], "bio"))
    with pytest.raises(ZhnerError, match="BIO.*BMES.*data.scheme"):
        source_task(Source, SpanTagging(["O", "S-PER"], "bmes"))


def test_another_architecture_is_an_error_naming_the_tensor(source):
    with pytest.raises(ZhnerError, match=r"train.init_from: .* is \[.*\] in the model, \[.*\] in this config"):
        prepare(tiny(f"train.init_from={source}", "model.head_dim=4"), lambda _: None)
    with pytest.raises(ZhnerError, match="train.init_from: the model has no"):
        prepare(load_config(resolve_config("flat_resume"), [*TINY_TENER, f"train.init_from={source}"]), lambda _: None)


def test_cli_reports_a_missing_model_directory(tmp_path, shared_data):
    missing = tmp_path / "no-model"
    proc = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "train", "tener_resume", "-o", str(tmp_path / "run"),
         *[a for kv in [*TINY_TENER, f"train.init_from={missing}"] for a in ("--set", kv)]],
        capture_output=True, text=True, cwd=REPO,
    )
    assert proc.returncode != 0
    assert "no such model directory" in proc.stderr and str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_lattice_model_keeps_every_table_row(tmp_path, shared_data):
    """FLAT: characters, bigrams and lexicon words all extend the model's vocabularies and keep its rows."""
    base = ["model.heads=2", "model.head_dim=8", "data.max_eval_sentences=8", "train.batch_size=10", "train.epochs=1"]
    flat = lambda *extra: load_config(resolve_config("flat_resume"), base + list(extra))  # noqa: E731
    train(flat("data.max_train_sentences=40"), tmp_path, log=lambda _: None)
    model = Tagger.load(tmp_path)
    run = prepare(flat("data.max_train_sentences=100", f"train.init_from={tmp_path}"), lambda _: None)
    ours, theirs = run.tagger.model.pretrained_tables(), model.model.pretrained_tables()
    assert set(ours) == set(theirs) == {"chars", "bigrams", "words"}
    for name in ours:
        mine, their_vocab = getattr(run.featurizer, name), getattr(model.featurizer, name)
        assert len(mine) > len(their_vocab), name  # more sentences, more tokens
        rows = torch.tensor([mine.stoi[t] for t in their_vocab.itos])
        assert torch.equal(ours[name].weight[rows], theirs[name].weight), name

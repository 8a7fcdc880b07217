"""train.init_from: a run that starts from a trained model's labels and weights."""
import pytest
import torch

from cli_runner import run_zhner
from conftest import MINI, REPO, TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.tagger import Tagger
from zhner.data.corpus import Corpus, Example
from zhner.data.registry import load_dataset
from zhner.tasks import SentenceClassification, SpanTagging
from zhner.train.assemble import prepare
from zhner.train.trainer import train
from zhner.train.warm_start import fit_scheme, source_task

TEXTS = ["张三，男，汉族，1965年出生，本科学历。", "北京大学毕业，现任中国银行行长。"]
MINI_TYPES = sorted({t[2:] for s in load_dataset("mini")["train"] for t in s.tags if t != "O"})  # PER, LOC, ORG


def tiny(*extra):
    return load_config(resolve_config("tener_resume"), TINY_TENER + list(extra))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
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
    # more train sentences: new characters; only PER and ORG kept, so the data's labels are a subset of the model's
    assert {"PER", "ORG"} < set(MINI_TYPES)
    type_map = "{" + ", ".join(f"{t}: {t if t in ('PER', 'ORG') else 'null'}" for t in MINI_TYPES) + "}"
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


def test_labels_the_model_knows_keep_their_rows(source):
    model = Tagger.load(source)
    # PER renamed NAME (new to the model), ORG kept, the rest dropped: the data's labels are not a subset of the model's
    assert {"PER", "ORG"} < set(MINI_TYPES) and "NAME" not in MINI_TYPES
    type_map = "{" + ", ".join(f"{t}: {dict(PER='NAME', ORG='ORG').get(t, 'null')}" for t in MINI_TYPES) + "}"
    logged = []
    # trained with the CRF's constraints, which the model was not: its masks must be this run's
    run = prepare(tiny(f"train.init_from={source}", f"data.type_map={type_map}", "model.crf_constraints=true"), logged.append)
    labels = run.tagger.task.labels
    assert set(labels) == {"O"} | {f"{p}-{t}" for p in "BMES" for t in ("NAME", "ORG")}
    assert any("5 of its 9 labels start from the model's weights" in line for line in logged), logged
    ours, theirs = run.tagger.model.state_dict(), model.model.state_dict()
    known = [lab for lab in labels if lab in model.task.index]
    i = torch.tensor([labels.index(lab) for lab in known])
    j = torch.tensor([model.task.index[lab] for lab in known])
    assert torch.equal(ours["out.weight"][i], theirs["out.weight"][j])
    assert torch.equal(ours["out.bias"][i], theirs["out.bias"][j])
    assert torch.equal(ours["crf.start"][i], theirs["crf.start"][j])
    assert torch.equal(ours["crf.transitions"][i][:, i], theirs["crf.transitions"][j][:, j])
    new = labels.index("B-NAME")
    assert not any(torch.equal(ours["out.weight"][new], row) for row in theirs["out.weight"])
    fresh = prepare(tiny(f"data.type_map={type_map}", "model.crf_constraints=true"), lambda _: None).tagger.model.state_dict()
    assert not bool(ours["crf.trans_allowed"][labels.index("B-NAME"), labels.index("E-ORG")])
    for mask in ("crf.start_allowed", "crf.trans_allowed", "crf.end_allowed"):
        assert torch.equal(ours[mask], fresh[mask]), mask


def test_tasks_and_schemes_against_the_model():
    class Source:
        task = SpanTagging(["O", "B-PER", "M-PER", "E-PER", "S-PER"], "bmes")

    same = SpanTagging(["O", "B-PER", "M-PER", "E-PER", "S-PER"], "bmes")
    assert source_task(Source, same, print) is Source.task
    wider = SpanTagging(["O", "B-LOC", "M-LOC", "E-LOC", "S-LOC", "B-PER", "M-PER", "E-PER", "S-PER"], "bmes")
    assert source_task(Source, wider, lambda _: None) is wider
    with pytest.raises(ZhnerError, match="the model does tagging, this data is for classification"):
        source_task(Source, SentenceClassification(["neg", "pos"]), print)
    bio = Corpus([Example(tokens=list("张三在北京"), tags=["B-PER", "I-PER", "O", "B-LOC", "I-LOC"])], "bio", "x.bio")
    logged = []
    fitted = fit_scheme({"train": bio, "dev": bio, "test": bio}, Source, logged.append)
    assert fitted["train"].scheme == "bmes" and fitted["dev"].sentences[0].tags == ["B-PER", "E-PER", "O", "B-LOC", "E-LOC"]
    assert logged == ["train.init_from: the data's BIO tags read as BMES, the model's scheme"]


def test_another_architecture_is_an_error_naming_the_tensor(source):
    with pytest.raises(ZhnerError, match=r"train.init_from: .* is \[.*\] in the model, \[.*\] in this config"):
        prepare(tiny(f"train.init_from={source}", "model.head_dim=4"), lambda _: None)
    with pytest.raises(ZhnerError, match="train.init_from: the model is a TENER, this config builds a FLAT") as err:
        prepare(load_config(resolve_config("flat_resume"), [*TINY_TENER, f"train.init_from={source}"]), lambda _: None)
    assert str(err.value).count("train.init_from") == 1  # the field was named twice


def test_cli_reports_a_missing_model_directory(tmp_path):
    missing = tmp_path / "no-model"
    proc = run_zhner(  # its own process, forked with torch imported (tests/cli_runner.py)
        "train", "tener_resume", "-o", tmp_path / "run",
        *[a for kv in [*TINY_TENER, f"train.init_from={missing}"] for a in ("--set", kv)], cwd=REPO,
    )
    assert proc.returncode != 0
    assert "no such model directory" in proc.stderr and str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_lattice_model_keeps_every_table_row(tmp_path):
    """FLAT: characters, bigrams and lexicon words all extend the model's vocabularies and keep its rows."""
    base = MINI + ["model.heads=2", "model.head_dim=8", "data.max_eval_sentences=8", "train.batch_size=10", "train.epochs=1"]
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

"""The task contract: sentence classification and English (word-level) tagging run through the same trainer, model
directory, evaluate, predict, serve and export as the Chinese taggers; classification metrics against oracles; model
directories saved before the contract still load."""
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, TINY_TENER
import zhner
from zhner.classifier import Classifier
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.data.example import Example, example_from_text
from zhner.errors import ZhnerError
from zhner.evaluate.classification import ClassificationScorer, matthews
from zhner.tagger import Tagger
from zhner.train.trainer import train

# a 2-layer, 32-wide BERT from random initialisation with bert-base-chinese's vocabulary (which also holds English
# word pieces): fast enough for unit tests, and needs no pretrained weights
TINY_BERT = [
    "model.bert=../shared/data/bert_base_chinese_vocab",
    "model.bert_weights=false",
    "model.bert_shape={num_hidden_layers: 2, hidden_size: 32, num_attention_heads: 2, intermediate_size: 64, "
    "max_position_embeddings: 40}",
    "train.epochs=2",
    "train.lr=0.003",
    "train.bert_lr=0.003",
    "train.batch_size=8",
]


def _train(config: str, out, overrides: list[str]) -> dict:
    return train(load_config(resolve_config(config), overrides), out, log=lambda _: None)


@pytest.fixture(scope="module")
def sst2_model(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("sst2")
    _train("bert_sst2", out, TINY_BERT + ["data.max_train_sentences=96", "data.max_eval_sentences=48"])
    return out


@pytest.fixture(scope="module")
def conll_model(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("conll")
    _train("bert_conll2003", out, TINY_BERT + ["data.max_train_sentences=64", "data.max_eval_sentences=24"])
    return out


# -- metrics ----------------------------------------------------------------------------------------------------------
def test_binary_mcc_is_the_correlation_of_the_labels():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 2, 200)
    pred = np.where(rng.random(200) < 0.7, gold, 1 - gold)
    scorer = ClassificationScorer(["0", "1"])
    for g, p in zip(gold, pred):
        scorer.add(str(g), str(p))
    result = scorer.result()
    assert result["mcc"] == pytest.approx(100 * scipy_stats.pearsonr(gold, pred)[0], abs=0.01)
    assert result["accuracy"] == pytest.approx(100 * (gold == pred).mean(), abs=0.01)


def test_multiclass_mcc_and_f_scores_by_hand():
    confusion = {("a", "a"): 5, ("a", "b"): 1, ("b", "b"): 3, ("b", "c"): 1, ("c", "c"): 4, ("c", "a"): 2}
    # Gorodkin: c = 12 correct, s = 16; t = gold (6, 4, 6), p = pred (7, 4, 5)
    c, s, t, p = 12, 16, (6, 4, 6), (7, 4, 5)
    expected = (c * s - sum(a * b for a, b in zip(t, p))) / np.sqrt((s * s - sum(x * x for x in p)) * (s * s - sum(x * x for x in t)))
    assert matthews(confusion, ["a", "b", "c"]) == pytest.approx(expected)
    scorer = ClassificationScorer(["a", "b", "c"], positive="a")
    for (g, q), n in confusion.items():
        for _ in range(n):
            scorer.add(g, q)
    result = scorer.result()
    precision, recall = 5 / 7, 5 / 6
    assert result["f05"] == pytest.approx(100 * 1.25 * precision * recall / (0.25 * precision + recall), abs=0.01)
    f1 = [2 * 5 / 13, 2 * 3 / 8, 2 * 4 / 11]  # per label 2tp / (n_gold + n_pred)
    assert result["macro_f1"] == pytest.approx(100 * sum(f1) / 3, abs=0.02)


def test_mcc_is_zero_when_every_prediction_is_one_label():
    scorer = ClassificationScorer(["0", "1"])
    for g in "0110":
        scorer.add(g, "1")
    assert scorer.result()["mcc"] == 0.0


# -- examples ---------------------------------------------------------------------------------------------------------
def test_word_examples_keep_offsets_into_the_text():
    text = "EU  rejects German call, doesn't it?"
    ex = example_from_text(text, "word")
    assert [text[s:e] for s, e in ex.meta["offsets"]] == ex.tokens
    assert ex.tokens[:4] == ["EU", "rejects", "German", "call"]
    plain = Example(["a", "b"], spaces=[True, False])
    assert plain.text == "a b" and plain.offsets() == [(0, 1), (2, 3)]


# -- sentence classification end to end ------------------------------------------------------------------------------
def test_classifier_trains_saves_and_loads_as_its_task(sst2_model):
    metrics = json.loads((sst2_model / "metrics.json").read_text())
    assert metrics["task"] == "classification" and metrics["metric"] == "accuracy"
    assert set(metrics["test"]) >= {"accuracy", "mcc", "macro_f1", "f05", "per_label"}
    classifier = zhner.load(sst2_model)
    assert isinstance(classifier, Classifier)
    out = classifier.predict(["a charming and often affecting journey .", "", "unflinchingly bleak"])
    assert out[0]["label"] in ("0", "1") and sum(out[0]["scores"].values()) == pytest.approx(1, abs=1e-4)
    assert out[1]["label"] is None  # an empty text
    assert Classifier.load(sst2_model).predict(["a charming and often affecting journey ."])[0] == out[0]
    with pytest.raises(ZhnerError, match="not a tagging model"):
        Tagger.load(sst2_model)


def test_classifier_reads_long_text_in_windows(sst2_model):
    """40 positions: a 100-word text is read as several windows whose logits are averaged (nothing is truncated), and
    the answer depends on the words past the first window."""
    classifier = zhner.load(sst2_model)
    head = "good " * 30
    a, b = classifier.predict([head + "bad " * 70, head + "fine " * 70])
    assert a["scores"] != b["scores"]


def test_classifier_evaluate_and_predict_cli(sst2_model, tmp_path):
    cli = [sys.executable, "-m", "zhner.cli"]
    scored = subprocess.run(cli + ["evaluate", str(sst2_model), "sst2"], cwd=REPO, capture_output=True, text=True)
    assert scored.returncode == 0, scored.stderr
    assert set(json.loads(scored.stdout)) >= {"accuracy", "mcc", "macro_f1"}
    (tmp_path / "in.jsonl").write_text('{"id": 7, "text": "a gorgeous film ."}\n', encoding="utf-8")
    run = subprocess.run(cli + ["predict", str(tmp_path / "in.jsonl"), "-m", str(sst2_model)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert record["id"] == 7 and record["label"] in ("0", "1") and set(record["scores"]) == {"0", "1"}
    bad = subprocess.run(cli + ["predict", "--text", "x", "-m", str(sst2_model), "--format", "conll"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "for taggers" in bad.stderr and "Traceback" not in bad.stderr
    wrong = subprocess.run(cli + ["evaluate", str(sst2_model), "conll2003"], cwd=REPO, capture_output=True, text=True)
    assert wrong.returncode != 0 and "classification model" in wrong.stderr and "Traceback" not in wrong.stderr


def test_classify_endpoint(sst2_model):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from zhner.serve.app import create_app

    classifier = zhner.load(sst2_model)
    with TestClient(create_app(classifier)) as client:
        one = client.post("/v1/classify", json={"text": "a gorgeous film ."})
        assert one.status_code == 200
        assert one.json() == {"text": "a gorgeous film .", **classifier.predict(["a gorgeous film ."])[0]}
        many = client.post("/v1/classify", json={"texts": ["good", "bad"]}).json()["results"]
        assert [r["text"] for r in many] == ["good", "bad"]
        assert client.post("/v1/ner", json={"text": "x"}).status_code == 404
        assert client.post("/v1/classify", json={"text": 3}).status_code == 422
        health = client.get("/health").json()
        assert health["task"] == "classification" and health["labels"] == ["0", "1"]


def test_classifier_onnx_export_matches(sst2_model, tmp_path):
    pytest.importorskip("onnxruntime")
    from zhner.export import OnnxClassifier, export_onnx, same_predictions

    classifier = zhner.load(sst2_model)
    path = export_onnx(classifier, tmp_path / "m.onnx")
    texts = ["a gorgeous film .", "good " * 30 + "bad " * 70, ""]  # one over BERT's 40 positions: windows
    assert same_predictions(OnnxClassifier.load(sst2_model, path).predict(texts), classifier.predict(texts))


# -- English tagging --------------------------------------------------------------------------------------------------
def test_english_tagger_reports_character_offsets(conll_model):
    tagger = zhner.load(conll_model)
    assert isinstance(tagger, Tagger) and tagger.featurizer.unit == "word"
    text = "John  Smith lives in New York ."
    entities = tagger.predict([text])[0]
    for e in entities:
        assert text[e["start"]:e["end"]] == e["text"] and not e["text"].startswith(" ")
    corpus_scores = tagger.evaluate(__import__("zhner.data.registry", fromlist=["x"]).load_dataset("conll2003")["dev"])
    assert corpus_scores["n_sentences"] == 3250


def test_english_tagger_labels_sit_on_first_pieces(conll_model):
    """A word split into several pieces is one token of the tagger: emissions per word, not per piece."""
    tagger = zhner.load(conll_model)
    ex = example_from_text("Unbelievably, Schwarzenegger visited Wolverhampton", "word")
    batch = tagger.featurizer.collate([tagger.featurizer.encode(ex, labelled=False)])
    assert batch["bert_ids"].shape[1] > len(ex) + 2  # more pieces than words
    assert tagger.model.emissions(batch).shape[:2] == (1, len(ex))
    assert batch["first_piece"][0, 0] == 1  # the first word starts right after [CLS]


def test_english_tagger_onnx_export_matches(conll_model, tmp_path):
    pytest.importorskip("onnxruntime")
    from zhner.export import EXAMPLE_TEXTS, OnnxTagger, export_onnx

    tagger = zhner.load(conll_model)
    path = export_onnx(tagger, tmp_path / "m.onnx")
    texts = EXAMPLE_TEXTS["word"] + ["Germany " * 60]  # over BERT's 40 positions: the tagger cuts it into pieces
    assert OnnxTagger.load(conll_model, path).predict(texts) == tagger.predict(texts)


def test_softmax_head_trains_and_refuses_crf_only_features(tmp_path, shared_data):
    _train("bert_conll2003", tmp_path, TINY_BERT + ["model.head=softmax", "data.max_train_sentences=32",
                                                     "data.max_eval_sentences=8", "train.epochs=1"])
    tagger = zhner.load(tmp_path)
    assert tagger.model.crf is None and isinstance(tagger.predict(["Peter lives in Paris ."])[0], list)
    with pytest.raises(ZhnerError, match="CRF head"):
        tagger.predict(["Peter lives in Paris ."], confidence=True)


def test_a_tagger_cannot_train_on_classification_data(tmp_path, shared_data):
    with pytest.raises(ZhnerError, match="tagging model"):
        _train("tener_resume", tmp_path, TINY_TENER + ["data.dataset=sst2"])


# -- directories saved before the contract -----------------------------------------------------------------------------
def test_a_directory_saved_before_the_contract_loads_and_predicts_the_same(tmp_path, shared_data):
    """Format-1 vocab.json (one flat dict with tags and scheme) and a config without labels or sizes, as every model
    directory written before the task contract."""
    new = tmp_path / "new"
    _train("tener_resume", new, TINY_TENER)
    old = tmp_path / "old"
    shutil.copytree(new, old)
    vocab = json.loads((new / "vocab.json").read_text(encoding="utf-8"))
    fields = vocab["fields"]
    flat = {
        "chars": fields["chars"]["vocab"], "bigrams": fields["bigrams"]["vocab"], "tags": vocab["task"]["labels"],
        "scheme": vocab["task"]["scheme"], "normalize_digits": fields["chars"]["normalize_digits"], "words": None,
        "bert_vocab": None, "lexicon": False,
    }
    (old / "vocab.json").write_text(json.dumps(flat, ensure_ascii=False), encoding="utf-8")
    config = (old / "config.yaml").read_text(encoding="utf-8")
    import yaml

    raw = yaml.safe_load(config)
    for key in ("labels", "scheme", "vocab_sizes", "head"):
        raw["model"].pop(key)
    (old / "config.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    texts = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。"]
    assert Tagger.load(old).predict(texts) == Tagger.load(new).predict(texts)
    torch.testing.assert_close(Tagger.load(old).model.state_dict(), Tagger.load(new).model.state_dict())


def test_english_long_text_is_cut_at_full_stops(conll_model):
    tagger = zhner.load(conll_model)
    text = "John Smith lives in New York. He works for the United Nations in Geneva. " * 12  # > one piece
    starts = {offset for offset, _ in tagger.split(text)}
    assert all(m.end() in starts for m in re.finditer(r"\.(?= )", text))  # every sentence starts a piece
    for e in tagger.predict([text])[0]:
        assert text[e["start"]:e["end"]] == e["text"]

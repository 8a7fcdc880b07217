"""The task contract: sentence classification and English (word-level) tagging run through the same trainer, model
directory, evaluate, predict, serve and export as the Chinese taggers; classification metrics against oracles; model
directories saved before the contract still load."""
import json
import re
import shutil

import numpy as np
import pytest
import torch

from cli_runner import run_zhner
from conftest import BERT_VOCAB, REPO, TEST_DATA, TINY_TENER
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
    f"model.bert={BERT_VOCAB}",
    "model.bert_weights=false",
    "model.bert_shape={num_hidden_layers: 2, hidden_size: 32, num_attention_heads: 2, intermediate_size: 64, "
    "max_position_embeddings: 40}",
    "train.epochs=2",
    "train.lr=0.003",
    "train.bert_lr=0.003",
    "train.batch_size=8",
]


# small corpora written for these tests (tests/data/small_tasks/, a README in each): English sentence sentiment in
# SST-2's layout, Chinese review sentiment in ChnSentiCorp's, English word-level NER in CoNLL-2003's types
SMALL_TASKS = TEST_DATA / "small_tasks"
EN_SENTIMENT = [f"data.dataset={SMALL_TASKS / 'en_sentiment'}", "data.unit=word"]
ZH_SENTIMENT = [f"data.dataset={SMALL_TASKS / 'zh_sentiment'}"]
EN_NER = [f"data.dataset={SMALL_TASKS / 'en_ner'}"]


def _train(config: str, out, overrides: list[str]) -> dict:
    return train(load_config(resolve_config(config), overrides), out, log=lambda _: None)


@pytest.fixture(scope="module")
def sst2_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("sst2")
    _train("bert_sst2", out, TINY_BERT + EN_SENTIMENT + ["data.max_train_sentences=96", "data.max_eval_sentences=48"])
    return out


@pytest.fixture(scope="module")
def conll_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("conll")
    _train("bert_conll2003", out, TINY_BERT + EN_NER + ["data.max_train_sentences=64", "data.max_eval_sentences=24"])
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
    assert classifier.predict("a charming and often affecting journey .") == out[0]  # one string: one record
    assert repr(classifier).startswith("Classifier(model=") and "labels=['0', '1']" in repr(classifier)
    with pytest.raises(ZhnerError, match="not a tagging model"):
        Tagger.load(sst2_model)


def test_classifier_reads_long_text_in_windows(sst2_model):
    """40 positions: a 100-word text is read as windows of 38 pieces, each wrapped in [CLS] .. [SEP], whose logits are
    averaged by piece count (nothing is truncated)."""
    classifier = zhner.load(sst2_model)
    text = "good " * 40 + "bad " * 60
    pieces = classifier.featurizer.encode(example_from_text(text, "word"), labelled=False)["bert_ids"][1:-1]
    bert, field = classifier.model.bert_encoder(), classifier.featurizer.fields["pieces"]
    windows = [pieces[s : s + bert.window] for s in range(0, len(pieces), bert.window)]
    assert len(windows) > 2
    with torch.no_grad():
        logits = [classifier.model.logits({"bert_ids": torch.tensor([[field.cls, *w, field.sep]])})[0] for w in windows]
    mean = sum(l * len(w) for l, w in zip(logits, windows)) / len(pieces)
    expected = mean.softmax(-1).tolist()
    got = classifier.predict([text])[0]["scores"]
    assert [got[k] for k in classifier.task.labels] == pytest.approx(expected, abs=1e-5)


def test_classifier_evaluate_and_predict_cli(sst2_model, tmp_path):
    scored = run_zhner("evaluate", sst2_model, SMALL_TASKS / "en_sentiment", "--json", cwd=REPO)  # the data it trained on
    assert scored.returncode == 0, scored.stderr
    assert set(json.loads(scored.stdout)) >= {"accuracy", "mcc", "macro_f1"}
    (tmp_path / "in.jsonl").write_text('{"id": 7, "text": "a gorgeous film ."}\n', encoding="utf-8")
    run = run_zhner("predict", tmp_path / "in.jsonl", "-m", sst2_model, cwd=REPO)
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    assert record["id"] == 7 and record["label"] in ("0", "1") and set(record["scores"]) == {"0", "1"}
    bad = run_zhner("predict", "--text", "x", "-m", sst2_model, "--format", "conll", cwd=REPO)
    assert bad.returncode != 0 and "for taggers" in bad.stderr and "Traceback" not in bad.stderr
    wrong = run_zhner("evaluate", sst2_model, SMALL_TASKS / "en_ner" / "test.txt", cwd=REPO)
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
def every_word_a_person(tagger: Tagger) -> Tagger:
    """The tagger with its output layer set so that every word is tagged B-PER: its entities are then its words."""
    with torch.no_grad():
        tagger.model.out.weight.zero_()
        tagger.model.out.bias.zero_()
        tagger.model.out.bias[tagger.task.labels.index("B-PER")] = 10.0
    return tagger


def test_english_tagger_reports_character_offsets(conll_model):
    tagger = every_word_a_person(zhner.load(conll_model))
    assert isinstance(tagger, Tagger) and tagger.featurizer.unit == "word"
    text = "John  Smith lives in New York, doesn't he?"
    entities = tagger.predict([text])[0]
    words, offsets = __import__("zhner.data.example", fromlist=["x"]).words_of(text)
    words_with_letters = [(s, e, w) for w, (s, e) in zip(words, offsets) if any(c.isalnum() for c in w)]
    assert [(e["start"], e["end"], e["text"]) for e in entities] == words_with_letters  # "," alone names nothing
    dev = __import__("zhner.data.registry", fromlist=["x"]).load_dataset(SMALL_TASKS / "en_ner")["dev"]
    assert tagger.evaluate(dev)["n_sentences"] == len(dev) > 0


def test_english_tagger_evaluates_conll2003(conll_model, shared_data):
    """A model trained on CoNLL-2003's types evaluates on CoNLL-2003 itself: every sentence of its dev split is scored."""
    tagger = zhner.load(conll_model)
    corpus_scores = tagger.evaluate(__import__("zhner.data.registry", fromlist=["x"]).load_dataset("conll2003")["dev"])
    assert corpus_scores["n_sentences"] == 3250


def test_english_tagger_labels_sit_on_first_pieces(conll_model):
    """A word split into several pieces is one token of the tagger: emissions per word, not per piece."""
    tagger = zhner.load(conll_model)
    ex = example_from_text("Unbelievably, Schwarzenegger visited Wolverhampton", "word")
    batch = tagger.featurizer.collate([tagger.featurizer.encode(ex, labelled=False)])
    assert batch["bert_ids"].shape[1] > len(ex) + 2  # more pieces than words
    ids, first = tagger.featurizer.fields["pieces"].wordpiece.encode_words(ex.tokens)
    assert batch["first_piece"][0].tolist() == [f + 1 for f in first]  # after [CLS]
    tagger.model.eval()
    with torch.no_grad():
        pieces = tagger.model.bert(batch["bert_ids"], torch.tensor([len(ids)]))  # [1, P, H]
        expected = tagger.model.out(pieces[0, first])  # each word's first piece
        torch.testing.assert_close(tagger.model.emissions(batch)[0], expected)


def test_english_tagger_onnx_export_matches(conll_model, tmp_path):
    pytest.importorskip("onnxruntime")
    from zhner.export import EXAMPLE_TEXTS, OnnxTagger, export_onnx

    tagger = every_word_a_person(zhner.load(conll_model))  # entities everywhere: equal outputs are not both empty
    tagger.save(tmp_path / "m")
    path = export_onnx(tagger, tmp_path / "m" / "model.onnx")
    texts = EXAMPLE_TEXTS["word"] + ["Germany " * 60]  # over BERT's 40 positions: the tagger cuts it into pieces
    onnx = OnnxTagger.load(tmp_path / "m", path)
    predicted = tagger.predict(texts, confidence=False)  # ONNX entities carry no score
    assert all(predicted) and onnx.predict(texts) == predicted
    # one sentence past the graph's window: tagged in parts cut at its sentence ends, each as PyTorch tags it alone
    sentence = "Peter Smith lives in Berlin , Germany ."
    long_example = example_from_text(" ".join([sentence] * 12), "word")
    assert len(tagger.featurizer.encode(long_example)["bert_ids"]) > 40
    short = example_from_text(sentence, "word")
    parts, owners = onnx.window_parts([short, long_example, short])
    assert owners == [0] + [1] * 12 + [2] and all(part.tokens == short.tokens for part in parts)
    assert onnx.tag([short, long_example]) == [tagger.tag([short])[0], tagger.tag([short])[0] * 12]
    with pytest.raises(ZhnerError, match="word pieces"):  # one word of more pieces than the window: refused, no crash
        onnx.tag([Example(["x1" * 25])])  # one word of 49 pieces in this vocabulary


def test_softmax_head_trains_and_refuses_crf_only_features(tmp_path):
    _train("bert_conll2003", tmp_path, TINY_BERT + EN_NER + ["model.head=softmax", "data.max_train_sentences=32",
                                                     "data.max_eval_sentences=8", "train.epochs=1"])
    tagger = zhner.load(tmp_path)
    assert tagger.model.crf is None
    with torch.no_grad():  # every word I-PER: an orphan I- starts an entity, as conlleval reads it
        tagger.model.out.weight.zero_()
        tagger.model.out.bias.zero_()
        tagger.model.out.bias[tagger.task.labels.index("I-PER")] = 10.0
    assert tagger.tag([["Peter", "Smith", "lives"]]) == [["B-PER", "I-PER", "I-PER"]]
    assert [e["text"] for e in tagger.predict(["Peter lives in Paris ."])[0]] == ["Peter lives in Paris ."]
    with pytest.raises(ZhnerError, match="CRF head"):
        tagger.predict(["Peter lives in Paris ."], confidence=True)


def test_a_tagger_cannot_train_on_classification_data(tmp_path):
    with pytest.raises(ZhnerError, match="tagging model"):
        _train("tener_resume", tmp_path, TINY_TENER + EN_SENTIMENT)
    zh, en = SMALL_TASKS / "zh_sentiment", SMALL_TASKS / "en_ner"
    with pytest.raises(ZhnerError, match=re.escape(f"data.union.0.dataset: {zh} is classification / char, but mini is tagging")):
        _train("tener_resume", tmp_path, TINY_TENER + [f"data.union=[{{dataset: {zh}}}]"])
    with pytest.raises(ZhnerError, match=re.escape(f"data.union.0.dataset: {en} is tagging / word, but mini is tagging / char")):
        _train("tener_resume", tmp_path, TINY_TENER + [f"data.union=[{{dataset: {en}}}]"])


def test_bert_settings_are_checked(tmp_path):
    with pytest.raises(ZhnerError, match="model.bert"):
        _train("bert_sst2", tmp_path, EN_SENTIMENT + ["model.bert=null"])
    with pytest.raises(ZhnerError, match="model.bert_shape.num_hidden_layer: not a BERT config field"):
        _train("bert_sst2", tmp_path, TINY_BERT[:2] + EN_SENTIMENT + ["model.bert_shape={num_hidden_layer: 2}"])


def test_classification_files_are_checked(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.tsv").write_text("good film\t1\nbad film\t0\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("fine\t1\nodd one\t2\n", encoding="utf-8")
    (folder / "test.tsv").write_text("fine\t1\n", encoding="utf-8")
    overrides = TINY_BERT + [f"data.dataset={folder}", "data.unit=word"]
    with pytest.raises(ZhnerError, match=r"dev.tsv:2: label '2' is not in train"):
        _train("bert_sst2", tmp_path / "run", overrides)
    (folder / "dev.tsv").write_text("fine\t1\n", encoding="utf-8")
    _train("bert_sst2", tmp_path / "run", overrides + ["train.epochs=1"])
    assert zhner.load(tmp_path / "run").featurizer.unit == "word"  # data.unit: the folder's text read as words
    (tmp_path / "ws.jsonl").write_text('{"text": "   ", "label": "0"}\n', encoding="utf-8")
    with pytest.raises(ZhnerError, match=r"ws.jsonl:1: no words in the text"):
        __import__("zhner.data.corpus", fromlist=["x"]).read_corpus(tmp_path / "ws.jsonl", unit="word")


@pytest.fixture(scope="module")
def chn_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("chn")
    _train("tener_chnsenticorp", out, ZH_SENTIMENT + ["data.max_train_sentences=64", "data.max_eval_sentences=16",
                                                      "train.epochs=1", "model.window=24", "model.head_dim=8"])
    return out


def test_character_classifier_windows_exports_and_serves(chn_model, tmp_path):
    classifier = zhner.load(chn_model)
    long_text = "这家酒店的服务很好，房间干净，早餐丰富。" * 6  # 120 characters: 5 windows of 24
    short = "房间太小了。"
    out = classifier.predict([long_text, short, ""])
    assert out[0]["label"] in ("0", "1") and out[2]["label"] is None
    ex = example_from_text(long_text, "char")
    batch = classifier.featurizer.collate([classifier.featurizer.encode(ex, labelled=False)])
    with torch.no_grad():
        parts = [classifier.model.window_logits({k: batch[k][:, s : s + 24] for k in ("chars", "bigrams", "mask")})
                 for s in range(0, 120, 24)]
    expected = (sum(parts) / 5).softmax(-1)[0].tolist()
    assert [out[0]["scores"][k] for k in classifier.task.labels] == pytest.approx(expected, abs=1e-5)
    pytest.importorskip("onnxruntime")
    from zhner.export import OnnxClassifier, export_onnx, same_predictions

    path = export_onnx(classifier, tmp_path / "c.onnx")
    assert same_predictions(OnnxClassifier.load(chn_model, path).predict([long_text, short, ""]), out)


def test_classify_endpoint_with_an_empty_text(sst2_model):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from zhner.serve.app import create_app

    with TestClient(create_app(zhner.load(sst2_model))) as client:
        body = client.post("/v1/classify", json={"text": ""}).json()
        assert body["label"] is None and body["scores"] == {"0": 0.5, "1": 0.5}


def test_the_shipped_model_is_written_under_the_contract_and_loads():
    """zhner/resources/default_model is written under the task contract (format-2 vocab.json with its fields and task;
    the models shipped before it were format 1, see the next section): it loads with its real weights and finds the
    entities of a plain sentence."""
    from zhner.tagger import default_model_dir

    shipped = default_model_dir()
    if shipped is None:
        pytest.skip("no shipped model in this checkout")
    vocab = json.loads((shipped / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["format"] == 2 and {"chars", "lexicon"} <= set(vocab["fields"])
    entities = Tagger.load(shipped).predict(["张三毕业于北京大学，现在上海工作。"])[0]
    assert {(e["text"], e["type"]) for e in entities} >= {("张三", "PER"), ("北京大学", "ORG"), ("上海", "LOC")}


# -- directories saved before the contract -----------------------------------------------------------------------------
def test_a_directory_saved_before_the_contract_loads_and_predicts_the_same(tmp_path):
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


def test_a_dev_file_in_another_scheme_is_scored_in_the_train_scheme():
    from zhner.data.corpus import Corpus
    from zhner.tasks import SpanTagging

    train_corpus = Corpus([Example(list("张三去北京"), ["B-PER", "E-PER", "O", "B-LOC", "E-LOC"])], "bmes", "train.bmes")
    dev_corpus = Corpus([Example(list("张三去北京"), ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"])], "bio", "dev.bio")
    task = SpanTagging.build({"train": train_corpus, "dev": dev_corpus, "test": train_corpus})
    assert task.scheme == "bmes"
    assert not any(tag.startswith("I-") for tag in task.labels)  # the dev's BIO tags are not in the model's tag set
    scorer = task.scorer()
    scorer.add_example(dev_corpus.sentences[0], ["B-PER", "E-PER", "O", "B-LOC", "E-LOC"], dev_corpus.scheme)
    assert scorer.result()["strict"]["f1"] == 100.0

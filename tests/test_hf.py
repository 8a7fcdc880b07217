"""zhner.integrations.hf: zhner's entities as transformers' token-classification records, called as transformers'
pipeline is called (aggregation_strategy none / simple / first / average / max, batch_size, one string or a list,
model.config.id2label), checked against what transformers' own pipeline gives for a tiny random
BertForTokenClassification."""
import numbers
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import BERT_VOCAB
from zhner.errors import ZhnerError
from zhner.integrations.hf import HF_KEYS, STRATEGIES, TOKEN_KEYS, pipeline, to_hf
from zhner.tagger import default_model_dir

TEXTS = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。", ""]


@pytest.fixture(scope="module")
def transformers_ner():
    """transformers' own pipeline over a tiny random BERT tagger with the real Chinese vocabulary."""
    transformers = pytest.importorskip("transformers")
    import torch

    tokenizer = transformers.BertTokenizer(vocab=str(BERT_VOCAB / "vocab.txt"))
    labels = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        id2label=dict(enumerate(labels)), label2id={t: i for i, t in enumerate(labels)},
    )
    torch.manual_seed(0)
    model = transformers.BertForTokenClassification(config).eval()
    return transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu")


@pytest.fixture(scope="module")
def transformers_records(transformers_ner):
    return transformers_ner(TEXTS[0], aggregation_strategy="simple"), transformers_ner(TEXTS, aggregation_strategy="simple")


@pytest.fixture(scope="module")
def ours():
    if default_model_dir() is None:
        pytest.skip("no shipped model")
    return pipeline()


def test_records_have_the_keys_and_types_of_transformers(transformers_records, ours):
    single, batch = transformers_records
    mine = ours(TEXTS[0])
    assert single and mine  # both found something, so the comparison is over real records
    theirs_shape = [(tuple(r), type(r["entity_group"]), type(r["word"]), type(r["start"]), type(r["end"])) for r in single]
    assert {shape for shape in theirs_shape} == {(HF_KEYS, str, str, int, int)}
    assert {(tuple(r), type(r["entity_group"]), type(r["word"]), type(r["start"]), type(r["end"])) for r in mine} == set(
        theirs_shape)
    assert all(isinstance(r["score"], np.floating) for r in single)  # numpy's float32 ...
    assert all(type(r["score"]) is float and isinstance(r["score"], numbers.Real) and 0 <= r["score"] <= 1 for r in mine)
    # a list of texts gives a list of lists in both, empty text included
    mine_batch = ours(TEXTS)
    assert [type(x) for x in mine_batch] == [type(x) for x in batch] == [list] * len(TEXTS)
    assert mine_batch[0] == mine and mine_batch[2] == []


def test_records_are_the_taggers_entities(ours):
    entities = ours.tagger.predict(TEXTS, confidence=True)
    records = ours(TEXTS)
    assert [[(r["entity_group"], r["start"], r["end"], r["word"], r["score"]) for r in row] for row in records] == [
        [(e["type"], e["start"], e["end"], e["text"], e["score"]) for e in row] for row in entities]
    assert all(r["word"] == text[r["start"]:r["end"]] for text, row in zip(TEXTS, records) for r in row)


@dataclass
class Entity:  # a typed record with attributes, as predict may return them
    type: str
    start: int
    end: int
    text: str
    score: float | None = None


def test_typed_records_and_missing_scores():
    assert to_hf([Entity("PER", 0, 2, "张三", 0.5)]) == [
        {"entity_group": "PER", "score": 0.5, "word": "张三", "start": 0, "end": 2}]
    with pytest.raises(ZhnerError, match="confidence=True"):
        to_hf([Entity("PER", 0, 2, "张三")])
    with pytest.raises(ZhnerError, match="confidence=True"):
        to_hf([{"type": "PER", "start": 0, "end": 2, "text": "张三"}])


def _shape(records):
    """Each record's keys in order and the Python types of its values (scores apart: numpy's float32 in transformers)."""
    return {tuple((k, type(v)) for k, v in r.items() if k != "score") for r in records}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_aggregation_strategy_gives_transformers_records(transformers_ner, ours, strategy):
    """The call a transformers user types, `ner(texts, aggregation_strategy=..., batch_size=...)`, with the records of
    that strategy: the same keys, order and types; "none" numbers tokens as transformers does ([CLS] is 0)."""
    theirs = transformers_ner(TEXTS[0], aggregation_strategy=strategy)
    mine = ours(TEXTS[0], aggregation_strategy=strategy)
    assert theirs and mine and _shape(mine) == _shape(theirs)
    assert list(mine[0]) == list(theirs[0]) == list(TOKEN_KEYS if strategy == "none" else HF_KEYS)
    assert all(type(r["score"]) is float for r in mine)
    if strategy == "none":
        assert all(r["index"] == r["start"] + 1 and r["end"] == r["start"] + 1 for r in theirs + mine)  # one per character
        assert all(r["word"] == TEXTS[0][r["start"]:r["end"]] for r in mine)
    batch = ours(TEXTS, aggregation_strategy=strategy, batch_size=2)
    assert batch[0] == mine and batch[2] == [] and len(batch) == len(TEXTS)
    assert [type(x) for x in transformers_ner(TEXTS, aggregation_strategy=strategy, batch_size=2)] == [list] * len(TEXTS)


def test_token_records_are_the_entities_characters(ours):
    """"none": each character of each entity with its tag in the model's scheme and its entity's score; the grouping
    strategies all give the entities (a character tagger has no word pieces to aggregate)."""
    from zhner.data.schemes import spans_to_tags

    entities = ours.tagger.predict(TEXTS[0], confidence=True)
    tokens = ours(TEXTS[0], aggregation_strategy="none")
    expected = []
    for e in entities:
        tags = spans_to_tags(e.end - e.start, [(0, e.end - e.start, e.type)], ours.tagger.featurizer.scheme)
        expected += [(tag, e.score, i, TEXTS[0][i]) for i, tag in zip(range(e.start, e.end), tags)]
    assert [(r["entity"], r["score"], r["start"], r["word"]) for r in tokens] == expected
    grouped = {strategy: ours(TEXTS, aggregation_strategy=strategy) for strategy in ("simple", "first", "average", "max")}
    assert all(records == grouped["simple"] for records in grouped.values())


def test_model_config_and_construction_options(transformers_ner, ours):
    tags = ours.tagger.featurizer.tags
    assert ours.model.config.id2label == dict(enumerate(tags)) and ours.model.config.label2id == {t: i for i, t in enumerate(tags)}
    assert type(next(iter(ours.model.config.id2label))) is type(next(iter(transformers_ner.model.config.id2label))) is int
    assert ours.model.config.num_labels == len(tags) and ours.model.labels == ["LOC", "ORG", "PER"]  # the tagger's own
    assert str(ours.device) == str(transformers_ner.device) == "cpu"
    tokens = pipeline(ours.tagger, aggregation_strategy="NONE", batch_size=4)
    assert tokens(TEXTS[0]) == ours(TEXTS[0], aggregation_strategy="none")
    assert tokens(iter(TEXTS[:2])) == ours(TEXTS[:2], aggregation_strategy="none")  # any iterable of texts
    without_per = ours(TEXTS[0], ignore_labels=["O", "PER"])
    assert without_per == [r for r in ours(TEXTS[0]) if r["entity_group"] != "PER"] and len(without_per) < len(ours(TEXTS[0]))


def test_wrong_calls_say_what_is_expected(ours):
    with pytest.raises(ValueError, match="aggregation_strategy must be one of none, simple, first, average, max"):
        ours(TEXTS[0], aggregation_strategy="mean")
    with pytest.raises(TypeError, match="stride: not taken"):
        ours(TEXTS[0], stride=16)
    with pytest.raises(TypeError, match="inputs must be a string or a list of strings, not NoneType"):
        ours(None)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        ours(TEXTS, batch_size=0)

"""zhner.integrations.hf: zhner's entities as transformers' token-classification records (aggregation_strategy=
"simple"), checked against the records transformers' own pipeline gives for a tiny random BertForTokenClassification."""
import numbers
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import BERT_VOCAB
from zhner.errors import ZhnerError
from zhner.integrations.hf import HF_KEYS, pipeline, to_hf
from zhner.tagger import default_model_dir

TEXTS = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。", ""]


@pytest.fixture(scope="module")
def transformers_records():
    """What transformers' pipeline returns: a tiny random BERT tagger with the real Chinese vocabulary."""
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
    ner = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple",
                                device="cpu")
    return ner(TEXTS[0]), ner(TEXTS)


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

"""Entity types and offsets of JSONL corpora are validated where they are read (issue 33): a type a CoNLL / BMES file
cannot carry, or a boolean offset, is an error naming the file, the line and the field."""
from __future__ import annotations

import json

import pytest

from zhner.data.corpus import read_corpus, write_conll
from zhner.errors import ZhnerError


def jsonl(tmp_path, *records) -> str:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return str(path)


GOOD = {"text": "张三在北京", "entities": [{"start": 0, "end": 2, "type": "PER"}]}


@pytest.mark.parametrize(
    "entity,field,message",
    [
        ({"start": 3, "end": 5, "type": "GPE X"}, "entities[1].type", "U+0020"),
        ({"start": 3, "end": 5, "type": "LOC\t"}, "entities[1].type", "U+0009"),
        ({"start": 3, "end": 5, "type": "LOC\u3000"}, "entities[1].type", "U+3000"),
        ({"start": 3, "end": 5, "type": "LOC\u200b"}, "entities[1].type", "U+200B"),
        ({"start": 3, "end": 5, "type": "LOC\x00"}, "entities[1].type", "U+0000"),
        ({"start": 3, "end": 5, "type": ""}, "entities[1].type", "is empty"),
        ({"start": 3, "end": 5, "type": 7}, "entities[1].type", "not a string"),
        ({"start": True, "end": 5, "type": "LOC"}, "entities[1].start", "True is not an integer"),
        ({"start": 3, "end": False, "type": "LOC"}, "entities[1].end", "False is not an integer"),
        ([True, 5, "LOC"], "entities[1].start", "True is not an integer"),
        ({"start": 3.0, "end": 5, "type": "LOC"}, "entities[1].start", "not an integer"),
    ],
)
def test_bad_entity_is_an_error_naming_file_line_and_field(tmp_path, entity, field, message):
    record = {"text": "李四去上海", "entities": [{"start": 0, "end": 2, "type": "PER"}, entity]}
    path = jsonl(tmp_path, GOOD, record)
    with pytest.raises(ZhnerError) as err:
        read_corpus(path)
    text = str(err.value)
    assert f"{path}:2" in text and field in text and message in text
    assert "\n" not in text


def test_a_type_a_tag_file_can_carry_round_trips_through_conll(tmp_path):
    record = {"text": "李四去上海", "entities": [{"start": 0, "end": 2, "type": "人名"}, [3, 5, "GPE-city_2"]]}
    corpus = read_corpus(jsonl(tmp_path, record))
    out = tmp_path / "out.bmes"
    write_conll(out, corpus.sentences)
    assert read_corpus(out).spans() == corpus.spans() == [[(0, 2, "人名"), (3, 5, "GPE-city_2")]]


def test_a_conll_tag_whose_type_holds_an_invisible_character_is_an_error(tmp_path):
    path = tmp_path / "x.bmes"
    path.write_text("张 B-PER\n三 E-PER\n\n北 B-LOC\u200b\n京 E-LOC\u200b\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match="x.bmes:4.*U\\+200B"):
        read_corpus(path)

"""`zhner evaluate` reads data in a model's entity types as its trainer did: a dataset of data.union (zh-small's Weibo and
Resume) with that entry's type map, and a corpus file in any of the model's source types through the map that covers
them; so the shipped models' per-corpus test F1 (metrics.json, the README) is one command."""
from __future__ import annotations

import json

import pytest

import zhner
from zhner.shipped import RESOURCES, SHIPPED, WEIGHTS

pytestmark = pytest.mark.skipif(not (RESOURCES / SHIPPED["zh-small"][0] / WEIGHTS).is_file(), reason="no shipped zh-small here")

# two sentences in each corpus's own types, and the same in zh-small's (nominal mentions, titles dropped as it trained)
SOURCE_TYPED = {
    "weibo": [[("张三", "PER.NAM"), "毕业于", ("北京大学", "ORG.NAM"), "，现在", ("上海", "GPE.NAM"), "工作。"],
              ["他的", ("老师", "PER.NOM"), "住在", ("西湖", "LOC.NAM"), "边。"]],
    "resume": [[("张三", "NAME"), "，", ("北京大学", "ORG"), ("教授", "TITLE"), "，", ("中国", "CONT"), "国籍。"],
               ["李四在", ("上海", "LOC"), "工作。"]],
}
MODEL_TYPES = {"PER.NAM": "PER", "ORG.NAM": "ORG", "GPE.NAM": "LOC", "LOC.NAM": "LOC", "NAME": "PER", "ORG": "ORG", "LOC": "LOC"}


def write_bio(path, sentences, types=None):
    """Sentences of plain strings and (text, type) pairs as a BIO file; `types` renames (or, missing, drops) a type."""
    lines = []
    for sentence in sentences:
        for part in sentence:
            text, label = part if isinstance(part, tuple) else (part, None)
            label = label if types is None or label is None else types.get(label)
            lines += [f"{c} {'O' if label is None else ('B-' if i == 0 else 'I-') + label}" for i, c in enumerate(text)]
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def evaluate_json(*args) -> dict:
    from zhner.cli import evaluate

    return evaluate(*args, batch_size=64, device="cpu", seen_in=None, as_json=True, onnx=None)


@pytest.mark.parametrize("corpus", SOURCE_TYPED)
def test_a_file_in_a_union_corpus_types_is_read_through_its_map(corpus, tmp_path, capsys):
    source = write_bio(tmp_path / f"{corpus}.bio", SOURCE_TYPED[corpus])
    mapped = write_bio(tmp_path / "mapped.bio", SOURCE_TYPED[corpus], MODEL_TYPES)
    evaluate_json("zh-small", str(source))
    from_source = json.loads(capsys.readouterr().out)
    evaluate_json("zh-small", str(mapped))
    assert from_source == json.loads(capsys.readouterr().out)
    assert from_source["strict"]["f1"] > 50 and set(from_source["per_type"]) <= {"PER", "LOC", "ORG"}


def test_a_union_dataset_scores_as_the_trainer_scored_it(shared_data, tmp_path, capsys):
    """Weibo's test split by name: its union entry's map (nominal types dropped), the F1 of metrics.json, and the
    score of the same split mapped by hand."""
    from zhner.data.corpus import map_types
    from zhner.data.registry import load_dataset

    tagger = zhner.load("zh-small")
    evaluate_json("zh-small", "weibo")
    by_name = json.loads(capsys.readouterr().out)
    weibo_map = next(part.type_map for part in tagger.config.data.union if part.dataset == "weibo")
    by_hand = tagger.evaluate(map_types(load_dataset("weibo")["test"], weibo_map), 64)
    assert by_name["strict"] == by_hand["strict"]
    assert by_name["strict"]["f1"] == tagger.metrics["test_per_corpus"]["weibo"]["f1_strict"] > 50

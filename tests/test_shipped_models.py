"""The two shipped models by name: zh-small (the default, fast) and zh-accurate (FLAT + LAC's frozen features): both
load by name from Python and the CLI, zh-accurate's files stay small and hold no LAC weights, and it tags the everyday
sentences the issue names that zh-small gets wrong (习近平, 阿里巴巴)."""
from __future__ import annotations

import json

import pytest

import zhner
from cli_runner import run_zhner
from conftest import REPO
from zhner.shipped import SHIPPED, shipped_dir

ACCURATE_LIMIT_BYTES = 40 * 2**20  # the issue's limit for the accurate model's own files


@pytest.fixture(scope="module")
def accurate():
    return zhner.load("zh-accurate")


def _spans(entities) -> list[tuple[str, str]]:
    return [(e.text, e.type) for e in entities]


def test_both_names_are_listed_and_the_default_stays_the_small_one():
    assert zhner.shipped_models() == ["zh-small", "zh-accurate"]
    assert zhner.load().directory == zhner.load("zh-small").directory == shipped_dir("zh-small")


def test_accurate_directory_is_small_and_reads_lac_from_jieba(accurate):
    directory = shipped_dir("zh-accurate")
    assert directory.name == SHIPPED["zh-accurate"][0]
    files = {p.name: p.stat().st_size for p in directory.iterdir()}
    assert set(files) == {"config.yaml", "vocab.json", "model.safetensors", "metrics.json", "lexicon.txt"}
    assert sum(files.values()) < ACCURATE_LIMIT_BYTES
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["fields"]["lac"]["kind"] == "lac" and len(vocab["fields"]["lac"]["weights_sha256"]) == 64
    assert accurate.config.model.char_features == "lac" and accurate.config.model.name == "flat"
    metrics = json.loads((directory / "metrics.json").read_text(encoding="utf-8"))
    assert set(metrics["test_per_corpus"]) == {"msra", "weibo", "resume"}


def test_accurate_tags_the_everyday_sentences_of_the_issue(accurate):
    small = zhner.load("zh-small")
    texts = ["习近平在北京会见了雷军。", "中国是一个历史悠久的国家。", "马云在杭州创办了阿里巴巴。"]
    expected = [
        [("习近平", "PER"), ("北京", "LOC"), ("雷军", "PER")],
        [("中国", "LOC")],
        [("马云", "PER"), ("杭州", "LOC"), ("阿里巴巴", "ORG")],
    ]
    assert [_spans(row) for row in accurate.predict(texts)] == expected
    assert [_spans(row) for row in small.predict(texts)] != expected  # what the small model misses (习近平, 阿里巴巴 as LOC)


def test_accurate_by_name_in_the_cli(accurate):
    text = "雷军是小米公司的创始人。"
    res = run_zhner("predict", "-m", "zh-accurate", "--text", text, cwd=REPO)
    assert res.returncode == 0, res.stderr
    record = json.loads(res.stdout)
    assert [(e["text"], e["type"]) for e in record["entities"]] == [(e.text, e.type) for e in accurate.predict(text)]
    info = run_zhner("info", "zh-accurate", "--json", cwd=REPO)
    assert info.returncode == 0 and json.loads(info.stdout)["model"] == "flat"

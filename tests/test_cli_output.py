"""What the CLI and the service print for a newcomer: `evaluate`'s table (the one `score` prints), the shipped model's
test scores under each corpus's name (`info`, `/health`), `data list` without words cut."""
from __future__ import annotations

import json

import pytest

from test_cli import zhner
from zhner.tagger import default_model_dir

GOLD = "张 B-PER\n三 E-PER\n在 O\n北 B-ORG\n京 M-ORG\n大 M-ORG\n学 E-ORG\n工 O\n作 O\n。 O\n\n李 B-PER\n四 E-PER\n去 O\n上 B-LOC\n海 E-LOC\n\n"
needs_shipped = pytest.mark.skipif(default_model_dir() is None, reason="no shipped model in this checkout")


@needs_shipped
def test_evaluate_prints_the_table_of_score_and_json_with_the_flag(tmp_path):
    gold, pred = tmp_path / "gold.bmes", tmp_path / "pred.bmes"
    gold.write_text(GOLD, encoding="utf-8")
    texts = "".join(line[0] if line else "\n" for line in GOLD.split("\n")[:-1]).strip("\n")
    predicted = zhner("predict", "--format", "conll", "-o", pred, "-", stdin=texts.replace("\n\n", "\n") + "\n")
    assert predicted.returncode == 0, predicted.stderr
    table = zhner("evaluate", default_model_dir(), gold)
    scored = zhner("score", gold, pred)
    assert table.returncode == scored.returncode == 0, table.stderr + scored.stderr
    assert table.stdout == scored.stdout and "precision" in table.stdout and "strict" in table.stdout
    as_json = json.loads(zhner("evaluate", default_model_dir(), gold, "--json").stdout)
    assert as_json == json.loads(zhner("score", gold, pred, "--json").stdout)


@needs_shipped
def test_info_names_each_corpus_with_its_own_test_score():
    metrics = json.loads((default_model_dir() / "metrics.json").read_text(encoding="utf-8"))
    expected = {name: s["f1_strict"] for name, s in metrics["test_per_corpus"].items()}
    info = json.loads(zhner("info", default_model_dir(), "--json").stdout)
    assert info["test_per_corpus"] == expected and info["dataset"] == "msra + weibo + resume"
    table = zhner("info", default_model_dir()).stdout.splitlines()
    assert "test by corpus     " + "  ".join(f"{name} {f1}" for name, f1 in expected.items()) in table
    union = metrics["test"]["strict"]["f1"]  # the union of the three test sets: no corpus's own score
    assert any(line.startswith(f"test (all corpora) f1_strict {union} ") for line in table)


@needs_shipped
def test_health_reports_the_test_score_of_each_corpus():
    from fastapi.testclient import TestClient

    import zhner as api
    from zhner.serve.app import create_app

    with TestClient(create_app(api.load())) as client:
        health = client.get("/health").json()
    metrics = json.loads((default_model_dir() / "metrics.json").read_text(encoding="utf-8"))
    assert health["dataset"] == "msra + weibo + resume"
    assert health["test_scores"] == {name: s["f1_strict"] for name, s in metrics["test_per_corpus"].items()}
    assert set(health["test_scores"]) == {"msra", "weibo", "resume"}


def test_data_list_wraps_descriptions_at_word_ends():
    from zhner.data.catalogue import DATASETS

    res = zhner("data", "list")
    assert res.returncode == 0, res.stderr
    words = res.stdout.split()
    for info in DATASETS.values():  # every word of every description is printed whole, its corpus here or not
        for word in info.description.split():
            assert word in words, word

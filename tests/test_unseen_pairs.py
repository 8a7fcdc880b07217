"""benchmarks/accuracy/unseen_pairs.py: pairing an arm's runs by seed with the "none" arm's figures recorded in an
earlier results file (--none-from), so that the none arm need not be trained again; pooling a pair's seeds with those
an earlier results file recorded (--merge)."""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def unseen_pairs(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("unseen_pairs", REPO / "benchmarks" / "accuracy" / "unseen_pairs.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def scores(f1: float) -> dict:
    """A trainer's metrics split (NERScorer.result's shape, the fields headline() reads)."""
    return {"strict": {"p": f1, "r": f1, "f1": f1}, "lenient": {"f1": f1}, "span_f": f1, "type_acc": 99.0}


def test_an_arm_is_paired_with_the_recorded_none_arm(unseen_pairs, tmp_path):
    recorded = tmp_path / "earlier.json"
    none = {"42": {"test.f1_strict": 50.0, "test_unseen.f1": 30.0, "test_seen.f1": 80.0, "dev.f1_strict": 60.0},
            "43": {"test.f1_strict": 52.0, "test_unseen.f1": 31.0, "test_seen.f1": 82.0, "dev.f1_strict": 61.0}}
    recorded.write_text(json.dumps({"rows": [{"model": "nflat", "dataset": "weibo", "per_seed_none": none}]}), encoding="utf-8")
    args = argparse.Namespace(models=["nflat"], corpora=["weibo"], arms=["both"], seeds=[42, 43], recipe="fast", set=[],
                              root=tmp_path / "runs", word_types="both", replacement=0.3, replacement_source="train",
                              none_from=recorded, merge=[])
    runs = unseen_pairs.plan(args)
    for run, gain in zip(runs, (1.0, 3.0)):  # the arm's runs: test +1 / +3 over none, unseen +2 / +6
        run["dir"].mkdir(parents=True)
        seed = str(run["seed"])
        metrics = {"status": "completed", "test": scores(none[seed]["test.f1_strict"] + gain),
                   "dev": scores(none[seed]["dev.f1_strict"])}
        (run["dir"] / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
        split = {"seen": {"f1": none[seed]["test_seen.f1"]}, "unseen": {"f1": none[seed]["test_unseen.f1"] + 2 * gain}}
        (run["dir"] / "seen_unseen.json").write_text(json.dumps(split), encoding="utf-8")
    (row,) = unseen_pairs.pairs(runs, args)
    assert row["per_seed_none"] == none and row["comparison"]["paired_seeds"] == [42, 43]
    paired = row["comparison"]["metrics"]
    assert paired["test.f1_strict"]["paired"]["mean_diff"] == pytest.approx(2.0)
    assert paired["test_unseen.f1"]["paired"]["mean_diff"] == pytest.approx(4.0)
    assert paired["test_seen.f1"]["paired"]["mean_diff"] == pytest.approx(0.0)
    # without --none-from and without a trained none arm there is nothing to pair with
    args.none_from = None
    assert unseen_pairs.pairs(runs, args) == []


def test_seeds_recorded_earlier_are_pooled_with_this_runs(unseen_pairs, tmp_path):
    figures = lambda test, unseen: {"test.f1_strict": test, "test_unseen.f1": unseen, "test_seen.f1": 90.0,  # noqa: E731
                                    "dev.f1_strict": 60.0}
    earlier = tmp_path / "earlier.json"  # seeds 42-43 of the both-against-none pair: unseen +1 and +3
    earlier.write_text(json.dumps({"rows": [
        {"model": "flat", "dataset": "resume", "a": "replacement", "per_seed": {}, "per_seed_none": {}},
        {"model": "flat", "dataset": "resume", "a": "both", "per_seed": {"42": figures(51.0, 31.0), "43": figures(52.0, 33.0)},
         "per_seed_none": {"42": figures(50.0, 30.0), "43": figures(50.0, 30.0)}},
    ]}), encoding="utf-8")
    args = argparse.Namespace(models=["flat"], corpora=["resume"], arms=["none", "both"], seeds=[44], recipe="fast", set=[],
                              root=tmp_path / "runs", word_types="both", replacement=0.3, replacement_source="train",
                              none_from=None, merge=[earlier])
    for run in unseen_pairs.plan(args):  # seed 44, trained now: both +2 on unseen over none
        run["dir"].mkdir(parents=True)
        unseen = 32.0 if run["arm"] == "both" else 30.0
        metrics = {"status": "completed", "test": scores(50.0), "dev": scores(60.0)}
        (run["dir"] / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
        (run["dir"] / "seen_unseen.json").write_text(json.dumps({"seen": {"f1": 90.0}, "unseen": {"f1": unseen}}),
                                                     encoding="utf-8")
    (row,) = unseen_pairs.pairs(unseen_pairs.plan(args), args)
    assert row["comparison"]["paired_seeds"] == [42, 43, 44] and sorted(row["per_seed_none"]) == ["42", "43", "44"]
    assert row["comparison"]["metrics"]["test_unseen.f1"]["paired"]["mean_diff"] == pytest.approx(2.0)
    assert row["per_seed"]["44"]["test_unseen.f1"] == 32.0 and "earlier.json" in row["command"]
    args.merge = [tmp_path / "missing.json"]
    with pytest.raises(SystemExit, match="missing.json: not a results file of this script"):
        unseen_pairs.pairs(unseen_pairs.plan(args), args)

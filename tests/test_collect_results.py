"""benchmarks/accuracy/collect_results.py: seeds aggregated with mean and std, recorded seeds merged, ablation files."""
import importlib.util
import json
import sys

import pytest

from conftest import REPO


@pytest.fixture()
def collect(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("collect_results", REPO / "benchmarks" / "accuracy" / "collect_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    return module


def scores(f1):
    strict = {"p": f1, "r": f1, "f1": f1}
    return {"strict": strict, "lenient": strict, "span_f": f1 + 1, "type_acc": 99.0}


def fake_run(root, seed, test_f1, dev_f1):
    run = root / f"s{seed}"
    run.mkdir()
    metrics = {"model": "flat", "dataset": "resume", "seed": seed, "status": "completed", "best_epoch": 3, "epochs_run": 4,
               "dev_label": "dev", "dev": scores(dev_f1), "test": scores(test_f1), "train_seconds": 10.0}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "log.jsonl").write_text("".join(json.dumps({"epoch": e, "train_sentences_per_s": 100.0 + e}) + "\n" for e in (1, 2, 3, 4)))
    return run


def main(collect, monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["collect_results.py", *map(str, args)])
    collect.main()


def test_seeds_then_merge(collect, tmp_path, monkeypatch):
    a, b = fake_run(tmp_path, 43, 90.0, 91.0), fake_run(tmp_path, 44, 92.0, 93.0)
    main(collect, monkeypatch, a, b, "--command", "cmd2")
    out = json.loads((tmp_path / "results" / "flat_resume.json").read_text())
    assert out["seeds"] == [43, 44] and out["test"]["f1_strict"] == 91.0 and out["test_std"]["f1_strict"] == 1.41
    assert out["dev"]["f1_strict"] == 92.0 and out["train_sentences_per_s"] == 102.5
    # a file holding one older seed: merged in front, commands kept
    old = tmp_path / "old.json"
    one = fake_run(tmp_path, 42, 94.0, 95.0)
    main(collect, monkeypatch, one, "--command", "cmd1")
    (tmp_path / "results" / "flat_resume.json").rename(old)
    main(collect, monkeypatch, a, b, "--command", "cmd2", "--merge", old)
    out = json.loads((tmp_path / "results" / "flat_resume.json").read_text())
    assert out["seeds"] == [42, 43, 44] and out["test"]["f1_strict"] == 92.0 and out["dev"]["f1_strict"] == 93.0
    assert out["command"] == ["cmd1", "cmd2"]
    with pytest.raises(SystemExit):  # the same seed twice
        main(collect, monkeypatch, one, "--command", "x", "--merge", old)


def test_ablation_file_and_table(collect, tmp_path, monkeypatch, capsys):
    a, b = fake_run(tmp_path, 42, 90.0, 91.0), fake_run(tmp_path, 43, 80.0, 81.0)
    main(collect, monkeypatch, f"default={a}", f"msm={b}", "--ablation", "flat_resume", "--command", "cmd")
    path = tmp_path / "results" / "ablation_flat_resume.json"
    rows = json.loads(path.read_text())["rows"]
    assert [r["variant"] for r in rows] == ["default", "msm"] and rows[1]["test"]["f1_strict"] == 80.0
    capsys.readouterr()
    main(collect, monkeypatch, "--ablation-table", path)
    table = capsys.readouterr().out.splitlines()
    assert table[2].startswith("| default | **90.0** |") and table[3].startswith("| msm | **80.0** |")


def test_a_variant_gets_its_own_file_and_row(collect, tmp_path, monkeypatch, capsys):
    main(collect, monkeypatch, fake_run(tmp_path, 42, 90.0, 91.0), "--command", "plain")
    main(collect, monkeypatch, fake_run(tmp_path, 43, 80.0, 81.0), "--command", "ablated", "--variant", "no_ssa")
    plain = json.loads((tmp_path / "results" / "flat_resume.json").read_text())
    ablated = json.loads((tmp_path / "results" / "flat_resume_no_ssa.json").read_text())
    assert plain["test"]["f1_strict"] == 90.0 and "variant" not in plain
    assert ablated["test"]["f1_strict"] == 80.0 and ablated["variant"] == "no_ssa" and ablated["command"] == "ablated"
    capsys.readouterr()
    main(collect, monkeypatch, "--table")
    tagging = capsys.readouterr().out.split("\n\n")[0].splitlines()  # then the classifiers' table (empty here)
    assert [row.split(" | ")[0] for row in tagging[2:]] == ["| flat", "| flat (no_ssa)"]

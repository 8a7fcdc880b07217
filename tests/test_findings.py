"""benchmarks/accuracy/findings.py and acts_sparsity.py: run sets and earlier findings rows paired on their common seeds."""
import importlib.util
import json
import sys

import pytest
from scipy import stats

from conftest import REPO


def load(name, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks" / "accuracy"))  # acts_sparsity imports findings as a sibling script
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "accuracy" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def results(tmp_path, monkeypatch):
    out = tmp_path / "results"
    out.mkdir()
    findings = load("findings", monkeypatch)
    monkeypatch.setattr(findings, "RESULTS", out)
    monkeypatch.setitem(sys.modules, "findings", findings)  # the module acts_sparsity imports, reading `out`
    return out


def scores(f1):
    strict = {"p": f1, "r": f1, "f1": f1}
    return {"strict": strict, "lenient": strict, "span_f": f1, "type_acc": 90.0}


def run_set(root, name, f1_by_seed):
    for seed, f1 in f1_by_seed.items():
        run = root / name / f"seed{seed}"
        run.mkdir(parents=True)
        metrics = {"seed": seed, "status": "completed", "best_epoch": 2, "epochs_run": 3, "dev": scores(f1 + 1),
                   "test": scores(f1)}
        (run / "metrics.json").write_text(json.dumps(metrics))
    return root / name


def run_main(module, monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["script", *map(str, args)])
    module.main()


def test_an_earlier_row_serves_as_the_baseline(results, tmp_path, monkeypatch):
    findings = sys.modules["findings"]
    base = run_set(tmp_path, "base", {42: 50.0, 43: 52.0, 44: 51.0})
    run_main(findings, monkeypatch, "first", "--base", f"A={base}")
    variant = run_set(tmp_path, "variant", {42: 53.0, 43: 52.5, 44: 54.0, 45: 60.0})  # 45 has no partner
    run_main(findings, monkeypatch, "second", "--base", "A=findings_first.json#0", f"B={variant}")
    rows = json.loads((results / "findings_second.json").read_text())["rows"]
    assert rows[0]["run_set"] == "findings_first.json#0" and rows[0]["f1_strict"]["mean"] == 51.0
    assert rows[0]["dev_f1_strict"] == 52.0  # the recorded dev mean carried over
    want = stats.ttest_rel([53.0, 52.5, 54.0], [50.0, 52.0, 51.0])
    assert rows[1]["vs_base"] == {"paired_seeds": [42, 43, 44], "mean_diff": 2.17, "p": round(want.pvalue, 4)}
    with pytest.raises(SystemExit, match="no such findings row"):
        run_main(findings, monkeypatch, "third", "--base", "A=findings_first.json#5")
    # an earlier one-seed row joined with a run set of the other seeds is one variant of three seeds
    run_main(findings, monkeypatch, "one", "--base", f"A={base}", f"B={run_set(tmp_path, 'b42', {42: 53.0})}")
    later = run_set(tmp_path, "later", {43: 52.5, 44: 54.0})
    run_main(findings, monkeypatch, "joined", "--base", "A=findings_first.json#0", f"B=findings_one.json#1+{later}")
    joined = json.loads((results / "findings_joined.json").read_text())["rows"][1]
    assert joined["seeds"] == [42, 43, 44] and joined["vs_base"] == rows[1]["vs_base"]
    with pytest.raises(SystemExit, match="seed 42 is in two"):
        run_main(findings, monkeypatch, "twice", "--base", f"A={base}", f"B=findings_one.json#1+{variant}")


def test_sparsity_points_are_sorted_and_paired_with_the_base_k(results, tmp_path, monkeypatch):
    sparsity = load("acts_sparsity", monkeypatch)
    k8 = run_set(tmp_path, "k8", {42: 54.0, 43: 55.0})
    k1 = run_set(tmp_path, "k1", {42: 52.0, 43: 54.0})
    every = run_set(tmp_path, "all", {42: 55.0})
    out = tmp_path / "curve.json"
    run_main(sparsity, monkeypatch, f"all={every}", f"8={k8}", f"1={k1}", "--base", "8", "--json", out)
    points = json.loads(out.read_text())["points"]
    assert [p["k"] for p in points] == ["1", "8", "all"]
    assert points[0]["vs_base"]["mean_diff"] == -1.5 and "vs_base" not in points[1]
    assert points[2]["vs_base"] == {"paired_seeds": [42], "mean_diff": 1.0, "p": None}  # one pair: no test
    with pytest.raises(SystemExit, match="not one of the points"):
        run_main(sparsity, monkeypatch, f"8={k8}", "--base", "4", "--json", out)

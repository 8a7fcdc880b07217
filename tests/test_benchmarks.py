"""benchmarks/: its scripts grouped by what they measure, the harness they share (what a run records beside its figures),
and the index of benchmarks/results/ (benchmarks/index.py), which must list every results file and nothing else."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def _module(path: Path, monkeypatch):
    """A script of benchmarks/ imported (not run), with its folder on sys.path as when it runs."""
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location(f"bench_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def index(monkeypatch):
    return _module(BENCHMARKS / "index.py", monkeypatch)


@pytest.fixture
def harness(monkeypatch):
    return _module(BENCHMARKS / "harness.py", monkeypatch)


def test_scripts_are_grouped_by_what_they_measure(index, monkeypatch):
    """No loose script: beside the harness and the index, every script is in a group's folder, and each imports (its
    paths and its imports of the harness and of siblings hold after a move)."""
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == ["harness.py", "index.py"]
    folders = {p.name for p in BENCHMARKS.iterdir() if p.is_dir() and p.name not in ("results", "__pycache__")}
    assert folders == set(index.GROUPS)
    scripts = sorted(BENCHMARKS.glob("*/*.py"))
    assert len(scripts) > 30
    for script in scripts:
        module = _module(script, monkeypatch)
        assert (module.__doc__ or "").strip(), f"{script.relative_to(REPO)} says nothing of what it measures"


def test_the_results_index_is_up_to_date(index):
    """benchmarks/results/INDEX.md lists every results file and no other: after adding one, run
    `python benchmarks/index.py`."""
    assert index.check() == []


def test_the_index_check_fails_on_a_file_added_removed_or_renamed(index, tmp_path):
    results, made = tmp_path / "results", index.RESULTS
    results.mkdir()
    for name in ("peers.json", "long_line.json", "long_line_before.json", "findings_flat_resume_resources.json",
                 "findings_flat_resume_fast_resources.json", "length_sweep.json", "length_sweep.png"):
        shutil.copy(made / name, results / name)
    (results / "INDEX.md").write_text(index.markdown(index.entries(results)), encoding="utf-8")
    assert index.check(results, results / "INDEX.md") == []

    shutil.copy(made / "startup.json", results / "startup_cold.json")  # a file added
    assert index.check(results, results / "INDEX.md") == ["not in INDEX.md: startup_cold.json"]
    (results / "startup_cold.json").unlink()
    (results / "peers.json").unlink()  # a file removed
    assert index.check(results, results / "INDEX.md") == ["in INDEX.md but not in the folder: peers.json"]
    (results / "INDEX.md").write_text(index.markdown(index.entries(results)).replace("current", "kept"), encoding="utf-8")
    assert index.check(results, results / "INDEX.md") == ["INDEX.md differs from what `python benchmarks/index.py` writes"]
    (results / "findings_flat_resume_fast_resources.json").unlink()  # the file that superseded another
    with pytest.raises(ValueError, match="by findings_flat_resume_fast_resources, which is not in the results folder"):
        index.entries(results)


def test_the_index_names_each_files_maker_and_status(index, tmp_path):
    rows = {e.name: e for e in index.entries()}
    assert rows["length_sweep"].files == ["length_sweep.json", "length_sweep.md", "length_sweep.png"]
    assert (rows["length_sweep"].maker, rows["length_sweep"].group) == ("length_sweep", "resources")
    assert (rows["findings_flat_resume_switches"].maker, rows["flat_resume"].maker) == ("findings", "collect_results")
    assert rows["bench_flat_resume"].maker == "zhner bench" and rows["bench_flat_resume"].group == "speed"
    assert rows["atssa_topk_resume"].maker == "zhner sweep"  # its command: zhner sweep ... && python plot_sweep.py
    assert rows["load_test_workers"].maker == "load_test"  # from its "commands"
    assert rows["startup_before"].superseded_by == "startup" and rows["startup"].superseded_by is None
    for name, (by, why) in index.SUPERSEDED.items():
        assert rows[name].superseded_by == by and why and rows[by].superseded_by is None, name
    text = (index.RESULTS / "INDEX.md").read_text(encoding="utf-8")
    assert "| `peers.json` | `benchmarks/speed/peers.py` | current |" in text

    (tmp_path / "mystery.json").write_text('{"rows": []}', encoding="utf-8")  # nothing says what makes it
    with pytest.raises(ValueError, match="nothing says what makes it"):
        index.entries(tmp_path)


def test_a_run_records_its_command_commit_and_load(harness, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "speed" / "peers.py"), "--rounds", "1", "--out", "a b.json"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)  # the command names the script from the checkout, wherever it ran
    run = harness.Run()
    with harness.clocked() as clock:
        sum(range(100_000))
    assert clock.cpu_s > 0 and clock.wall_s > 0
    out = tmp_path / "out" / "r.json"
    harness.write(out, run.record({"sentences_per_s": 12.5}), echo=False)
    record = json.loads(out.read_text(encoding="utf-8"))
    assert list(record) == ["command", "sentences_per_s", "commit", "load", "date"]
    assert record["command"] == "OMP_NUM_THREADS=1 python benchmarks/speed/peers.py --rounds 1 --out 'a b.json'"
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    assert record["commit"].removesuffix("+dirty") == (head.strip() or "unknown")  # a copy without .git: unknown
    assert len(record["load"]["before"]) == len(record["load"]["after"]) == 3
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]  # written whole, no partial file left
    assert harness.commit(repo=tmp_path) == "unknown"  # not a git checkout
    noted = harness.Run(note="two trainings beside it").record({"rows": []})
    assert list(noted)[:3] == ["command", "rows", "note"] and noted["note"] == "two trainings beside it"


def test_repeated_times_each_call_after_the_warmup(harness):
    calls = []
    clocks, last = harness.repeated(lambda: calls.append(1) or len(calls), repeats=3, warmup=2)
    assert len(calls) == 5 and len(clocks) == 3 and last == 5

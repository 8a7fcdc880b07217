"""`mini`, the corpus the package carries: its files are what scripts/build_mini_corpus.py makes of corpus/mini.txt,
the catalogue's sha256 values match them, and `zhner demo` runs on it with no other corpus reachable."""
from __future__ import annotations

import importlib.util
import sys

import pytest
from typer.testing import CliRunner

from conftest import REPO
from zhner.data import registry
from zhner.data.catalogue import get_info
from zhner.data.registry import CARRIED_ROOT, check, load_dataset


def _build_script():
    spec = importlib.util.spec_from_file_location("build_mini_corpus", REPO / "scripts" / "build_mini_corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_carried_files_are_built_from_the_source():
    build = _build_script()
    for name, part in build.split(build.read_source()).items():
        assert (CARRIED_ROOT / "mini" / f"{name}.char.bmes").read_text(encoding="utf-8") == build.bmes_file(part), name


def test_the_catalogue_verifies_the_carried_files():
    rows = check("mini")
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert get_info("mini").carried


def test_the_entities_read_back_are_the_marked_ones():
    build = _build_script()
    marked = {text: sorted((s, e, t) for s, e, t in ents) for text, ents in build.read_source()}
    corpus = load_dataset("mini")
    assert sum(len(split) for split in corpus.values()) == len(marked)
    for split in corpus.values():
        assert split.types() == {"PER", "LOC", "ORG"}
        for sentence, spans in zip(split, split.spans()):
            assert sorted(spans) == marked[sentence.text]


def test_a_malformed_source_line_names_its_line(tmp_path):
    build = _build_script()
    source = tmp_path / "mini.txt"
    source.write_text("{张三|PER}在{北京|LOC}。\n{李四|PERSON}来了。\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{source}:2: unknown type 'PERSON'"):
        build.read_source(source)


@pytest.fixture
def no_corpus_reachable(tmp_path, monkeypatch):
    """A bare clone: no $ZHNER_DATA, no shared/data beside the checkout, an empty user cache."""
    monkeypatch.delenv("ZHNER_DATA", raising=False)
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_shared_roots", lambda: [tmp_path / "no-shared" / "data"])
    with pytest.raises(Exception, match="resume train file not found"):
        load_dataset("resume")


def test_the_demo_runs_with_no_corpus_reachable(tmp_path, no_corpus_reachable):
    from zhner.cli import app

    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "-o", str(out), "--minutes", "0.05"])  # one epoch, then the budget is spent
    assert result.exit_code == 0, result.output
    assert "Step 3 of 3" in result.output and (out / "model.safetensors").is_file()
    tagged = [line for line in result.output.splitlines() if line.startswith("  ") and "[" in line and ")" in line]
    first_sentence = result.output.split("Step 3 of 3")[1]
    assert "张晓明毕业于复旦大学" in first_sentence
    # the demo's model is scored on mini's own test split, which the catalogue found in the package
    assert "125 test sentences" in result.output
    assert all(line.split()[0] in {"PER", "LOC", "ORG"} for line in tagged)

"""Research tooling through the CLI on tiny ATSSA runs: `zhner sweep` (2 values x 2 seeds, resumable), `zhner train --seeds`
reading finished seeds back, `zhner compare`, `zhner attention`, and the sweep plot script."""
import json
import math
import subprocess
import sys

import pytest

from conftest import MINI, REPO
from test_cli import assert_clean_error, zhner
from zhner.data.registry import find_file
from zhner.evaluate.significance import paired_t_test

TINY = MINI + [
    "model.heads=2",
    "model.head_dim=8",
    "data.max_train_sentences=32",
    "data.max_eval_sentences=16",
    "train.epochs=1",
    "train.lr=0.01",
]


def sets(overrides):
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "topk"
    res = zhner("sweep", "atssa_resume", "-o", out, "--param", "model.topk=1,3", "--seeds", "2", *sets(TINY))
    assert res.returncode == 0, res.stderr
    return out, res


def test_sweep_writes_one_run_set_per_value(swept):
    out, res = swept
    summary = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert summary["param"] == "model.topk" and [r["value"] for r in summary["runs"]] == [1, 3]
    for run in summary["runs"]:
        assert [s["seed"] for s in run["summaries"]] == [42, 43]
        f1s = [s["test"]["f1_strict"] for s in run["summaries"]]
        assert math.isclose(run["test.f1_strict"]["mean"], sum(f1s) / 2)
        for seed in (42, 43):
            config = (out / run["dir"] / f"seed{seed}" / "config.yaml").read_text(encoding="utf-8")
            assert f"topk: {run['value']}" in config and f"seed: {seed}" in config
    assert "model.topk=1\ttest F1" in res.stdout and "model.topk=3\ttest F1" in res.stdout


def test_sweep_and_seeds_resume_instead_of_retraining(swept):
    out, _ = swept
    before = (out / "topk=3" / "seed42" / "model.safetensors").stat().st_mtime_ns
    res = zhner("sweep", "atssa_resume", "-o", out, "--param", "model.topk=1,3", "--seeds", "2", *sets(TINY))
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("finished run found") == 4 and "epoch 1/1" not in res.stderr
    # `train --seeds` with the same config reads the finished seeds back too
    res = zhner("train", "atssa_resume", "-o", out / "topk=3", "--seeds", "2", *sets(TINY + ["model.topk=3"]))
    assert res.returncode == 0, res.stderr
    assert [s["seed"] for s in json.loads(res.stdout)] == [42, 43]
    assert (out / "topk=3" / "seed42" / "model.safetensors").stat().st_mtime_ns == before
    # another time budget is the same run: it is read back, not refused
    res = zhner("train", "atssa_resume", "-o", out / "topk=3", "--seeds", "2", *sets(TINY + ["model.topk=3", "train.max_minutes=60"]))
    assert res.returncode == 0 and res.stderr.count("finished run found") == 2, res.stderr
    # a different config on a finished run is refused, not silently mixed in
    res = zhner("train", "atssa_resume", "-o", out / "topk=3", "--seeds", "2", *sets(TINY + ["model.topk=4"]))
    assert_clean_error(res, "seed42", "different config")


def test_seeds_rerun_over_a_damaged_run_is_an_error_and_keeps_seeds_json(swept, tmp_path):
    import shutil

    out = tmp_path / "set"
    shutil.copytree(swept[0] / "topk=3", out)
    before = json.loads((out / "seeds.json").read_text(encoding="utf-8"))
    args = ("train", "atssa_resume", "-o", out, "--seeds", "2", *sets(TINY + ["model.topk=3"]))
    metrics = out / "seed43" / "metrics.json"
    for damage in ("{bad", "[1, 2]", '{"status": "completed"}'):  # tracebacks before
        metrics.write_text(damage, encoding="utf-8")
        assert_clean_error(zhner(*args), str(metrics))
        # seed 42 was read back and seeds.json rewritten: seed 43's summary is still there
        assert json.loads((out / "seeds.json").read_text(encoding="utf-8")) == before
    (out / "seed43" / "config.yaml").write_text("5\n", encoding="utf-8")
    metrics.write_text(json.dumps(before[1] | {"status": "completed"}), encoding="utf-8")
    assert_clean_error(zhner(*args), str(out / "seed43" / "config.yaml"), "expected a mapping")
    # a set whose last seed would be over 2^32 - 1 is refused before any training
    assert_clean_error(zhner("train", "atssa_resume", "-o", tmp_path / "never", "--seeds", "2", "--set", "train.seed=4294967295"), "--seeds 2")
    assert not (tmp_path / "never").exists()


def test_cli_and_config_agree_on_the_largest_seed():
    from zhner import cli, config

    assert cli.MAX_SEED == config.MAX_SEED == 2**32 - 1


def test_a_swept_value_names_one_directory_inside_the_sweep():
    from pathlib import Path

    from zhner.train.runs import run_dir_name

    assert run_dir_name("model.topk", 3) == "topk=3"
    for value in ("../../../tmp/x", "/data/x/y", "a\\b", "x" * 300):  # a path value once escaped -o
        name = run_dir_name("data.dataset", value)
        assert len(Path(name).parts) == 1 and name not in ("..", ".") and len(name.encode()) <= 200, name
    assert run_dir_name("data.dataset", "x" * 300) != run_dir_name("data.dataset", "x" * 299)


def test_sweep_bad_param():
    from zhner.errors import ZhnerError
    from zhner.train.runs import parse_param

    assert parse_param("model.alpha=1, 50,100.5") == ("model.alpha", [1, 50, 100.5])
    with pytest.raises(ZhnerError, match="KEY=V1,V2"):
        parse_param("model.topk=")
    with pytest.raises(ZhnerError, match=r"^--param '\.heads=1': bad key"):  # named --set before
        parse_param(".heads=1")
    assert_clean_error(zhner("sweep", "atssa_resume", "-o", "never", "--param", "model.topk=1,-2"), "model.topk")


def test_compare_cli(swept):
    out, _ = swept
    res = zhner("compare", out / "topk=3", out / "topk=1", "--json")
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    assert result["paired_seeds"] == [42, 43]
    seeds = {v: json.loads((out / f"topk={v}" / "seeds.json").read_text()) for v in (1, 3)}
    a = [s["test"]["f1_strict"] for s in seeds[3]]
    b = [s["test"]["f1_strict"] for s in seeds[1]]
    assert result["metrics"]["test.f1_strict"]["paired"] == paired_t_test(a, b)
    table = zhner("compare", out / "topk=3", out / "topk=1")
    assert table.returncode == 0 and "test.f1_strict" in table.stdout and "p (paired t)" in table.stdout
    assert_clean_error(zhner("compare", out / "topk=3", out / "missing"), "no such run directory")


def test_compare_two_models_sentence_by_sentence(swept):
    """`compare A B --on DATA`: each model's F1 is what `evaluate` gives, with a randomization test between them."""
    out, _ = swept
    a, b = out / "topk=3" / "seed42", out / "topk=1" / "seed42"
    res = zhner("compare", a, b, "--on", "mini:dev", "--resamples", "200", "--json")
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    for model, key in ((a, "f1_a"), (b, "f1_b")):
        evaluated = json.loads(zhner("evaluate", model, "mini:dev", "--json").stdout)
        assert round(100 * result["strict"][key], 2) == evaluated["strict"]["f1"]
        assert round(100 * result["lenient"][key], 2) == evaluated["lenient"]["f1"]
    dev = find_file("mini", "dev").read_text(encoding="utf-8")
    assert result["strict"]["sentences"] == sum(1 for block in dev.split("\n\n") if block.strip())
    assert 0 < result["strict"]["p"] <= 1
    itself = json.loads(zhner("compare", a, a, "--on", "mini:dev", "--resamples", "50", "--json").stdout)
    assert itself["strict"]["diff"] == 0 and itself["strict"]["p"] == 1
    table = zhner("compare", a, b, "--on", "mini:dev", "--resamples", "50")
    assert table.returncode == 0 and "approximate randomization" in table.stdout
    assert_clean_error(zhner("compare", out / "topk=3", b, "--on", "mini:dev"), "run set")


def test_compare_refuses_models_that_read_the_data_in_different_types(swept, tmp_path):
    """A model whose data.type_map drops a type scores against other gold entities: no sentence test between the two."""
    import shutil

    import yaml

    out, _ = swept
    a = out / "topk=3" / "seed42"
    dropping = tmp_path / "dropping"
    shutil.copytree(a, dropping)
    config = yaml.safe_load((dropping / "config.yaml").read_text(encoding="utf-8"))
    tags = [line.split()[-1] for line in find_file("mini", "train").read_text(encoding="utf-8").splitlines() if line.strip()]
    types = sorted({t[2:] for t in tags if t != "O"})  # mini's: LOC, ORG, PER
    assert "PER" in types
    config["data"]["type_map"] = {t: (None if t == "PER" else t) for t in types}
    (dropping / "config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    assert zhner("evaluate", dropping, "mini:dev").returncode == 0  # the model itself still loads and scores
    res = zhner("compare", a, dropping, "--on", "mini:dev", "--resamples", "10")
    assert_clean_error(res, "mini:dev", "different entity types")


def test_attention_cli(swept, tmp_path):
    out, _ = swept
    text = "腾讯联想"
    res = zhner("attention", out / "topk=3" / "seed42", text, "-o", tmp_path / "att")
    assert res.returncode == 0, res.stderr
    pngs = sorted(p.name for p in (tmp_path / "att").glob("*.png"))
    assert pngs == ["layer1_head1.png", "layer1_head2.png"]
    for p in (tmp_path / "att").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    maps = json.loads((tmp_path / "att" / "attention.json").read_text(encoding="utf-8"))
    assert maps["chars"] == list(text)
    for head_w, head_z, head_kept in zip(maps["layers"][0]["weights"], maps["layers"][0]["z"], maps["layers"][0]["kept"]):
        for w, z, kept in zip(head_w, head_z, head_kept):
            assert math.isclose(sum(w), 1.0, rel_tol=1e-5) and kept == sum(z) >= 3  # the top-k floor at inference
            assert all(wj == 0.0 for wj, zj in zip(w, z) if not zj)  # unselected keys get no weight
    rows = (tmp_path / "att" / "keys_per_query.tsv").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "char\tlayer1_head1\tlayer1_head2" and [r.split("\t")[0] for r in rows[1:]] == list(text)
    if maps["cjk_font"] is None:  # no CJK font here: index ticks and a legend file
        assert (tmp_path / "att" / "tokens.txt").read_text(encoding="utf-8").splitlines()[1] == "1\t讯"
        assert "no CJK font" in res.stderr


def test_attention_needs_a_selective_model(swept):
    from zhner.errors import ZhnerError
    from zhner.evaluate.attention import selective_maps
    from zhner.tagger import Tagger

    out, _ = swept
    tagger = Tagger.load(out / "topk=3" / "seed42")
    with pytest.raises(ZhnerError, match="at most|1 to 256"):
        selective_maps(tagger, "")
    tagger.model.layers[0].attention.selector = None  # what an ATSSA -SSA (selective: false) model is
    with pytest.raises(ZhnerError, match="no selective attention"):
        selective_maps(tagger, "腾讯")
    assert_clean_error(zhner("attention", out / "missing", "腾讯"), "no such model directory")


def test_attention_refuses_an_unusable_output_or_text(swept, tmp_path):
    model = swept[0] / "topk=3" / "seed42"
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    for output in (tmp_path / "afile", tmp_path / "afile" / "sub"):  # FileExistsError / NotADirectoryError before
        assert_clean_error(zhner("attention", model, "腾讯", "-o", output), "afile", "not a directory")
    assert_clean_error(zhner("attention", model, b"\xed\xa0\x80", "-o", tmp_path / "att"), "TEXT", "UTF-8")
    assert not (tmp_path / "att").exists()  # refused before the folder was made


def test_plot_sweep_script(swept, tmp_path):
    out, _ = swept
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "accuracy" / "plot_sweep.py"), str(out / "sweep.json"), "-o", str(tmp_path / "s.png")],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    assert res.stdout.splitlines()[0].startswith("| model.topk | test F1 strict")
    assert len(res.stdout.splitlines()) == 4

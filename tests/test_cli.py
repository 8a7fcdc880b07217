"""The `zhner` command as a user runs it: exit codes, one-line errors, no tracebacks, JSON output."""
import json
import math
import subprocess
import sys

import pytest

from cli_runner import run_zhner
from conftest import REPO, TINY_TENER


def zhner(*args, stdin=None, cwd=REPO):
    """`zhner ARGS` in its own process (forked from a zygote with torch imported: tests/cli_runner.py)."""
    return run_zhner(*args, stdin=stdin, cwd=cwd)


def assert_clean_error(res, *fragments):
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ")
    for frag in fragments:
        assert frag in line, line


def test_score_cli(tmp_path):
    gold = tmp_path / "gold.bmes"
    pred = tmp_path / "pred.bmes"
    gold.write_text("张 B-PER\n三 E-PER\n在 O\n北 B-LOC\n京 E-LOC\n\n", encoding="utf-8")
    pred.write_text("张 B-PER\n三 E-PER\n在 O\n北 B-LOC\n京 M-LOC\n\n", encoding="utf-8")
    res = zhner("score", gold, pred, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["strict"] == {"p": 100.0, "r": 50.0, "f1": 66.67}
    assert out["lenient"]["p"] == 100.0 and out["lenient"]["r"] == 100.0
    assert set(out["per_type"]) == {"LOC", "PER"}
    table = zhner("score", gold, pred)
    assert table.returncode == 0 and "66.67" in table.stdout
    train = tmp_path / "train.bmes"
    train.write_text("张 B-PER\n三 E-PER\n\n", encoding="utf-8")
    res = zhner("score", gold, pred, "--json", "--seen-in", train)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)["seen"]
    assert seen["seen"] == {"p": 100.0, "r": 100.0, "f1": 100.0, "n_gold": 1, "n_pred": 1}
    assert seen["unseen"] == {"p": 0.0, "r": 0.0, "f1": 0.0, "n_gold": 1, "n_pred": 0}
    assert_clean_error(zhner("score", gold, pred, "--seen-in", tmp_path / "missing.bmes"), "missing.bmes")


def test_score_against_a_second_prediction(tmp_path):
    """`score GOLD PRED --against PRED_B`: both files' F1 and the sentence-level randomization test between them."""
    gold, pred, other = (tmp_path / f"{name}.bmes" for name in ("gold", "pred", "other"))
    gold.write_text("张 B-PER\n三 E-PER\n在 O\n北 B-LOC\n京 E-LOC\n\n李 S-PER\n\n", encoding="utf-8")
    pred.write_text("张 B-PER\n三 E-PER\n在 O\n北 B-LOC\n京 M-LOC\n\n李 S-PER\n\n", encoding="utf-8")
    other.write_text("张 O\n三 O\n在 O\n北 B-LOC\n京 E-LOC\n\n李 O\n\n", encoding="utf-8")
    res = zhner("score", gold, pred, "--against", other, "--json", "--resamples", "100")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    strict, lenient = out["strict"], out["lenient"]
    assert strict["sentences"] == 2 and strict["resamples"] == 100
    assert math.isclose(strict["f1_a"], 0.8) and math.isclose(strict["f1_b"], 0.5)  # 2tp/(pred+gold): 4/5, 2/4
    assert math.isclose(lenient["f1_a"], 1.0) and math.isclose(lenient["diff"], 0.5)
    assert 0 < strict["p"] <= 1
    table = zhner("score", gold, pred, "--against", other)
    assert table.returncode == 0 and "approximate randomization" in table.stdout and "+30.00" in table.stdout
    assert_clean_error(zhner("score", gold, pred, "--against", tmp_path / "missing.bmes"), "missing.bmes")
    short = tmp_path / "short.bmes"
    short.write_text("张 O\n三 O\n在 O\n北 O\n京 O\n\n", encoding="utf-8")
    assert_clean_error(zhner("score", gold, pred, "--against", short), "short.bmes", "sentence 2")
    assert_clean_error(zhner("score", gold, pred, "--against", other, "--seen-in", gold), "--seen-in")


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["train", "nope.yaml", "-o", "x"], ["nope.yaml", "no such config"]),
        (["train", "tener_resume", "-o", "x", "--set", "train.lr=abc"], ["train.lr"]),
        (["evaluate", "/nonexistent/model", "resume"], ["no such model directory"]),
        (["predict", "-m", "/nonexistent/model", "-"], ["no such model directory"]),
        (["data", "check", "nonexistent-set"], ["unknown dataset"]),
    ],
)
def test_user_errors_are_one_line(args, fragments):
    assert_clean_error(zhner(*args), *fragments)


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["trian"], ["No such command 'trian'"]),
        (["train"], ["zhner train", "Missing argument"]),
        (["train", "tener_resume", "-o", "x", "--bogus"], ["No such option: --bogus"]),
        (["predict", "--batch-size", "0", "-"], ["--batch-size"]),
        (["serve", "--port", "99999"], ["--port"]),
        (["data", "nope"], ["zhner data", "No such command"]),
    ],
)
def test_usage_errors_are_one_line(args, fragments):
    """typer/click usage errors: one line, exit 2 (typer 0.29 printed a rich traceback and exited 1)."""
    res = zhner(*args)
    assert_clean_error(res, *fragments)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_version():
    from zhner import __version__

    res = zhner("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"zhner {__version__}", res.stderr


@pytest.mark.parametrize("override", ["model.heads=-1", "model.heads=0", "model.dropout=1.5", "model.head_dim=0"])
def test_config_bounds_leave_nothing(tmp_path, override):
    out = tmp_path / "run"
    res = zhner("train", "tener_resume", "-o", out, "--set", override)
    assert_clean_error(res, override.split("=")[0])
    assert not out.exists()


def test_misuse_is_one_line(tmp_path):
    """Directories where files are expected and the reverse, unknown splits and schemes: one line, exit 2
    (IsADirectoryError, FileExistsError and KeyError tracebacks before)."""
    from zhner.tagger import default_model_dir

    folder, a_file = tmp_path / "folder", tmp_path / "file"
    folder.mkdir()
    a_file.write_text("x\n", encoding="utf-8")
    gold = tmp_path / "g.bmes"
    gold.write_text("张 B-PER\n三 E-PER\n\n", encoding="utf-8")
    assert_clean_error(zhner("train", folder, "-o", tmp_path / "run"), str(folder), "is a directory")
    assert_clean_error(zhner("train", "tener_resume", "-o", a_file), str(a_file), "not a directory")
    assert_clean_error(zhner("score", gold, gold, "--scheme", "foo"), "--scheme", "'foo'")
    model = default_model_dir()
    assert_clean_error(zhner("evaluate", model, "resume:foo"), "resume:foo", "unknown split 'foo'")
    assert_clean_error(zhner("predict", "-m", model, "-o", folder, "-", stdin="张三\n"), str(folder), "is a directory")
    assert not (tmp_path / "run").exists() and list(folder.iterdir()) == []


def test_predict_output_mode_and_sigterm(tmp_path):
    """predict -o: the output gets the umask's mode (0644 under umask 022, was 0600), and SIGTERM while it runs
    removes the hidden temporary file and exits 143."""
    import os
    import signal
    import time

    out = tmp_path / "out.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "predict", "-o", out, "-"], input="张三在北京。\n", capture_output=True,
        text=True, cwd=REPO, timeout=300, preexec_fn=lambda: os.umask(0o022),
    )
    assert res.returncode == 0, res.stderr
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)
    out.unlink()

    proc = subprocess.Popen(
        [sys.executable, "-m", "zhner.cli", "predict", "-o", out, "-"], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=REPO,
    )
    proc.stdin.write("张三在北京。\n")  # stdin stays open: predict waits for more lines with its temporary file open
    proc.stdin.flush()
    deadline = time.time() + 120
    while not list(tmp_path.glob(".out.jsonl.*.tmp")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert list(tmp_path.glob(".out.jsonl.*.tmp")), "predict never opened its output"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    assert "Traceback" not in proc.stderr.read()
    proc.stdin.close()
    assert list(tmp_path.iterdir()) == []


def test_predict_outputs_read_back_and_jsonl_input(tmp_path):
    """Whitespace in the text: predict's CoNLL output holds <U+XXXX> placeholders that score (the corpus reader) reads
    back (it rejected the lines before); JSONL input keeps ids and other fields; --text tags one string."""
    from zhner.data.corpus import read_corpus

    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": 7, "text": "张三在北京　大学\t工作 了", "source": "web"}, ensure_ascii=False) + "\n\n"
        + json.dumps({"id": "b", "text": ""}) + "\n",
        encoding="utf-8",
    )
    for fmt, name in (("conll", "out.conll"), ("jsonl", "out.jsonl")):
        res = zhner("predict", src, "--format", fmt, "-o", tmp_path / name)
        assert res.returncode == 0, res.stderr
        res = zhner("score", tmp_path / name, tmp_path / name, "--json")
        assert res.returncode == 0, res.stderr
        assert [s.text for s in read_corpus(tmp_path / name)] == ["张三在北京　大学\t工作 了"]
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["id"], r.get("source")) for r in records] == [(7, "web"), ("b", None)]
    assert list(records[0]) == ["id", "text", "source", "entities"]
    assert any(e["text"] == "张三" for e in records[0]["entities"])

    res = zhner("predict", "--text", "张三在北京大学工作")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["text"] == "张三在北京大学工作"
    assert_clean_error(zhner("predict", "--input-format", "jsonl", "-", stdin='{"text": 5}\n'), "<stdin>:1", '"text"')
    assert_clean_error(zhner("predict", src, "--text", "x"), "--text")
    # strings that cannot be written back as UTF-8: a JSON "\ud800" escape (in any field), bytes on the command line
    bad = '{"text": "ab"}\n{"text": "ab", "id": {"k\\udc00": 1}}\n'
    assert_clean_error(zhner("predict", "--input-format", "jsonl", "-o", tmp_path / "never.jsonl", "-", stdin=bad), "<stdin>:2", "U+DC00")
    assert not (tmp_path / "never.jsonl").exists()
    assert_clean_error(zhner("predict", "--text", b"\xff\xfe"), "--text", "UTF-8")


def test_info_device_and_label_warning(tmp_path):
    from zhner.tagger import default_model_dir

    model = default_model_dir()
    res = zhner("info", model, "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["model"] == "flat" and info["labels"] == ["LOC", "ORG", "PER"] and info["lexicon_words"] > 1000
    assert info["size_bytes"] > (model / "model.safetensors").stat().st_size and info["parameters"] > 0
    assert info["test"]["f1_strict"] > 0
    table = zhner("info", model)
    assert table.returncode == 0 and "labels" in table.stdout and "LOC, ORG, PER" in table.stdout
    assert_clean_error(zhner("info", tmp_path / "none"), "no such model directory")
    assert_clean_error(zhner("info", "a" * 300), "cannot read this model directory")  # a traceback before

    res = zhner("predict", "--device", "cpu", "--text", "张三")
    assert res.returncode == 0, res.stderr
    import torch

    if not torch.cuda.is_available():
        assert_clean_error(zhner("predict", "--device", "cuda", "--text", "张三"), "--device cuda", "no CUDA device")
        assert_clean_error(zhner("evaluate", model, "resume", "--device", "cuda"), "no CUDA device")
        assert_clean_error(zhner("train", "tener_resume", "-o", tmp_path / "r", "--device", "cuda"), "no CUDA device")
        assert not (tmp_path / "r").exists()
    assert_clean_error(zhner("predict", "--device", "tpu", "--text", "张三"), "--device must be one of")

    gold = tmp_path / "gold.bmes"
    gold.write_text("张 B-PERSON\n三 E-PERSON\n在 O\n北 B-LOC\n京 E-LOC\n\n", encoding="utf-8")
    res = zhner("evaluate", model, gold)
    assert res.returncode == 0, res.stderr
    warning = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert warning == [f"warning: {gold}: entity types PERSON are not among the model's labels (LOC, ORG, PER); "
                       "their entities all count as missed"]


def test_score_misaligned_and_binary(tmp_path):
    gold = tmp_path / "g.bmes"
    gold.write_text("a O\nb O\n\n", encoding="utf-8")
    pred = tmp_path / "p.bmes"
    pred.write_text("a O\n\n", encoding="utf-8")
    assert_clean_error(zhner("score", gold, pred), str(pred))
    binary = tmp_path / "b.bmes"
    binary.write_bytes(b"a O\n\xff\xfe O\n")
    assert_clean_error(zhner("score", gold, binary), f"{binary}:2", "UTF-8")


def test_data_list_and_check():
    """`data list` names the benchmark corpora whether or not they are here, and where the carried `mini` is; `data
    check` verifies mini's three files (the benchmark corpora's: test_data_check_a_benchmark_corpus)."""
    from zhner.data.registry import find_file

    res = zhner("data", "list")
    assert res.returncode == 0 and "resume" in res.stdout and "msra" in res.stdout
    assert str(find_file("mini", "train").parent) in res.stdout
    res = zhner("data", "check", "mini")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(" ok ") == 3


def test_data_check_a_benchmark_corpus(shared_data):
    res = zhner("data", "check", "resume")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(" ok ") == 3


def test_train_predict_evaluate_cli(tmp_path):
    out = tmp_path / "model"
    args = ["train", "tener_resume", "-o", out]
    for o in TINY_TENER:
        args += ["--set", o]
    res = zhner(*args)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["model"] == "tener" and summary["test"]["f1_strict"] >= 0

    res = zhner("predict", "-m", out, "-", stdin="张三毕业于北京大学。\n\n🙂 ＡＢＣ\ufffd\n")
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["text"] for r in records] == ["张三毕业于北京大学。", "", "🙂 ＡＢＣ\ufffd"]
    for r in records:
        for e in r["entities"]:
            assert r["text"][e["start"] : e["end"]] == e["text"]

    src = tmp_path / "in.txt"
    src.write_text("张三毕业于北京大学。\n李四\n", encoding="utf-8")
    dest = tmp_path / "out.conll"
    res = zhner("predict", "-m", out, src, "-o", dest, "--format", "conll")
    assert res.returncode == 0, res.stderr
    assert dest.read_text(encoding="utf-8").count("\n\n") == 2

    bad = tmp_path / "bad.txt"
    bad.write_bytes("好\n".encode() + b"\xff\n")
    res = zhner("predict", "-m", out, bad, "-o", tmp_path / "never.jsonl")
    assert_clean_error(res, f"{bad}:2")
    assert not (tmp_path / "never.jsonl").exists()  # nothing half-written

    res = zhner("evaluate", out, "mini:dev", "--json")
    assert res.returncode == 0, res.stderr
    assert {"strict", "lenient", "per_type", "span_f", "type_acc"} <= set(json.loads(res.stdout))
    res = zhner("evaluate", out, "mini:dev", "--seen-in", "mini", "--json")
    assert res.returncode == 0, res.stderr
    scores = json.loads(res.stdout)
    assert sum(g["n_gold"] for g in scores["seen"].values()) == scores["n_gold"] > 0
    assert_clean_error(zhner("evaluate", out, "mini:dev", "--seen-in", "mini:nope"), "mini:nope", "unknown split")


def test_demo_trains_evaluates_and_tags(tmp_path):
    """`make demo` runs `zhner demo`; a tiny budget still trains one full epoch on mini (configs/tener_mini.yaml)."""
    from zhner.cli import resolve_config
    from zhner.config import load_config

    epochs = load_config(resolve_config("tener_mini")).train.epochs
    res = zhner("demo", "--minutes", "0.01", "-o", tmp_path / "demo")
    assert res.returncode == 0, res.stderr
    import re

    # sentences a newcomer reads: the epochs of its budget, the test result with its meaning; no dict reprs
    assert re.search(rf"ran out after 1 of {epochs} epochs|trained \d+ epochs", res.stdout), res.stdout
    assert re.search(rf"epoch 1 of at most {epochs}: dev F1 \d+\.\d", res.stdout), res.stdout
    assert re.search(r"\d+\.\d% of the entities in them are found \(recall\)", res.stdout), res.stdout
    assert "{'" not in res.stdout + res.stderr and f"epoch 1/{epochs}" not in res.stdout + res.stderr

    entity_lines = [ln for ln in res.stdout.splitlines() if re.match(r"^  [A-Z]+ +\[ *\d+, *\d+\)  \S", ln)]
    assert entity_lines, res.stdout  # at least one entity printed as TYPE [start, end) text
    assert (tmp_path / "demo" / "model.safetensors").exists()


def test_train_with_an_unknown_recipe_names_the_known_ones(tmp_path):
    res = zhner("train", "flat_resume", "-o", tmp_path / "run", "--recipe", "slow")
    assert_clean_error(res, "--recipe 'slow'", "it has: fast", "flat_resume.yaml")
    assert not (tmp_path / "run").exists()

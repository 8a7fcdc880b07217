"""Issue 33, "One line, no traceback": OS errors, full disks, impossible sizes and endless input are one `error:` line
naming the file (and line) or the field, exit 2, and leave nothing behind."""
import os
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import REPO
from test_cli import assert_clean_error, zhner

LONG_NAME = "a" * 300  # over every Linux file system's 255-byte limit on a name: ENAMETOOLONG


@pytest.fixture
def gold(tmp_path):
    path = tmp_path / "gold.bmes"
    path.write_text("张 B-PER\n三 E-PER\n\n", encoding="utf-8")
    return path


def test_names_the_os_refuses_are_one_line(tmp_path, gold):
    """A name too long for the OS, wherever a path is taken: the path and the OS's reason (tracebacks before)."""
    from zhner.tagger import default_model_dir

    cases = [
        ("predict", LONG_NAME),
        ("predict", "--text", "张三", "-o", tmp_path / LONG_NAME),
        ("evaluate", default_model_dir(), LONG_NAME),
        ("score", gold, gold, "--seen-in", LONG_NAME),
        ("train", LONG_NAME, "-o", tmp_path / "run"),
    ]
    for args in cases:
        assert_clean_error(zhner(*args), LONG_NAME, "File name too long")
    assert list(tmp_path.iterdir()) == [gold]


@pytest.mark.parametrize(
    "make_output,reason",
    [
        (lambda tmp: "/proc/zhner-run", "/proc/zhner-run"),  # /proc takes no new directories
        (lambda tmp: "/sys/zhner-run", "/sys/zhner-run"),  # read-only (sysfs), even for root
        (lambda tmp: tmp / "data.txt" / "run", "not a directory"),
        (lambda tmp: tmp / "dangling", "does not exist"),
    ],
)
def test_train_output_is_checked_before_the_data(tmp_path, make_output, reason):
    """`train -o` where no directory can be made is refused before the data is read: the dataset named does not
    exist, and the error is about the output, not the data (tracebacks after the data and model were built, before)."""
    (tmp_path / "data.txt").write_text("x\n", encoding="utf-8")
    os.symlink(tmp_path / "missing" / "target", tmp_path / "dangling")
    output = make_output(tmp_path)
    res = zhner("train", "tener_resume", "-o", output, "--set", f"data.dataset={tmp_path / 'no-such-data'}")
    assert_clean_error(res, reason)
    assert "no-such-data" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "data.txt"]


def test_train_output_probe_leaves_nothing(tmp_path):
    """The output is probed by creating it: a run that fails afterwards (a bad dataset) leaves no directory."""
    out = tmp_path / "new" / "deeper" / "run"
    res = zhner("train", "tener_resume", "-o", out, "--set", f"data.dataset={tmp_path / 'no-such-data'}")
    assert_clean_error(res, "no-such-data")
    assert list(tmp_path.iterdir()) == []


def run_to_full_disk(*args):
    """A zhner command whose stdout is /dev/full (every write: ENOSPC)."""
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "zhner.cli", *map(str, args)], stdout=full, stderr=subprocess.PIPE, text=True,
            cwd=REPO, timeout=300,
        )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_stdout_is_one_line(gold):
    from zhner.tagger import default_model_dir

    model = default_model_dir()
    for args in (["info", model], ["score", gold, gold], ["evaluate", model, gold], ["predict", "--text", "张三在北京。"]):
        res = run_to_full_disk(*args)
        assert_clean_error(res, "cannot write the standard output", "No space left on device")
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_output_file_on_a_full_disk_names_it(tmp_path):
    """predict -o when the disk refuses the write (a file-size limit stands in for a full disk: EFBIG): the error
    names the output file, and no temporary file is left."""

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit then fails with EFBIG, not a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    out = tmp_path / "out.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "predict", "-o", str(out), "--text", "张三在北京大学工作。" * 20],
        capture_output=True, text=True, cwd=REPO, timeout=300, preexec_fn=limit_file_size,
    )
    assert_clean_error(res, str(out), "cannot write: File too large")
    assert list(tmp_path.iterdir()) == []


def test_a_model_larger_than_the_machine_is_refused_with_its_size(tmp_path):
    """model.heads=10000000 asked a 655 GB allocation of the allocator (a RuntimeError traceback); now its size is
    added up before each tensor is allocated, from --set or from a model directory's config."""
    from zhner.tagger import default_model_dir

    out = tmp_path / "run"
    res = zhner("train", "tener_resume", "-o", out, "--set", "data.dataset=mini", "--set", "model.heads=10000000",
                "--set", "data.max_train_sentences=8", "--set", "data.max_eval_sentences=8")
    assert_clean_error(res, "655.4 GB of weights", "more than half of this machine's memory")
    assert not out.exists()

    model = tmp_path / "model"
    shutil.copytree(default_model_dir(), model)
    config = (model / "config.yaml").read_text(encoding="utf-8")
    assert "\n  heads: 8\n" in config
    (model / "config.yaml").write_text(config.replace("\n  heads: 8\n", "\n  heads: 10000000\n"), encoding="utf-8")
    assert_clean_error(zhner("predict", "-m", model, "--text", "张三"), f"{model / 'config.yaml'}: model:", "GB of weights")


def test_weight_budget_counts_every_way_a_tensor_is_made():
    import torch

    from zhner.pipeline import _ModelTooLarge, _WeightBudget

    with _WeightBudget(10_000) as budget:
        torch.nn.Linear(10, 10)  # 110 floats
        torch.zeros((5, 5), dtype=torch.float64)
        torch.full((3,), 1.0)
        torch.arange(4)  # int64
    assert budget.total == 110 * 4 + 25 * 8 + 3 * 4 + 4 * 8
    with pytest.raises(_ModelTooLarge):
        with _WeightBudget(10_000):
            torch.nn.Embedding(1_000_000, 1_000)  # refused before the 4 GB are asked for


def test_memory_budget_must_be_finite():
    assert_clean_error(zhner("predict", "--memory-mb", "inf", "--text", "张三"), "--memory-mb")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_endless_lines_are_refused_at_the_limit(gold):
    """/dev/zero is one endless line: predict and score (either file, --seen-in) stop at the line limit with an error
    naming it, instead of reading until memory runs out; train refuses it as a config, which must be a regular file."""
    for args in (["predict", "/dev/zero"], ["score", "/dev/zero", gold], ["score", gold, gold, "--seen-in", "/dev/zero"]):
        assert_clean_error(zhner(*args), "/dev/zero:1", "a line longer than 16,777,216 bytes")
    assert_clean_error(zhner("train", "/dev/zero", "-o", "never"), "/dev/zero", "a character device", "regular files only")
    res = zhner("predict", "-", stdin="张三\n" + "好" * 6_000_000 + "\n")  # 18 MB on line 2
    assert_clean_error(res, "<stdin>:2", "a line longer than")


def test_bounded_lines_keep_the_lines_as_they_were():
    import io

    from zhner.fileio import bounded_lines

    assert list(bounded_lines(io.BytesIO(b"a\n\nb"), "x")) == [(1, b"a\n"), (2, b"\n"), (3, b"b")]


def test_a_key_given_twice_in_a_config_names_it(tmp_path):
    config = tmp_path / "twice.yaml"
    config.write_text("model:\n  name: tener\ntrain:\n  epochs: 1\nmodel:\n  name: flat\n", encoding="utf-8")
    for command in (["train", config, "-o", tmp_path / "run"], ["sweep", config, "-o", tmp_path / "run", "--param", "train.lr=1,2"]):
        assert_clean_error(zhner(*command), f"{config}:5", "duplicate key 'model'")
    assert not (tmp_path / "run").exists()


def test_yaml_merge_keys_may_still_override():
    from zhner.fileio import parse_yaml

    assert parse_yaml("base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  x: 3\n")["derived"] == {"x": 3, "y": 2}


def test_health_answers_head_and_an_unfittable_request_is_413():
    """HEAD /health was 405; a request of more texts than the queue can ever hold (--max-pending-texts) was 503
    "busy", which tells a client to retry what can never succeed."""
    import httpx

    from test_serve import live_server
    from zhner.serve.app import Limits, create_app
    from zhner.tagger import Tagger, default_model_dir

    limits = Limits(max_texts=20, max_pending_texts=10, batch_wait_ms=1)
    with live_server(create_app(Tagger.load(default_model_dir()), limits)) as url, httpx.Client(base_url=url, timeout=60) as client:
        head = client.head("/health")
        assert head.status_code == 200 and head.content == b""
        res = client.post("/v1/ner", json={"texts": ["张三"] * 11})
        assert res.status_code == 413 and res.json()["field"] == "texts" and "never fit" in res.json()["error"]
        assert client.post("/v1/ner", json={"texts": ["张三"] * 10}).status_code == 200


# -- issue 33, "Smaller" -----------------------------------------------------------------------------------------------
def test_saved_weights_follow_the_umask(tmp_path):
    """model.safetensors was 0600 whatever the umask (safetensors creates it so); the other files were 0644."""
    from zhner.tagger import Tagger, default_model_dir

    tagger = Tagger.load(default_model_dir())
    old = os.umask(0o022)
    try:
        tagger.save(tmp_path / "m")
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "m").iterdir()}
    assert set(modes.values()) == {oct(0o644)}, modes


@pytest.mark.parametrize(
    "args", [["info", ""], ["predict", "-m", "", "--text", "张三"], ["evaluate", "", "resume"], ["export", ""]]
)
def test_an_empty_model_path_is_an_error(tmp_path, args):
    """'' was the current directory: in a model directory, `info ''` and `predict -m ''` loaded it."""
    from zhner.tagger import default_model_dir

    shutil.copytree(default_model_dir(), tmp_path / "m")
    assert_clean_error(zhner(*args, cwd=tmp_path / "m"), "no model directory given")


def test_a_split_with_two_files_names_both(tmp_path):
    from zhner.data.registry import detect_split_files
    from zhner.errors import ZhnerError

    for name in ("train.char.bmes", "train.bmes", "test.bmes"):
        (tmp_path / name).write_text("张 B-PER\n三 E-PER\n\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match=r"several train files \(train.bmes, train.char.bmes\)"):
        detect_split_files(tmp_path)
    (tmp_path / "train.bmes").unlink()
    assert {k: p.name for k, p in detect_split_files(tmp_path).items()} == {"train": "train.char.bmes", "test": "test.bmes"}


def test_confidence_needs_jsonl(tmp_path):
    """--format conll --confidence wrote CoNLL without the scores, silently."""
    out = tmp_path / "out.conll"
    assert_clean_error(zhner("predict", "--format", "conll", "--confidence", "--text", "张三", "-o", out), "--confidence", "jsonl")
    assert not out.exists()


def test_info_on_truncated_weights_does_not_say_completed(tmp_path):
    from zhner.info import model_info
    from zhner.tagger import default_model_dir

    model = tmp_path / "m"
    shutil.copytree(default_model_dir(), model)
    assert model_info(model)["status"] == "completed"
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    info = model_info(model)
    assert info["status"].startswith("unusable: model.safetensors is truncated") and info["parameters"] is None
    weights.unlink()
    assert model_info(model)["status"] == "unusable: model.safetensors is missing"


@pytest.mark.parametrize("damage", ["size-mismatch", "hole", "unknown-dtype", "trailing-bytes"])
def test_info_checks_the_weights_header_as_loading_does(tmp_path, damage):
    """Headers whose shapes, offsets, dtypes or length do not add up: `info` said "completed" for such a file, which
    `predict` refuses (issue 46); now both refuse it, info as its status."""
    import json as json_
    import struct

    from zhner.errors import ZhnerError
    from zhner.info import model_info
    from zhner.tagger import Tagger, default_model_dir

    model = tmp_path / "m"
    shutil.copytree(default_model_dir(), model)
    weights = model / "model.safetensors"
    raw = weights.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header, data = json_.loads(raw[8 : 8 + size]), raw[8 + size :]
    name = next(k for k in header if k != "__metadata__")
    entry = header[name]
    if damage == "size-mismatch":  # one more row than its bytes hold
        entry["shape"] = [entry["shape"][0] + 1, *entry["shape"][1:]]
    elif damage == "hole":  # a tensor that starts past the end of the one before
        entry["data_offsets"] = [entry["data_offsets"][0] + 4, entry["data_offsets"][1]]
    elif damage == "unknown-dtype":
        entry["dtype"] = "Q7"
    else:
        data += b"\0" * 64
    text = json_.dumps(header).encode()
    weights.write_bytes(struct.pack("<Q", len(text)) + text + data)
    info = model_info(model)
    assert info["status"].startswith("unusable: model.safetensors is corrupt") and info["parameters"] is None, info
    with pytest.raises(ZhnerError, match="corrupt weights file"):
        Tagger.load(model)

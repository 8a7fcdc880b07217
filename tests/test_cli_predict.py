"""`zhner predict` as a newcomer uses it: typing at a terminal (each line answered at once), JSONL on stdin detected
from its content, and bad records skipped or fatal as --on-error says."""
from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from test_cli import assert_clean_error, zhner
from conftest import REPO
from zhner.tagger import default_model_dir

pytestmark = pytest.mark.skipif(default_model_dir() is None, reason="no shipped model in this checkout")


def read_line(fd: int, timeout: float) -> bytes:
    """One line from a pipe, or what came before `timeout` seconds passed."""
    data, deadline = b"", time.monotonic() + timeout
    while not data.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    return data


def test_a_line_typed_at_a_terminal_is_answered_before_the_input_ends():
    """stdin a terminal: the record of a line comes while the terminal is still open (512-line chunks before: nothing
    until Ctrl-D)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zhner.cli", "predict", "-"], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO
    )
    os.close(slave)
    try:
        os.write(master, "张三在北京大学工作。\n".encode())
        first = read_line(proc.stdout.fileno(), timeout=120)
        assert proc.poll() is None  # still reading: the answer came before the end of the input
        record = json.loads(first)
        assert record["text"] == "张三在北京大学工作。"
        assert [(e["text"], e["type"]) for e in record["entities"]] == [("张三", "PER"), ("北京大学", "ORG")]
        os.write(master, "李四\n".encode())
        assert json.loads(read_line(proc.stdout.fileno(), timeout=60))["text"] == "李四"
        os.write(master, b"\x04")  # Ctrl-D
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_jsonl_on_stdin_is_detected_from_its_first_line_and_the_flag_wins():
    stdin = '\n{"id": 7, "text": "张三在北京"}\n{"id": 8, "text": "李四"}\n'
    res = zhner("predict", "-", stdin=stdin)
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["id"] for r in records] == [7, 8] and records[0]["entities"][0]["start"] == 0  # offsets into "text"
    as_text = zhner("predict", "--input-format", "text", "-", stdin=stdin)
    assert [json.loads(line)["text"] for line in as_text.stdout.splitlines()] == stdin.split("\n")[:-1]
    braces = zhner("predict", "-", stdin="{张三} 在北京\n")  # starts with a brace, is no JSON: text
    assert json.loads(braces.stdout)["text"] == "{张三} 在北京"


def test_on_error_skip_reports_each_bad_record_and_tags_the_rest(tmp_path):
    src = tmp_path / "in.txt"  # not .jsonl: JSONL from its content
    src.write_bytes(b'{"id": 1, "text": "\xe5\xbc\xa0\xe4\xb8\x89"}\n[1, 2]\n{"id": 3, "text": "\xe6\x9d\x8e\xe5\x9b\x9b"}\n\xff\xfe\n{"id": 5}\n{"id": 6, "text": ""}\n')
    res = zhner("predict", src, "--on-error", "skip")
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == [1, 3, 6]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert [w.split(":")[2] for w in warnings] == ["2", "4", "5"] and all(str(src) in w for w in warnings)
    assert res.stderr.strip().splitlines()[-1] == f"{src}: 3 bad records skipped (lines 2, 4, 5); 3 tagged"


def test_on_error_fail_stops_at_the_first_bad_record_and_writes_nothing(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"text": "张三"}\nnot json\n{"text": "李四"}\n', encoding="utf-8")
    assert_clean_error(zhner("predict", src, "-o", out), f"{src}:2")
    assert not out.exists()
    assert_clean_error(zhner("predict", src, "--on-error", "maybe"), "--on-error", "'maybe'")


def test_shipped_names_are_accepted_wherever_a_model_directory_is():
    """`-m zh-small` (predict, export), `zhner info zh-small` and `zhner evaluate zh-small` name the shipped model; a word
    that is neither a shipped name nor a directory is one line listing the names (it was "no such model directory")."""
    text = "张三在北京大学工作。"
    by_name = zhner("predict", "-m", "zh-small", "--text", text)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == zhner("predict", "-m", default_model_dir(), "--text", text).stdout
    assert json.loads(by_name.stdout)["entities"][0]["text"] == "张三"
    info = zhner("info", "zh-small", "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["model"] == "flat"
    res = zhner("predict", "-m", "zh-huge", "--text", text)
    assert_clean_error(res, "unknown model 'zh-huge': neither a shipped model (zh-small, zh-accurate) nor a model directory")
    res = zhner("info", "zh-huge")
    assert_clean_error(res, "unknown model 'zh-huge'")
    res = zhner("export", "zh-small")  # its default output would be inside the installed package
    assert_clean_error(res, "name the .onnx file with -o: zh-small is a shipped model")

"""The demo's closing hint names a command the user can type: `.venv/bin/zhner` after `make demo` (not on the PATH
until the environment is activated), `zhner` when that name is the program that ran."""
import os
import sys

from zhner.demo import command_name


def test_hint_names_the_path_when_zhner_is_not_on_the_path(tmp_path, monkeypatch):
    script = tmp_path / ".venv" / "bin" / "zhner"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [".venv/bin/zhner", "demo"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name() == ".venv/bin/zhner"
    monkeypatch.setenv("PATH", str(script.parent) + os.pathsep + "/usr/bin")  # an activated environment
    assert command_name() == "zhner"


def test_hint_is_zhner_under_python_m(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/zhner/cli.py", "demo"])
    assert command_name() == "zhner"

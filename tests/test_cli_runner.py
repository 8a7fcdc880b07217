"""The forked `zhner` of tests/cli_runner.py behaves as `python -m zhner.cli` does: same exit code, stdout and
stderr for a success, a usage error, a user error, input on stdin and an argument that is not UTF-8."""
import pytest

from cli_runner import run_zhner

CASES = {
    "success": (["score", "gold.bmes", "pred.bmes", "--json"], None),
    "user_error": (["predict", "-m", "no-such-model", "--text", "张三"], None),
    "usage_error": (["predict", "--no-such-option"], None),
    "not_utf8_argument": (["score", b"\xff.bmes", "pred.bmes"], None),
    "stdin": (["predict", "-"], "李四昨天去了上海。\n"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_forked_command_equals_a_fresh_process(case, tmp_path, monkeypatch):
    (tmp_path / "gold.bmes").write_text("张 B-PER\n三 E-PER\n在 O\n\n", encoding="utf-8")
    (tmp_path / "pred.bmes").write_text("张 B-PER\n三 M-PER\n在 O\n\n", encoding="utf-8")
    args, stdin = CASES[case]
    forked = run_zhner(*args, stdin=stdin, cwd=tmp_path)
    monkeypatch.setenv("ZHNER_TEST_SUBPROCESS", "1")
    fresh = run_zhner(*args, stdin=stdin, cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert (fresh.returncode == 0) == (case in ("success", "stdin"))
    assert fresh.stdout or fresh.stderr  # each case says something, so the comparison compares something


def test_the_child_sees_the_tests_environment(tmp_path, monkeypatch):
    """An environment variable the test sets (here ZHNER_CACHE) reaches the forked command, as it would a subprocess."""
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "cache"))
    res = run_zhner("pretrained", "list", cwd=tmp_path)
    monkeypatch.setenv("ZHNER_TEST_SUBPROCESS", "1")
    fresh = run_zhner("pretrained", "list", cwd=tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert str(tmp_path / "cache" / "pretrained" / "e5-small") in res.stdout

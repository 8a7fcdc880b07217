"""The runnable examples of docs/runtime.md, docs/spacy.md, docs/transformers.md and docs/scale.md: each ```bash and ```python block
runs, in order, in one temporary directory (with pyproject.toml's entry points installed); a ```text block right after
one is its output: the same text, except that a decimal number may differ from the printed one by `FLOAT_TOLERANCE`
(a model's probability moves in its fourth digit from one CPU to another)."""
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, declared_entry_points
from zhner.tagger import default_model_dir

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
DECIMAL = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")
FLOAT_TOLERANCE = 0.005


def same_output(printed: str, documented: str) -> bool:
    """`printed` reads as `documented`: equal text around the decimal numbers, each number within FLOAT_TOLERANCE."""
    if DECIMAL.split(printed) != DECIMAL.split(documented):
        return False
    got, want = DECIMAL.findall(printed), DECIMAL.findall(documented)
    return len(got) == len(want) and all(math.isclose(float(a), float(b), abs_tol=FLOAT_TOLERANCE) for a, b in zip(got, want))


def test_same_output_tolerates_the_last_digits_only():
    assert same_output("张三 PER 0.9466\n", "张三 PER 0.9465\n")
    assert same_output("{'score': 0.999, 'start': 0}", "{'score': 0.9982, 'start': 0}")
    assert not same_output("张三 PER 0.9466\n", "张三 LOC 0.9466\n")      # the text around a number counts
    assert not same_output("张三 PER 0.8466\n", "张三 PER 0.9466\n")      # so does a number off by more
    assert not same_output("start 1, end 3", "start 0, end 2")            # integers (offsets) are exact
    assert not same_output("0.5 0.5", "0.5")


def examples(page: Path) -> list[tuple[str, str, str | None]]:
    """(language, code, expected output or None) of each runnable block of a Markdown page."""
    blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
    out = []
    for i, (language, code) in enumerate(blocks):
        if language in ("bash", "python"):
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            out.append((language, code, following[1] if following and following[0] == "text" else None))
    return out


@pytest.mark.parametrize("page", ["runtime.md", "spacy.md", "transformers.md", "scale.md"])
def test_documented_examples_run(page, tmp_path):
    if default_model_dir() is None:
        pytest.skip("the examples use the shipped model")
    if page == "runtime.md":
        pytest.importorskip("onnxscript")
    if page == "spacy.md":
        pytest.importorskip("spacy")
    if page == "scale.md":
        pytest.importorskip("ray")  # a local Ray instance on this machine's CPUs (2 in CI): the example must not wait
    metadata = declared_entry_points(tmp_path / "metadata")  # spaCy finds the component as an installed zhner offers it
    env = dict(os.environ, PYTHONPATH=f"{metadata}{os.pathsep}{REPO}", OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    blocks = examples(REPO / "docs" / page)
    assert len(blocks) >= 1 and any(expected is not None for _, _, expected in blocks)
    for language, code, expected in blocks:
        command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
        res = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)  # a hang fails
        assert res.returncode == 0, f"{page}: {code}\n{res.stderr}"
        if expected is not None:
            assert same_output(res.stdout, expected), f"{page}: {code}\nprinted:\n{res.stdout}\ndocumented:\n{expected}"

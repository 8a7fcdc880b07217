"""The runnable examples of docs/runtime.md, docs/spacy.md and docs/transformers.md: each ```bash and ```python block
runs, in order, in one temporary directory (with pyproject.toml's entry points installed); a ```text block right after
one is its exact output."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, declared_entry_points
from zhner.tagger import default_model_dir

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def examples(page: Path) -> list[tuple[str, str, str | None]]:
    """(language, code, expected output or None) of each runnable block of a Markdown page."""
    blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
    out = []
    for i, (language, code) in enumerate(blocks):
        if language in ("bash", "python"):
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            out.append((language, code, following[1] if following and following[0] == "text" else None))
    return out


@pytest.mark.parametrize("page", ["runtime.md", "spacy.md", "transformers.md"])
def test_documented_examples_run(page, tmp_path):
    if default_model_dir() is None:
        pytest.skip("the examples use the shipped model")
    if page == "runtime.md":
        pytest.importorskip("onnxscript")
    if page == "spacy.md":
        pytest.importorskip("spacy")
    metadata = declared_entry_points(tmp_path / "metadata")  # spaCy finds the component as an installed zhner offers it
    env = dict(os.environ, PYTHONPATH=f"{metadata}{os.pathsep}{REPO}", OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    blocks = examples(REPO / "docs" / page)
    assert len(blocks) >= 1 and any(expected is not None for _, _, expected in blocks)
    for language, code, expected in blocks:
        command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
        res = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env)
        assert res.returncode == 0, f"{page}: {code}\n{res.stderr}"
        if expected is not None:
            assert res.stdout == expected, f"{page}: {code}"

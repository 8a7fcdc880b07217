"""The wheel, installed alone, trains and predicts.

The wheel is built from a copy of the sources (the checkout is left as it is) and installed into a fresh venv made with
`--without-pip`. Creating a venv and installing torch & co. into it for each run is too slow for the suite, so the new
venv sees the running environment's site-packages through a .pth file: third-party packages come from there, while
zhner itself must come from the wheel. A .pth file's path lines are appended to sys.path, and the .pth files *inside*
that path (the editable install of the checkout) are not processed, so the checkout's zhner is not importable there;
the test also checks it, and runs every command from a folder outside the repository with PYTHONPATH unset. pip runs
with `--ignore-installed`, so it never tries to remove the outer environment's zhner.
"""
from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "zhner")


def _run(args: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """(the wheel, the build's output) built by setuptools' PEP 517 backend from a copy of the sources."""
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    code = f"from setuptools import build_meta; print(build_meta.build_wheel({str(dist)!r}))"
    done = _run([sys.executable, "-W", "always", "-c", code], cwd=src)
    assert done.returncode == 0, done.stderr[-3000:]
    return dist / done.stdout.strip().splitlines()[-1], done.stdout + done.stderr


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed and the running environment's packages visible (see the module doc)."""
    root = tmp_path_factory.mktemp("venv")
    done = _run([sys.executable, "-m", "venv", "--without-pip", root], cwd=root)
    assert done.returncode == 0, done.stderr
    python = root / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).stdout.strip())
    (site / "outer_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    done = _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet", wheel[0]], cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_wheel_holds_configs_and_types_and_modern_metadata(wheel):
    path, build_log = wheel
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        metadata = email.message_from_bytes(zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    shipped = {p.name for p in (REPO / "zhner" / "configs").glob("*.yaml")}
    assert shipped and {f"zhner/configs/{n}" for n in shipped} <= names
    assert "zhner/py.typed" in names
    assert "zhner/resources/default_model/model.safetensors" in names
    assert "zhner/resources/accurate_model/model.safetensors" in names  # zh-accurate
    mini = REPO / "zhner" / "resources" / "corpus" / "mini"  # the carried corpus, with its licence
    assert {f"zhner/resources/corpus/mini/{p.name}" for p in mini.iterdir()} <= names and (mini / "LICENSE").is_file()
    assert metadata["License-Expression"] == "MIT"
    assert "deprecat" not in build_log.lower()  # setuptools' banners about `project.license` as a table
    torch = [r for r in metadata.get_all("Requires-Dist") if r.startswith("torch")]
    assert torch and "==" not in torch[0]  # a range: the exact CPU pin lives in constraints.txt, for make setup
    assert len(metadata.get_payload()) < 20_000  # a short long-description, not the old 167 KB notebook


@pytest.mark.slow
def test_installed_wheel_trains_and_predicts(venv, tmp_path):
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import find_file

    bin_dir = venv / "bin"
    where = _run([bin_dir / "python", "-c", "import zhner; print(zhner.__file__)"], cwd=tmp_path)
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr  # the wheel's zhner, not the checkout's
    corpus = tmp_path / "corpus"  # a folder of the user's files: here 24 of mini's sentences per split
    corpus.mkdir()
    for split in ("train", "dev", "test"):
        sentences = find_file("mini", split).read_text(encoding="utf-8").split("\n\n")[:24]
        (corpus / f"{split}.bmes").write_text("\n\n".join(sentences).strip() + "\n\n", encoding="utf-8")
    tiny = ["model.heads=2", "model.head_dim=8", "model.layers=1", "train.epochs=1", f"data.dataset={corpus}"]
    sets = [arg for field in tiny for arg in ("--set", field)]
    done = _run([bin_dir / "zhner", "train", "tener_resume", "-o", tmp_path / "run", *sets], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "model.safetensors").is_file()
    done = _run([bin_dir / "zhner", "evaluate", tmp_path / "run", "mini", "--json"], cwd=tmp_path)  # the wheel's own mini
    assert done.returncode == 0, done.stderr[-3000:]
    test = read_corpus(find_file("mini", "test"))
    scores = json.loads(done.stdout)
    assert (scores["n_sentences"], scores["n_gold"]) == (len(test), sum(map(len, test.spans())))
    done = _run([bin_dir / "zhner", "predict", "--text", "张三在北京大学工作。"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"text": "张三"' in done.stdout and '"type": "PER"' in done.stdout

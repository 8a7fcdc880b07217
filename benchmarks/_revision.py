"""An earlier revision of the repository beside this one, for benchmarks that run both (ab_speed.py, same_entities.py)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def extract(revision: str, into: Path) -> Path:
    """The files of `revision` (git archive) written into the new folder `into`, which is returned."""
    into.mkdir()
    archive = subprocess.run(["git", "archive", revision], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def tree_env(root: Path) -> dict[str, str]:
    """The environment of a process that imports zhner from `root`, one thread, finding the corpora as this tree does
    (a tree extracted elsewhere has no shared/data beside it)."""
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    if "ZHNER_DATA" not in env and (REPO.parent / "shared" / "data").is_dir():
        env["ZHNER_DATA"] = str(REPO.parent / "shared" / "data")
    return env

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_collection_modifyitems(config, items):
    if not SHARED_DATA.is_dir():
        skip = pytest.mark.skip(reason="../shared/data is not present")
        for item in items:
            if "shared_data" in item.fixturenames:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED_DATA


TINY_TENER = [
    "model.heads=2",
    "model.head_dim=8",
    "model.layers=1",
    "data.max_train_sentences=48",
    "data.max_eval_sentences=24",
    "train.epochs=2",
    "train.batch_size=8",
    "train.lr=0.01",
]

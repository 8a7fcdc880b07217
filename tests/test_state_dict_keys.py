"""Saved model directories keep loading: the state_dict keys (and shapes) of FLAT, ATSSA, NFLAT and TENER built from the
shipped configs equal the ones recorded in state_dict_keys.json, written from the code before zhner/nn/span_position.py
was split out of flat_attention.py and the two encoder layer classes became one (zhner/nn/encoder.py, `EncoderLayer`).
The FLAT entries recorded before the default preset took the release's attention set the textbook attention explicitly,
as the model directories saved then do in their config.yaml; flat_compat has the release's attention's keys."""
import json

import pytest
import torch

from conftest import REPO, sized
from zhner.config import load_config
from zhner.models import MODELS

EXPECTED = json.loads((REPO / "tests" / "state_dict_keys.json").read_text(encoding="utf-8"))
VOCAB = {"chars": 30, "bigrams": 30, "words": 30}  # the sizes the recorded shapes were built with
NUM_TAGS = 5


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_state_dict_keys_unchanged(variant):
    spec = EXPECTED[variant]
    config = load_config(REPO / "zhner" / "configs" / spec["config"], ["model.heads=2", "model.head_dim=8", *spec["set"]])
    _, model_class = MODELS[config.model.name]
    torch.manual_seed(0)
    model = model_class(sized(config.model, VOCAB, NUM_TAGS))
    got = {name: list(value.shape) for name, value in model.state_dict().items()}
    assert list(got) == list(spec["state_dict"])  # the same keys, in the same order
    assert got == spec["state_dict"]

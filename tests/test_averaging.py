"""Weight averaging (train.average_epochs): the arithmetic, the swap, and that the saved model is the evaluated average."""
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.tagger import Tagger
from zhner.train.averaging import WeightAverage
from zhner.train.trainer import prepare, train


def _model() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[1].weight.requires_grad_(False)  # frozen: not averaged
    return model


def _set(model: torch.nn.Module, value: float) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.fill_(value)


def test_the_average_is_a_running_mean_then_an_exponential_one():
    model = _model()
    average = WeightAverage(model, horizon=3)
    # steps 1-3: the mean of the steps so far (3, (3+6)/2, (3+6+9)/3); step 4: decay 1 - 1/3, 6 + (12 - 6) / 3
    for value, expected in zip([3.0, 6.0, 9.0, 12.0], [3.0, 4.5, 6.0, 8.0]):
        _set(model, value)
        average.update()
        for a in average.average:
            assert torch.all(a == expected), (value, a, expected)
    assert len(average.average) == 3  # the frozen weight is left out


def test_applied_swaps_the_average_in_and_back_out():
    model = _model()
    _set(model, 4.0)
    average = WeightAverage(model, horizon=10)
    average.update()
    _set(model, 8.0)
    average.update()  # the mean of 4 and 8
    frozen = model[1].weight.clone()
    with average.applied():
        assert torch.all(model[0].weight == 6.0) and torch.all(model[1].bias == 6.0)
        assert torch.equal(model[1].weight, frozen)
    assert torch.all(model[0].weight == 8.0) and torch.all(model[1].bias == 8.0)
    assert all(torch.all(a == 6.0) for a in average.average)

    saved = average.state_dict()
    restored = WeightAverage(_model(), horizon=10)
    restored.load_state_dict(saved)
    assert restored.updates == 2 and all(torch.all(a == 6.0) for a in restored.average)
    with pytest.raises(ValueError, match="does not match"):
        WeightAverage(torch.nn.Linear(3, 3), horizon=10).load_state_dict(saved)


def test_training_saves_the_averaged_weights_it_evaluated(tmp_path, shared_data):
    overrides = TINY_TENER + ["train.epochs=2", "train.average_epochs=1"]
    config = load_config(resolve_config("tener_resume"), overrides)
    metrics = train(config, tmp_path / "avg", log=lambda _: None)
    plain = train(load_config(resolve_config("tener_resume"), TINY_TENER + ["train.epochs=2"]), tmp_path / "plain", log=lambda _: None)
    averaged_w, plain_w = load_file(tmp_path / "avg" / "model.safetensors"), load_file(tmp_path / "plain" / "model.safetensors")
    assert any(not torch.equal(averaged_w[k], plain_w[k]) for k in plain_w)  # same seed and data: only the average differs

    # the saved model scores what the log says the selected epoch scored: the average is what was evaluated
    tagger = Tagger.load(tmp_path / "avg")
    dev = prepare(config, log=lambda _: None).splits["dev"]
    assert tagger.task.select(tagger.evaluate(dev)) == metrics["dev"]["strict"]["f1"]
    log = [json.loads(x) for x in (tmp_path / "avg" / "log.jsonl").read_text().splitlines()]
    assert log[metrics["best_epoch"] - 1]["dev"]["f1_strict"] == metrics["dev"]["strict"]["f1"]
    assert plain["status"] == metrics["status"] == "completed"

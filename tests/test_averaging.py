"""Weight averaging (train.average_epochs): the arithmetic, the swap, and that the saved model is the evaluated average."""
import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.tagger import Tagger
from zhner.train.averaging import WeightAverage
from zhner.train.assemble import prepare
from zhner.train.trainer import train


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


def test_the_average_is_what_is_evaluated_saved_and_checkpointed(tmp_path, monkeypatch):
    """A run stopped by its time budget after epoch 1 keeps its checkpoint: the weights evaluated at that epoch, the
    saved model and the checkpoint's average are the same tensors, and they are not the trained weights."""
    evaluated: list[dict[str, torch.Tensor]] = []
    evaluate = Tagger.evaluate

    def recording(self, *args, **kwargs):
        evaluated.append({n: p.detach().clone() for n, p in self.model.named_parameters()})
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(Tagger, "evaluate", recording)
    extra = ["train.epochs=3", "train.average_epochs=1", "train.max_minutes=0.0001"]
    config = load_config(resolve_config("tener_resume"), TINY_TENER + extra)
    metrics = train(config, tmp_path, log=lambda _: None)
    assert metrics["status"] == "time_budget" and metrics["best_epoch"] == 1
    assert len(evaluated) == 2  # dev, then test at the new best epoch

    saved = load_file(tmp_path / "model.safetensors")
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    trained, average = checkpoint["model"], checkpoint["average"]["average"]
    model = prepare(config, log=lambda _: None).tagger.model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert len(trainable) == len(average) and checkpoint["average"]["updates"] > 1
    for name, averaged in zip(trainable, average):
        for weights in evaluated:
            torch.testing.assert_close(weights[name], averaged, rtol=0, atol=0)
        torch.testing.assert_close(saved[name], averaged, rtol=0, atol=0)
    assert any(not torch.equal(trained[n], saved[n]) for n in trainable)  # training went on from its own weights

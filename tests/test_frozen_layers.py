"""A partly frozen BERT (`model.bert_frozen_layers`, zhner.nn.bert.BertCharFeatures; issue 34): the embeddings and the
first K layers run in eval mode without a graph, their output at layer K is memoised per row ([CLS] and [SEP] too),
only the layers above train and reach the optimiser, and the result is the whole encoder's (to float16 rounding at
layer K), windows included; the memo and the traced path agree exactly; a bad K is a one-line error."""
from __future__ import annotations

import pytest
import torch

from test_frozen import TINY, piece_batch
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.nn.bert import BertCharFeatures, load_pretrained, memo_disabled
from zhner.nn.local_attention import local_attention_factory
from zhner.tagger import Tagger
from zhner.train.trainer import make_optimizer, prepare, train


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

"""A frozen, memoised BERT (zhner.nn.memo, zhner.nn.bert_features.BertCharFeatures; issue 34): the memo gives the
frozen encoder's own outputs (to float16), each sentence is encoded once however many epochs read it, no gradient
reaches the encoder and the optimiser holds none of its weights, and the e5 configs' `frozen` recipe trains end to end
(on a tiny SentencePiece BERT in e5-small's place)."""
from __future__ import annotations

import pytest
import torch

from conftest import MINI
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.nn.bert_checkpoint import load_pretrained
from zhner.nn.bert_features import BertCharFeatures, memo_disabled
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer, train

E5_CONFIGS = ["bert_e5_resume", "bert_e5_weibo", "bert_e5_msra", "flat_e5_resume", "flat_e5_weibo", "nflat_e5_resume",
              "nflat_e5_weibo"]
TINY = MINI + ["data.max_train_sentences=12", "data.max_eval_sentences=6", "train.batch_size=4"]


def frozen_features(tiny_sp_bert) -> BertCharFeatures:
    """The tiny encoder, frozen, with its pretrained weights and dropout high enough that eval mode must be used."""
    bert = load_pretrained(tiny_sp_bert)
    config = dict(bert.config, hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)
    features = BertCharFeatures(config, trainable=False)
    features.model.load_pretrained_weights(bert.weights)
    return features


def piece_batch(rows: list[list[int]], cls: int = 0, sep: int = 2, pad: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """bert_ids [B, P + 2] ([CLS] ids [SEP], padded) and lengths [B] of rows of piece ids."""
    P = max(len(r) for r in rows)
    ids = torch.full((len(rows), P + 2), pad)
    for b, row in enumerate(rows):
        ids[b, : len(row) + 2] = torch.tensor([cls, *row, sep])
    return ids, torch.tensor([len(r) for r in rows])


def count_rows(module: torch.nn.Module) -> list[int]:
    """Rows the module's forward receives, one entry per call."""
    calls: list[int] = []
    module.register_forward_hook(lambda m, args, kwargs, out: calls.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    return calls


def test_memo_gives_the_frozen_encoders_outputs_and_encodes_each_row_once(tiny_sp_bert):
    features = frozen_features(tiny_sp_bert).eval()
    rows = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    ids, lengths = piece_batch(rows)
    with torch.no_grad():
        direct = features.encode(ids, lengths)  # [3, 5, 16], float32, no dropout
    features.train()  # training mode: the frozen encoder still runs without dropout
    calls = count_rows(features.model)
    first = features(ids, lengths)  # [3, 5, 16]
    assert calls == [3] and len(features.memo) == 3 and features.model.training  # the mode is given back
    for b, row in enumerate(rows):
        torch.testing.assert_close(first[b, : len(row)], direct[b, : len(row)], atol=1e-3, rtol=1e-3)
        assert first[b, len(row):].abs().sum() == 0  # padding is zero
    again_ids, again_lengths = piece_batch([rows[2], rows[0], [20, 21]])  # two seen rows, in another batch: one new
    again = features(again_ids, again_lengths)
    assert calls == [3, 1] and len(features.memo) == 4
    assert torch.equal(again[0, :3], first[2, :3]) and torch.equal(again[1], first[0])


def test_without_the_memo_the_frozen_encoder_runs_every_row_and_agrees(tiny_sp_bert):
    features = frozen_features(tiny_sp_bert).eval()
    ids, lengths = piece_batch([[5, 6, 7], [8, 9]])
    memo = features(ids, lengths)
    calls = count_rows(features.model)
    with memo_disabled(features):
        direct = features(ids, lengths)  # the traced (ONNX) path: float16-rounded as the memo keeps it
    assert calls == [2] and features.use_memo
    assert torch.equal(direct[0], memo[0]) and torch.equal(direct[1, :2], memo[1, :2])
    features.load_state_dict(features.state_dict())
    assert len(features.memo) == 0  # weights loaded: the memo starts again
    features(ids, lengths)
    features.model.load_pretrained_weights(load_pretrained(tiny_sp_bert).weights)  # into the encoder alone
    assert len(features.memo) == 0


def test_a_trainable_encoder_is_not_memoised_and_trains(tiny_sp_bert):
    bert = load_pretrained(tiny_sp_bert)
    features = BertCharFeatures(bert.config, trainable=True)
    ids, lengths = piece_batch([[5, 6, 7], [8, 9]])
    features(ids, lengths).sum().backward()
    assert len(features.memo) == 0 and not features.frozen
    assert all(p.grad is not None for p in features.model.encoder.parameters())


@pytest.mark.parametrize("name", E5_CONFIGS)
def test_every_e5_config_has_a_frozen_recipe(name):
    config = load_config(resolve_config(name), recipe="frozen")
    assert config.model.bert == "e5-small" and config.model.bert_trainable is False
    assert load_config(resolve_config(name)).model.bert_trainable is True  # fine-tuning stays the default


@pytest.mark.parametrize("name", ["bert_e5_weibo", "flat_e5_weibo"])
def test_frozen_recipe_encodes_each_sentence_once_and_trains_the_rest(name, tiny_sp_bert, tmp_path, monkeypatch):
    config = load_config(resolve_config(name), TINY + ["train.epochs=3", f"model.bert={tiny_sp_bert}"], recipe="frozen")
    run = prepare(config, log=lambda _: None)
    model = run.tagger.model
    bert = model.bert_encoder()
    optimised = {id(p) for group in make_optimizer(model, config).param_groups for p in group["params"]}
    assert optimised and not optimised & {id(p) for p in bert.parameters()}  # AdamW keeps no state for the encoder
    model.train()
    batch = run.featurizer.collate([run.featurizer.encode(s) for s in run.splits["train"].sentences[:4]])
    model(batch).backward()
    assert all(p.grad is None for p in bert.parameters()) and model.out.weight.grad is not None

    encoded: list[int] = []  # rows the encoder runs on, over the whole training (3 epochs, dev and test each epoch)
    encode = BertCharFeatures.encode  # once per batch, however many windows a long sentence needs
    monkeypatch.setattr(BertCharFeatures, "encode", lambda self, ids, *a: encoded.append(ids.shape[0]) or encode(self, ids, *a))
    metrics = train(config, tmp_path / "run", progress=False, log=lambda _: None)
    sentences = {s.text for split in ("train", "dev", "test") for s in run.splits[split]}
    assert 0 < sum(encoded) <= len(sentences)  # without the memo: 3 epochs x 12 training sentences alone
    assert metrics["test"] is not None and metrics["epochs_run"] == 3
    saved = Tagger.load(tmp_path / "run")
    pretrained = load_pretrained(tiny_sp_bert).weights
    encoder = saved.model.bert_encoder().model.state_dict()
    assert all(torch.equal(encoder[k], pretrained[k][: encoder[k].shape[0]]) for k in encoder if "word_embeddings" not in k)
    texts = ["高勇，男，中国国籍。", "张三毕业于北京大学。"]
    memoised = saved.predict(texts, confidence=True)
    with memo_disabled(saved.model):
        assert saved.predict(texts, confidence=True) == memoised
    assert len(saved.model.bert_encoder().memo) == len(texts)

"""SLA / WLA's gated local attention inside TENER's character encoders (zhner.nn.local_attention.GatedLocalSelector, the
selector of zhner.nn.tener_attention): plain TENER at g = 0 and under an all-True mask, a window that really blocks far
keys, character masks without NaN under padding, a tiny TENER that trains, saves, loads and predicts the same, a syntax
run that parses once through the cache (udchinese), and the sentence classifier variant."""
from __future__ import annotations

import importlib.util
from collections import Counter

import pytest
import torch

from conftest import TEST_DATA, TINY_TENER, assert_trains_and_roundtrips, sized
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.data.example import Example
from zhner.data.vocab import Vocab
from zhner.errors import ZhnerError
from zhner.evaluate.attention import gate_means, local_maps
from zhner.models.fields import CharField, SyntaxField
from zhner.models.inputs import Featurizer, fields_for
from zhner.models.modeling_tener import TENER, TENERConfig
from zhner.models.modeling_tener_classifier import TENERClassifier, TENERClassifierConfig
from zhner.nn.local_attention import GatedLocalSelector
from zhner.nn.tener_attention import RelativeSelfAttention
from zhner.syntax import window_mask
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer, train

D, H = 16, 2
TEXTS = ["张三，男，汉族，1965年出生，本科学历。", "现任北京大学教授", "中国人民银行行长"]


def padded_inputs(B: int = 3, L: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [B, L, D], mask [B, L] (lengths L, 5, 2), a random local mask [B, L, L] with the diagonal allowed."""
    torch.manual_seed(0)
    x = torch.randn(B, L, D)
    mask = torch.arange(L)[None, :] < torch.tensor([L, 5, 2])[:B, None]
    local = (torch.rand(B, L, L) < 0.4) | torch.eye(L, dtype=torch.bool)
    return x, mask, local


def twin(gate_init: float = 0.5) -> tuple[RelativeSelfAttention, RelativeSelfAttention]:
    """Plain TENER attention and the same weights with a gated local selector (eval: no dropout)."""
    torch.manual_seed(0)
    plain = RelativeSelfAttention(D, H, dropout=0.15)
    gated = RelativeSelfAttention(D, H, dropout=0.15, selector=GatedLocalSelector(D, gate_init, "window"))
    missing, unexpected = gated.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == ["selector.gate.bias", "selector.gate.weight"] and not unexpected  # the gate is all that is new
    return plain.eval(), gated.eval()


def test_gate_zero_is_plain_tener():
    plain, gated = twin()
    torch.nn.init.constant_(gated.selector.gate.bias, -1e4)  # sigmoid(-1e4) == 0 in float32
    x, mask, local = padded_inputs()
    torch.testing.assert_close(gated(x, mask, local_mask=local), plain(x, mask), atol=1e-6, rtol=0)
    # and the gate matters: at its start value (0.5) the same mask gives something else
    torch.nn.init.constant_(gated.selector.gate.bias, 0.0)
    assert not torch.allclose(gated(x, mask, local_mask=local), plain(x, mask), atol=1e-3)


@pytest.mark.parametrize("gate_init", [0.01, 0.5, 0.99])
def test_all_true_mask_is_plain_tener_for_any_gate(gate_init):
    plain, gated = twin(gate_init)
    torch.nn.init.normal_(gated.selector.gate.weight)  # gates vary per character
    x, mask, _ = padded_inputs()
    everything = torch.ones(3, 9, 9, dtype=torch.bool)
    torch.testing.assert_close(gated(x, mask, local_mask=everything), plain(x, mask), atol=1e-6, rtol=0)


def test_window_blocks_far_keys():
    plain, gated = twin()
    torch.nn.init.constant_(gated.selector.gate.bias, 1e4)  # g = 1: local attention alone
    x, mask, _ = padded_inputs()
    window = torch.from_numpy(window_mask(9, 1)).expand(3, 9, 9)  # |i - j| <= 1
    far = x.clone()
    far[0, 6] += 10.0  # character 6 of sentence 0: out of the window of queries 0..4
    out, out_far = gated(x, mask, local_mask=window), gated(far, mask, local_mask=window)
    torch.testing.assert_close(out_far[0, :5], out[0, :5], atol=1e-6, rtol=0)
    assert not torch.allclose(out_far[0, 5:8], out[0, 5:8], atol=1e-3)  # its neighbours see it
    assert not torch.allclose(plain(far, mask)[0, :5], plain(x, mask)[0, :5], atol=1e-3)  # plain TENER sees it everywhere

    # Eq. 4-6 as recorded: S^loc is zero outside the window, the weights are the gated mixture, rows are distributions
    torch.nn.init.constant_(gated.selector.gate.bias, 0.0)
    torch.nn.init.normal_(gated.selector.gate.weight)
    selector = gated.selector
    selector.record = True
    weights = selector(torch.randn(3, H, 9, 9), x, mask[:, None, :], mask, local_mask=window)
    g, glob, loc = selector.last
    assert g.shape == (3, 9) and glob.shape == loc.shape == weights.shape == (3, H, 9, 9)
    assert (loc[0][:, ~window[0]] == 0).all()
    assert (glob[1, :, :, 5:] == 0).all() and (loc[1, :, :5, 5:] == 0).all()  # padded keys: nothing, in both
    assert torch.isfinite(loc).all()  # padded queries whose window holds only padding: uniform rows, not NaN
    torch.testing.assert_close(weights, g[:, None, :, None] * loc + (1 - g[:, None, :, None]) * glob)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, H, 9))


def test_missing_mask_and_bad_switches_are_errors():
    _, gated = twin()
    x, mask, _ = padded_inputs()
    with pytest.raises(ZhnerError, match="local_mask"):
        gated(x, mask)
    with pytest.raises(ZhnerError, match="gate_init"):
        GatedLocalSelector(D, 0.0)
    with pytest.raises(ZhnerError, match="unknown local attention"):
        GatedLocalSelector(D, 0.5, "gaussian")
    with pytest.raises(ValueError, match="unknown parser"):
        TENERConfig(local_attention="syntax", parser="stanza")


def char_featurizer(texts: list[str], kind: str = "window", window: int = 1) -> Featurizer:
    chars = Vocab.build(Counter(c for t in texts for c in t))
    return Featurizer([CharField(chars, True), SyntaxField(kind, window=window, parser="udchinese", over="tokens")])


def test_character_mask_pads_without_empty_rows_or_nan():
    featurizer = char_featurizer(TEXTS)
    items = [featurizer.encode(Example(list(t))) for t in TEXTS]
    batch = featurizer.collate(items)
    L, n = batch["chars"].shape[1], len(TEXTS[2])
    local = batch["local_mask"]  # [B, L, L] over characters: no [CLS] / [SEP]
    assert local.shape == (3, L, L) and local.any(-1).all()  # no row is empty
    assert torch.equal(local[0], torch.from_numpy(window_mask(L, 1)))
    assert torch.equal(local[2, :n, :n], torch.from_numpy(window_mask(n, 1)))
    assert not local[2, :n, n:].any() and local[2, n:].all()  # real rows: no padded key; padded rows: everything

    config = sized(TENERConfig(heads=H, head_dim=8, layers=2, bigram_dim=0, local_attention="window", local_window=1),
                   featurizer.vocab_sizes(), 5)
    assert fields_for(config, False, False, False) == ["chars", "syntax"]
    torch.manual_seed(0)
    model = TENER(config)
    assert [type(layer.attention.selector) for layer in model.layers] == [GatedLocalSelector] * 2
    model.train()
    emissions = model.emissions(batch)
    assert torch.isfinite(emissions).all()
    model(batch | {"tags": torch.zeros_like(batch["chars"])}).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.layers[0].attention.selector.gate.weight.grad.abs().sum() > 0  # the gate learns
    model.eval()
    with torch.no_grad():  # a sentence padded beside longer ones gets the emissions it gets alone
        alone = model.emissions(featurizer.collate([items[2]]))[0]
        torch.testing.assert_close(model.emissions(batch)[2, :n], alone, atol=1e-5, rtol=0)
        with pytest.raises(ZhnerError, match="local_mask"):
            model.emissions({k: v for k, v in batch.items() if k != "local_mask"})


def test_plain_tener_keeps_its_state_dict_and_local_adds_only_gates():
    overrides = ["model.heads=2", "model.head_dim=8"]
    plain = load_config(resolve_config("tener_resume"), overrides).model
    local = load_config(resolve_config("tener_resume"), overrides + ["model.local_attention=syntax"]).model
    vocab = {"chars": 30, "bigrams": 30}
    plain_keys = list(TENER(sized(plain, vocab, 5)).state_dict())
    local_keys = list(TENER(sized(local, vocab, 5)).state_dict())
    assert not any("selector" in k for k in plain_keys)
    assert [k for k in local_keys if k not in plain_keys] == [
        f"layers.{i}.attention.selector.gate.{p}" for i in range(2) for p in ("weight", "bias")
    ]


def test_tiny_tener_with_window_attention_trains_saves_and_loads(tmp_path):
    config = load_config(
        resolve_config("tener_resume"), TINY_TENER + ["model.local_attention=window", "model.local_window=2", "train.gate_lr=0.05"]
    )
    run = prepare(config, log=lambda _: None)
    model = run.tagger.model
    syntax = run.featurizer.fields["syntax"]
    assert (syntax.kind, syntax.window, syntax.over) == ("window", 2, "tokens")
    gate = model.layers[0].attention.selector.gate
    groups = [g for g in make_optimizer(model, run.config).param_groups if g["lr"] == 0.05]  # train.gate_lr
    assert len(groups) == 1 and [id(p) for p in groups[0]["params"]] == [id(gate.weight), id(gate.bias)]
    start = gate.bias.detach().clone()
    assert_trains_and_roundtrips(run, tmp_path, make_optimizer, Tagger)
    assert not torch.equal(start, gate.bias)
    loaded = Tagger.load(tmp_path)
    assert loaded.featurizer.fields["syntax"].over == "tokens"
    assert isinstance(loaded.model.layers[0].attention.selector, GatedLocalSelector)

    # Figures 2 and 3 of the SLA paper for TENER: mean gate per layer, and one sentence's distributions over characters
    gates = gate_means(loaded, [Example(list(t)) for t in TEXTS], batch_size=2)
    assert len(gates) == 1 and 0.0 < gates[0] < 1.0
    maps = local_maps(loaded, TEXTS[1])
    assert maps["pieces"] == list(TEXTS[1]) and maps["kind"] == "window"
    mask = torch.tensor(maps["mask"])
    assert torch.equal(mask, torch.from_numpy(window_mask(len(TEXTS[1]), 2)))
    (layer,) = maps["layers"]
    local, glob, mixed, g = (torch.tensor(layer[k]) for k in ("local", "global", "mixed", "gate"))
    assert (local[~mask] < 1e-6).all() and torch.allclose(mixed.sum(-1), torch.ones(len(TEXTS[1])), atol=1e-5)
    assert torch.allclose(mixed, g[:, None] * local + (1 - g[:, None]) * glob, atol=1e-6)

    # ONNX: the graph takes the [B, L, L] local mask as an input and tags as PyTorch does
    pytest.importorskip("onnxruntime")
    from zhner.export import OnnxTagger, export_onnx

    with torch.no_grad():  # a model that finds entities, so that equal output means something
        loaded.model.out.bias[loaded.task.labels.index("S-PER")] = 8.0
    path = export_onnx(loaded, tmp_path / "m.onnx")
    onnx = OnnxTagger(OnnxTagger.load(tmp_path, path).session, loaded, path)
    assert "local_mask" in onnx.input_names
    expected = loaded.predict(TEXTS, confidence=False)  # ONNX entities carry no score
    assert sum(map(len, expected)) > 3 and onnx.predict(TEXTS) == expected


@pytest.mark.skipif(importlib.util.find_spec("udchinese") is None, reason="pip install 'zhner[syntax]'")
def test_tiny_tener_with_syntax_attention_parses_once(tmp_path):
    overrides = TINY_TENER + [
        "model.local_attention=syntax", "train.epochs=1", "data.max_train_sentences=16", "data.max_eval_sentences=8"
    ]
    config = load_config(resolve_config("tener_resume"), overrides)
    lines: list[str] = []
    train(config, tmp_path / "run", log=lines.append)
    assert any(line.startswith("parse udchinese:jieba") and "32 parsed" in line for line in lines), lines
    lines.clear()
    train(config, tmp_path / "run2", log=lines.append)
    assert any(line.startswith("parse udchinese:jieba") and "0 parsed, 32 cached" in line for line in lines), lines

    tagger = Tagger.load(tmp_path / "run")
    syntax = tagger.featurizer.fields["syntax"]
    assert (syntax.kind, syntax.parser_spec, syntax.over) == ("syntax", "udchinese", "tokens")
    example = tagger.examples([TEXTS[0]])[0]
    assert example.heads is None
    item = tagger.featurizer.encode(example)  # parsed on the fly
    assert len(item["heads"]) == len(TEXTS[0])
    mask = tagger.featurizer.collate([item])["local_mask"][0]
    assert mask.diagonal().all() and not mask.all()  # Eq. 3 with m = 3 blocks characters far in the tree
    assert not torch.equal(mask, torch.from_numpy(window_mask(len(TEXTS[0]), 3)))
    assert len(tagger.predict(TEXTS)) == 3


def test_tener_classifier_with_local_attention_takes_a_step():
    texts = ["这家酒店很好，服务周到，早餐丰富。", "太差了", "房间干净", "一般般吧，下次不会再来了。"]
    featurizer = char_featurizer(texts, "window", 1)
    config = TENERClassifierConfig(
        heads=H, head_dim=8, bigram_dim=0, window=6, local_attention="window", local_window=1, gate_init=0.3,
        labels=["0", "1"], vocab_sizes=featurizer.vocab_sizes(),
    )
    assert fields_for(config, False, False, False) == ["chars", "syntax"]
    torch.manual_seed(0)
    model = TENERClassifier(config)
    selector = model.layers[0].attention.selector
    assert isinstance(selector, GatedLocalSelector)
    assert torch.allclose(torch.sigmoid(selector.gate.bias), torch.tensor(0.3))
    batch = featurizer.collate([featurizer.encode(Example(list(t))) for t in texts])  # 17 characters: 3 windows of 6
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    start = selector.gate.bias.detach().clone()
    loss = torch.nn.functional.cross_entropy(model.logits(batch), torch.tensor([1, 0, 1, 0]))
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and not torch.equal(start, selector.gate.bias)
    model.eval()
    with torch.no_grad():  # each window reads its block of the mask: a short text alone gets the same logits
        alone = model.logits(featurizer.collate([featurizer.encode(Example(list(texts[1])))]))
        torch.testing.assert_close(model.logits(batch)[1:2], alone, atol=1e-5, rtol=0)


def test_tener_classifier_with_window_attention_exports_windows_with_their_masks(tmp_path):
    pytest.importorskip("onnxruntime")
    import zhner
    from zhner.export import OnnxClassifier, export_onnx, same_predictions

    config = load_config(resolve_config("tener_chnsenticorp"), [
        f"data.dataset={TEST_DATA / 'small_tasks' / 'zh_sentiment'}",  # Chinese review sentiment written for the tests
        "model.heads=2", "model.head_dim=8", "model.layers=1", "model.window=24", "model.local_attention=window",
        "model.local_window=1", "model.gate_init=0.3", "data.max_train_sentences=24", "data.max_eval_sentences=8",
        "train.epochs=1", "train.batch_size=8",
    ])
    train(config, tmp_path / "model", log=lambda _: None)
    classifier = zhner.load(tmp_path / "model")
    path = export_onnx(classifier, tmp_path / "c.onnx")
    onnx = OnnxClassifier.load(tmp_path / "model", path)
    assert "local_mask" in onnx.input_names
    long = "这家酒店很好，服务周到，早餐丰富，房间干净，下次还会再来。" * 2  # 58 characters: 3 windows of 24
    texts = [long, "太差了", ""]
    assert same_predictions(onnx.predict(texts), classifier.predict(texts))


def test_local_attention_refuses_a_text_too_long_for_its_mask():
    from zhner.models.fields import MAX_LOCAL_TOKENS

    texts = ["好" * (MAX_LOCAL_TOKENS + 1), "差"]
    featurizer = char_featurizer(texts, "window", 1)
    items = [featurizer.encode(Example(list(t))) for t in texts]
    with pytest.raises(ZhnerError, match=f"local attention over {MAX_LOCAL_TOKENS + 1:,} tokens"):
        featurizer.collate(items)
    assert featurizer.collate(items[1:])["local_mask"].shape == (1, 1, 1)

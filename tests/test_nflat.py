"""NFLAT: inter-attention against Eq. 1-4 written as loops, <non_word>, -RPE, -TAG, padding invariance, the lean TENER
attention against its gather form, a few training steps on real sentences (mini, the corpus the package carries),
save/load, the shipped configs."""
import math

import pytest
import torch

from conftest import MINI, REPO, assert_padding_invariant, assert_trains_and_roundtrips, lattice_batch, sized
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.evaluate.attention import gate_means
from zhner.models.modeling_nflat import NFLAT, NFLATConfig
from zhner.nn import tener_attention
from zhner.nn.interformer import InterFormer
from zhner.nn.position import sinusoid
from zhner.nn.span_position import SpanPositionEncoding
from zhner.nn.tener_attention import RelativeSelfAttention
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer

TINY_NFLAT = MINI + [
    "model.heads=2", "model.head_dim=8", "data.max_train_sentences=40", "data.max_eval_sentences=8", "train.lr=0.01",
]


def words_of(seed=0, B=3, n=7, max_words=5):
    """Random padded lexicon matches: starts/ends [B, W] sorted by (start, end), padding (0, 0), and char lengths."""
    g = torch.Generator().manual_seed(seed)
    lengths = [n] + [int(torch.randint(2, n + 1, (1,), generator=g)) for _ in range(B - 1)]
    spans = []
    for L in lengths:
        s = {(a, min(L - 1, a + int(torch.randint(1, 4, (1,), generator=g))))
             for a in torch.randint(0, L - 1, (int(torch.randint(1, max_words + 1, (1,), generator=g)),), generator=g).tolist()}
        spans.append(sorted(s))
    spans[-1] = []  # one sentence without any lexicon word
    W = max(1, max(len(s) for s in spans))
    starts, ends = torch.zeros(B, W, dtype=torch.long), torch.zeros(B, W, dtype=torch.long)
    wmask = torch.zeros(B, W, dtype=torch.bool)
    for b, ws in enumerate(spans):
        for k, (s, e) in enumerate(ws):
            starts[b, k], ends[b, k], wmask[b, k] = s, e, True
    cmask = torch.arange(n)[None] < torch.tensor(lengths)[:, None]
    return starts, ends, wmask, cmask


def naive_interformer_attention(inter: InterFormer, x, y, starts, ends, wmask):
    """Eq. 1-4, 7-8 as loops over batch, head, character i and key j: the first key is <non_word> (distance 0)."""
    att = inter.layers[0].attention
    B, n, D = x.shape
    H, d = att.heads, att.head_dim
    W, bias = att.qkv.weight, att.qkv.bias
    keys = [(None, None, inter.non_word)] if inter.non_word is not None else []
    out = torch.zeros(B, n, D)
    for b in range(B):
        batch_keys = keys + [(int(starts[b, j]), int(ends[b, j]), y[b, j]) for j in range(y.shape[1]) if wmask[b, j]]
        for i in range(n):
            q = (x[b, i] @ W[:D].T + bias[:D]).view(H, d)  # Eq. 1
            scores, values = [], []
            for s, e, key in batch_keys:
                k = (key @ W[D : 2 * D].T + bias[D : 2 * D]).view(H, d)
                values.append((key @ W[2 * D :].T + bias[2 * D :]).view(H, d))
                a = ((q + att.u) * k).sum(-1)  # (Q_i + u) K_j, Eq. 3
                if inter.position is not None:
                    dh, dt = (0, 0) if s is None else (i - s, i - e)  # character i: head = tail = i
                    p = torch.cat([sinusoid(torch.tensor(dh), D), sinusoid(torch.tensor(dt), D)])
                    R = torch.relu(inter.position.fuse(p))  # Eq. 4
                    a = a + ((q + att.v) * torch.einsum("hdD,D->hd", att.w_r, R)).sum(-1)  # (Q_i + v) W_{k,R} R_ij
                scores.append(a * att.scale)  # 1 unless scaled: 1/sqrt(d)
            if not scores:  # -TAG and no word: nothing to attend to
                continue
            weights = torch.softmax(torch.stack(scores), dim=0)  # [K, H], Eq. 2
            out[b, i] = (weights[:, :, None] * torch.stack(values)).sum(0).reshape(D)  # heads concatenated, Eq. 8
    return out


@pytest.mark.parametrize(
    "rpe,non_word,scaled",
    [(True, True, False), (False, True, False), (True, False, False), (False, False, False), (True, True, True)],
)
def test_inter_attention_matches_eq1_4(rpe, non_word, scaled):
    torch.manual_seed(0)
    starts, ends, wmask, cmask = words_of(seed=1)
    B, n, D = cmask.shape[0], cmask.shape[1], 12
    inter = InterFormer(D, heads=3, d_ff=24, rpe=rpe, non_word=non_word, scaled=scaled).eval()
    assert (inter.position is None) == (not rpe) and (inter.non_word is None) == (not non_word)
    assert inter.layers[0].attention.scale == (0.5 if scaled else 1.0)  # head_dim 4
    x, y = torch.randn(B, n, D, requires_grad=True), torch.randn(B, starts.shape[1], D, requires_grad=True)
    pos = torch.arange(n).expand(B, n)
    positions = inter.positions(pos, pos, starts, ends, n - 1)
    keys, allowed = inter.keys(y, wmask)
    got = inter.layers[0].attention.attend(x, keys, positions, allowed)
    expected = naive_interformer_attention(inter, x, y, starts, ends, wmask)
    assert got.shape == (B, n, D)
    assert torch.allclose(got, expected, atol=1e-5)
    if not non_word:
        assert not got[-1].any()  # the sentence without words: zero attention output, no NaN
    g = torch.randn_like(got)
    wrt = [x, y, *inter.parameters()]
    grads = torch.autograd.grad((got * g).sum(), wrt, allow_unused=True)
    grads_naive = torch.autograd.grad((expected * g).sum(), wrt, allow_unused=True)
    for a, b in zip(grads, grads_naive):
        assert (a is None) == (b is None) or not (a if a is not None else b).any()
        if a is not None and b is not None:
            assert torch.allclose(a, b, atol=1e-4)
    assert all(torch.isfinite(a).all() for a in grads if a is not None)


def test_cross_positions_and_zero_key_equal_eq4():
    torch.manual_seed(0)
    starts, ends, _, cmask = words_of(seed=2)
    B, n = cmask.shape
    pos = torch.arange(n).expand(B, n)
    for fusion in ("ff_two", "head", "ff_four"):
        enc = SpanPositionEncoding(10, fusion)
        fast = enc(pos, pos, n - 1, starts, ends).dense()  # [B, n, W, D]
        assert torch.allclose(fast, enc.naive(pos, pos, starts, ends), atol=1e-5)
    for fusion in ("ff_two", "head"):
        enc = SpanPositionEncoding(10, fusion)
        with_zero = enc(pos, pos, n - 1, starts, ends, zero_key=True).dense()  # [B, n, 1 + W, D]
        zero = enc.naive(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long))[0, 0, 0]  # R(0, 0)
        assert torch.allclose(with_zero[:, :, 0], zero.expand(B, n, -1), atol=1e-6)
        assert torch.allclose(with_zero[:, :, 1:], enc.naive(pos, pos, starts, ends), atol=1e-5)
    with pytest.raises(ValueError, match="zero_key"):
        SpanPositionEncoding(10, "ff_four")(pos, pos, n - 1, starts, ends, zero_key=True)


def gather_relative_attention(att: RelativeSelfAttention, x, mask):
    """TENER's attention as the release (and zhner before the lean version) computed it: score all 2L-1 distances, gather."""
    B, L, _ = x.shape
    H, d = att.heads, att.head_dim
    q, k, v = att.qkv(x).view(B, L, 3, H, d).permute(2, 0, 3, 1, 4)
    rel = sinusoid(torch.arange(-(L - 1), L), d)  # [2L-1, d]
    idx = (torch.arange(L)[:, None] - torch.arange(L)[None, :]) + L - 1  # distance i - j at column i - j + L - 1
    q_pos = torch.matmul(q + att.v[:, None], rel.t()).gather(-1, idx.expand(B, H, L, L))
    k_pos = torch.matmul(k, rel.t()).gather(-1, idx.t().expand(B, H, L, L)).transpose(-1, -2)
    scores = (torch.matmul(q + att.u[:, None], k.transpose(-1, -2)) + q_pos + k_pos) * att.scale
    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2).reshape(B, L, H * d)


@pytest.mark.parametrize("d_model,heads,L,scaled", [(16, 2, 9, False), (15, 3, 40, True), (32, 4, 200, False)])
@pytest.mark.parametrize("fused", [False, True])  # scaled_dot_product_attention's kernel, or the explicit softmax
def test_lean_tener_attention_equals_gather_form(d_model, heads, L, scaled, fused, monkeypatch):
    monkeypatch.setattr(tener_attention, "FUSED_MIN_LENGTH", 0 if fused else 10**9)
    torch.manual_seed(0)
    att = RelativeSelfAttention(d_model, heads, dropout=0.0, scaled=scaled)
    x = torch.randn(2, L, d_model, requires_grad=True)
    mask = torch.ones(2, L, dtype=torch.bool)
    mask[1, L // 2 :] = False
    got, expected = att(x, mask), gather_relative_attention(att, x, mask)
    assert torch.allclose(got, expected, atol=1e-5)
    g = torch.randn_like(got)
    wrt = [x, *att.parameters()]
    for a, b in zip(torch.autograd.grad((got * g).sum(), wrt), torch.autograd.grad((expected * g).sum(), wrt)):
        assert torch.allclose(a, b, atol=1e-4)


def test_model_shapes_ablations_and_config_errors():
    sizes = {"chars": 20, "bigrams": 30, "words": 15}
    starts, ends, wmask, cmask = words_of(seed=4)
    B, n = cmask.shape
    variants = [(True, True, False, False), (False, True, True, True), (True, False, False, False)]
    for rpe, non_word, less_head, scaled in variants:
        cfg = NFLATConfig(
            heads=4, head_dim=4, char_dim=6, bigram_dim=5, rpe=rpe, non_word=non_word, less_head=less_head, scaled=scaled
        )
        model = NFLAT(sized(cfg, sizes, 7))
        assert model.encoder[0].attention.heads == (2 if less_head else 4)
        # both encoders scaled by 1/sqrt(head_dim) or neither: head_dim 4 inter, 8 with half the heads
        assert model.interformer.layers[0].attention.scale == (0.5 if scaled else 1.0)
        tener_head_dim = 16 // model.encoder[0].attention.heads
        assert model.encoder[0].attention.scale == pytest.approx(tener_head_dim**-0.5 if scaled else 1.0)
        batch = {
            "chars": torch.randint(2, 20, (B, n)), "bigrams": torch.randint(2, 30, (B, n)), "mask": cmask,
            "words": torch.randint(2, 15, (B, starts.shape[1])), "word_starts": starts, "word_ends": ends,
            "word_mask": wmask, "tags": torch.randint(0, 7, (B, n)),
        }
        assert model.emissions(batch).shape == (B, n, 7)
        loss = model(batch)
        loss.backward()
        assert math.isfinite(loss.item())
        assert all(p.grad is not None for name, p in model.named_parameters() if not name.startswith("crf")), (rpe, non_word)
    with pytest.raises(ZhnerError, match="lexicon"):
        NFLAT(sized(NFLATConfig(), {"chars": 20, "bigrams": 30}, 7))
    with pytest.raises(ZhnerError, match="less_head"):
        NFLAT(sized(NFLATConfig(heads=1, less_head=True), sizes, 7))


@pytest.mark.parametrize("dataset,heads,less_head", [("resume", 8, False), ("weibo", 12, True), ("msra", 8, False)])
def test_shipped_configs(dataset, heads, less_head):
    config = load_config(REPO / "zhner" / "configs" / f"nflat_{dataset}.yaml")
    assert config.model.name == "nflat" and config.model.heads == heads and config.model.less_head is less_head
    assert config.embeddings.lexicon == "jieba" and config.train.batch_size == 16 and config.data.dataset == dataset
    assert config.train.clip_norm == 5.0 and config.train.clip_value is None  # see the configs' header
    ablated = load_config(REPO / "zhner" / "configs" / f"nflat_{dataset}.yaml", ["model.rpe=false", "model.non_word=false"])
    assert ablated.model.rpe is False and ablated.model.non_word is False


@pytest.fixture(scope="module")
def tiny_run():
    torch.set_num_threads(1)
    config = load_config(REPO / "zhner" / "configs" / "nflat_resume.yaml", TINY_NFLAT)
    return prepare(config, log=lambda _: None)


def test_padding_invariance(tiny_run):
    model = NFLAT(tiny_run.config.model).eval()
    assert_padding_invariant(model, tiny_run)


def test_tiny_nflat_trains_and_roundtrips(tiny_run, tmp_path):
    assert tiny_run.config.model.name == "nflat" and tiny_run.featurizer.words is not None
    assert_trains_and_roundtrips(tiny_run, tmp_path, make_optimizer, Tagger)


def test_window_attention_in_the_character_layer_only(tmp_path):
    """SLA / WLA inside NFLAT (beyond the paper): only the TENER character layer gets a gate, g = 0 is NFLAT with the same
    weights, a sentence padded beside a longer one keeps its emissions, and the model trains, saves, loads and exports."""
    torch.set_num_threads(1)
    overrides = TINY_NFLAT + ["model.local_attention=window", "model.local_window=1", "model.gate_init=0.3"]
    run = prepare(load_config(REPO / "zhner" / "configs" / "nflat_resume.yaml", overrides), log=lambda _: None)
    model = run.tagger.model
    assert (run.featurizer.fields["syntax"].kind, run.featurizer.fields["syntax"].over) == ("window", "tokens")
    plain = NFLAT(run.config.model.model_copy(update={"local_attention": "none"})).eval()
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert not missing and unexpected == ["encoder.0.attention.selector.gate.weight", "encoder.0.attention.selector.gate.bias"]
    gate = model.encoder[0].attention.selector.gate
    assert torch.allclose(torch.sigmoid(gate.bias), torch.tensor(0.3))
    batch = lattice_batch(run, run.splits["train"].sentences[:6])
    assert batch["local_mask"].shape == (6, batch["chars"].shape[1], batch["chars"].shape[1])
    model.eval()
    with torch.no_grad():
        assert not torch.allclose(model.emissions(batch), plain.emissions(batch), atol=1e-3)  # the window matters
        torch.nn.init.constant_(gate.bias, -1e4)  # g = 0: global attention alone
        torch.testing.assert_close(model.emissions(batch), plain.emissions(batch), atol=1e-5, rtol=0)
        torch.nn.init.constant_(gate.bias, 0.0)
    assert_padding_invariant(model, run)
    assert_trains_and_roundtrips(run, tmp_path, make_optimizer, Tagger)
    loaded = Tagger.load(tmp_path)
    assert loaded.config.model.local_attention == "window"
    (gate_mean,) = gate_means(loaded, run.splits["dev"].sentences[:4], batch_size=2)  # Figure 2 reads NFLAT too
    assert 0.0 < gate_mean < 1.0

    pytest.importorskip("onnxruntime")
    from zhner.export import OnnxTagger, export_onnx

    path = export_onnx(loaded, tmp_path / "m.onnx")
    onnx = OnnxTagger(OnnxTagger.load(tmp_path, path).session, loaded, path)
    texts = ["张三，男，汉族，1965年出生，本科学历，现任北京大学教授。", "中国人民银行行长"]
    assert "local_mask" in onnx.input_names and onnx.predict(texts) == loaded.predict(texts, confidence=False)

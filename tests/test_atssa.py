"""ATSSA: the selective mechanism against a per-query loop (Eq. 7-12, 16-17), the straight-through gradient, the plug-in
into TENER's and FLAT's attention, the word-fusion layer against a loop (Eq. 13-15), the ablation switches, the L1 term
(Eq. 19), a few training steps on real sentences (mini, the corpus the package carries), save/load."""
import math

import pytest
import torch

from conftest import MINI, REPO
from zhner.config import load_config
from zhner.models.modeling_atssa import ATSSA, ATSSAConfig
from zhner.nn.flat_attention import FlatRelativeAttention, span_attention_mask
from zhner.nn.position import sinusoid
from zhner.nn.selective_attention import SelectiveAttention
from zhner.nn.span_position import SpanPositionEncoding
from zhner.nn.tener_attention import RelativeSelfAttention
from zhner.nn.word_fusion import WordFusion, words_per_char
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer, train, train_step

TINY_ATSSA = MINI + [
    "model.heads=2",
    "model.head_dim=8",
    "data.max_train_sentences=40",
    "data.max_eval_sentences=8",
    "train.batch_size=10",
    "train.lr=0.01",
]


def random_case(seed=0, B=3, H=2, K=7, D=6, lengths=(7, 4, 2)):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, H, K, K, generator=g, dtype=torch.double) * 2
    x = torch.randn(B, K, D, generator=g, dtype=torch.double)
    mask = torch.arange(K)[None] < torch.tensor(lengths)[:, None]  # [B, K]
    return scores, x, mask


def naive_selection(sel: SelectiveAttention, scores, x, mask, uniforms=None):
    """Eq. 7-12 one query at a time; with `uniforms` [2, B, H, Q, K] the training sample of Eq. 16-17 written out.
    The top-k keys are kept in training too (see zhner/nn/selective_attention.py)."""
    B, H, Q, K = scores.shape
    z = torch.zeros_like(scores)
    weights = torch.zeros_like(scores)
    for b in range(B):
        real = [j for j in range(K) if mask[b, j]]
        pooled = x[b, real].mean(0)
        for i in range(Q):
            for h in range(H):
                if sel.threshold is None:
                    T = 0.0
                else:
                    xi = x[b, i]
                    T = float(sel.threshold(torch.cat([xi, pooled, xi * pooled, xi - pooled]))[h].detach())
                kth = math.inf
                if sel.topk:
                    ranked = sorted((float(scores[b, h, i, j]) for j in real), reverse=True)
                    kth = ranked[min(sel.topk, len(ranked)) - 1]
                    T = min(kth, T)
                for j in real:
                    a = float(scores[b, h, i, j])
                    if a >= kth:  # the top-k keys are always kept
                        z[b, h, i, j] = 1.0
                    elif uniforms is None:
                        z[b, h, i, j] = float(a >= T)
                    else:
                        p1 = 1 / (1 + math.exp(-sel.alpha * (a - T)))  # Eq. 9
                        g1, g0 = (-math.log(-math.log(float(uniforms[c, b, h, i, j]))) for c in (0, 1))
                        e1 = math.exp((math.log(p1) + g1) / sel.tau)  # Eq. 17, class 1 (keep)
                        e0 = math.exp((math.log(1 - p1) + g0) / sel.tau)
                        z[b, h, i, j] = float(e1 >= e0)  # Eq. 16
                kept = [j for j in real if z[b, h, i, j]]
                if kept:
                    weights[b, h, i, kept] = torch.softmax(scores[b, h, i, kept], -1)  # Eq. 11-12
    return z, weights


@pytest.mark.parametrize(
    "topk,dynamic", [(3, True), (0, True), (3, False), (1, True), (6, True)]  # 6 > the 4- and 2-key rows
)
def test_inference_selection_matches_per_query_loop(topk, dynamic):
    torch.manual_seed(0)
    scores, x, mask = random_case()
    sel = SelectiveAttention(6, 2, topk=topk, dynamic_threshold=dynamic).double().eval()
    weights = sel(scores, x, mask[:, None, :], mask)
    z, expected = naive_selection(sel, scores, x, mask)
    assert sel.last.z.dtype == torch.bool and torch.equal(sel.last.z.to(z.dtype), z)
    assert torch.allclose(weights, expected, atol=1e-12)
    assert not torch.isnan(weights).any()



@pytest.mark.parametrize("topk", [3, 6])  # 6 > the 4- and 2-key rows
def test_traced_selection_equals_the_fast_path(topk, monkeypatch):
    """While torch.export traces, every row gets its k-th score (no data-dependent branch): the same weights."""
    torch.manual_seed(0)
    scores, x, mask = random_case()
    sel = SelectiveAttention(6, 2, topk=topk).double().eval()
    expected = sel(scores, x, mask[:, None, :], mask)
    z = sel.last.z
    assert (z.sum(-1) < 7).any()  # some row keeps fewer than all its keys: the selection is not trivial
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    torch.testing.assert_close(sel(scores, x, mask[:, None, :], mask), expected, atol=1e-12, rtol=0)
    assert torch.equal(sel.last.z, z)

def test_rows_never_empty_and_masked_keys_never_selected():
    torch.manual_seed(1)
    scores, x, mask = random_case(seed=1, K=9, lengths=(9, 5, 1))
    sel = SelectiveAttention(6, 2, topk=3).double().eval()
    with torch.no_grad():
        sel.threshold.bias.fill_(100.0)  # a threshold above every score: only the top-k floor keeps keys
    sel(scores, x, mask[:, None, :], mask)
    z = sel.last.z
    kept = z.sum(-1)  # [B, H, Q]
    n_real = mask.sum(-1)[:, None, None].expand_as(kept)
    assert torch.equal(kept, torch.minimum(n_real, torch.tensor(3)).to(kept.dtype))  # exactly the top-k floor
    assert (z * ~mask[:, None, None, :]).sum() == 0
    assert torch.allclose(sel.last.weights.sum(-1), torch.ones_like(kept, dtype=torch.double))
    # without the floor (ablation -topk) the same rows are empty: zero weights, no NaN
    sel.topk = 0
    weights = sel(scores, x, mask[:, None, :], mask)
    assert sel.last.z.sum() == 0 and torch.equal(weights, torch.zeros_like(weights))


@pytest.mark.parametrize("alpha,tau", [(2.0, 1.0), (5.0, 0.5)])
def test_training_sample_is_eq16_17(alpha, tau):
    scores, x, mask = random_case(seed=2)
    sel = SelectiveAttention(6, 2, topk=3, alpha=alpha, tau=tau).double().train()
    torch.manual_seed(7)
    weights = sel(scores, x, mask[:, None, :], mask)
    torch.manual_seed(7)
    uniforms = torch.rand(2, *scores.shape, dtype=torch.double)  # the module's own draw
    z, expected = naive_selection(sel, scores, x, mask, uniforms)
    assert torch.allclose(sel.last.z.detach(), z, atol=1e-12)  # straight-through: 1 + soft - soft
    assert torch.allclose(weights, expected, atol=1e-12)
    assert 0 < z.sum() < (mask[:, None, None, :].expand_as(z)).sum()  # a real sample: some keys dropped, some kept


def test_straight_through_gradient_reaches_threshold_and_scores():
    scores, x, mask = random_case(seed=3)
    scores.requires_grad_(True)
    sel = SelectiveAttention(6, 2, topk=3, alpha=5.0).double().train()
    torch.manual_seed(0)
    weights = sel(scores, x, mask[:, None, :], mask)
    (weights * torch.randn_like(weights)).sum().backward(retain_graph=True)
    assert sel.threshold.weight.grad is not None and sel.threshold.weight.grad.abs().sum() > 0  # only through z
    assert scores.grad.abs().sum() > 0
    sel.zero_grad()
    sel.last.l1.sum().backward()  # the L1 term alone pushes thresholds (through the soft sample)
    assert sel.threshold.weight.grad.abs().sum() > 0
    # at inference z is a hard step: no gradient reaches the threshold
    sel.eval().zero_grad()
    sel(scores, x, mask[:, None, :], mask).sum().backward()
    assert sel.threshold.weight.grad is None or sel.threshold.weight.grad.abs().sum() == 0


def test_l1_is_norm_of_z_over_real_queries():
    scores, x, mask = random_case(seed=4)
    sel = SelectiveAttention(6, 2).double().eval()
    sel(scores, x, mask[:, None, :], mask)
    z = sel.last.z
    for b in range(z.shape[0]):
        n = int(mask[b].sum())
        assert math.isclose(float(sel.last.l1[b]), float(z[b, :, :n].sum()) / n)


def test_selector_plugs_into_tener_attention():
    torch.manual_seed(0)
    plain = RelativeSelfAttention(16, 2, dropout=0.0).eval()
    keep_all = RelativeSelfAttention(16, 2, dropout=0.0, selector=SelectiveAttention(16, 2, topk=99)).eval()
    keep_all.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 6, 16)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    # a top-k floor at least the row length keeps every key: exactly the plain attention
    assert torch.allclose(keep_all(x, mask), plain(x, mask), atol=1e-6)
    selective = RelativeSelfAttention(16, 2, dropout=0.0, selector=SelectiveAttention(16, 2, topk=1)).eval()
    selective.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        selective.selector.threshold.bias.fill_(1e4)  # keep only each query's best key
    out = selective(x, mask)
    assert (selective.selector.last.z.sum(-1) == 1).all()
    assert not torch.allclose(out[mask], plain(x, mask)[mask], atol=1e-3)


def test_selector_plugs_into_flat_attention():
    torch.manual_seed(0)
    heads = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [0, 1, 2, 0, 0, 1, 0]])
    tails = torch.tensor([[0, 1, 2, 3, 4, 1, 4], [0, 1, 2, 0, 0, 2, 0]])
    span_mask = torch.tensor([[True] * 7, [True, True, True, False, False, True, False]])
    positions = SpanPositionEncoding(16, "ff_two")(heads, tails, 4)
    allowed = span_attention_mask(heads, tails, span_mask, 5)
    plain = FlatRelativeAttention(16, 2).eval()
    keep_all = FlatRelativeAttention(16, 2, selector=SelectiveAttention(16, 2, topk=99)).eval()
    keep_all.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 7, 16, requires_grad=True)
    expected = plain(x, positions, allowed, 5)
    got = keep_all(x, positions, allowed, 5, span_mask)
    assert torch.allclose(got[span_mask[:, :5]], expected[span_mask[:, :5]], atol=1e-6)
    with pytest.raises(ValueError, match="span_mask"):
        keep_all(x, positions, allowed, 5)
    selective = FlatRelativeAttention(16, 2, selector=SelectiveAttention(16, 2, topk=2)).train()
    selective(x, positions, allowed, None, span_mask).sum().backward()
    assert selective.selector.threshold.weight.grad.abs().sum() > 0 and x.grad.abs().sum() > 0


# -- word fusion (Eq. 13-15) --------------------------------------------------------------------------------------------


def word_batch():
    # sentence 0: 6 chars, words (0,1) (1,3) (1,2) (4,5); sentence 1: 4 chars, word (2,3); padding words (0, 0)
    starts = torch.tensor([[0, 1, 1, 4], [2, 0, 0, 0]])
    ends = torch.tensor([[1, 2, 3, 5], [3, 0, 0, 0]])
    wmask = torch.tensor([[True, True, True, True], [True, False, False, False]])
    return starts, ends, wmask


def test_words_per_char_is_eq13():
    starts, ends, wmask = word_batch()
    index, valid = words_per_char(starts, ends, wmask, 6)
    for b in range(2):
        for i in range(6):
            expected = [w for w in range(4) if wmask[b, w] and starts[b, w] <= i <= ends[b, w]]
            assert index[b, i][valid[b, i]].tolist() == expected


def test_word_fusion_matches_loop():
    torch.manual_seed(0)
    starts, ends, wmask = word_batch()
    fusion = WordFusion(10, 12, 16, 2).double().eval()
    with torch.no_grad():
        fusion.none.normal_()
    chars, words = torch.randn(2, 6, 10, dtype=torch.double), torch.randn(2, 4, 12, dtype=torch.double)
    got = fusion(chars, words, starts, ends, wmask)
    H, d = 2, 8
    for b in range(2):
        for i in range(6):
            S = [w for w in range(4) if wmask[b, w] and starts[b, w] <= i <= ends[b, w]]  # Eq. 13
            if not S:
                assert torch.equal(got[b, i], fusion.none)
                continue
            q = fusion.q(chars[b, i]).view(H, d)
            kv = fusion.kv(words[b, S]).view(len(S), 2, H, d)
            out = []
            for h in range(H):
                scores = []
                for n, w in enumerate(S):
                    p = torch.cat([sinusoid(i - starts[b, w], 16), sinusoid(i - ends[b, w], 16)])  # Eq. 14
                    R = fusion.w_r(p.double()).view(H, d)[h]  # Eq. 15
                    k = kv[n, 0, h]
                    scores.append((q[h] @ k + q[h] @ R + fusion.u[h] @ k + fusion.v[h] @ R) / math.sqrt(d))  # Eq. 5
                a = torch.softmax(torch.stack(scores), 0)
                out.append(a @ kv[:, 1, h])
            assert torch.allclose(got[b, i], torch.cat(out), atol=1e-10), (b, i)



def test_traced_word_fusion_equals_the_fast_path(monkeypatch):
    """While torch.export traces, every word is a candidate of every character (C = W, no sort): the same output."""
    torch.manual_seed(0)
    starts, ends, wmask = word_batch()
    fusion = WordFusion(10, 12, 16, 2).double().eval()
    chars, words = torch.randn(2, 6, 10, dtype=torch.double), torch.randn(2, 4, 12, dtype=torch.double)
    expected = fusion(chars, words, starts, ends, wmask)
    index, valid = words_per_char(starts, ends, wmask, 6, keep_all=True)
    assert index.shape == (2, 6, 4) and valid.sum() == words_per_char(starts, ends, wmask, 6)[1].sum()
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    torch.testing.assert_close(fusion(chars, words, starts, ends, wmask), expected, atol=1e-12, rtol=0)

# -- the model ------------------------------------------------------------------------------------------------------------


def tiny_config(extra=()):
    return load_config(REPO / "zhner" / "configs" / "atssa_resume.yaml", TINY_ATSSA + list(extra))


@pytest.fixture(scope="module")
def tiny_run():
    run = prepare(tiny_config(), log=lambda _: None)
    items = [run.featurizer.encode(s) for s in run.splits["train"].sentences[:10]]
    return run, run.featurizer.collate(items)


@pytest.mark.parametrize(
    "switch,check",
    [
        ("model.selective=false", lambda m: m.selectors() == []),
        ("model.topk=0", lambda m: [s.topk for s in m.selectors()] == [0]),
        ("model.alpha=1", lambda m: [s.alpha for s in m.selectors()] == [1.0]),
        ("model.dynamic_threshold=false", lambda m: [s.threshold for s in m.selectors()] == [None]),
    ],
)
def test_ablation_switches(tiny_run, switch, check):
    run, batch = tiny_run
    default = ATSSA(run.config.model)
    sized = {k: getattr(run.config.model, k) for k in ("char_dim", "bigram_dim", "labels", "scheme", "vocab_sizes")}
    cfg = tiny_config([switch]).model.model_copy(update=sized)
    model = ATSSA(cfg).eval()
    assert check(model) and not check(default)
    with torch.no_grad():
        model.decode(batch)
    if model.selectors():
        z = model.selectors()[0].last.z  # [B, H, L, L]
        mask = batch["mask"]
        kept = z.sum(-1)[mask[:, None, :].expand_as(z.sum(-1))]
        if switch == "model.topk=0":
            assert not torch.isnan(model.emissions(batch)).any()
        else:
            assert (kept >= 3).all()  # the floor holds at inference (every sentence here has >= 3 characters)


def test_forward_adds_l1_term(tiny_run):
    run, batch = tiny_run
    model = run.tagger.model.eval()
    with torch.no_grad():
        loss = model(batch)
        nll = model.crf(model.emissions(batch), batch["tags"], batch["mask"], reduction="mean")
        l1 = sum(s.last.l1 for s in model.selectors()).mean()
    assert l1 > 0 and math.isclose(float(loss), float(nll + model.config.l1 * l1), rel_tol=1e-6)


def test_training_steps_reduce_loss(tiny_run):
    run, batch = tiny_run
    model = run.tagger.model
    optimizer = make_optimizer(model, run.config)
    model.train()
    torch.manual_seed(0)
    losses = []
    for _ in range(8):
        losses.append(float(train_step(model, optimizer, batch, run.config.train).detach()))  # with the config's clipping
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.7 * losses[0], losses
    model.eval()


def test_save_load_roundtrip(tmp_path):
    train(tiny_config(["train.epochs=1"]), tmp_path / "run", log=lambda _: None)
    tagger = Tagger.load(tmp_path / "run")
    assert tagger.model.config.name == "atssa" and len(tagger.model.selectors()) == 1
    texts = ["张三，男，汉族，1965年出生，本科学历。", "北京大学"]
    again = Tagger.load(tmp_path / "run")
    assert tagger.predict(texts) == again.predict(texts)
    emissions = [t.model.emissions(t.featurizer.collate([t.featurizer.encode(list(texts[0]))])) for t in (tagger, again)]
    assert torch.equal(*emissions)

"""FLAT: span distances, the projected-table position encoding against Eq. 8 as written, Eq. 11 attention against a naive
implementation, masks, padding invariance, a few training steps on real sentences (mini, the corpus the package
carries), save/load, the compat preset."""
import math

import pytest
import torch

from conftest import MINI, REPO, assert_padding_invariant, assert_trains_and_roundtrips, lattice_batch, sized
from zhner.errors import ZhnerError
from zhner.models.modeling_flat import FLAT, FLATConfig
from zhner.nn import span_position as sp
from zhner.nn.flat_attention import FlatRelativeAttention, span_attention_mask
from zhner.nn.span_position import SpanPositionEncoding, position_scores, span_distances
from zhner.config import Config, config_from_dict, load_config
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer

TINY_FLAT = MINI + [
    "model.heads=2",
    "model.head_dim=8",
    "data.max_train_sentences=40",
    "data.max_eval_sentences=8",
    "train.batch_size=10",
    "train.lr=0.01",
]


def lattice(seed=0, B=3, L=7, max_words=5):
    """A random padded lattice as the model builds it: chars 0..L-1 then words (start, end) sorted, padding words (0, 0)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [L] + [int(torch.randint(2, L + 1, (1,), generator=g)) for _ in range(B - 1)]
    words = []
    for n in lengths:
        spans = set()
        for _ in range(int(torch.randint(0, max_words + 1, (1,), generator=g))):
            s = int(torch.randint(0, n - 1, (1,), generator=g))
            e = min(n - 1, s + int(torch.randint(1, 4, (1,), generator=g)))
            spans.add((s, e))
        words.append(sorted(spans))
    W = max(1, max(len(w) for w in words))
    starts, ends, wmask = torch.zeros(B, W, dtype=torch.long), torch.zeros(B, W, dtype=torch.long), torch.zeros(B, W, dtype=torch.bool)
    for b, ws in enumerate(words):
        for k, (s, e) in enumerate(ws):
            starts[b, k], ends[b, k], wmask[b, k] = s, e, True
    pos = torch.arange(L).expand(B, L)
    heads, tails = torch.cat([pos, starts], 1), torch.cat([pos, ends], 1)
    span_mask = torch.cat([torch.arange(L)[None] < torch.tensor(lengths)[:, None], wmask], 1)
    return heads, tails, span_mask, L


# -- span relative positions (Eq. 4-10) ----------------------------------------------------------------------------------


def test_distances_match_double_loop():
    heads, tails, _, _ = lattice()
    dist = span_distances(heads, tails)
    B, N = heads.shape
    for b in range(B):
        for i in range(N):
            for j in range(N):
                h_i, t_i, h_j, t_j = heads[b, i].item(), tails[b, i].item(), heads[b, j].item(), tails[b, j].item()
                assert dist["hh"][b, i, j] == h_i - h_j
                assert dist["ht"][b, i, j] == h_i - t_j
                assert dist["th"][b, i, j] == t_i - h_j
                assert dist["tt"][b, i, j] == t_i - t_j


@pytest.mark.parametrize("fusion", ["ff_four", "ff_two", "head"])
def test_projected_tables_equal_eq8(fusion):
    torch.manual_seed(0)
    heads, tails, _, L = lattice(seed=1)
    enc = SpanPositionEncoding(24, fusion)
    fast = enc(heads, tails, max_distance=L - 1).dense()  # [B, N, N, D]
    naive = enc.naive(heads, tails)  # ReLU(W_r [p_hh ; p_th ; p_ht ; p_tt] + b_r) over the concatenation
    assert fast.shape == naive.shape == (*heads.shape, heads.shape[1], 24)
    assert torch.allclose(fast, naive, atol=1e-5)
    # gradients reach W_r and b_r the same way
    g = torch.randn_like(naive)
    grads_fast = torch.autograd.grad((fast * g).sum(), [enc.fuse.weight, enc.fuse.bias])
    grads_naive = torch.autograd.grad((naive * g).sum(), [enc.fuse.weight, enc.fuse.bias])
    for a, b in zip(grads_fast, grads_naive):
        assert torch.allclose(a, b, atol=1e-4)


def test_gathered_scores_gradcheck(monkeypatch):
    monkeypatch.setattr(sp, "_CHUNK_ELEMENTS", 16)  # several chunks of query rows
    g = torch.Generator().manual_seed(0)
    qr = torch.randn(6, 2, 5, dtype=torch.double, generator=g, requires_grad=True)
    table = torch.randn(9, 5, dtype=torch.double, generator=g, requires_grad=True)
    index = torch.randint(0, 9, (6, 4), generator=g)
    assert torch.autograd.gradcheck(lambda q, t: sp._GatheredScores.apply(q, t, index), (qr, table))
    expected = torch.einsum("rhd,rjd->rjh", qr, table[index])
    assert torch.allclose(sp._GatheredScores.apply(qr, table, index), expected)


@pytest.mark.parametrize("rows", [5, 40])  # P <= N: score every table row, then gather; P > N: gather R rows in chunks
def test_position_scores_both_paths(rows, monkeypatch):
    monkeypatch.setattr(sp, "_CHUNK_ELEMENTS", 64)
    g = torch.Generator().manual_seed(0)
    B, N, H, D = 2, 9, 3, 8
    table = torch.randn(rows, D, generator=g, requires_grad=True)
    positions = sp.SpanPositions(table, torch.randint(0, rows, (B, N, N), generator=g))
    qr = torch.randn(B, N, H, D, generator=g, requires_grad=True)
    expected = torch.einsum("bihd,bijd->bijh", qr, positions.dense())
    got = position_scores(qr, positions)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(position_scores(qr[:, :4], positions), expected[:, :4], atol=1e-5)  # the first queries only
    w = torch.randn_like(got)
    for a, b in zip(torch.autograd.grad((got * w).sum(), [qr, table]), torch.autograd.grad((expected * w).sum(), [qr, table])):
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("fusion", ["ff_two", "ff_four", "head"])
@pytest.mark.parametrize("char_queries_only", [False, True])
def test_char_query_scores_equal_the_gathered_ones(fusion, char_queries_only, monkeypatch):
    """Inference's position term for character queries (one matmul per distance for character keys, projected rows
    for word keys) equals the training path's, for every fusion, with the positions of every span or of the
    characters only as queries (FLAT with one layer builds the latter)."""
    monkeypatch.setattr(sp, "_CHUNK_ELEMENTS", 256)  # several chunks of word rows
    heads, tails, _, L = lattice(seed=3, B=3, L=9, max_words=6)
    torch.manual_seed(0)
    enc = SpanPositionEncoding(16, fusion)
    att = FlatRelativeAttention(16, 4)
    if char_queries_only:
        positions = enc(heads[:, :L], tails[:, :L], max_distance=L - 1, key_heads=heads, key_tails=tails)
    else:
        positions = enc(heads, tails, max_distance=L - 1)
    q = torch.randn(3, L, 4, 4)
    expected = att.position_scores(q, positions)  # chars unset: the gathered path
    positions.chars = L
    with torch.no_grad():
        got = att.position_scores(q, positions)
        assert torch.allclose(got, expected, atol=1e-5)
        assert torch.allclose(att.position_scores(q[:, :4], positions), expected[:, :, :4], atol=1e-5)


def test_inference_emissions_equal_training_path():
    """FLAT's emissions under no_grad (character-query positions, the inference position term) equal those computed
    with autograd on (the training path), for one layer and for two."""
    heads, tails, span_mask, L = lattice(seed=1, B=3, L=8, max_words=5)
    batch = {
        "chars": torch.randint(1, 20, (3, L)), "mask": span_mask[:, :L],
        "word_starts": heads[:, L:], "word_ends": tails[:, L:], "word_mask": span_mask[:, L:],
    }
    for layers in (1, 2):
        config = FLATConfig(heads=2, head_dim=8, layers=layers, char_dim=16, bigram_dim=0, word_embedding="chars")
        model = FLAT(sized(config, {"chars": 20}, 3)).eval()
        training_path = model.emissions(batch)
        with torch.no_grad():
            assert torch.allclose(model.emissions(batch), training_path, atol=1e-4)


# -- attention (Eq. 11) and masks ------------------------------------------------------------------------------------


def naive_attention(att: FlatRelativeAttention, x, R, allowed):
    """Eq. 11 written out: A_ij = q_i W_{k,E} x_j + q_i W_{k,R} R_ij + u W_{k,E} x_j + v W_{k,R} R_ij, per head."""
    B, N, D = x.shape
    H, d = att.heads, att.head_dim
    W, b = att.qkv.weight, att.qkv.bias
    q = (x @ W[:D].T + b[:D]).view(B, N, H, d)
    if att.project_k:
        k, v = (x @ W[D : 2 * D].T + b[D : 2 * D]).view(B, N, H, d), x @ W[2 * D :].T + b[2 * D :]
    else:
        k, v = x.view(B, N, H, d), x @ W[D:].T + b[D:]
    v = v.view(B, N, H, d)
    Rk = torch.einsum("bijD,hdD->bijhd", R, att.w_r)  # W_{k,R} R_ij for each head
    A = torch.einsum("bihd,bjhd->bhij", q, k) + torch.einsum("bihd,bijhd->bhij", q, Rk)
    A = A + torch.einsum("hd,bjhd->bhj", att.u, k)[:, :, None, :] + torch.einsum("hd,bijhd->bhij", att.v, Rk)
    A = (A * att.scale).masked_fill(~allowed[:, None], float("-inf"))
    out = torch.einsum("bhij,bjhd->bihd", torch.softmax(A, -1), v).reshape(B, N, D)
    return att.out(out) if att.out is not None else out


@pytest.mark.parametrize("compat", [False, True])
def test_attention_matches_eq11(compat):
    torch.manual_seed(0)
    heads, tails, span_mask, L = lattice(seed=3)
    B, N = heads.shape
    att = FlatRelativeAttention(16, 4, scaled=not compat, project_k=not compat, out_proj=not compat).eval()
    positions = SpanPositionEncoding(16, "ff_four")(heads, tails, L - 1)
    allowed = span_attention_mask(heads, tails, span_mask, L, msm=True)
    x = torch.randn(B, N, 16, requires_grad=True)
    expected = naive_attention(att, x, positions.dense(), allowed.expand(B, N, N))
    got = att(x, positions, allowed)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(att(x, positions, allowed, num_queries=L), expected[:, :L], atol=1e-5)
    # and the same gradients, through the gathered position scores included
    g = torch.randn_like(got)
    wrt = [x, *att.parameters()]
    for a, b in zip(torch.autograd.grad((got * g).sum(), wrt), torch.autograd.grad((expected * g).sum(), wrt)):
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("project_k", [False, True])
def test_the_exported_key_mask_gives_the_masked_softmax(project_k, monkeypatch):
    """The exported graph's attention carries the key mask inside q . k (`_key_mask_columns`): the outputs of the
    masked softmax, a sentence with no key at all included (its rows are zero)."""
    torch.manual_seed(0)
    heads, tails, span_mask, L = lattice(seed=5, B=4)
    span_mask[3] = False  # a row of the batch with no real span
    B, N = heads.shape
    att = FlatRelativeAttention(16, 4, scaled=project_k, project_k=project_k, out_proj=project_k).eval()
    positions = SpanPositionEncoding(16, "ff_two")(heads, tails, L - 1)
    allowed = span_mask[:, None, :]  # [B, 1, N]: FLAT's keys-only mask
    x = torch.randn(B, N, 16)
    expected = att(x, positions, allowed)
    calls = []
    columns = FlatRelativeAttention._key_mask_columns
    monkeypatch.setattr(FlatRelativeAttention, "_key_mask_columns", staticmethod(lambda *a: calls.append(1) or columns(*a)))
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)  # the path torch.onnx.export traces
    got = att(x, positions, allowed)
    assert calls == [1]  # the exported path ran
    assert torch.allclose(got, expected, atol=1e-6)
    zero = torch.zeros(N, 16) if att.out is None else att.out.bias.expand(N, 16)  # the projection of a zero row
    assert torch.equal(got[3], zero)
    assert got[:3].abs().sum(-1).gt(0).all()  # the others attend to something


def test_msm_and_mld_masks_by_hand():
    # "ABCD" with words AB (0-1), BCD (1-3), CD (2-3) and one padding word
    heads = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0]])
    tails = torch.tensor([[0, 1, 2, 3, 1, 3, 3, 0]])
    span_mask = torch.tensor([[True] * 7 + [False]])
    plain = span_attention_mask(heads, tails, span_mask, 4)
    assert plain.shape == (1, 1, 8) and plain[0, 0].tolist() == [True] * 7 + [False]
    msm = span_attention_mask(heads, tails, span_mask, 4, msm=True)[0]
    masked = {(i, j) for i in range(8) for j in range(7) if not msm[i, j]}
    # character -> the words containing it; words as queries and character keys are untouched
    assert masked == {(0, 4), (1, 4), (1, 5), (2, 5), (2, 6), (3, 5), (3, 6)}
    assert msm[:, 7].tolist() == [False] * 7 + [True]  # the padding word is a key only for itself

    # 13 characters and the word (11, 12): heads more than 10 apart may not attend to each other
    heads = torch.tensor([list(range(13)) + [11]])
    tails = torch.tensor([list(range(13)) + [12]])
    mld = span_attention_mask(heads, tails, torch.ones(1, 14, dtype=torch.bool), 13, mld=True)[0]
    assert not mld[0, 11] and not mld[0, 12] and not mld[0, 13] and not mld[13, 0] and not mld[12, 1]
    assert mld[0, 10] and mld[1, 11] and mld[1, 13] and mld[13, 1] and mld[13, 13]
    assert mld.sum() == sum(1 for i in range(14) for j in range(14) if abs(heads[0, i] - heads[0, j]) <= 10)


# -- the model -------------------------------------------------------------------------------------------------------


def test_emission_shapes_and_config():
    sizes = {"chars": 20, "bigrams": 30, "words": 15}
    for fusion in ("ff_two", "ff_four", "head"):
        cfg = FLATConfig(heads=2, head_dim=4, char_dim=6, bigram_dim=5, position_fusion=fusion, layers=2, msm=True, mld=True)
        model = FLAT(sized(cfg, sizes, 7))
        assert set(model.pretrained_tables()) == {"chars", "bigrams", "words"}
        assert model.words.weight.shape == (15, 6)  # word_dim defaults to char_dim
        heads, tails, span_mask, L = lattice(seed=4)
        B, W = heads.shape[0], heads.shape[1] - L
        batch = {
            "chars": torch.randint(2, 20, (B, L)), "bigrams": torch.randint(2, 30, (B, L)), "mask": span_mask[:, :L],
            "words": torch.randint(2, 15, (B, W)), "word_starts": heads[:, L:], "word_ends": tails[:, L:],
            "word_mask": span_mask[:, L:], "tags": torch.randint(0, 7, (B, L)),
        }
        assert model.emissions(batch).shape == (B, L, 7)
        loss = model(batch)
        loss.backward()
        assert math.isfinite(loss.item())
        assert all(p.grad is not None for n, p in model.named_parameters() if not n.startswith("crf")), fusion
    with pytest.raises(ZhnerError, match="lexicon"):
        FLAT(sized(FLATConfig(), {"chars": 20, "bigrams": 30}, 7))


def test_compat_preset_fills_release_values():
    cfg = FLATConfig(preset="compat")
    assert (cfg.residual, cfg.scaled, cfg.project_k, cfg.out_proj) == (False, False, False, False)
    assert cfg.crf_init == "zero" and cfg.crf_constraints is False and cfg.constrained_decoding is False
    assert FLATConfig(preset="compat", scaled=True).scaled is True  # an explicit value wins over the preset
    default = FLATConfig()
    # the release's attention (unscaled, K unprojected, no output projection) with a real residual
    assert (default.residual, default.scaled, default.project_k, default.out_proj) == (True, False, False, False)
    # the release's CRF training, decoded well-formed
    assert (default.crf_init, default.crf_constraints, default.constrained_decoding) == ("zero", False, True)
    # through the run config, and back from its dump
    config = config_from_dict({"model": {"name": "flat", "preset": "compat"}, "embeddings": {"lexicon": "jieba"}})
    again = Config.model_validate(config.model_dump(mode="json"))
    assert again.model == config.model


@pytest.fixture(scope="module")
def tiny_run():
    torch.set_num_threads(1)
    config = load_config(REPO / "zhner" / "configs" / "flat_resume.yaml", TINY_FLAT)
    return prepare(config, log=lambda _: None)


def test_padding_invariance(tiny_run):
    model = FLAT(tiny_run.config.model.model_copy(update={"msm": True, "mld": True, "layers": 2})).eval()
    assert_padding_invariant(model, tiny_run)


def test_tiny_flat_trains_and_roundtrips(tiny_run, tmp_path):
    assert tiny_run.config.model.name == "flat" and tiny_run.featurizer.words is not None
    assert_trains_and_roundtrips(tiny_run, tmp_path, make_optimizer, Tagger)


def test_compat_model_runs(tiny_run):
    sizes = {k: getattr(tiny_run.config.model, k) for k in ("labels", "scheme", "vocab_sizes")}
    model = FLAT(FLATConfig(heads=2, head_dim=8, preset="compat", position_fusion="ff_four", **sizes))
    assert not model.crf.transitions.any() and model.layers[0].attention.out is None
    batch = lattice_batch(tiny_run, tiny_run.splits["train"].sentences[:6])
    loss = model(batch)
    loss.backward()
    assert math.isfinite(loss.item())
    assert len(model.decode(batch)) == 6


def test_a_directory_saved_before_constrained_decoding_decodes_as_it_trained(tiny_run, tmp_path):
    """A FLAT directory written before `model.constrained_decoding` existed, trained without CRF constraints (an ablation),
    kept its unconstrained decoding: the field's absence means "as trained", not FLAT's new default (true)."""
    import yaml

    tiny_run.tagger.save(tmp_path)
    raw = yaml.safe_load((tmp_path / "config.yaml").read_text(encoding="utf-8"))
    assert raw["model"]["constrained_decoding"] is True and raw["model"]["crf_constraints"] is False  # today's default
    assert Tagger.load(tmp_path).model.crf.decode_trans_allowed is not None
    del raw["model"]["constrained_decoding"]  # as an older zhner wrote it
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    old = Tagger.load(tmp_path)
    assert old.config.model.constrained_decoding is None and old.model.crf.decode_trans_allowed is None
    assert bool(old.model.crf.allowed(decoding=True)[1].all())  # unconstrained, as it was

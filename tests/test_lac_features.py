"""LAC's small model read from jieba without PaddlePaddle (zhner.pretrained.lac), and its frozen BiGRU states as
character features of the small taggers (model.char_features)."""
import itertools

import numpy as np
import pytest
import torch

from conftest import TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.models.fields import LacField
from zhner.pretrained import lac as lac_module
from zhner.pretrained.lac import (
    NUM_TAGS, STATE_DIM, BiGRULayer, GRUDirection, LacModel, entity_spans, lac_char, load_lac_model, words,
)
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import train

# LAC's reading of sentences whose segmentation and names are beyond doubt
SENTENCES = {
    "我爱北京天安门": [("我", "r"), ("爱", "v"), ("北京", "LOC"), ("天安门", "LOC")],
    "李小明在中国科学院计算技术研究所工作。": [
        ("李小明", "PER"), ("在", "p"), ("中国科学院计算技术研究所", "ORG"), ("工作", "v"), ("。", "w"),
    ],
    "张三和李四去了上海浦东新区": [("张三", "PER"), ("和", "c"), ("李四", "PER"), ("去", "v"), ("了", "u"), ("上海浦东新区", "LOC")],
    "百度是一家高科技公司": [("百度", "ORG"), ("是", "v"), ("一家", "m"), ("高科技", "n"), ("公司", "n")],
}


@pytest.fixture(scope="module")
def lac() -> LacModel:
    return load_lac_model()


def test_reader_shapes(lac):
    assert lac.embedding.shape == (len(lac.vocab) + 1, 128)  # word.dic names every row but one
    assert len(lac.layers) == 2
    for layer, in_dim in zip(lac.layers, (128, 256)):
        for d in (layer.forward, layer.backward):
            assert d.proj_w.shape == (in_dim, 384) and d.proj_b.shape == (384,)
            assert d.gate_w.shape == (128, 256) and d.state_w.shape == (128, 128)
    assert lac.out_w.shape == (STATE_DIM, NUM_TAGS) and lac.transitions.shape == (NUM_TAGS, NUM_TAGS)
    assert len(lac.tags) == NUM_TAGS and {"PER-B", "LOC-I", "ORG-B", "O"} <= set(lac.tags)
    chars = list("李小明在北京")
    assert lac.states(chars).shape == (6, 256) and lac.scores(chars).shape == (6, 57)
    assert lac.states([]).shape == (0, 256) and lac.tag([]) == []


@pytest.mark.parametrize("text", SENTENCES)
def test_lac_segments_and_names_as_lac_does(lac, text):
    assert words(list(text), lac.tag(list(text))) == SENTENCES[text]


def test_the_other_gru_convention_reads_nonsense(lac):
    """origin_mode (h = u h_prev + (1 - u) c) is not how LAC was trained: none of the sentences comes out right."""
    other = lac.variant(origin_mode=True)
    for text, expected in SENTENCES.items():
        assert words(list(text), other.tag(list(text))) != expected


def test_full_width_and_cjk_punctuation_read_as_lac_trained_them(lac):
    assert lac_char("，") == "," and lac_char("。") == "." and lac_char("Ａ") == "a" and lac_char("“") == '"'
    assert lac_char("中") == "中" and lac_char("…") == "."
    assert (lac.ids(list("，１Ｂ")) == lac.ids(list(",1b"))).all()
    text = "今天天气很好，我们去公园玩吧！"
    assert [w for w, kind in words(list(text), lac.tag(list(text))) if kind == "w"] == ["，", "！"]
    assert lac.variant(normalize=False).ids(["，"])[0] == lac.vocab["，"]  # jieba's own reader: the untrained row
    assert lac.ids(["\ue305"])[0] == lac.vocab["OOV"]


def _paddle_gru(d: GRUDirection, x: np.ndarray, reverse: bool) -> np.ndarray:
    """dynamic_gru written out per direction and per unit, as PaddlePaddle's kernel states it (origin_mode false)."""
    H = d.state_w.shape[0]
    gates = x @ d.proj_w + d.proj_b
    h, out = np.zeros(H), np.zeros((len(x), H))
    for t in (reversed(range(len(x))) if reverse else range(len(x))):
        update = 1 / (1 + np.exp(-(gates[t, :H] + h @ d.gate_w[:, :H])))
        reset = 1 / (1 + np.exp(-(gates[t, H : 2 * H] + h @ d.gate_w[:, H:])))
        candidate = np.tanh(gates[t, 2 * H :] + (reset * h) @ d.state_w)
        h = h - update * h + update * candidate
        out[t] = h
    return out


def test_bigru_layer_runs_both_directions_as_two_paddle_grus():
    rng = np.random.default_rng(0)
    H, n = 4, 7

    def direction() -> GRUDirection:
        return GRUDirection(*(rng.normal(size=s).astype(np.float32) for s in ((3, 3 * H), (3 * H,), (H, 2 * H), (H, H))))

    layer = BiGRULayer(direction(), direction())
    x = rng.normal(size=(2, n, 3)).astype(np.float32)
    lengths = [n, 4]  # the second sentence padded with 3 rows of noise
    got = layer.run(x, lengths)  # [2, n, 2H]
    for b, length in enumerate(lengths):
        one = x[b, :length]
        expected = np.concatenate([_paddle_gru(layer.forward, one, False), _paddle_gru(layer.backward, one, True)], axis=1)
        np.testing.assert_allclose(got[b, :length], expected, atol=1e-5)


def test_sentences_in_a_batch_get_their_states_alone(lac):
    sentences = [list(t) for t in SENTENCES] + [[]]
    for together, chars in zip(lac.states_batch(sentences), sentences):
        np.testing.assert_allclose(together, lac.states(chars), atol=1e-5)


def test_viterbi_finds_the_best_path_of_the_crf():
    rng = np.random.default_rng(1)
    T, n = 3, 4
    start, end, trans = rng.normal(size=T), rng.normal(size=T), rng.normal(size=(T, T))
    model = LacModel({}, np.zeros((1, 1)), (), np.zeros((1, T)), np.zeros(T), start, end, trans, ("a", "b", "c"))
    emissions = rng.normal(size=(n, T))

    def total(path):
        s = start[path[0]] + end[path[-1]] + sum(emissions[i, t] for i, t in enumerate(path))
        return s + sum(trans[a, b] for a, b in zip(path, path[1:]))

    best = max(itertools.product(range(T), repeat=n), key=total)
    assert model.viterbi(emissions) == list(best)


def test_entity_spans_are_lac_words_of_the_mapped_types():
    tags = ["PER-B", "PER-I", "p-B", "LOC-B", "LOC-I", "LOC-B", "O", "ORG-I"]
    assert entity_spans(tags, {"PER": "PER", "LOC": "LOC"}) == [(0, 2, "PER"), (3, 5, "LOC"), (5, 6, "LOC")]


def test_field_features_are_frozen_unit_rows_memoised_and_padded(lac):
    field = LacField("lac")
    tokens = list("李小明在北京")
    x = field.features(tokens)
    assert x.shape == (6, 256) and x.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(x.astype(np.float32), axis=1), 1.0, atol=1e-2)
    direction = lac.states(tokens) / np.linalg.norm(lac.states(tokens), axis=1, keepdims=True)
    np.testing.assert_allclose(x.astype(np.float32), direction, atol=2e-3)
    assert field.features(list(tokens)) is x  # computed once per sentence
    fresh = LacField("lac")
    fresh.prepare([list("中国人民银行行长"), tokens, ["北"]])  # in one batch, padded: the same rows
    np.testing.assert_allclose(fresh.features(tokens).astype(np.float32), x.astype(np.float32), atol=2e-3)
    batch = field.collate([{"lac": x}, {"lac": field.features(["北"])}], 6)["char_features"]
    assert batch.shape == (2, 6, 256) and not batch.requires_grad
    assert torch.equal(batch[1, 1:], torch.zeros(5, 256))
    scores = LacField("lac_scores").features(tokens)
    assert scores.shape == (6, 57)


def test_field_memo_is_bounded_in_entries_and_bytes(monkeypatch):
    field = LacField("lac")
    monkeypatch.setattr(field, "MEMO_ENTRIES", 3)
    for i in range(5):
        field.prepare([list(f"第{i}句话")])
    assert len(field._memo) == 3 and field._memo_bytes == sum(x.nbytes for x in field._memo.values())
    assert tuple("第4句话") in field._memo and tuple("第0句话") not in field._memo  # least recently used go first
    monkeypatch.setattr(field, "MEMO_BYTES", 4 * 256 * 2)  # four characters of float16 rows
    field.prepare([list("北京")])
    assert list(field._memo) == [tuple("北京")]  # over the byte bound: only the newest stays
    assert field._memo_bytes == 2 * 256 * 2


def test_no_subnormal_weights_slow_the_bigru(lac):
    """LAC's files hold subnormal floats (~3e-42), a microcode assist per product on x86: they are read as zeros."""
    tiny = np.finfo(np.float32).tiny
    for layer in lac.layers:
        for direction in (layer.forward, layer.backward):
            for w in (direction.proj_w, direction.gate_w, direction.state_w):
                assert not ((w != 0) & (np.abs(w) < tiny)).any()


def test_field_round_trips_and_refuses_other_weights():
    field = LacField("lac_scores")
    again = LacField.from_dict(field.to_dict())
    assert (again.kind, again.dim, again.weights_sha256) == ("lac_scores", 57, field.weights_sha256)
    with pytest.raises(ZhnerError, match="not the one this model was trained with"):
        LacField.from_dict(field.to_dict() | {"weights_sha256": "0" * 64})
    with pytest.raises(ValueError, match="unknown character features"):
        LacField("elmo")


def test_a_missing_jieba_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(lac_module, "jieba_dir", lambda: (_ for _ in ()).throw(ZhnerError("the jieba package is not installed")))
    lac_module.fingerprint.cache_clear()
    try:
        with pytest.raises(ZhnerError, match="jieba package is not installed"):
            LacField("lac")
    finally:
        monkeypatch.undo()
        lac_module.fingerprint.cache_clear()


@pytest.mark.parametrize(
    "config, extra, trains",
    [
        ("tener_weibo", [], True),
        ("flat_weibo", ["model.heads=2", "model.head_dim=8", "model.layers=1"], False),
        ("nflat_weibo", ["model.heads=2", "model.head_dim=8"], False),
    ],
)
def test_lac_features_in_the_small_models_save_load_and_train(config, extra, trains, tmp_path):
    # on mini (TINY_TENER's corpus); the lattice models take TINY_TENER's data and training sizes, not its TENER sizes
    sizes = TINY_TENER if config == "tener_weibo" else [o for o in TINY_TENER if not o.startswith("model.")]
    overrides = sizes + extra + ["model.char_features=lac"]
    cfg = load_config(resolve_config(config), overrides)
    run = prepare(cfg, log=lambda _: None)
    model = run.tagger.model
    assert "lac" in run.featurizer.fields and model.embed.feature_dim == 256
    plain = type(model)(run.config.model.model_copy(update={"char_features": "none"}))  # a model is built from its config
    assert model.state_dict().keys() == plain.state_dict().keys()  # the LAC weights are not part of the model
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in plain.parameters())
    assert extra == 256 * cfg.model.heads * cfg.model.head_dim  # one projection reads them: 256 more input columns
    sents = run.splits["train"].sentences[:4]
    batch = run.featurizer.collate([run.featurizer.encode(s) for s in sents])
    assert batch["char_features"].shape[-1] == 256
    run.tagger.save(tmp_path)  # (untrained) weights and vocab.json: the features come back from jieba at load
    loaded = Tagger.load(tmp_path)
    assert loaded.config.model.char_features == "lac" and "lac" in loaded.featurizer.fields
    texts = ["李小明在北京大学工作，", "", "中国人民银行行长"]
    assert loaded.predict(texts) == run.tagger.predict(texts)
    again = loaded.featurizer.collate([loaded.featurizer.encode(s) for s in sents])
    assert torch.equal(again["char_features"], batch["char_features"])
    with torch.no_grad():
        assert torch.equal(loaded.model.eval().emissions(again), model.eval().emissions(batch))
    if not trains:
        return
    metrics = train(cfg, tmp_path / "trained", log=lambda _: None)  # end to end: trains, selects, saves
    assert metrics["status"] == "completed" and (tmp_path / "trained" / "model.safetensors").is_file()

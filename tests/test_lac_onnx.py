"""LAC's BiGRU as a hand-written ONNX graph run by onnxruntime (zhner.pretrained.lac_onnx): a valid ModelProto, the
numpy loop's states, the numpy loop where onnxruntime is missing."""
import builtins

import numpy as np
import onnx
import pytest

from zhner.errors import ZhnerError
from zhner.pretrained import lac_onnx
from zhner.pretrained.lac import char_features, load_lac_model, words
from zhner.pretrained.lac import padded_char_features as char_features_padded

SENTENCES = ["我爱北京天安门", "李小明在中国科学院计算技术研究所工作。", "好", "张三和李四去了上海浦东新区，看了东方明珠。"]


@pytest.fixture(scope="module")
def lac():
    return load_lac_model()


def test_the_graph_is_a_valid_onnx_model(lac):
    model = onnx.load_from_string(lac_onnx.bigru_graph(lac))
    onnx.checker.check_model(model, full_check=True)  # shapes inferred through Gather, GRU, Transpose, Reshape
    assert [n.op_type for n in model.graph.node].count("GRU") == 2
    gru = next(n for n in model.graph.node if n.op_type == "GRU")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gru.attribute}
    assert attrs == {"hidden_size": 128, "direction": b"bidirectional", "linear_before_reset": 0}
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(weights["embedding"], lac.embedding)
    assert weights["W1"].shape == (2, 384, 256) and weights["R0"].shape == (2, 384, 128) and weights["B0"].shape == (2, 768)
    # the update gate enters negated (ONNX's z is 1 - Paddle's u), the reset and candidate gates as they are
    np.testing.assert_array_equal(weights["W0"][1, :128], -lac.layers[0].backward.proj_w[:, :128].T)
    np.testing.assert_array_equal(weights["R1"][0, 256:], lac.layers[1].forward.state_w.T)


def test_float16_rounding_is_numpys_bit_for_bit():
    model = onnx.load_from_string(lac_onnx.float16_rounding_graph())
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(0)
    # normal, subnormal and zero float16 values, ties, negatives: every case the unit rows can hold
    x = np.concatenate([rng.normal(size=3000) * scale for scale in (1.0, 1e-2, 1e-4, 1e-6, 1e-8)] + [np.zeros(5)])
    x = np.concatenate([x, np.float32(1 + 2**-11) * np.arange(-4, 5)]).astype(np.float32).reshape(1, -1, 1)
    expected = x.astype(np.float16).astype(np.float32)
    assert not np.array_equal(expected, x)  # the rounding does something here
    np.testing.assert_array_equal(lac_onnx.round_to_float16(x), expected)


def test_padded_features_are_the_sentences_own_and_zero_past_them(lac):
    sentences = [list(s) for s in SENTENCES]
    for kind in ("lac", "lac_scores"):
        half, lengths = char_features_padded(lac, sentences, kind)
        single, _ = char_features_padded(lac, sentences, kind, np.float32)
        assert half.dtype == np.float16 and single.dtype == np.float32
        np.testing.assert_array_equal(single, half.astype(np.float32))  # the same values, either storage
        for b, (chars, alone) in enumerate(zip(sentences, char_features(lac, sentences, kind))):
            np.testing.assert_array_equal(half[b, : len(chars)], alone)
            assert not half[b, len(chars) :].any()
    with pytest.raises(ValueError, match="float16 or float32"):
        char_features_padded(lac, sentences, "lac", np.float64)


def test_onnxruntime_gives_the_numpy_states_in_mixed_batches(lac):
    sentences = [list(s) for s in SENTENCES]
    ort_states = lac.states_batch(sentences, engine="onnxruntime")  # padded to the longest, as a batch is
    for got, expected, chars in zip(ort_states, lac.states_batch(sentences, engine="numpy"), sentences):
        assert got.shape == (len(chars), 256)
        np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(lac.states(list(SENTENCES[1])), ort_states[1], atol=1e-5)  # alone = in the batch


def test_lac_reads_the_same_words_either_way(lac):
    for text in SENTENCES:
        states = {engine: lac.states_batch([list(text)], engine=engine)[0] for engine in ("numpy", "onnxruntime")}
        tags = {engine: [lac.tags[t] for t in lac.viterbi(lac.emissions(s))] for engine, s in states.items()}
        assert words(list(text), tags["onnxruntime"]) == words(list(text), tags["numpy"])


def test_without_onnxruntime_numpy_runs_the_layers(lac, monkeypatch):
    real_import = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError("no onnxruntime here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(lac_onnx, "_SESSIONS", {})
    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    lac_onnx.onnxruntime_installed.cache_clear()  # asked again, without onnxruntime
    try:
        assert lac_onnx.ort_bigru(lac) is None
        np.testing.assert_allclose(lac.states(list("北京")), lac.states_batch([list("北京")], engine="numpy")[0], atol=0)
        with pytest.raises(ZhnerError, match="onnxruntime"):
            lac.states_batch([list("北京")], engine="onnxruntime")
        with pytest.raises(ValueError, match="unknown engine"):
            lac.states_batch([list("北京")], engine="gpu")
    finally:
        lac_onnx.onnxruntime_installed.cache_clear()  # the next test asks with onnxruntime back


def test_the_other_gru_convention_stays_in_numpy(lac):
    other = lac.variant(origin_mode=True)
    np.testing.assert_array_equal(other.states(list("北京")), other.states_batch([list("北京")], engine="numpy")[0])
    with pytest.raises(ZhnerError, match="origin_mode"):
        other.states_batch([list("北京")], engine="onnxruntime")

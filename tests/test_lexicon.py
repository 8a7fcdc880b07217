"""Lexicon matching and pretrained vectors (zhner.lexicon)."""
from __future__ import annotations

import gzip
import lzma
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from zhner.data.corpus import read_corpus
from zhner.errors import ZhnerError
from zhner.lexicon import lac as lacmod
from zhner.lexicon import word2vec
from zhner.lexicon.lac import load_lac_char_vectors
from zhner.lexicon.lexicon import Lexicon
from zhner.lexicon.table import Vectors
from zhner.lexicon.vectors import compose_vectors, embedding_matrix, load_vectors
from zhner.lexicon.word2vec import load_word2vec_text

# LAC's table as a word2vec text file, restricted to the characters of Resume, Weibo and MSRA: a file of the benchmark
# corpora's folder (shared_data), as the papers' releases distribute it
LAC_MATCHED = Path("char_emb_lac") / "lac_char_emb.128d.matched_resume_weibo_msra.txt"


@pytest.fixture(scope="module")
def jieba_lexicon() -> Lexicon:
    return Lexicon.from_jieba()


@pytest.fixture(scope="module")
def lac() -> Vectors:
    return load_lac_char_vectors()


# -- Lexicon -------------------------------------------------------------------------------------------------------


def test_construction_dedupes_sorts_and_filters():
    lex = Lexicon(["中国", "北京", "中国", "京", " 人民 ", "a b", ""], min_len=2)
    assert lex.words == ["中国", "人民", "北京"]  # sorted, deduplicated, stripped; short and spaced words dropped
    assert len(lex) == 3 and "中国" in lex and "京" not in lex
    assert Lexicon(["京", "北京"], min_len=1).words == ["京", "北京"]


def test_match_hand_examples():
    lex = Lexicon(["中国", "中国人", "国人", "人民", "北京", "京城", "共和国", "人民共和国"])
    assert lex.match("中国人民") == [(0, 2, "中国"), (0, 3, "中国人"), (1, 3, "国人"), (2, 4, "人民")]
    # nested words, all ending at the last character
    assert lex.match("人民共和国") == [(0, 2, "人民"), (0, 5, "人民共和国"), (2, 5, "共和国")]
    # words at both ends, a repeated word, overlap across a boundary (北京|京城)
    assert lex.match("北京和北京城") == [(0, 2, "北京"), (3, 5, "北京"), (4, 6, "京城")]
    assert lex.match("你好") == []
    assert lex.match("") == []
    assert Lexicon([]).match("中国") == []
    # offsets count code points, also after characters outside the BMP (Weibo has emoji)
    assert lex.match("😀中国") == [(1, 3, "中国")]
    assert lex.match_many(["中国", "", "北京"]) == [[(0, 2, "中国")], [], [(0, 2, "北京")]]


def test_match_equals_bruteforce_on_real_sentences(jieba_lexicon):
    from zhner.data.registry import find_file

    sentences = [s.text for s in read_corpus(find_file("mini", "train")).sentences[:200]]
    words, longest = set(jieba_lexicon.words), jieba_lexicon.max_len
    total = 0
    for text in sentences:
        expected = [
            (i, j, text[i:j])
            for i in range(len(text))
            for j in range(i + 2, min(len(text), i + longest) + 1)
            if text[i:j] in words
        ]
        assert jieba_lexicon.match(text) == expected
        total += len(expected)
    assert total > 1000  # the comparison is not vacuous


def test_from_jieba(jieba_lexicon):
    assert len(jieba_lexicon) > 300_000
    assert all(len(w) >= 2 for w in jieba_lexicon.words)
    assert jieba_lexicon.words == sorted(jieba_lexicon.words)
    assert "中华人民共和国" in jieba_lexicon and jieba_lexicon.name == "jieba"


def test_restrict_keeps_only_occurring_words():
    lex = Lexicon(["中国", "人民", "北京", "上海"])
    small = lex.restrict(["中国人民", "在北京"])
    assert small.words == ["中国", "人民", "北京"]
    texts = ["中国人民在北京", "上海人"]
    assert small.match_many(texts[:1]) == lex.match_many(texts[:1])
    assert len(lex.restrict([])) == 0


def test_save_load_roundtrip(tmp_path):
    lex = Lexicon(["中国", "北京", "人民共和国", "京"], min_len=1)
    path = tmp_path / "model" / "lexicon.txt"
    lex.save(path)
    assert path.read_text(encoding="utf-8") == "".join(f"{w}\n" for w in sorted(["中国", "北京", "人民共和国", "京"]))
    back = Lexicon.load(path)
    assert back.words == lex.words
    assert back.match("北京人民共和国") == lex.match("北京人民共和国")
    Lexicon([]).save(tmp_path / "empty.txt")
    assert len(Lexicon.load(tmp_path / "empty.txt")) == 0
    assert not [p for p in (tmp_path / "model").iterdir() if p.name != "lexicon.txt"]  # no temp file left


def test_pickle_rebuilds_automaton():
    lex = Lexicon(["中国", "国人"])
    lex.match("中国")  # builds the automaton
    clone = pickle.loads(pickle.dumps(lex))
    assert clone.match("中国人") == [(0, 2, "中国"), (1, 3, "国人")]


def test_from_file_word_list_and_word2vec(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("中国 1000 ns\n\n北京\t34 ns\n京\n人民\n", encoding="utf-8")
    assert Lexicon.from_file(words).words == ["中国", "人民", "北京"]
    w2v = tmp_path / "words.vec"
    w2v.write_text("3 2\n中国 0.1 0.2\n北京 0.3 0.4\n\u3000 0.5 0.6\n", encoding="utf-8")
    lex = Lexicon.from_file(w2v)
    assert lex.words == ["中国", "北京"] and "3" not in lex
    # a word list whose first line merely looks like a header ("2 3" followed by a 1-column line) keeps it
    numbers = tmp_path / "numbers.txt"
    numbers.write_text("12 3\n中国\n", encoding="utf-8")
    assert Lexicon.from_file(numbers).words == ["12", "中国"]
    gz = tmp_path / "words.txt.gz"
    gz.write_bytes(gzip.compress("中国\n北京\n".encode("utf-8")))
    assert Lexicon.from_file(gz).words == ["中国", "北京"]


def test_from_file_cut_offs_by_length_and_count(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("中国 1000 ns\n北京\t34 ns\n人民大会堂 5 ns\n中华人民共和国 80 ns\n", encoding="utf-8")
    assert Lexicon.from_file(words, max_word_len=5).words == ["中国", "人民大会堂", "北京"]
    assert Lexicon.from_file(words, min_freq=34).words == ["中华人民共和国", "中国", "北京"]
    assert Lexicon.from_file(words, max_word_len=4, min_freq=50).words == ["中国"]
    with pytest.raises(ZhnerError, match="count >= 5000"):
        Lexicon.from_file(words, min_freq=5000)
    uncounted = tmp_path / "uncounted.txt"
    uncounted.write_text("中国 1000\n北京\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match="a count after each word") as err:
        Lexicon.from_file(uncounted, min_freq=2)
    assert err.value.where == str(uncounted) and err.value.line == 2
    w2v = tmp_path / "words.vec"
    w2v.write_text("2 2\n中国 0.1 0.2\n北京 0.3 0.4\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match="word2vec"):
        Lexicon.from_file(w2v, min_freq=2)
    assert Lexicon.from_file(w2v, max_word_len=2).words == ["中国", "北京"]


def test_from_jieba_cut_offs():
    full = Lexicon.from_jieba()
    from zhner.train.resources import load_lexicon  # what embeddings.lexicon_max_len / lexicon_min_freq call

    short = load_lexicon("jieba", max_word_len=3)
    frequent = load_lexicon("jieba", min_freq=100)
    assert short.max_len == 3 and set(short.words) == {w for w in full.words if len(w) <= 3}
    assert set(frequent.words) < set(full.words) and 10_000 < len(frequent) < len(full) / 2


def test_from_file_bad_input(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes("中国\n北京\n".encode("utf-8") + b"\xff\xfe\n")
    with pytest.raises(ZhnerError) as err:
        Lexicon.from_file(bad)
    assert str(bad) in str(err.value) and err.value.line == 3 and "UTF-8" in str(err.value)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match="empty"):
        Lexicon.from_file(empty)
    short = tmp_path / "short.txt"
    short.write_text("中\n国\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match="length >= 2"):
        Lexicon.from_file(short)
    with pytest.raises(ZhnerError, match="no such file"):
        Lexicon.from_file(tmp_path / "missing.txt")


# -- Vectors -------------------------------------------------------------------------------------------------------


def test_lac_vectors(lac):
    assert lac.dim == 128 and len(lac) == 20940  # word.dic has no entry for ID 20939
    assert lac.matrix.dtype == np.float32 and lac.matrix.flags.writeable
    assert lac.tokens[-5:] == ["OOV_NUM", "OOV_ALPHA", "OOV_ALNUM", "OOV_HANZ", "OOV"]
    assert {"a", "Z", "7", "北", "\u3000"} <= set(lac.tokens)
    assert lac.get("北") is not None and lac.get("no such token") is None
    # real pretrained vectors: 北's nearest neighbours include 南 (PROVENANCE.md)
    unit = lac.matrix / np.linalg.norm(lac.matrix, axis=1, keepdims=True)
    sims = unit @ unit[lac.index()["北"]]
    assert lac.index()["南"] in np.argsort(-sims)[1:6]


def test_lac_equals_converted_text_file(lac, shared_data):
    ref = load_word2vec_text(shared_data / LAC_MATCHED, cache=False)
    assert len(ref) == 5320 and ref.dim == 128
    rows = [lac.index()[t] for t in ref.tokens]  # every token of the file is in the table
    np.testing.assert_allclose(lac.matrix[rows], ref.matrix, rtol=0, atol=1e-6)


def _lod_tensor(data: np.ndarray, packed: bool, lod: bytes = b"") -> bytes:
    def varint(n: int) -> bytes:
        out = b""
        while True:
            byte, n = n & 0x7F, n >> 7
            out += bytes([byte | (0x80 if n else 0)])
            if not n:
                return out

    if packed:
        dims = b"".join(varint(d) for d in data.shape)
        desc = b"\x08\x05" + b"\x12" + varint(len(dims)) + dims
    else:
        desc = b"\x08\x05" + b"".join(b"\x10" + varint(d) for d in data.shape)
    levels = 1 if lod else 0
    head = struct.pack("<IQ", 0, levels) + (struct.pack("<Q", len(lod)) + lod if lod else b"")
    return head + struct.pack("<Ii", 0, len(desc)) + desc + data.astype("<f4").tobytes()


def test_lod_tensor_reader(tmp_path):
    data = np.arange(300 * 3, dtype=np.float32).reshape(300, 3)  # 300 needs a two-byte varint
    for packed, lod in ((False, b""), (True, b"\x00" * 16)):
        path = tmp_path / "t"
        path.write_bytes(_lod_tensor(data, packed, lod))
        np.testing.assert_array_equal(lacmod.read_lod_tensor(path), data)
    path.write_bytes(_lod_tensor(data, False)[:-4])
    with pytest.raises(ZhnerError, match="data bytes"):
        lacmod.read_lod_tensor(path)


def test_word2vec_formats(tmp_path):
    body = "中 1 2 3\n国 4.5 -6 7e-1\n\u3000 0 0 1\n"
    plain = tmp_path / "v.txt"
    plain.write_text("3 3\n" + body, encoding="utf-8")
    noheader = tmp_path / "nh.txt"
    noheader.write_text(body.replace("\n", "\r\n"), encoding="utf-8")
    xz = tmp_path / "v.txt.xz"
    xz.write_bytes(lzma.compress(("3 3\n" + body).encode("utf-8")))
    gz = tmp_path / "v.txt.gz"
    gz.write_bytes(gzip.compress(body.encode("utf-8")))
    for path in (plain, noheader, xz, gz):
        v = load_word2vec_text(path, cache=False)
        assert v.tokens == ["中", "国", "\u3000"], path
        np.testing.assert_allclose(v.matrix, [[1, 2, 3], [4.5, -6, 0.7], [0, 0, 1]], rtol=1e-6)
    assert load_vectors(str(plain)).tokens == ["中", "国", "\u3000"]  # a path spec (cached next to the file)


@pytest.mark.parametrize(
    "content, line, message",
    [
        ("2 3\n中 1 2 3\n国 1 2\n", 3, "expected a token and 3 values"),
        ("中 1 2 3\n国 1 x 3\n", 2, "not a number"),
        ("中 1 2 3\n国 1 nan 3\n", 2, "not finite in the vector of '国'"),  # a model trained to NaN before
        ("2 3\n中 1e400 2 3\n国 1 2 3\n", 2, "not finite in the vector of '中'"),  # over float32: inf
        ("2 3\n", None, "no vectors"),
        ("0 0\n", None, "no vectors"),
        ("2 300\n中 1 2 3\n国 1 2 3\n", 2, "says 300 values per vector, but the first vector has 3"),
        ("0 0\n中 1 2 3\n", 2, "says 0 values per vector"),
        ("3 3\n中 1 2 3\n国 1 2 3\n", None, "says 3 vectors but the file has only 2"),
        ("\n", None, "empty"),
    ],
)
def test_word2vec_bad_input(tmp_path, content, line, message):
    path = tmp_path / "bad.vec"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ZhnerError, match=message) as err:
        load_word2vec_text(path, cache=False)
    assert err.value.where == str(path) and err.value.line == line


def test_word2vec_cache_reuse(tmp_path, monkeypatch):
    path = tmp_path / "v.txt"
    path.write_text("2 2\n中 1 2\n国 3 4\n", encoding="utf-8")
    first = load_word2vec_text(path)
    cache_files = list((tmp_path / ".zhner_cache").iterdir())  # the folder is writable: cache next to the file
    assert sorted(p.suffix for p in cache_files) == [".json", ".npy", ".txt"]

    def boom(*args, **kwargs):
        raise AssertionError("parsed the text again")

    monkeypatch.setattr(word2vec, "_parse_word2vec", boom)
    second = load_word2vec_text(path)
    assert second.tokens == first.tokens
    np.testing.assert_array_equal(second.matrix, first.matrix)
    # a changed file (new size and mtime) is parsed again
    monkeypatch.undo()
    path.write_text("2 2\n中 1 2\n国 3 5.5\n", encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert load_word2vec_text(path).matrix[1, 1] == 5.5
    explicit = tmp_path / "cache"
    load_word2vec_text(path, cache_dir=explicit)
    assert len(list(explicit.iterdir())) == 3


def test_load_vectors_specs(tmp_path):
    assert load_vectors(None).dim == 128 and len(load_vectors("lac")) == 20940
    with pytest.raises(ZhnerError, match="no such vectors file"):
        load_vectors(str(tmp_path / "nope.vec"))


def test_compose_vectors():
    chars = Vectors(["中", "国", "人"], np.array([[1, 0], [0, 1], [2, 2]], dtype=np.float32))
    rng = np.random.default_rng(0)
    out, composed = compose_vectors(["中国", "中x", "xy", "国<eos>", "<unk>"], chars, rng, scale=0.01)
    assert composed == 3 and out.dtype == np.float32 and out.shape == (5, 2)
    np.testing.assert_allclose(out[0], [0.5, 0.5])
    np.testing.assert_allclose(out[1], [1, 0])  # unknown x skipped
    np.testing.assert_allclose(out[3], [0, 1])  # the <eos> marker is not composed from its letters
    assert np.abs(out[[2, 4]]).max() <= 0.01  # no known character: small random vectors


def test_embedding_matrix():
    vecs = Vectors(["中", "国", "中国"], np.array([[1, 0], [0, 1], [9, 9]], dtype=np.float32))
    vocab = ["<pad>", "<unk>", "中国", "国中", "中", "zz"]
    m, stats = embedding_matrix(vocab, vecs, 2, np.random.default_rng(0), compose=True)
    assert stats == {"pretrained": 2, "composed": 1, "random": 3}
    np.testing.assert_allclose(m[2], [9, 9])  # a pretrained vector beats composition
    np.testing.assert_allclose(m[3], [0.5, 0.5])
    assert np.abs(m[[0, 1, 5]]).max() <= np.sqrt(3 / 2)
    m2, stats = embedding_matrix(vocab, vecs, 2, np.random.default_rng(0), compose=False)
    assert stats == {"pretrained": 2, "composed": 0, "random": 4}
    np.testing.assert_array_equal(m2[[0, 1, 5]], m[[0, 1, 5]])  # same rng state -> same random rows
    m3, stats = embedding_matrix(vocab, None, 4, np.random.default_rng(0), compose=True)
    assert m3.shape == (6, 4) and stats["random"] == 6
    with pytest.raises(ZhnerError, match="2-d"):
        embedding_matrix(vocab, vecs, 3, np.random.default_rng(0), compose=True)


def test_saved_lexicon_reads_in_one_piece(tmp_path, monkeypatch):
    """A file as `save` writes it is read without the line-by-line reader (8x faster on the shipped 337k words);
    anything else (CRLF, unsorted, spaces, a BOM) still goes through it, with the same words as before."""
    from zhner.lexicon import lexicon as module

    lex = Lexicon(["中国", "北京", "人民", "国人", "a"], min_len=1)
    lex.save(tmp_path / "lexicon.txt")
    variants = {
        "crlf.txt": "a\r\n中国\r\n",
        "unsorted.txt": "北京\n中国\n",
        "spaces.txt": "中国 \n北京\n",
        "bom.txt": "\ufeff中国\n北京\n",
        "blank.txt": "中国\n\n北京\n",
    }
    expected = {}
    for name, text in variants.items():
        (tmp_path / name).write_text(text, encoding="utf-8", newline="")
        expected[name] = Lexicon.load(tmp_path / name).words
    assert expected["crlf.txt"] == ["a", "中国"] and expected["blank.txt"] == ["中国", "北京"]

    def no_line_reader(path):
        raise AssertionError(f"read line by line: {path}")

    monkeypatch.setattr(module, "iter_lines", no_line_reader)
    back = Lexicon.load(tmp_path / "lexicon.txt")
    assert back.words == lex.words and "国人" in back and back.name == "lexicon"
    assert back.match("中国人民") == lex.match("中国人民")
    monkeypatch.undo()
    for name in variants:
        assert Lexicon.load(tmp_path / name).words == expected[name]


def test_automaton_cache(tmp_path, monkeypatch):
    """A large lexicon's automaton is stored in $ZHNER_CACHE/automata and read back instead of rebuilt; a corrupt or
    unwritable cache only costs a rebuild."""
    from zhner.lexicon import lexicon as module

    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(module, "CACHE_MIN_WORDS", 3)
    words = ["中国", "国人", "北京", "人民", "北京大学"]
    text = "北京大学的中国人民"
    expected = Lexicon(words).match(text)
    assert expected == [(0, 2, "北京"), (0, 4, "北京大学"), (5, 7, "中国"), (6, 8, "国人"), (7, 9, "人民")]
    (cached,) = (tmp_path / "cache" / "automata").iterdir()
    build = module._build
    monkeypatch.setattr(module, "_build", lambda _: pytest.fail("rebuilt although cached"))
    assert Lexicon(words).match(text) == expected  # read from the cache
    monkeypatch.setattr(module, "_build", build)
    cached.write_bytes(b"\x00garbage" * 10)
    assert Lexicon(words).match(text) == expected  # rebuilt over the corrupt file
    assert Lexicon(words).match(text) == expected
    (tmp_path / "not_a_dir").write_text("")
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "not_a_dir"))
    assert Lexicon(words + ["大学"]).match("大学") == [(0, 2, "大学")]  # the cache cannot be written: still matches


def test_word2vec_header_counting_fewer_vectors_warns(tmp_path):
    path = tmp_path / "more.vec"
    path.write_text("1 3\n中 1 2 3\n国 4 5 6\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="says 1 vectors but the file has 2"):
        assert load_word2vec_text(path, cache=False).tokens == ["中", "国"]

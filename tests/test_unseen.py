"""Issue 50's two switches: typed lexicon words (embeddings.word_types) and mention replacement
(train.mention_replacement). Each builds, trains a tiny model on mini for one epoch, and saves / loads with the same
predictions; replacement keeps the scheme valid and the entity count, is deterministic per seed and epoch, and never
touches dev or test; a bad value is a one-line config error naming the field."""
import json

import pytest
import torch

from conftest import MINI, REPO
from zhner.config import load_config
from zhner.data.augment import MentionReplacer, guess_classes, lexicon_pool, train_pool
from zhner.data.registry import load_dataset
from zhner.data.schemes import first_violation, tags_to_spans
from zhner.errors import ZhnerError
from zhner.lexicon.lexicon import Lexicon
from zhner.lexicon.types import TYPE_NAMES, jieba_codes, typed_words
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.trainer import train

TINY = {
    "flat": ["model.heads=2", "model.head_dim=8"],
    "nflat": ["model.heads=2", "model.head_dim=8", "model.less_head=false"],
    "atssa": ["model.heads=2", "model.head_dim=8"],
}
CONFIG = {"flat": "flat_resume", "nflat": "nflat_resume", "atssa": "atssa_resume"}
COMMON = MINI + ["data.max_train_sentences=40", "data.max_eval_sentences=16", "train.batch_size=10", "train.lr=0.01",
                 "train.epochs=1"]


@pytest.fixture(scope="module")
def mini():
    return load_dataset("mini")


@pytest.fixture(scope="module")
def small_lexicon(tmp_path_factory, mini):
    """jieba's words that occur in mini: LAC types them in a second, where jieba's 337k words take minutes."""
    texts = [s.text for split in mini.values() for s in split.sentences]
    path = tmp_path_factory.mktemp("lexicon") / "mini_words.txt"
    Lexicon.from_jieba().restrict(texts).save(path)
    return path


def config(model, lexicon, extra=()):
    overrides = COMMON + TINY[model] + [f"embeddings.lexicon={lexicon}", *extra]
    return load_config(REPO / "zhner" / "configs" / f"{CONFIG[model]}.yaml", overrides)


# -- config errors --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("item, field", [
    ("embeddings.word_types=pos", "embeddings.word_types"),
    ("train.mention_replacement=1.5", "train.mention_replacement"),
    ("train.mention_replacement=-0.1", "train.mention_replacement"),
    ("train.mention_replacement_source=dev", "train.mention_replacement_source"),
    ("train.mention_replacement_types={NAME: PERSON}", "train.mention_replacement_types.NAME"),
    ("train.mention_replacement_pool=0", "train.mention_replacement_pool"),
])
def test_a_bad_value_is_a_one_line_error_naming_the_field(item, field):
    with pytest.raises(ZhnerError) as err:
        load_config(REPO / "zhner" / "configs" / "flat_resume.yaml", [item])
    message = str(err.value)
    assert field in message and "\n" not in message


@pytest.mark.parametrize("overrides, field", [
    (["embeddings.word_types=jieba"], "embeddings.word_types"),  # TENER reads no lexicon words
    (["train.mention_replacement=0.5", "train.mention_replacement_source=lexicon",
      "train.mention_replacement_types={NOPE: PER}"], "train.mention_replacement_types"),
])
def test_switches_that_cannot_apply_are_errors_naming_the_field(overrides, field):
    cfg = load_config(REPO / "zhner" / "configs" / "tener_resume.yaml", COMMON + overrides)
    with pytest.raises(ZhnerError, match=field.replace(".", r"\.")):
        prepare(cfg, log=lambda _: None)


# -- word types ------------------------------------------------------------------------------------------------------------


def test_jieba_codes_read_the_dictionary_tags():
    words = ["北京大学", "上海", "海尔", "吃饭", "不在词典里的词"]
    codes = jieba_codes(words)
    names = [TYPE_NAMES["jieba"][int(c)] for c in codes]
    assert names == ["nt", "ns", "nrt", "other", "other"]
    assert typed_words(words, codes) == {"nt": ["北京大学"], "ns": ["上海"], "nrt": ["海尔"]}


def test_lac_reads_each_word_alone():
    from zhner.pretrained.lac import word_types

    words = ["李明", "北京大学", "上海", "吃饭", "百度"]
    names = [TYPE_NAMES["lac"][int(c)] for c in word_types(words)]
    assert names[:4] == ["PER", "ORG", "LOC", "other"]


# -- mention replacement -------------------------------------------------------------------------------------------------


def _replacer(corpus, p=0.5, seed=42):
    return MentionReplacer(train_pool(corpus), p, seed, corpus.scheme)


def test_replacement_keeps_the_scheme_and_the_entities(mini):
    train_corpus = mini["train"]
    sentences, changed, replaced = _replacer(train_corpus).epoch(train_corpus.sentences, 0)
    assert changed and replaced >= len(changed)
    for i, (old, new) in enumerate(zip(train_corpus.sentences, sentences)):
        assert first_violation(new.tags, train_corpus.scheme) is None
        old_spans, new_spans = (tags_to_spans(s.tags, train_corpus.scheme) for s in (old, new))
        assert [t for _, _, t in old_spans] == [t for _, _, t in new_spans]  # same count, types, order
        assert len(new.tokens) == len(new.tags)
        if i not in changed:
            assert new is old
        else:  # every character outside the mentions kept
            outside = lambda s, spans: [c for k, c in enumerate(s.tokens) if not any(a <= k < b for a, b, _ in spans)]  # noqa: E731
            assert outside(old, old_spans) == outside(new, new_spans)
            assert any(old.tokens[a:b] != new.tokens[c:d] for (a, b, _), (c, d, _) in zip(old_spans, new_spans))


def test_replacement_is_deterministic_per_seed_and_epoch(mini):
    sents = mini["train"].sentences
    first = _replacer(mini["train"]).epoch(sents, 3)[0]
    again = _replacer(mini["train"]).epoch(sents, 3)[0]
    assert [s.tokens for s in first] == [s.tokens for s in again]
    assert [s.tokens for s in first] != [s.tokens for s in _replacer(mini["train"]).epoch(sents, 4)[0]]
    assert [s.tokens for s in first] != [s.tokens for s in _replacer(mini["train"], seed=43).epoch(sents, 3)[0]]
    assert _replacer(mini["train"], p=0.0).epoch(sents, 3)[1:] == ([], 0)


def test_lexicon_pool_and_type_guess():
    assert guess_classes(["PER.NAM", "PER.NOM", "GPE.NAM", "ORG.NAM", "NAME", "TITLE", "NT"]) == {
        "PER.NAM": "PER", "GPE.NAM": "LOC", "ORG.NAM": "ORG", "NAME": "PER", "NT": "ORG"}
    words = {"PER": [f"人{i}" for i in range(10)], "LOC": ["上海", "北京"]}
    pool = lexicon_pool({"NAME": "PER", "LOC": "LOC", "ORG": "ORG"}, words, limit=4, seed=1)
    assert len(pool["NAME"]) == 4 and pool["LOC"] == [("上", "海"), ("北", "京")] and "ORG" not in pool
    assert pool == lexicon_pool({"NAME": "PER", "LOC": "LOC", "ORG": "ORG"}, words, limit=4, seed=1)


# -- each switch trains, saves and loads ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, extra", [
    ("flat", []),
    ("flat", ["embeddings.word_types=jieba"]),
    ("flat", ["embeddings.word_types=both", "train.mention_replacement=0.5", "train.mention_replacement_source=lexicon"]),
    ("nflat", ["embeddings.word_types=lac"]),
    ("nflat", ["train.mention_replacement=0.5"]),
    ("atssa", ["embeddings.word_types=jieba", "train.mention_replacement=0.3"]),
], ids=["flat-off", "flat-jieba", "flat-both-lexicon", "nflat-lac", "nflat-train", "atssa-jieba-train"])
def test_each_switch_trains_saves_and_loads(model, extra, small_lexicon, mini, tmp_path):
    cfg = config(model, small_lexicon, extra)
    lines = []
    metrics = train(cfg, tmp_path, log=lines.append)
    assert metrics["status"] == "completed"
    loaded = Tagger.load(tmp_path)
    types = cfg.embeddings.word_types
    record = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])
    if cfg.train.mention_replacement:
        assert record["mentions_replaced"] > 0
        assert any(line.startswith("mention replacement:") for line in lines)
    else:
        assert "mentions_replaced" not in record
    if types != "none":
        assert loaded.model.word_types is not None and loaded.config.embeddings.word_types == types
        assert any(t.weight.abs().sum() > 0 for t in loaded.model.word_types.tables)  # the types trained
        assert list(loaded.featurizer.fields["lexicon"].types) == {"jieba": ["jieba"], "lac": ["lac"],
                                                                   "both": ["jieba", "lac"]}[types]
    else:
        assert loaded.model.word_types is None and "types" not in loaded.featurizer.fields["lexicon"].to_dict()
    # the same predictions and emissions as the model the training left in the directory (its best epoch's weights)
    texts = [s.text for s in mini["test"].sentences[:30]] + ["张三毕业于北京大学，现任中国人民银行行长。", ""]
    again = Tagger.load(tmp_path)
    assert loaded.predict(texts) == again.predict(texts)
    batch = loaded.featurizer.collate([loaded.featurizer.encode(list(t), labelled=False) for t in texts[:4]])
    if types != "none":
        assert batch["word_types"].shape[-1] == (2 if types == "both" else 1) and (batch["word_types"] > 1).any()
    with torch.no_grad():
        assert torch.equal(loaded.model.eval().emissions(batch), again.model.eval().emissions(batch))


def test_type_codes_that_do_not_fit_the_lexicon_are_an_error(small_lexicon, tmp_path):
    train(config("flat", small_lexicon, ["embeddings.word_types=jieba"]), tmp_path, log=lambda _: None)
    vocab = json.loads((tmp_path / "vocab.json").read_text())
    vocab["fields"]["lexicon"]["types"]["jieba"] += "0"
    (tmp_path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    with pytest.raises(ZhnerError, match="word types do not fit the lexicon"):
        Tagger.load(tmp_path)


def test_replacement_never_touches_dev_or_test(small_lexicon, mini, tmp_path):
    cfg = config("flat", small_lexicon, ["train.mention_replacement=1.0", "train.epochs=2"])
    run = prepare(cfg, log=lambda _: None)
    before = {k: [(s.tokens[:], s.tags[:]) for s in run.splits[k].sentences] for k in ("train", "dev", "test")}
    new, changed, _ = run.replacer.epoch(run.splits["train"].sentences, 0)
    assert changed
    after = {k: [(s.tokens, s.tags) for s in run.splits[k].sentences] for k in ("train", "dev", "test")}
    assert after == before  # the epoch's sentences are new objects: nothing in the splits changed
    metrics = train(cfg, tmp_path, log=lambda _: None)
    unchanged = load_dataset("mini")
    assert metrics["test"]["n_gold"] == sum(len(s) for s in unchanged["test"].spans()[:16])


def test_onnx_and_the_torch_free_runtime_read_the_types(small_lexicon, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import numpy as np

    from zhner.export import export_onnx
    from zhner.runtime import RuntimeTagger

    train(config("flat", small_lexicon, ["embeddings.word_types=both", "model.word_embedding=table"]), tmp_path,
          log=lambda _: None)
    tagger = Tagger.load(tmp_path)
    export_onnx(tagger, tmp_path / "model.onnx")
    runtime = RuntimeTagger.load(tmp_path)
    assert "word_types" in runtime.input_names
    texts = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。"]
    batch = runtime.featurizer.batch(texts)
    ours = tagger.featurizer.collate([tagger.featurizer.encode(list(t), labelled=False) for t in texts])
    assert np.array_equal(batch["word_types"], ours["word_types"].numpy())
    emissions = runtime.session.run(None, {name: batch[name] for name in runtime.input_names})[0]
    with torch.no_grad():
        expected = tagger.model.eval().emissions(ours).numpy()
    assert np.allclose(emissions, expected, atol=1e-4)

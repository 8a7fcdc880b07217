"""The assembly of a training run (zhner.train.assemble, .resources, .corpora), a step at a time on `mini`, the corpus
the package carries: each step called alone does what `prepare` does with it, and `prepare` is its steps in order."""
import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import zhner
from conftest import TINY_TENER
from zhner.config import load_config
from zhner.data.corpus import Corpus
from zhner.data.example import Example
from zhner.errors import ZhnerError
from zhner.lexicon.table import Vectors
from zhner.lexicon.vectors import load_vectors
from zhner.pipeline import build_model, configured
from zhner.train import assemble, corpora, resources
from zhner.train.assemble import prepare
from zhner.train.rundir import fresh_state, resume, run_metrics

CONFIGS = Path(zhner.__file__).parent / "configs"


def config(name="tener_resume", extra=()):
    return load_config(CONFIGS / f"{name}.yaml", TINY_TENER + list(extra))


def quiet(_):
    pass


@pytest.fixture(scope="module")
def splits():
    return corpora.load_splits(config())[0]


# -- the recipe ---------------------------------------------------------------------------------------------------------
def test_prepare_is_its_steps_in_order():
    """A run assembled by calling the steps by hand is prepare's, weight for weight: the steps are the recipe, and
    calling them alone leaves nothing out (the random draws come in the same order)."""
    cfg = config()
    run = prepare(cfg, log=quiet)

    assemble.seed_everything(cfg.train.seed)
    splits = corpora.load_splits(cfg)[0]
    splits["train"] = corpora.cut_long_sentences(corpora.repair_train(splits["train"], quiet), cfg.train.max_length, quiet)
    vectors = load_vectors(cfg.embeddings.char_vectors)
    tables = resources.table_vectors(cfg.embeddings, vectors)
    cfg = assemble.fit_embedding_dims(cfg, vectors, char_model=True)
    task = assemble.make_task(splits, cfg)
    featurizer = assemble.build_featurizer(cfg, splits, task, vectors, None, None, None, None, None)
    cfg = configured(cfg, featurizer)
    model = build_model(cfg, featurizer)
    assemble.init_embeddings(model, featurizer, tables, cfg, quiet)

    assert cfg == run.config
    assert featurizer.chars.itos == run.featurizer.chars.itos and featurizer.bigrams.itos == run.featurizer.bigrams.itos
    ours, theirs = model.state_dict(), run.tagger.model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_the_assembly_imports_neither_the_loop_nor_the_cli():
    """The import direction of the prepare path: cli -> train.trainer -> train.assemble -> train.resources /
    train.corpora -> data, lexicon, models, ...; nothing below the loop reaches back up (function-level imports too)."""
    above = ("zhner.train.trainer", "zhner.train.runs", "zhner.train.rundir", "zhner.cli", "zhner.serve")
    for module in (assemble, resources, corpora):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        assert not {m for m in imported if m.startswith(above)}, module.__name__


# -- corpora ------------------------------------------------------------------------------------------------------------
def test_the_corpora_of_a_config_are_read_and_truncated(splits):
    cfg = config()
    (source,) = corpora.data_sources(cfg.data)
    assert (source.dataset, source.type_map, source.field) == ("mini", None, "data.type_map")
    whole = corpora.read_source(cfg.data, source)
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [48, 24, 24]  # TINY_TENER's limits
    assert len(whole["train"]) > 48 and whole["train"].sentences[:48] == splits["train"].sentences
    assert corpora.token_unit(splits["train"]) == "char" and splits["train"].scheme == "bmes"
    assert corpora.dataset_unit("conll2003") == "word" and corpora.dataset_unit("mini") == "char"
    assert corpora.dataset_metric("cola") == "mcc" and corpora.dataset_metric("not-registered") == "accuracy"


def test_a_corpus_named_twice_in_a_union_is_an_error():
    with pytest.raises(ZhnerError, match="'mini' is named twice"):
        corpora.load_splits(config(extra=["data.union=[{dataset: mini}]"]))


def test_broken_training_tags_are_repaired_and_logged():
    bad = Example(list("张三在北京"), ["E-PER", "O", "O", "B-LOC", "E-LOC"], line=7)  # an E- with no B- before it
    good = Example(list("李四"), ["B-PER", "E-PER"], line=9)
    logs = []
    train = corpora.repair_train(Corpus([bad, good], "bmes", "train.txt"), logs.append)
    assert train.sentences[0].tags[0] != "E-PER" and train.sentences[1].tags == ["B-PER", "E-PER"]
    assert logs == ["train: 1 sentence breaks the BMES scheme (train.txt, line 7); trained on the spans a lenient "
                    "reading gives"]
    unlabelled = Corpus([Example(list("好"), label="pos")], None)
    assert corpora.repair_train(unlabelled, logs.append) is unlabelled and len(logs) == 1


def test_long_training_sentences_are_cut_when_max_length_says(splits):
    logs = []
    assert corpora.cut_long_sentences(splits["train"], None, logs.append) is splits["train"]
    cut = corpora.cut_long_sentences(splits["train"], 20, logs.append)
    assert max(len(ex.tokens) for ex in cut) <= 20 < max(len(ex.tokens) for ex in splits["train"])
    assert sum(len(ex.tokens) for ex in cut) == sum(len(ex.tokens) for ex in splits["train"])
    assert len(logs) == 1 and logs[0].startswith("warning: train: ") and "train.max_length=20" in logs[0]


# -- resources ----------------------------------------------------------------------------------------------------------
def vectors(tokens, dim=4):
    return Vectors(list(tokens), np.arange(len(tokens) * dim, dtype=np.float32).reshape(len(tokens), dim))


def test_each_table_starts_from_the_character_vectors_or_its_own_file():
    emb = config().embeddings
    chars = vectors("张三李四")
    assert resources.table_vectors(emb, None) == {}
    tables = resources.table_vectors(emb, chars)
    assert tables == {"chars": chars, "bigrams": chars, "words": chars}
    with pytest.raises(ZhnerError, match="needs embeddings.char_vectors"):
        resources.table_vectors(emb.model_copy(update={"bigram_vectors": "bigrams.txt"}), None)


def test_the_embedding_sizes_follow_the_vectors():
    cfg = config()
    fitted = assemble.fit_embedding_dims(cfg, vectors("张三", dim=6), char_model=True)
    assert fitted.model.char_dim == 6 and fitted.model.bigram_dim == 6  # bigram rows composed from the characters
    own = assemble.fit_embedding_dims(config(extra=["embeddings.compose_bigrams=false"]), vectors("张三", dim=6), True)
    assert own.model.char_dim == 6 and own.model.bigram_dim == cfg.model.bigram_dim  # a table of their own
    no_bigrams = config(extra=["embeddings.bigrams=false"])
    assert assemble.fit_embedding_dims(no_bigrams, None, char_model=True).model.bigram_dim == 0
    assert assemble.fit_embedding_dims(cfg, None, char_model=True) == cfg


def test_a_model_without_bert_gets_none_and_a_bert_model_needs_one(splits):
    tener = config()
    assert resources.load_model_bert(tener, splits, None, True, quiet) is None
    assert resources.load_english_bert(tener) is None
    bert_model = load_config(CONFIGS / "bert_e5_resume.yaml", ["model.bert=null"])
    assert assemble.reads_chars(tener) and not assemble.reads_chars(bert_model)
    with pytest.raises(ZhnerError, match="a BERT model reads BERT's word pieces"):
        resources.load_model_bert(bert_model, splits, None, False, quiet)


def test_a_sentencepiece_bert_is_pruned_to_the_pieces_the_data_can_meet(splits, tiny_sp_bert):
    cfg = load_config(CONFIGS / "bert_e5_resume.yaml", [*TINY_TENER[:1], f"model.bert={tiny_sp_bert}"])
    full = resources.load_bert(str(tiny_sp_bert))
    logs = []
    bert = resources.load_model_bert(cfg, splits, None, False, logs.append)
    assert len(bert.vocab) < len(full.vocab) and "▁extra" not in bert.vocab
    assert logs == [f"bert vocabulary pruned to the pieces the data can meet: {len(bert.vocab):,} of {len(full.vocab):,}"]


def test_word_types_are_off_or_need_a_lattice_model_with_a_lexicon():
    assert resources.lexicon_word_types(config(), None, quiet) is None
    with pytest.raises(ZhnerError, match=r"lattice model \(flat, nflat, atssa\).*this is tener without a lexicon"):
        resources.lexicon_word_types(config(extra=["embeddings.word_types=jieba"]), None, quiet)


def test_mention_replacement_pools_the_training_mentions(splits):
    assert resources.mention_replacer(config(), splits, None, quiet) is None
    logs = []
    replacer = resources.mention_replacer(config(extra=["train.mention_replacement=0.5"]), splits, None, logs.append)
    assert replacer.probability == 0.5 and replacer.scheme == "bmes" and set(replacer.pool) <= splits["train"].types()
    assert logs[0].startswith("mention replacement: p 0.5 per mention, from the train: ")
    mentions = resources.lexicon_mentions(replacer)
    assert mentions == sorted(mentions) and all(isinstance(m, str) for m in mentions)
    assert resources.lexicon_mentions(None) == []


def test_a_replaced_mention_would_not_fit_a_dependency_parse(splits):
    sla = load_config(CONFIGS / "bert_e5_resume.yaml", ["model.local_attention=syntax", "train.mention_replacement=0.5"])
    with pytest.raises(ZhnerError, match="dependency parse"):
        resources.mention_replacer(sla, splits, None, quiet)


def test_without_a_translator_sentences_get_an_empty_translation():
    acts = load_config(CONFIGS / "acts_resume.yaml", ["model.translator=null"])
    split = Corpus([Example(list("北京")), Example(list("上海"), translation="Shanghai")], "bmes")
    logs = []
    resources.translate_splits({"train": split}, acts, logs.append)
    assert [ex.translation for ex in split] == ["", "Shanghai"]
    assert logs == ["translate: no model.translator; 1 of 2 sentences have no translation (empty English side)"]


# -- task, fields, model ------------------------------------------------------------------------------------------------
def test_the_task_fields_and_embeddings_of_a_tagging_run(splits):
    cfg = config(extra=["embeddings.normalize_vectors=false"])
    chars = vectors(sorted({c for ex in splits["train"] for c in ex.tokens}), dim=cfg.model.char_dim)
    task = assemble.make_task(splits, cfg)
    assert task.kind == "tagging" and task.scheme == "bmes"
    featurizer = assemble.build_featurizer(cfg, splits, task, chars, None, None, None, None, None)
    assert {c for c in chars.tokens if not c.isdigit()} <= set(featurizer.chars.itos)  # digits read as 0
    assert featurizer.words is None  # no lexicon
    cfg = configured(cfg, featurizer)
    model = build_model(cfg, featurizer)
    logs = []
    assemble.init_embeddings(model, featurizer, {"chars": chars}, cfg, logs.append)
    table = model.pretrained_tables()["chars"].weight  # [V, D]
    i = next(i for i, c in enumerate(chars.tokens) if "\u4e00" <= c <= "\u9fff")  # a Chinese character's row
    assert torch.equal(table[featurizer.chars.stoi[chars.tokens[i]]], torch.from_numpy(chars.matrix[i]))
    assert logs and logs[0].startswith("embeddings chars: ")
    assert assemble.unk_pieces(featurizer, splits, quiet) is None  # no BERT input
    summary = assemble.data_summary(cfg, splits, task, featurizer, None)
    assert summary.startswith(f"data mini: train 48 / dev 24 / test 24 sentences; {len(task.labels)} tags (bmes); ")


def test_layer_decay_needs_a_bert_encoder():
    with pytest.raises(ZhnerError, match="has no BERT encoder"):
        assemble.check_layer_decay(config(extra=["train.bert_layer_decay=0.9"]))
    assemble.check_layer_decay(config())


# -- the run directory's state ------------------------------------------------------------------------------------------
def test_a_directory_without_a_checkpoint_starts_afresh(tmp_path):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    assert resume(tmp_path, model, opt, sched, config(), None, False, True, quiet) is None
    state = fresh_state()
    assert (state["epoch"], state["batch"], state["step"], state["best"]) == (0, 0, 0, None)
    metrics = run_metrics(config(), assemble.make_task(corpora.load_splits(config())[0], config()), state, 0.0,
                          "running", "dev")
    assert metrics["status"] == "running" and metrics["dev"] is None and metrics["warnings"] == []

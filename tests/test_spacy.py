"""zhner's spaCy component: registered through the spacy_factories entry point, doc.ents from zhner's character offsets
on spaCy's character segmenter, jieba and hand-made tokens (misaligned spans aligned and recorded), scores on spans,
nlp.pipe batched through one predict call per batch, and nlp.to_disk / spacy.load without the original model; docs that
go through spaCy's own serialisation (to_bytes, DocBin, n_process), nlp.evaluate / `spacy evaluate`, analyze_pipes and
pipe_labels, a model checked at add_pipe, and `spacy package`."""
import json
import shutil
import subprocess
import sys
import tomllib

import pytest

from conftest import MINI, REPO, declared_entry_points
from zhner.errors import ZhnerError
from zhner.tagger import Tagger, default_model_dir

spacy = pytest.importorskip("spacy")
from spacy.tokens import Doc  # noqa: E402

from zhner.integrations.spacy import ZhnerEntities, make_zhner  # noqa: E402

TEXTS = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。", "王五生于广州市天河区。", "", "赵六和钱七去了杭州西湖。"]


@pytest.fixture(scope="module")
def model():
    if default_model_dir() is None:
        pytest.skip("no shipped model")
    return str(default_model_dir())


@pytest.fixture(scope="module")
def expected(model):
    return Tagger.load(model).predict(TEXTS, confidence=True)


def _ents(doc):
    return [(e.start_char, e.end_char, e.label_, e._.zhner_score) for e in doc.ents]


def _assert_same(docs, expected):
    """doc.ents as zhner's entities: the same spans, scores to 1e-3 (a text tagged alone or in a padded batch)."""
    got = [_ents(doc) for doc in docs]
    assert [[g[:3] for g in row] for row in got] == [[(e["start"], e["end"], e["type"]) for e in row] for row in expected]
    assert [[g[3] for g in row] for row in got] == [[pytest.approx(e["score"], abs=1e-3) for e in row] for row in expected]


def test_the_entry_point_registers_the_factory(model, tmp_path):
    """What an installed zhner gives spaCy: the entry point pyproject.toml declares, found from a dist-info on the path
    by a fresh interpreter that never imports zhner.integrations itself."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["spacy_factories"]
    assert declared == {"zhner": "zhner.integrations.spacy:make_zhner"}
    declared_entry_points(tmp_path / "metadata")
    script = (
        "import json, sys, spacy\n"
        "nlp = spacy.blank('zh')\n"
        "assert 'zhner.integrations.spacy' in sys.modules  # loaded by spaCy from the entry point\n"
        f"nlp.add_pipe('zhner', config={{'model': {model!r}}})\n"
        "print(json.dumps([(e.text, e.label_) for e in nlp('张三毕业于北京大学。').ents], ensure_ascii=False))\n"
    )
    env = {"PYTHONPATH": f"{tmp_path / 'metadata'}:{REPO}", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [["张三", "PER"], ["北京大学", "ORG"]]


def test_character_segmenter_gives_zhners_entities(model, expected):
    nlp = spacy.blank("zh")
    assert nlp.tokenizer.segmenter == "char"
    nlp.add_pipe("zhner", config={"model": model})
    docs = [nlp(text) for text in TEXTS]
    _assert_same(docs, expected)
    assert sum(map(len, expected)) >= 8 and all(doc._.zhner_misaligned == [] for doc in docs)
    assert [[e["text"] for e in doc._.zhner_entities] for doc in docs] == [[e["text"] for e in row] for row in expected]


def test_jieba_tokens_align_and_misaligned_spans_are_counted(model, expected):
    nlp = spacy.blank("zh", config={"nlp": {"tokenizer": {"segmenter": "jieba"}}})
    nlp.add_pipe("zhner", config={"model": model})
    for doc, entities in zip(nlp.pipe(TEXTS), expected):
        starts, ends = {t.idx for t in doc}, {t.idx + len(t) for t in doc}
        cut = [e for e in entities if e["start"] not in starts or e["end"] not in ends]
        assert [{k: v for k, v in m.items() if k != "action"} for m in doc._.zhner_misaligned] == cut
        exact = [(e["start"], e["end"], e["type"]) for e in entities if e not in cut]
        assert [s for s in ((e.start_char, e.end_char, e.label_) for e in doc.ents) if s in exact] == exact
        assert len(doc.ents) == len(entities)  # expanded, not dropped
    assert any(doc._.zhner_misaligned for doc in nlp.pipe(TEXTS))  # jieba cuts at least one entity here


@pytest.mark.parametrize("mode, ents, action", [
    ("expand", [("张三毕", "PER"), ("北京大学", "ORG")], "expand"),
    ("strict", [("北京大学", "ORG")], "dropped"),
    ("contract", [("北京大学", "ORG")], "dropped"),
])
def test_alignment_modes(model, mode, ents, action):
    nlp = spacy.blank("zh")
    nlp.add_pipe("zhner", config={"model": model, "alignment_mode": mode})
    doc = nlp.get_pipe("zhner")(Doc(nlp.vocab, words=["张三毕", "业于", "北京大学"], spaces=[False] * 3))
    assert [(e.text, e.label_) for e in doc.ents] == ents
    assert [(m["text"], m["action"]) for m in doc._.zhner_misaligned] == [("张三", action)]


def test_pipe_tags_each_batch_in_one_predict_call(model, expected):
    nlp = spacy.blank("zh")
    component = nlp.add_pipe("zhner", config={"model": model, "batch_size": 2})
    calls = []
    predict = component.tagger.predict
    component.tagger.predict = lambda texts, **kw: calls.append(list(texts)) or predict(texts, **kw)
    docs = list(nlp.pipe(TEXTS, batch_size=2))
    assert calls == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:5]]
    _assert_same(docs, expected)


def test_to_disk_and_load_keep_the_model(model, expected, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(model, copy)
    nlp = spacy.blank("zh", config={"nlp": {"tokenizer": {"segmenter": "jieba"}}})
    nlp.add_pipe("zhner", config={"model": str(copy), "alignment_mode": "contract"})
    before = [_ents(doc) for doc in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(copy)  # the saved pipeline holds its own copy of the model
    loaded = spacy.load(tmp_path / "pipeline")
    component = loaded.get_pipe("zhner")
    assert component.alignment_mode == "contract" and component.model == str(tmp_path / "pipeline" / "zhner")
    assert [_ents(doc) for doc in loaded.pipe(TEXTS)] == before


def test_to_disk_replaces_planted_links_and_needs_a_model(model, tmp_path):
    """to_disk writes each file as a new one of its own renamed into place, as the trainer does (issue 46, item 5): a
    link planted at a name in the output, to a file outside, is replaced and that file left as it was. A model path
    that does not exist, or a directory without weights, fails at to_disk with one line naming it."""
    nlp = spacy.blank("zh")
    nlp.add_pipe("zhner", config={"model": model})
    out = tmp_path / "pipeline"
    (out / "zhner").mkdir(parents=True)
    for name in ("model.safetensors", "config.yaml", "zhner.json"):
        (tmp_path / f"victim-{name}").write_text("mine")
        (out / "zhner" / name).symlink_to(tmp_path / f"victim-{name}")
    nlp.to_disk(out)
    assert [(tmp_path / f"victim-{n}").read_text() for n in ("model.safetensors", "config.yaml", "zhner.json")] == ["mine"] * 3
    assert not [p for p in (out / "zhner").iterdir() if p.is_symlink() or p.name.endswith(".tmp")]
    assert (out / "zhner" / "model.safetensors").read_bytes() == (default_model_dir() / "model.safetensors").read_bytes()
    assert spacy.load(out)("张三在北京。").ents
    no_weights = tmp_path / "no-weights"
    shutil.copytree(model, no_weights)
    (no_weights / "model.safetensors").unlink()
    for where, fragment in ((tmp_path / "nowhere", "no such model directory"), (no_weights, "no model.safetensors")):
        nlp = spacy.blank("zh")
        nlp.add_pipe("zhner", config={"model": str(where)})
        with pytest.raises(ZhnerError, match=fragment) as err:
            nlp.to_disk(tmp_path / "elsewhere")
        assert str(err.value).startswith(f"{where}: ") and "\n" not in str(err.value)


def test_bad_settings_name_the_field(model):
    with pytest.raises(ZhnerError, match=r"components.zhner.alignment_mode: alignment_mode must be one of"):
        spacy.blank("zh").add_pipe("zhner", config={"model": model, "alignment_mode": "nearest"})
    with pytest.raises(ZhnerError, match=r"components.zhner.runtime: runtime must be one of torch, onnx"):
        spacy.blank("zh").add_pipe("zhner", config={"model": model, "runtime": "tf"})
    assert make_zhner.__name__ == "make_zhner" and ZhnerEntities  # the factory is what the entry point names


def test_onnx_runtime_component(tmp_path):
    pytest.importorskip("onnxscript")
    from zhner.cli import resolve_config
    from zhner.config import load_config
    from zhner.export import export_onnx
    from zhner.train.trainer import train

    out = tmp_path / "model"
    overrides = [*MINI, "model.heads=2", "model.head_dim=8", "model.layers=1", "data.max_train_sentences=100",
                 "data.max_eval_sentences=8", "train.epochs=2", "train.optimizer=adamw", "train.lr=0.005"]
    train(load_config(resolve_config("tener_resume"), overrides), out, log=lambda _: None)
    tagger = Tagger.load(out)
    export_onnx(tagger, out / "model.onnx")
    texts = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作，电话13812345678。"]
    nlp = spacy.blank("zh")
    nlp.add_pipe("zhner", config={"model": str(out), "runtime": "onnx"})
    assert type(nlp.get_pipe("zhner").tagger).__name__ == "RuntimeTagger"
    got = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in nlp.pipe(texts)]
    assert got == [[(e["start"], e["end"], e["type"]) for e in row] for row in tagger.predict(texts)]
    nlp.to_disk(tmp_path / "pipeline")
    assert (tmp_path / "pipeline" / "zhner" / "model.onnx").is_file()


# -- spaCy's own calls: serialisation, evaluation, analysis, packaging ---------------------------------------------------
def _doc_data(doc):
    return ([(e.start_char, e.end_char, e.label_, e._.zhner_score) for e in doc.ents], list(doc._.zhner_entities),
            list(doc._.zhner_misaligned))


@pytest.fixture(scope="module")
def char_nlp(model):
    nlp = spacy.blank("zh")
    nlp.add_pipe("zhner", config={"model": model})
    return nlp


def test_docs_go_through_spacys_serialisation(char_nlp, expected):
    """doc.to_bytes, a DocBin with user data and nlp.pipe(n_process=2) (which sends docs back as bytes) keep doc.ents,
    the scores on the spans and zhner's own records."""
    from spacy.tokens import DocBin

    docs = list(char_nlp.pipe(TEXTS))
    assert all(type(e) is dict for doc in docs for e in doc._.zhner_entities)  # plain data, not zhner.Entity
    assert [_doc_data(Doc(char_nlp.vocab).from_bytes(doc.to_bytes())) for doc in docs] == [_doc_data(d) for d in docs]
    stored = DocBin(store_user_data=True, docs=docs).to_bytes()
    read = list(DocBin(store_user_data=True).from_bytes(stored).get_docs(char_nlp.vocab))
    assert [_doc_data(doc) for doc in read] == [_doc_data(doc) for doc in docs]  # a DocBin gives tuples: compared as lists
    parallel = list(char_nlp.pipe(TEXTS, n_process=2, batch_size=2))
    assert [_doc_data(doc) for doc in parallel] == [_doc_data(doc) for doc in docs]
    _assert_same(parallel, expected)


def _gold(nlp, expected):
    """Reference docs: zhner's entities with the first one of the first text missed and a wrong one added to the second."""
    from spacy.training import Example

    examples = []
    for i, (text, entities) in enumerate(zip(TEXTS, expected)):
        spans = [(e["start"], e["end"], e["type"]) for e in entities]
        if i == 0:
            spans = spans[1:]  # the model's first entity is a false positive
        if i == 1:
            spans.append((len(text) - 3, len(text) - 1, "ORG"))  # one it misses (no overlap with the others)
        examples.append(Example.from_dict(nlp.make_doc(text), {"entities": spans}))
    return examples


def test_evaluate_reports_spacys_entity_scores(char_nlp, expected):
    found = sum(map(len, expected))
    scores = char_nlp.evaluate(_gold(char_nlp, expected))
    assert scores["ents_p"] == pytest.approx((found - 1) / found)
    assert scores["ents_r"] == pytest.approx((found - 1) / found)
    assert set(scores["ents_per_type"]) == {"PER", "ORG", "LOC"}
    examples = _gold(char_nlp, expected)
    component = char_nlp.get_pipe("zhner")
    list(component.pipe(eg.predicted for eg in examples))  # the component's own `score`, on docs it tagged
    assert component.score(examples)["ents_f"] == pytest.approx(scores["ents_f"])


def test_spacy_evaluate_command(char_nlp, expected, tmp_path):
    from spacy.tokens import DocBin

    char_nlp.to_disk(tmp_path / "pipeline")
    DocBin(docs=[eg.reference for eg in _gold(char_nlp, expected)]).to_disk(tmp_path / "gold.spacy")
    res = subprocess.run([sys.executable, "-m", "spacy", "evaluate", str(tmp_path / "pipeline"), str(tmp_path / "gold.spacy"),
                          "--output", str(tmp_path / "scores.json")], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    scores = json.loads((tmp_path / "scores.json").read_text())
    found = sum(map(len, expected))
    assert scores["ents_p"] == pytest.approx((found - 1) / found) and "NER P" in res.stdout


def test_the_component_declares_what_it_assigns_its_labels_and_scores(char_nlp):
    summary = char_nlp.analyze_pipes()["summary"]["zhner"]
    assert {"doc.ents", "token.ent_iob", "token.ent_type", "span._.zhner_score", "doc._.zhner_entities"} <= set(summary["assigns"])
    assert set(summary["scores"]) >= {"ents_f", "ents_p", "ents_r"}
    assert char_nlp.pipe_labels == {"zhner": ["LOC", "ORG", "PER"]} and char_nlp.meta["labels"]["zhner"] == ["LOC", "ORG", "PER"]


def test_a_bad_model_fails_when_the_component_is_added(model, tmp_path):
    nlp = spacy.blank("zh")
    with pytest.raises(ZhnerError, match="no such model directory") as info:
        nlp.add_pipe("zhner", config={"model": str(tmp_path / "runs" / "none")})
    assert "\n" not in str(info.value)
    with pytest.raises(ZhnerError, match=r"^components.zhner.model: unknown model 'zh-huge'.*zh-small"):
        nlp.add_pipe("zhner", config={"model": "zh-huge"})
    assert nlp.pipe_names == []


@pytest.mark.parametrize("name", ["zh-small", "zh-accurate"])
def test_shipped_names_are_models(name):
    from zhner.shipped import SHIPPED, RESOURCES

    if not (RESOURCES / SHIPPED[name][0] / "model.safetensors").is_file():
        pytest.skip(f"{name} is not in this checkout")
    nlp = spacy.blank("zh")
    nlp.add_pipe("zhner", config={"model": name})
    assert [(e.text, e.label_) for e in nlp("张三毕业于北京大学。").ents] == [("张三", "PER"), ("北京大学", "ORG")]


def test_spacy_package_makes_an_installable_pipeline(char_nlp, tmp_path):
    """`spacy package` of a pipeline with the component: it requires zhner, carries the model, and the installed
    package loads with spacy.load(NAME) in a fresh interpreter."""
    pytest.importorskip("setuptools")
    char_nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "packages").mkdir()
    res = subprocess.run([sys.executable, "-m", "spacy", "package", str(tmp_path / "pipeline"), str(tmp_path / "packages"),
                          "--name", "zhner_test", "--version", "0.0.1", "--build", "none"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    source = tmp_path / "packages" / "zh_zhner_test-0.0.1"
    assert "zhner>=" in (source / "meta.json").read_text()  # spaCy found the component's package: a requirement
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                          "--target", str(tmp_path / "site"), str(source)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    script = ("import spacy\nnlp = spacy.load('zh_zhner_test')\n"
              "print([(e.text, e.label_) for e in nlp('张三毕业于北京大学。').ents])")
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{REPO}", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[('张三', 'PER'), ('北京大学', 'ORG')]"

"""The shipped general model's plumbing: entity type mapping, FLAT word vectors composed from characters, the size of a
model directory built from configs/flat_general.yaml, and the default model used by `zhner predict` without -m.

The tiny run of flat_general.yaml trains on `mini` (the corpus the package carries) written out in the types of the
config's corpora (MSRA's NR/NS/NT, Weibo's and Resume's), so that each of the config's type maps is applied as on the
real corpora; the size check's growth counts the real corpora's characters (the benchmark corpora's folder)."""
import json

import pytest
import torch

from conftest import REPO, sized
from zhner import shipped as shipped_module
from zhner import tagger as tagger_module
from zhner.config import apply_overrides, config_from_dict, load_config, read_yaml_config
from zhner.data.corpus import Corpus, Example, map_types, write_conll
from zhner.data.registry import load_dataset
from zhner.data.vocab import normalize_char
from zhner.errors import ZhnerError
from zhner.models.modeling_flat import FLAT, FLATConfig
from zhner.tagger import Tagger, default_model_dir
from zhner.train.assemble import prepare
from zhner.train.corpora import load_splits
from zhner.train.trainer import train

GENERAL = REPO / "zhner" / "configs" / "flat_general.yaml"
TINY = [
    "model.heads=2",
    "model.head_dim=8",
    "data.max_train_sentences=40",
    "data.max_eval_sentences=8",
    "train.epochs=1",
    "train.batch_size=10",
    "train.lr=0.01",
]
LIMIT_BYTES = 20 * 2**20


def test_map_types_renames_and_rejects_unmapped_types():
    corpus = Corpus([Example(list("张三在北京"), ["B-NR", "E-NR", "O", "B-NS", "E-NS"], line=3)], "bmes", "x.bmes")
    mapped = map_types(corpus, {"NR": "PER", "NS": "LOC", "NT": "ORG"})
    assert mapped.sentences[0].tags == ["B-PER", "E-PER", "O", "B-LOC", "E-LOC"]
    assert corpus.sentences[0].tags[0] == "B-NR"  # the input is left alone
    with pytest.raises(ZhnerError, match=r"data.type_map: entity type 'NS' of x.bmes:6 is not mapped"):
        map_types(corpus, {"NR": "PER"})
    with pytest.raises(ZhnerError, match="data.type_map"):
        config_from_dict({"model": {"name": "tener"}, "data": {"type_map": {"NR": "P ER"}}})
    # accepted before: {} read as no map, B-O / E-O tags of a type named O, a model with the O tag alone
    for type_map, message in (({}, "an empty map"), ({"NR": "O"}, "'O' is the tag outside entities"),
                              ({"NR": None, "NS": None}, "every type is mapped to null")):
        with pytest.raises(ZhnerError, match=f"data.type_map: .*{message}"):
            config_from_dict({"model": {"name": "tener"}, "data": {"type_map": type_map}})


def test_composed_word_vectors_are_the_mean_of_their_characters():
    cfg = FLATConfig(heads=2, head_dim=4, char_dim=6, bigram_dim=0, word_embedding="chars")
    model = FLAT(sized(cfg, {"chars": 20}, 5))
    assert model.words is None and set(model.pretrained_tables()) == {"chars"}
    chars = torch.randint(2, 20, (2, 7))
    starts = torch.tensor([[0, 2, 3], [1, 4, 0]])
    ends = torch.tensor([[1, 5, 6], [3, 6, 0]])
    got = model.word_vectors({"chars": chars, "word_starts": starts, "word_ends": ends})
    table = model.embed.chars.weight
    for b in range(2):
        for w in range(3):
            s, e = int(starts[b, w]), int(ends[b, w])
            assert torch.allclose(got[b, w], table[chars[b, s : e + 1]].mean(0), atol=1e-6)
    with pytest.raises(ZhnerError, match="model.word_dim"):
        FLAT(sized(cfg.model_copy(update={"word_dim": 8}), {"chars": 20}, 5))


# mini's PER / LOC / ORG as each corpus of flat_general.yaml names them (the Weibo stand-in's ORG as a nominal mention,
# which the config's map drops)
SOURCE_TYPES = {
    "msra": {"PER": "NR", "LOC": "NS", "ORG": "NT"},
    "weibo": {"PER": "PER.NAM", "LOC": "GPE.NAM", "ORG": "ORG.NOM"},
    "resume": {"PER": "NAME", "LOC": "LOC", "ORG": "ORG"},
}


@pytest.fixture(scope="module")
def general_run(tmp_path_factory):
    """flat_general.yaml, tiny, with each of its corpora replaced by a folder of mini in that corpus's types."""
    folders = tmp_path_factory.mktemp("general_corpora")
    for corpus, types in SOURCE_TYPES.items():
        (folders / corpus).mkdir()
        for split, data in load_dataset("mini").items():
            write_conll(folders / corpus / f"{split}.char.bmes", map_types(data, types).sentences)
    raw = apply_overrides(read_yaml_config(GENERAL), TINY)
    assert raw["data"]["dataset"] == "msra" and [part["dataset"] for part in raw["data"]["union"]] == ["weibo", "resume"]
    raw["data"]["dataset"] = str(folders / "msra")
    for part in raw["data"]["union"]:
        part["dataset"] = str(folders / part["dataset"])
    out = tmp_path_factory.mktemp("general")
    train(config_from_dict(raw, str(GENERAL)), out, log=lambda _: None)
    return out


def test_general_config_maps_msra_types_and_has_no_word_table(general_run):
    tagger = Tagger.load(general_run)
    assert {t[2:] for t in tagger.featurizer.tags if t != "O"} == {"PER", "LOC", "ORG"}
    assert tagger.featurizer.words is None and tagger.featurizer.bigrams is None
    assert len(tagger.featurizer.lexicon) > 300_000  # the whole lexicon ships: any of its words is used at prediction
    batch = tagger.featurizer.collate([tagger.featurizer.encode(list("中国人民银行行长在北京"))])
    assert "words" not in batch and batch["word_mask"].sum() > 3
    texts = ["张三毕业于北京大学。", "", "中华人民共和国国务院总理"]
    (ents, empty, _) = tagger.predict(texts)
    assert empty == []
    assert all(texts[0][e["start"] : e["end"]] == e["text"] and e["type"] in {"PER", "LOC", "ORG"} for e in ents)


def test_general_model_directory_fits_the_size_limit(general_run, shared_data):
    """The directory of the tiny run, plus the largest growth a full run can bring: its character table holds at most
    every character of the union's corpora (train, dev and test); nothing else grows with data."""
    size = sum(p.stat().st_size for p in general_run.iterdir() if p.name != "log.jsonl")
    tagger = Tagger.load(general_run)
    char_dim = tagger.config.model.char_dim
    full = load_config(GENERAL, [t for t in TINY if not t.startswith("data.")])
    splits, _ = load_splits(full)
    chars = {normalize_char(c, full.embeddings.normalize_digits) for corpus in splits.values() for ex in corpus for c in ex.tokens}
    # a float32 row + its vocab.json entry (JSON-escaped characters take up to 6 bytes each)
    growth = (len(chars) + 2 - len(tagger.featurizer.chars)) * (char_dim * 4 + 10)
    assert size + growth < LIMIT_BYTES, (size, growth)
    weights = (general_run / "model.safetensors").stat().st_size
    assert weights < 2_000_000  # tiny sizes here; the real model (8 x 20) is about 4 MB (see the report)


def test_predict_without_a_model_uses_the_shipped_one(general_run, tmp_path, monkeypatch):
    from zhner.cli import predict

    monkeypatch.setattr(shipped_module, "DEFAULT_MODEL", tmp_path / "absent")
    assert default_model_dir() is None
    src, dest = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("张三毕业于北京大学。\n李四\n", encoding="utf-8")
    options = {"confidence": False, "nbest": 0, "input_format": "auto", "text": None, "device": "cpu", "on_error": "fail",
               "engine": "local", "workers": 2, "runtime": "torch"}  # typer's defaults
    with pytest.raises(ZhnerError, match="ships no default model"):
        predict(str(src), None, dest, "jsonl", 32, None, **options)

    monkeypatch.setattr(shipped_module, "DEFAULT_MODEL", general_run)
    assert default_model_dir() == general_run
    predict(str(src), None, dest, "jsonl", 32, None, **options)
    records = [json.loads(line) for line in dest.read_text(encoding="utf-8").splitlines()]
    expected = Tagger.load(general_run).predict(["张三毕业于北京大学。", "李四"], confidence=False)
    assert [r["entities"] for r in records] == expected


def test_evaluate_maps_source_types_of_the_data(general_run, tmp_path, capsys):
    """`zhner evaluate` of a model trained with data.type_map reads data in the source types (MSRA's NR/NS/NT) too."""
    from zhner.cli import evaluate

    source, mapped = tmp_path / "nr.bmes", tmp_path / "per.bmes"
    lines = ["张 B-NR", "三 E-NR", "在 O", "北 B-NS", "京 E-NS", ""]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mapped.write_text("\n".join(lines).replace("NR", "PER").replace("NS", "LOC") + "\n", encoding="utf-8")
    evaluate(general_run, str(source), 64, device="cpu", seen_in=None, as_json=True, onnx=None)
    from_source = json.loads(capsys.readouterr().out)
    evaluate(general_run, str(mapped), 64, device="cpu", seen_in=None, as_json=True, onnx=None)
    assert from_source == json.loads(capsys.readouterr().out)
    assert set(from_source["per_type"]) <= {"PER", "LOC", "ORG"}
    # --seen-in in the source types is mapped too: both gold mentions are seen (张三/PER, 北京/LOC)
    evaluate(general_run, str(mapped), 64, device="cpu", seen_in=str(source), as_json=True, onnx=None)
    seen = json.loads(capsys.readouterr().out)["seen"]
    assert (seen["seen"]["n_gold"], seen["unseen"]["n_gold"]) == (2, 0)


def test_the_shipped_model_loads_is_small_and_tags():
    """The model in zhner/resources/default_model/ (when this checkout ships one): under 20 MB, PER/LOC/ORG, and it finds
    the obvious entities of a plain sentence with exact offsets."""
    shipped = tagger_module.DEFAULT_MODEL
    if not (shipped / "model.safetensors").is_file():
        pytest.skip("this checkout ships no default model")
    size = sum(p.stat().st_size for p in shipped.iterdir())
    assert size < 20_000_000, size
    tagger = Tagger.load(shipped)
    assert {t[2:] for t in tagger.featurizer.tags if t != "O"} == {"PER", "LOC", "ORG"}
    text = "李明毕业于北京大学，现在上海工作。"
    entities = tagger.predict([text])[0]
    assert all(text[e["start"] : e["end"]] == e["text"] for e in entities)
    assert {(e["text"], e["type"]) for e in entities} >= {("北京大学", "ORG"), ("上海", "LOC")}

"""Readers of English tagging and sentence-classification data (zhner.data.wordconll, zhner.data.classification),
on the real files in shared/data and on small malformed ones."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from zhner.data.catalogue import DATASETS
from zhner.data.corpus import read_corpus
from zhner.data.registry import HELDOUT_SEED, check, load_dataset
from zhner.errors import ZhnerError

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"


def need(relpath: str) -> Path:
    path = SHARED / relpath
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    return path


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------------
# CoNLL-2003


@pytest.fixture(scope="module")
def conll():
    need("conll2003/train.txt")
    return load_dataset("conll2003")


def test_conll2003_sentence_and_entity_counts(conll):
    assert [len(conll[s]) for s in ("train", "dev", "test")] == [14041, 3250, 3453]
    assert all(c.scheme == "bio" for c in conll.values())
    counts = Counter(t for spans in conll["test"].spans() for _, _, t in spans)
    assert counts == {"PER": 1617, "LOC": 1668, "ORG": 1661, "MISC": 702}  # PROVENANCE.md, Table 2 of the paper
    assert sum(len(s) for s in conll["test"]) == 46435


def test_conll2003_entities_agree_with_seqeval(conll):
    seqeval = pytest.importorskip("seqeval.metrics.sequence_labeling")
    test = conll["test"]
    ours = Counter(t for spans in test.spans() for _, _, t in spans)
    theirs = Counter(t for t, _, _ in seqeval.get_entities([s.tags for s in test]))
    assert ours == theirs


def test_conll2003_examples_are_words(conll):
    first = conll["train"].sentences[0]
    assert first.tokens == ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    assert first.tags == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert first.line == 3  # line 1 is -DOCSTART-, line 2 blank
    assert first.spaces == [True] * 8 + [False]
    assert first.text == "EU rejects German call to boycott British lamb ."
    for (start, end), word in zip(first.offsets(), first.tokens):
        assert first.text[start:end] == word
    assert conll["train"].token_line(first, 2) == 5


def test_iob1_is_converted_to_bio(tmp_path):
    # the original CoNLL-2003 release: I- begins an entity; B- only between two adjacent entities of one type
    content = "-DOCSTART- -X- O\n\nEU NNP I-ORG\nrejects VBZ O\nPeter NNP I-PER\nBlackburn NNP I-PER\nJohn NNP B-PER\n"
    corpus = read_corpus(write(tmp_path, "eng.train", content), "conll-words")
    assert corpus.sentences[0].tags == ["B-ORG", "O", "B-PER", "I-PER", "B-PER"]
    assert corpus.spans() == [[(0, 1, "ORG"), (2, 4, "PER"), (4, 5, "PER")]]


def test_conll_words_detected_and_docstart_ends_a_sentence(tmp_path):
    content = "Paris B-LOC\nis O\n-DOCSTART- O\nRome B-LOC\n"
    corpus = read_corpus(write(tmp_path, "train.txt", content))
    assert [s.tokens for s in corpus] == [["Paris", "is"], ["Rome"]]
    assert [s.line for s in corpus] == [1, 4]


@pytest.mark.parametrize(
    "content,line,message",
    [
        ("EU NNP B-NP B-ORG\nrejects VBZ B-VP\n", 2, "3 columns, but line 1 has 4"),
        ("EU NNP B-NP B-ORG\nrejects VBZ B-VP X-ORG\n", 2, "unknown tag"),
        ("EU NNP B-NP B-ORG\n\nrejects VBZ B-VP E-ORG\n", 3, "not a BIO/IOB1 tag"),
        ("EU NNP B-NP ORG\n", 1, "malformed tag"),
        ("EU\n", 1, "2 or more columns"),
    ],
)
def test_conll_words_errors_name_file_and_line(tmp_path, content, line, message):
    path = write(tmp_path, "bad.txt", content)
    with pytest.raises(ZhnerError, match=message) as err:
        read_corpus(path, "conll-words")
    assert str(err.value).startswith(f"{path}:{line}:")


# ---------------------------------------------------------------------------------------------------------------
# GLUE SST-2 and CoLA, ChnSentiCorp


@pytest.fixture(scope="module")
def sst2():
    need("glue_sst2/train.tsv")
    return load_dataset("sst2")


def test_sst2_splits(sst2):
    train, dev, test = sst2["train"], sst2["dev"], sst2["test"]
    assert len(train) + len(dev) == 67349 and len(dev) == round(67349 * 0.05)
    assert not {s.line for s in train} & {s.line for s in dev}
    assert len(test) == 872 and "GLUE dev" in test.path
    assert f"seed {HELDOUT_SEED}" in dev.path
    assert all(c.scheme is None for c in sst2.values())
    assert Counter(s.label for s in test) == {"1": 444, "0": 428}
    assert Counter(s.label for c in (train, dev) for s in c) == {"1": 37569, "0": 29780}
    assert train.sentences[0].line == 2  # line 1 is the header `sentence<TAB>label`


def test_english_word_offsets_map_back_to_the_text(sst2):
    lines = (SHARED / "glue_sst2" / "dev.tsv").read_text(encoding="utf-8").split("\n")
    for example in sst2["test"].sentences[:50]:
        text = lines[example.line - 1].split("\t")[0]
        assert [text[a:b] for a, b in example.meta["offsets"]] == example.tokens


def test_cola_splits():
    need("glue_cola/train.tsv")
    data = load_dataset("cola")
    assert len(data["train"]) + len(data["dev"]) == 8551
    assert len(data["test"]) == 1043 and "GLUE dev" in data["test"].path
    assert Counter(s.label for s in data["test"]) == {"1": 721, "0": 322}
    first = data["train"].sentences[0]
    assert first.tokens[:3] == ["Our", "friends", "won't"] and first.label == "1"
    assert DATASETS["cola"].metric == "mcc" and DATASETS["sst2"].metric == "accuracy"


def test_glue_test_files_read_unlabelled():
    path = need("glue_cola/test.tsv")  # `index<TAB>sentence`, labels held by the GLUE server
    corpus = read_corpus(path, "tsv", labelled=False, unit="word")
    assert len(corpus) == 1063 and all(s.label is None for s in corpus)
    with pytest.raises(ZhnerError, match="no 'label' column") as err:
        read_corpus(path, "tsv", unit="word")
    assert f"{path}:1:" in str(err.value)


def test_chnsenticorp_splits_and_characters():
    need("chnsenticorp/train.tsv")
    data = load_dataset("chnsenticorp")
    assert [len(data[s]) for s in ("train", "dev", "test")] == [9600, 1200, 1200]
    assert {s.label for c in data.values() for s in c} == {"0", "1"}
    assert Counter(s.label for s in data["test"]) == {"1": 608, "0": 592}
    first = data["train"].sentences[0]
    assert first.tokens[:4] == list("选择珠江") and first.spaces is None
    assert " " in first.tokens  # spaces inside the review stay characters of the text
    assert DATASETS["chnsenticorp"].unit == "char" and DATASETS["chnsenticorp"].language == "zh"


def test_check_new_datasets_pass():
    need("conll2003/train.txt")
    for name in ("conll2003", "sst2", "cola", "chnsenticorp"):
        rows = check(name)
        assert all(r["status"] == "ok" and r["error"] is None for r in rows), rows
    res = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "data", "check", "cola"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and res.stdout.count(" ok ") == 2, res.stdout + res.stderr


# ---------------------------------------------------------------------------------------------------------------
# Small classification files


def test_tsv_with_and_without_header(tmp_path):
    plain = read_corpus(write(tmp_path, "a.tsv", "很好 吃\t1\n太差\t0\n"))
    assert [(s.text, s.label, s.line) for s in plain] == [("很好 吃", "1", 1), ("太差", "0", 2)]
    assert plain.scheme is None
    header = read_corpus(write(tmp_path, "b.tsv", "label\ttext_a\nacceptable\tI saw it.\n"), unit="word")
    assert header.sentences[0].tokens == ["I", "saw", "it", "."] and header.sentences[0].label == "acceptable"


def test_cola_format_detected(tmp_path):
    content = 'gj04\t1\t\tHe said "no".\nbc01\t0\t*\tThe more.\n'
    corpus = read_corpus(write(tmp_path, "train.tsv", content), unit="word")
    assert [s.label for s in corpus] == ["1", "0"]
    assert corpus.sentences[0].tokens == ["He", "said", '"', "no", '"', "."]


def test_jsonl_label_records(tmp_path):
    lines = [{"text": "It works .", "label": "1"}, {"text": "No", "label": 0}]
    corpus = read_corpus(write(tmp_path, "a.jsonl", "\n".join(json.dumps(r) for r in lines)), unit="word")
    assert corpus.scheme is None
    assert [(s.tokens, s.label, s.line) for s in corpus] == [(["It", "works", "."], "1", 1), (["No"], "0", 2)]


@pytest.mark.parametrize(
    "name,content,fmt,line,message",
    [
        ("a.tsv", "good\t1\nbad\t0\textra\n", "tsv", 2, "3 tab-separated columns"),
        ("b.tsv", "good\t1\nbad\t \n", "tsv", 2, "empty label"),
        ("c.tsv", "sentence\tlabel\ngood\t1\n \t0\n", "tsv", 3, "empty text"),
        ("d.tsv", "gj04\t1\t\tGood.\ngj04\t1\tGood.\n", "cola", 2, "CoLA"),
        ("e.tsv", "good\t1\nok\t1\nbad\t0\n", "cola", 1, "use the format 'cola'|CoLA"),
        ("f.jsonl", '{"text": "ab", "entities": []}\n{"text": "cd", "label": "1"}\n', "jsonl", 2, "line 1 has"),
        ("g.jsonl", '{"text": "ab", "label": "1", "entities": []}\n', "jsonl", 1, "both"),
        ("h.jsonl", '{"text": "ab", "label": ""}\n', "jsonl", 1, "empty label"),
        ("i.jsonl", '{"text": "ab", "label": [1]}\n', "jsonl", 1, "string or an integer"),
    ],
)
def test_classification_errors_name_file_and_line(tmp_path, name, content, fmt, line, message):
    path = write(tmp_path, name, content)
    with pytest.raises(ZhnerError, match=message) as err:
        read_corpus(path, fmt)
    assert str(err.value).startswith(f"{path}:{line}:")


def test_bad_utf8_names_the_line(tmp_path):
    path = write(tmp_path, "gbk.tsv", "好\t1\n".encode("utf-8") + "差\t0\n".encode("gbk"))
    with pytest.raises(ZhnerError, match="UTF-8") as err:
        read_corpus(path, "tsv")
    assert str(err.value).startswith(f"{path}:2:")


def test_unknown_unit_and_word_unit_tagging_records(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"text": "ab", "entities": [[0, 1, "X"]]}\n')
    with pytest.raises(ZhnerError, match="unknown token unit"):
        read_corpus(path, unit="subword")
    with pytest.raises(ZhnerError, match="character offsets") as err:
        read_corpus(path, unit="word")
    assert f"{path}:1:" in str(err.value)


def test_folder_of_english_classification_files(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder, "train.tsv", "text\tlabel\n" + "".join(f"sentence number {i}\t{i % 2}\n" for i in range(40)))
    write(folder, "test.tsv", "text\tlabel\nthe end .\t1\n")
    data = load_dataset(folder, unit="word")
    assert (len(data["train"]), len(data["dev"]), len(data["test"])) == (38, 2, 1)
    assert data["test"].sentences[0].tokens == ["the", "end", "."]

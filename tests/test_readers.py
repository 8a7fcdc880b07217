"""Readers of English tagging and sentence-classification data (zhner.data.wordconll, zhner.data.classification):
on small files written for the tests in the formats of CoNLL-2003 and GLUE (tests/data/english_readers), on small
malformed ones, and on the real corpora where the benchmark corpora's folder is reachable (`shared_data`)."""
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
ENGLISH = REPO / "tests" / "data" / "english_readers"  # hand-written: CoNLL-2003's and GLUE's file formats


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
def conll(shared_data):
    return load_dataset("conll2003", data_dir=shared_data)


def test_conll2003_sentence_and_entity_counts(conll):
    assert [len(conll[s]) for s in ("train", "dev", "test")] == [14041, 3250, 3453]
    assert all(c.scheme == "bio" for c in conll.values())
    counts = Counter(t for spans in conll["test"].spans() for _, _, t in spans)
    assert counts == {"PER": 1617, "LOC": 1668, "ORG": 1661, "MISC": 702}  # PROVENANCE.md, Table 2 of the paper
    assert sum(len(s) for s in conll["test"]) == 46435


def _assert_entities_agree_with_seqeval(corpus) -> None:
    seqeval = pytest.importorskip("seqeval.metrics.sequence_labeling")
    ours = [(t, start, end - 1) for spans in corpus.spans() for start, end, t in spans]  # per sentence, as seqeval's
    theirs = [entity for s in corpus for entity in seqeval.get_entities(s.tags)]
    assert ours == theirs and ours


def test_word_file_entities_agree_with_seqeval():
    corpus = read_corpus(ENGLISH / "ner.txt")
    assert corpus.scheme == "bio" and {t for spans in corpus.spans() for _, _, t in spans} == {"PER", "LOC", "ORG", "MISC"}
    _assert_entities_agree_with_seqeval(corpus)


def test_conll2003_entities_agree_with_seqeval(conll):
    _assert_entities_agree_with_seqeval(conll["test"])


def test_conll_words_examples_are_words():
    corpus = read_corpus(ENGLISH / "ner.txt")  # CoNLL-2003's format: WORD POS CHUNK NER, -DOCSTART- lines
    first = corpus.sentences[0]
    assert first.tokens == ["Anna", "Berg", "flew", "from", "Oslo", "to", "Cape", "Town", "on", "Monday", "."]
    assert first.tags == ["B-PER", "I-PER", "O", "O", "B-LOC", "O", "B-LOC", "I-LOC", "O", "O", "O"]
    assert first.line == 3  # line 1 is -DOCSTART-, line 2 blank
    assert first.spaces == [True] * 10 + [False]
    assert first.text == "Anna Berg flew from Oslo to Cape Town on Monday ."
    for (start, end), word in zip(first.offsets(), first.tokens):
        assert first.text[start:end] == word
    assert corpus.token_line(first, 2) == 5
    # a -DOCSTART- inside the file ends a document: the next sentence starts two lines below it
    text = (ENGLISH / "ner.txt").read_text(encoding="utf-8")
    starts = [n + 2 for n, line in enumerate(text.split("\n"), 1) if line.startswith("-DOCSTART-")]
    assert len(starts) == 2 and starts[1] in [s.line for s in corpus]
    blocks = [b for b in text.split("\n\n") if b.strip() and not b.startswith("-DOCSTART-")]
    assert [s.tokens for s in corpus] == [[line.split()[0] for line in b.splitlines()] for b in blocks]


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
def sst2(shared_data):
    return load_dataset("sst2", data_dir=shared_data)


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


def test_english_word_offsets_map_back_to_the_text():
    path = ENGLISH / "sentiment.tsv"  # SST-2's format; words with punctuation, contractions and quotes attached
    corpus = read_corpus(path, unit="word")
    lines = path.read_text(encoding="utf-8").split("\n")
    assert len(corpus) == len([line for line in lines[1:] if line]) and corpus.scheme is None
    split_off = 0
    for example in corpus.sentences:
        text, label = lines[example.line - 1].split("\t")
        assert example.label == label and example.tokens
        assert [text[a:b] for a, b in example.meta["offsets"]] == example.tokens
        split_off += sum(1 for (_, b), (c, _) in zip(example.meta["offsets"], example.meta["offsets"][1:]) if b == c)
    assert split_off > 10  # words cut off at punctuation, not at spaces: the offsets are not a plain split


def test_cola_splits(shared_data):
    data = load_dataset("cola", data_dir=shared_data)
    assert len(data["train"]) + len(data["dev"]) == 8551
    assert len(data["test"]) == 1043 and "GLUE dev" in data["test"].path
    assert Counter(s.label for s in data["test"]) == {"1": 721, "0": 322}
    first = data["train"].sentences[0]
    assert first.tokens[:3] == ["Our", "friends", "won't"] and first.label == "1"
    assert DATASETS["cola"].metric == "mcc" and DATASETS["sst2"].metric == "accuracy"


def test_glue_test_files_read_unlabelled():
    path = ENGLISH / "unlabelled.tsv"  # a GLUE test file's format, `index<TAB>sentence`: labels held by the GLUE server
    corpus = read_corpus(path, "tsv", labelled=False, unit="word")
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    assert len(corpus) == len(rows) and all(s.label is None for s in corpus)
    assert [s.text for s in corpus] == [sentence for _, sentence in rows]  # the index column is not text
    assert corpus.sentences[0].tokens == ["The", "bus", "left", "before", "we", "got", "there", "."]
    with pytest.raises(ZhnerError, match="no 'label' column") as err:
        read_corpus(path, "tsv", unit="word")
    assert f"{path}:1:" in str(err.value)


def test_chnsenticorp_splits_and_characters(shared_data):
    data = load_dataset("chnsenticorp", data_dir=shared_data)
    assert [len(data[s]) for s in ("train", "dev", "test")] == [9600, 1200, 1200]
    assert {s.label for c in data.values() for s in c} == {"0", "1"}
    assert Counter(s.label for s in data["test"]) == {"1": 608, "0": 592}
    first = data["train"].sentences[0]
    assert first.tokens[:4] == list("选择珠江") and first.spaces is None
    assert " " in first.tokens  # spaces inside the review stay characters of the text
    assert DATASETS["chnsenticorp"].unit == "char" and DATASETS["chnsenticorp"].language == "zh"


def test_check_new_datasets_pass(shared_data):
    for name in ("conll2003", "sst2", "cola", "chnsenticorp"):
        rows = check(name, shared_data)
        assert all(r["status"] == "ok" and r["error"] is None for r in rows), rows
    res = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "data", "check", "cola", "--data-dir", str(shared_data)],
        capture_output=True, text=True, timeout=120,
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

import json

import pytest

from zhner.data.corpus import check_known_tags, read_corpus, repair_tags, write_conll, write_jsonl
from zhner.data.schemes import tags_to_spans
from zhner.errors import ZhnerError


def write(tmp_path, name, content, mode="w"):
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_bmes_space_and_tab(tmp_path):
    path = write(tmp_path, "a.bmes", "张 B-NAME\n三 E-NAME\n好 O\n\n北\tB-LOC\n京\tE-LOC\n")
    corpus = read_corpus(path)
    assert corpus.scheme == "bmes"
    assert [s.text for s in corpus] == ["张三好", "北京"]
    assert corpus.spans() == [[(0, 2, "NAME")], [(0, 2, "LOC")]]
    assert [s.line for s in corpus] == [1, 5]


def test_bio_and_bioes_detected(tmp_path):
    assert read_corpus(write(tmp_path, "b.txt", "a B-X\nb I-X\n")).scheme == "bio"
    assert read_corpus(write(tmp_path, "c.txt", "a B-X\nb I-X\nc E-X\n")).scheme == "bioes"


def test_weibo_original_format(tmp_path):
    # a digit character with a two-digit position, and the damaged-emoji token of the real corpus
    content = "我0\tO\n们1\tO\n310\tB-PER.NAM\n\ufffd\ufffd0\tO\np12\tO\n"
    corpus = read_corpus(write(tmp_path, "weibo.train", content))
    assert corpus.sentences[0].tokens == ["我", "们", "3", "\ufffd", "p"]
    assert corpus.scheme == "bio"


def test_jsonl_roundtrip(tmp_path):
    src = write(
        tmp_path,
        "a.jsonl",
        json.dumps({"text": "张三在北京", "entities": [{"start": 0, "end": 2, "type": "PER"}, [3, 5, "LOC"]]}, ensure_ascii=False)
        + "\n\n"
        + json.dumps({"text": "无"}, ensure_ascii=False)
        + "\n",
    )
    corpus = read_corpus(src)
    assert corpus.sentences[0].tags == ["B-PER", "E-PER", "O", "B-LOC", "E-LOC"]
    assert corpus.sentences[1].tags is None and corpus.sentences[1].line == 3
    out = tmp_path / "out.jsonl"
    write_jsonl(out, corpus.sentences[:1], corpus.scheme)
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["entities"][1] == {"type": "LOC", "start": 3, "end": 5, "text": "北京"}
    conll = tmp_path / "out.bmes"
    write_conll(conll, corpus.sentences[:1])
    assert read_corpus(conll).sentences[0].tags == corpus.sentences[0].tags


@pytest.mark.parametrize(
    "content,line,message",
    [
        ("张 B-NAME\n三 E-NAME extra\n", 2, "malformed line"),
        ("张 B-NAME\n三\n", 2, "malformed line"),
        ("张 B-NAME\n\n三四 O\n", 3, "not a single character"),
        ("张 B-NAME\n三 X-NAME\n", 2, "unknown tag"),
        ("张 B-NAME\n三 I-NAME\n四 E-NAME\n\n五 M-NAME\n", 2, "not a BMES tag"),  # mixed schemes
        ("张 B-NAME\n三 E-\n", 2, "malformed tag"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, content, line, message):
    path = write(tmp_path, "bad.bmes", content)
    with pytest.raises(ZhnerError, match=message) as err:
        read_corpus(path)
    assert str(err.value).startswith(f"{path}:{line}:")


def test_empty_and_missing_and_binary(tmp_path):
    with pytest.raises(ZhnerError, match="empty"):
        read_corpus(write(tmp_path, "e.bmes", "\n\n"))
    with pytest.raises(ZhnerError, match="no such file"):
        read_corpus(tmp_path / "nope.bmes")
    bad = write(tmp_path, "gbk.bmes", "张 O\n".encode("utf-8") + "三 O\n".encode("gbk"), mode="wb")
    with pytest.raises(ZhnerError, match="UTF-8") as err:
        read_corpus(bad)
    assert f"{bad}:2:" in str(err.value)


def test_bad_jsonl(tmp_path):
    with pytest.raises(ZhnerError, match="invalid JSON") as err:
        read_corpus(write(tmp_path, "a.jsonl", '{"text": "a"}\n{"text": \n'))
    assert ":2:" in str(err.value)
    with pytest.raises(ZhnerError, match="overlaps"):
        read_corpus(write(tmp_path, "b.jsonl", '{"text": "abcd", "entities": [[0, 3, "X"], [2, 4, "Y"]]}\n'))
    with pytest.raises(ZhnerError, match='"text"'):
        read_corpus(write(tmp_path, "c.jsonl", '{"txt": "abcd"}\n'))
    with pytest.raises(ZhnerError, match="too long to read") as err:  # Python reads at most 4,300 digits
        read_corpus(write(tmp_path, "d.jsonl", '{"text": "a"}\n{"text": "a", "id": ' + "9" * 5000 + "}\n"))
    assert ":2:" in str(err.value)


def test_strict_scheme_check(tmp_path):
    path = write(tmp_path, "s.bmes", "a O\nb M-X\nc E-X\n")
    assert read_corpus(path).spans(strict=False) == [[(1, 3, "X")]]
    with pytest.raises(ZhnerError, match="breaks the BMES scheme") as err:
        read_corpus(path, strict=True)
    assert f"{path}:2:" in str(err.value)


def test_repair_tags_keeps_the_lenient_spans(tmp_path):
    # sentence 2 is Weibo train's kind of error: a PER.NAM entity runs into M-/E- of PER.NOM without closing
    content = "a S-X\nb O\n\nc B-P\nd M-P\ne M-Q\nf E-Q\ng O\n\nh E-X\n"
    corpus = read_corpus(write(tmp_path, "r.bmes", content))
    fixed, lines = repair_tags(corpus)
    assert lines == [6, 10]  # the first offending token of each broken sentence
    assert fixed.sentences[0] is corpus.sentences[0]  # well-formed sentences are untouched
    assert fixed.sentences[1].tags == ["B-P", "E-P", "B-Q", "E-Q", "O"]
    assert fixed.sentences[2].tags == ["S-X"]
    assert fixed.spans(strict=True) == corpus.spans(strict=False)
    assert repair_tags(fixed)[1] == []


def test_repaired_paths_are_allowed_by_the_crf_constraints(shared_data):
    import torch

    from zhner.data.registry import load_dataset
    from zhner.nn.crf import CRF, allowed_transitions

    train = load_dataset("weibo")["train"]
    fixed, lines = repair_tags(train)
    assert len(lines) == 8  # Weibo's train file has 8 sentences whose BMES tags break the scheme
    tags = sorted({t for s in train.sentences for t in s.tags})
    crf = CRF(len(tags), allowed_transitions(tags, "bmes"))
    index = {t: i for i, t in enumerate(tags)}

    def worst_gold_score(corpus):  # with zero emissions and transitions a path scores 0, unless it is forbidden (-1e4)
        scores = []
        for s in corpus.sentences:
            ids = torch.tensor([[index[t] for t in s.tags]])
            with torch.no_grad():
                scores.append(float(crf.score(torch.zeros(1, len(s), len(tags)), ids, torch.ones_like(ids, dtype=torch.bool))))
        return min(scores)

    assert worst_gold_score(train) <= -1e4  # the CRF gives the broken gold paths probability 0
    assert worst_gold_score(fixed) == 0.0


def test_unknown_tags_against_a_label_set(tmp_path):
    corpus = read_corpus(write(tmp_path, "u.bmes", "a O\nb S-X\n\nc S-Y\n"))
    check_known_tags(corpus, ["O", "S-X", "S-Y"])
    with pytest.raises(ZhnerError, match="unknown tag 'S-Y'") as err:
        check_known_tags(corpus, ["O", "S-X"])
    assert ":4:" in str(err.value)


def test_real_corpora_counts(shared_data):
    weibo = read_corpus(shared_data / "weibo_ner/original_2nd_conll/weiboNER_2nd_conll.train")
    bmes = read_corpus(shared_data / "weibo_ner/bmes/train.all.bmes")
    assert len(weibo) == len(bmes) == 1350
    assert [s.tokens for s in weibo] == [s.tokens for s in bmes]
    assert sum(len(x) for x in weibo.spans(strict=True)) == 1885  # PROVENANCE: 1885 mentions
    # the BMES conversion agrees span for span with the BIO original under the lenient reading
    assert [tags_to_spans(s.tags, "bio", False) for s in weibo] == [tags_to_spans(s.tags, "bmes", False) for s in bmes]
    resume = read_corpus(shared_data / "resume_ner/test.char.bmes")
    assert len(resume) == 477 and sum(len(s) for s in resume) == 15100


def test_whitespace_placeholder_round_trip(tmp_path):
    """A space, tab or U+3000 in a sentence is written as <U+XXXX> and read back as the character (before, such a
    CoNLL line was 'malformed'); an empty JSONL text is no sentence, as a blank CoNLL line."""
    from zhner.data.corpus import Example, conll_token, write_conll

    chars = list("张三 在\t北京\u3000大学")
    tags = ["B-PER", "E-PER", "O", "O", "O", "B-LOC", "E-LOC", "O", "O", "O"]
    assert [conll_token(c) for c in chars[2:4]] == ["<U+0020>", "在"]
    write_conll(tmp_path / "a.bmes", [Example(chars, tags)])
    assert "<U+0009> O\n" in (tmp_path / "a.bmes").read_text(encoding="utf-8")
    back = read_corpus(tmp_path / "a.bmes")
    assert back.sentences[0].tokens == chars and back.sentences[0].tags == tags
    (tmp_path / "b.jsonl").write_text('{"text": ""}\n{"text": "张三", "entities": []}\n', encoding="utf-8")
    assert [s.text for s in read_corpus(tmp_path / "b.jsonl")] == ["张三"]
    (tmp_path / "c.bmes").write_text("张 O\n<U+D800> O\n", encoding="utf-8")  # a surrogate is no character
    with pytest.raises(ZhnerError, match=r"c.bmes:2: token '<U\+D800>' is not a single character"):
        read_corpus(tmp_path / "c.bmes")

"""No entity begins or ends on whitespace or a symbol, none is made of them alone (issue 33): the decoders' spans are
trimmed (zhner.data.schemes.trim_spans / trim_tags) for every model, on every prediction path; ordinary sentences keep
the entities the model decodes."""
from __future__ import annotations

import json

import pytest

from cli_runner import run_zhner
from conftest import REPO
from zhner.data.schemes import is_edge_junk, tags_to_spans, trim_spans, trim_tags
from zhner.tagger import Tagger, default_model_dir


@pytest.mark.parametrize("token,junk", [(" ", True), ("\n", True), ("\u3000", True), ("😀", True), ("\u200b", True),
                                        ("\ufe0f", True), ("☀", True), ("🇨", True), ("张", False), ("a", False),
                                        ("3", False), ("（", False), ("。", False), ("Paris", False), ("😀a", False),
                                        ("○", False), ("©", False), ("+", False)])
def test_edge_junk_is_whitespace_invisible_characters_and_emoji(token, junk):
    assert is_edge_junk(token) == junk


def _assert_gold_entities_untrimmed(dataset: str, splits: tuple[str, ...]) -> None:
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import find_file

    for split in splits:
        corpus = read_corpus(find_file(dataset, split))
        assert corpus.sentences
        for sent in corpus:
            spans = tags_to_spans(sent.tags, corpus.scheme)
            assert trim_spans(sent.tokens, spans) == spans


def test_no_gold_entity_is_changed_by_trimming():
    """The rule never touches a real entity: all of mini, the corpus the package carries (Resume's and Weibo's test
    sets: the test below; all of Resume, Weibo, MSRA and CoNLL-2003, 128,823 entities, were checked once:
    docs/metrics.md)."""
    _assert_gold_entities_untrimmed("mini", ("train", "dev", "test"))
    msra_year = list("二○○八年北京")  # MSRA writes a year's zero as U+25CB, also at an entity's end
    assert trim_spans(msra_year, [(0, 4, "X")]) == [(0, 4, "X")]
    assert trim_spans(list("，。！"), [(0, 3, "X")]) == []  # punctuation alone names nothing


def test_no_gold_entity_of_the_benchmark_test_sets_is_changed_by_trimming(shared_data):
    """Resume's and Weibo's test sets (Weibo's messages hold emoji and odd spaces)."""
    for dataset in ("resume", "weibo"):
        _assert_gold_entities_untrimmed(dataset, ("test",))


def test_trim_spans_trims_edges_drops_empty_and_keeps_inner_whitespace():
    tokens = list("张三 😀😀") + list(" Michael Jordan ")
    spans = [(0, 5, "PER", 0.9), (5, 21, "PER", 0.8), (2, 3, "LOC", 0.5)]
    assert trim_spans(tokens, spans) == [(0, 2, "PER", 0.9), (6, 20, "PER", 0.8)]
    assert trim_spans(list("   "), [(0, 3, "PER")]) == []


@pytest.mark.parametrize(
    "scheme,tags,expected",
    [
        ("bmes", ["B-PER", "M-PER", "E-PER"], ["O", "O", "O"]),
        ("bio", ["B-PER", "I-PER", "I-PER"], ["O", "O", "O"]),
        ("bioes", ["B-PER", "I-PER", "E-PER"], ["O", "O", "O"]),
    ],
)
def test_trim_tags_on_whitespace_only_text_leaves_nothing(scheme, tags, expected):
    assert trim_tags([" ", "\n", "\u3000"], tags, scheme) == expected


def test_trim_tags_reencodes_a_trimmed_entity_and_blanks_stray_tags_on_whitespace():
    tokens = list("张三 😀x 北京")
    tags = ["B-PER", "M-PER", "M-PER", "E-PER", "O", "E-LOC", "B-LOC", "E-LOC"]
    # PER 0..4 -> 张三 (0..2); the orphan E-LOC on the space becomes O; LOC 6..8 untouched
    assert trim_tags(tokens, tags, "bmes") == ["B-PER", "E-PER", "O", "O", "O", "O", "B-LOC", "E-LOC"]
    bio = trim_tags([" ", "巴", "黎", " "], ["B-LOC", "I-LOC", "I-LOC", "I-LOC"], "bio")
    assert bio == ["O", "B-LOC", "I-LOC", "O"]
    assert tags_to_spans(["O", "I-X", "O"], "bio", strict=False) == [(1, 2, "X")]
    assert trim_tags(["a", "b", "c"], ["O", "I-X", "O"], "bio") == ["O", "I-X", "O"]  # malformed, not junk: kept


@pytest.fixture(scope="module")
def shipped():
    directory = default_model_dir()
    if directory is None:
        pytest.skip("this installation has no shipped default model")
    return Tagger.load(directory)


@pytest.mark.parametrize("text", ["   ", "\n\n\n", "😀😀😀", "\u3000\u3000", " 😀 😀 "])
def test_shipped_model_finds_no_entity_in_whitespace_or_emoji(shipped, text):
    assert shipped.predict([text]) == [[]]
    assert shipped.predict([text], confidence=True) == [[]]
    assert all(option["entities"] == [] for option in shipped.nbest([text], k=3)[0])
    assert shipped.tag([list(text)]) == [["O"] * len(text)]


def test_shipped_model_trims_whitespace_and_emoji_off_a_name(shipped):
    raw = shipped.model_predictions([list("张三 😀😀")])[0]
    assert tags_to_spans(raw, "bmes") == [(0, 5, "PER")]  # what the model decodes (the case the issue reports)
    assert shipped.predict(["张三 😀😀"], confidence=False) == [[{"type": "PER", "start": 0, "end": 2, "text": "张三"}]]


def test_zhner_predict_text_of_spaces_finds_nothing():
    if default_model_dir() is None:
        pytest.skip("this installation has no shipped default model")
    out = run_zhner("predict", "--text", "   ", cwd=REPO)  # its own process, forked with torch imported (cli_runner)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"text": "   ", "entities": []}


@pytest.mark.parametrize("split", ["dev", "test"])
def test_shipped_model_keeps_its_entities_on_ordinary_sentences(shipped, split):
    """The first 100 sentences of two of mini's splits (news, business, sports, everyday posts): the finished
    prediction has exactly the entities the model decodes."""
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import find_file

    sentences = read_corpus(find_file("mini", split)).sentences[:100]
    raw = shipped.model_predictions(sentences)
    finished = shipped.predictions(sentences)
    assert [tags_to_spans(t, "bmes") for t in finished] == [tags_to_spans(t, "bmes") for t in raw]
    assert sum(len(tags_to_spans(t, "bmes")) for t in raw) > 50  # the comparison is about real entities

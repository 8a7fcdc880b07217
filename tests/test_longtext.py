"""Long text: splitting with overlapping windows, stitching spans without duplicates or losses, the memory budget, and a
100,000-character document through `zhner predict` with its offsets checked."""
import json
import random

import pytest

from conftest import REPO, TINY_TENER
from test_cli import zhner
from zhner.data.longtext import SENTENCE_END, split_long_text, stitch, token_parts

ALPHABET = "张三。！？\n，北京大学abc"


def random_text(rng: random.Random, n: int, punctuation: bool = True) -> str:
    return "".join(rng.choice(ALPHABET if punctuation else "张三，北京大学abc") for _ in range(n))


def test_split_with_overlap_covers_the_text():
    rng = random.Random(1)
    for _ in range(300):
        text = random_text(rng, rng.randint(0, 700), punctuation=rng.random() < 0.7)
        max_len = rng.randint(8, 90)
        overlap = rng.randint(0, max_len // 2)
        pieces = split_long_text(text, max_len, overlap)
        cuts = {m.end() for m in SENTENCE_END.finditer(text)}
        assert all(text[off : off + len(chunk)] == chunk and 0 < len(chunk) <= max_len for off, chunk in pieces) or text == ""
        assert pieces[0][0] == 0 and pieces[-1][0] + len(pieces[-1][1]) == len(text)
        for (a, ca), (b, cb) in zip(pieces, pieces[1:]):
            a_end = a + len(ca)
            assert a < b <= a_end  # in order, no gap
            if b < a_end:  # windows inside one over-long sentence: they share at least `overlap` characters
                assert a_end - b == overlap and len(ca) == max_len
                assert not any(a < c < b + len(cb) for c in cuts)  # all inside one sentence
            elif len(text) > max_len:  # pieces meet at sentence ends (or full windows), no piece holds one inside
                assert (b in cuts or len(ca) == max_len) and not any(a < c < a_end for c in cuts)
    with pytest.raises(ValueError, match="overlap"):
        split_long_text("x" * 20, 10, 10)


def true_entities(rng: random.Random, text: str, max_len: int) -> list[tuple[int, int, str]]:
    """Non-overlapping entities of at most max_len characters that do not contain sentence punctuation."""
    spans, i = [], 0
    while i < len(text):
        length = rng.randint(1, max_len)
        if rng.random() < 0.3 and not SENTENCE_END.search(text[i : i + length]) and i + length <= len(text):
            spans.append((i, i + length, rng.choice("AB")))
            i += length + rng.randint(0, 3)
        else:
            i += 1
    return spans


def test_token_parts_partition_in_order_within_the_budget():
    """Token parts cover the tokens in order, each within max_size unless one token alone is larger; a too-long
    sequence is cut after every sentence end, as split_long_text cuts text (with characters as tokens: its cuts)."""
    rng = random.Random(5)
    for _ in range(300):
        tokens = list(random_text(rng, rng.randint(1, 300)))
        sizes = [rng.choice((1, 1, 2, 3)) for _ in tokens]
        max_size = rng.randint(2, 60)
        parts = token_parts(tokens, sizes, max_size)
        assert parts[0][0] == 0 and parts[-1][1] == len(tokens)
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:])) and all(s < e for s, e in parts)
        assert all(sum(sizes[s:e]) <= max_size or e - s == 1 for s, e in parts)
        if sum(sizes) > max_size:  # no part runs past a sentence end
            assert not any(SENTENCE_END.fullmatch(tokens[i]) and not SENTENCE_END.fullmatch(tokens[i + 1])
                           for s, e in parts for i in range(s, e - 1))
        if sum(sizes) <= max_size:
            assert parts == [(0, len(tokens))]
        text, ones = "".join(tokens), [1] * len(tokens)  # characters as tokens: the cuts of split_long_text, no overlap
        expected = [(offset, offset + len(chunk)) for offset, chunk in split_long_text(text, max_size)]
        assert token_parts(tokens, ones, max_size) == expected
    chars = list("我爱北京。你好吗？今天天气很好")
    assert token_parts(chars, [1] * len(chars), 6) == [(0, 5), (5, 9), (9, 15)]
    assert token_parts(chars, [1] * len(chars), 4) == [(0, 4), (4, 5), (5, 9), (9, 13), (13, 15)]
    words = "Mr . Smith went to Paris . He is fine ...".split()  # a full stop ends a sentence before a space
    assert token_parts(words, [1] * len(words), 5, [True] * len(words)) == [(0, 2), (2, 7), (7, 11)]


def test_stitch_recovers_every_entity_once():
    """Each piece 'predicts' the true entities clipped to its bounds (what a window edge does to an entity);
    stitching must give back exactly the true entities: none lost at an edge, none twice from an overlap."""
    rng = random.Random(2)
    for _ in range(300):
        text = random_text(rng, rng.randint(0, 600), punctuation=rng.random() < 0.5)
        max_len = rng.randint(12, 80)
        overlap = rng.randint(4, max_len // 2)
        truth = true_entities(rng, text, overlap)  # an entity no longer than the overlap fits whole in some window
        pieces = split_long_text(text, max_len, overlap)
        predicted = []
        for off, chunk in pieces:
            end = off + len(chunk)
            predicted.append([(max(s, off) - off, min(e, end) - off, t) for s, e, t in truth if s < end and e > off])
        assert stitch(pieces, predicted) == truth


def test_stitch_prefers_the_span_farthest_from_an_edge():
    pieces = [(0, "x" * 10), (6, "x" * 10)]  # overlap [6, 10)
    # the first window sees (7, 10) cut at its edge; the second sees the whole (7, 12)
    assert stitch(pieces, [[(7, 10, "A")], [(1, 6, "A")]]) == [(7, 12, "A")]
    # identical spans inside the overlap come out once
    assert stitch(pieces, [[(7, 9, "A")], [(1, 3, "A")]]) == [(7, 9, "A")]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from zhner.config import load_config
    from zhner.train.assemble import prepare

    out = tmp_path_factory.mktemp("tener")
    run = prepare(load_config(REPO / "zhner" / "configs" / "tener_resume.yaml", TINY_TENER), log=lambda _: None)
    run.tagger.save(out)
    return out, run


def test_memory_budget_sets_the_chunk_length(tiny_model):
    tagger = tiny_model[1].tagger
    lengths = [tagger.max_chars(mb) for mb in (1, 16, 256)]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]
    for mb, n in zip((1, 16, 256), lengths):
        assert tagger.model.inference_bytes(n) <= mb * 2**20 < tagger.model.inference_bytes(n + 1)


def test_predict_100k_character_document(tiny_model, tmp_path):
    """One 100,000-character line: mini's sentences, then a 5,000-character stretch without sentence punctuation
    (windows). Every entity must sit at its offsets; in the sentence part, the entities of each piece tagged on its own,
    shifted by the piece's offset, are exactly what the document gets."""
    from zhner.data.registry import load_dataset
    from zhner.tagger import Tagger

    model_dir, run = tiny_model
    mini = load_dataset("mini")
    sentences = ["".join(s.tokens) for split in ("test", "dev", "train") for s in mini[split].sentences]
    doc, k = "", 0
    while len(doc) < 95_000:
        s = sentences[k % len(sentences)]
        doc += s if SENTENCE_END.search(s[-1]) else s + "。"
        k += 1
    doc = doc[:95_000]
    doc += SENTENCE_END.sub("", "".join(sentences))[:5_000].replace("\n", "")
    assert len(doc) == 100_000 and "\n" not in doc
    (tmp_path / "doc.txt").write_text(doc + "\n", encoding="utf-8")

    memory_mb = 4
    res = zhner("predict", "-m", model_dir, tmp_path / "doc.txt", "--memory-mb", memory_mb)
    assert res.returncode == 0, res.stderr
    (record,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert record["text"] == doc
    entities = record["entities"]
    assert entities, "the model should find some entities in 100,000 characters"
    for a, b in zip(entities, entities[1:]):
        assert a["end"] <= b["start"]  # sorted, no overlaps (no duplicates from windows)
    for e in entities:
        assert 0 <= e["start"] < e["end"] <= len(doc) and doc[e["start"] : e["end"]] == e["text"]

    tagger = Tagger.load(model_dir)
    pieces = tagger.split(doc, memory_mb)
    assert len(pieces) > 100 and any(b < a + len(c) for (a, c), (b, _) in zip(pieces, pieces[1:]))  # windows happened
    inside = [(off, chunk) for off, chunk in pieces if off + len(chunk) <= 95_000]  # the sentence part: no overlaps
    expected = []
    for (off, _), found in zip(inside, tagger.predict([chunk for _, chunk in inside], confidence=False)):  # each on its own
        expected += [e.to_dict() | {"start": e["start"] + off, "end": e["end"] + off} for e in found]
    sentence_part_end = pieces_end(pieces, 95_000)
    assert [e for e in entities if e["end"] <= sentence_part_end] == expected


def pieces_end(pieces, limit: int) -> int:
    """The end of the last piece that ends by `limit`."""
    return max(off + len(chunk) for off, chunk in pieces if off + len(chunk) <= limit)


def test_a_long_line_is_tagged_as_its_sentences(tiny_model, monkeypatch):
    """A 3,000-character line goes to the model as its sentences (sorted and batched with other texts' pieces), not as
    pieces packed up to the memory budget's length (quadratic attention made that ~20x slower than its sentences);
    its entities are those of its sentences tagged one by one, shifted to line offsets."""
    from zhner.data.registry import load_dataset

    tagger = tiny_model[1].tagger
    mini = load_dataset("mini")
    line = "".join(s.text for s in (mini["test"].sentences + mini["dev"].sentences)[:200]).replace("\n", "")[:3_000]
    starts = [0] + [m.end() for m in SENTENCE_END.finditer(line) if m.end() < len(line)]
    sentences = [line[a:b] for a, b in zip(starts, starts[1:] + [len(line)])]
    assert len(sentences) > 50 and max(map(len, sentences)) < tagger.piece_chars()
    assert len(line) < tagger.max_chars()  # within the memory budget: the old code tagged it in one or two pieces
    seen: list[int] = []
    tag = tagger.tag
    monkeypatch.setattr(tagger, "tag", lambda chunks, batch_size=32: seen.extend(map(len, chunks)) or tag(chunks, batch_size))
    (entities, short) = tagger.predict([line, "张三"], confidence=False)  # the path through `tag`
    assert sorted(seen) == sorted([len(s) for s in sentences] + [2])  # one model input per sentence
    assert short == tagger.predict(["张三"], confidence=False)[0]
    expected = []
    for start, one in zip(starts, tagger.predict(sentences, confidence=False)):
        expected += [e.to_dict() | {"start": e["start"] + start, "end": e["end"] + start} for e in one]
    assert entities == expected and entities

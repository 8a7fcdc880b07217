"""Entity confidences (the CRF's marginal probability of each span) and n-best paths, end to end on the shipped model,
checked against enumerating every tag path of short texts."""
from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from zhner.data.schemes import tags_to_spans
from zhner.tagger import Tagger, default_model_dir

TEXTS = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。", "", "这是一个没有实体的句子"]


@pytest.fixture(scope="module")
def tagger() -> Tagger:
    if default_model_dir() is None:
        pytest.skip("no shipped model in this checkout")
    return Tagger.load(default_model_dir())


def test_unscored_output_is_unchanged_and_scores_are_probabilities(tagger):
    plain = tagger.predict(TEXTS, confidence=False)
    scored = tagger.predict(TEXTS, confidence=True)
    assert tagger.predict(TEXTS) == scored  # the Python default: scores when the model has a CRF
    assert all("score" not in e for entities in plain for e in entities)
    assert [[{k: v for k, v in e.items() if k != "score"} for e in entities] for entities in scored] == plain
    scores = [e["score"] for entities in scored for e in entities]
    assert len(scores) >= 5 and all(0.0 <= s <= 1.0 for s in scores)
    # a 20,000-character text goes through stitching with its scores carried along
    long = "".join(TEXTS) * 700
    (entities,) = tagger.predict([long], confidence=True)
    assert len(entities) > 1000 and all(0.0 <= e["score"] <= 1.0 and long[e["start"] : e["end"]] == e["text"] for e in entities)


def enumerate_paths(tagger: Tagger, text: str) -> dict[tuple[str, ...], float]:
    """Probability of every tag path of `text` allowed by the scheme, from the model's emissions and CRF."""
    f, crf = tagger.featurizer, tagger.model.crf
    batch = f.collate([f.encode(list(text))])
    with torch.no_grad():
        e = tagger.model.emissions(batch)[0].double().tolist()
    start, trans, end = crf.start.tolist(), crf.transitions.tolist(), crf.end.tolist()
    ok_s, ok_t, ok_e = (m.tolist() for m in crf.allowed(decoding=True))  # what decoding and confidences use
    scores = {}
    for path in itertools.product(range(len(f.tags)), repeat=len(text)):
        if ok_s[path[0]] and ok_e[path[-1]] and all(ok_t[a][b] for a, b in zip(path, path[1:])):
            s = start[path[0]] + end[path[-1]] + sum(e[i][y] for i, y in enumerate(path))
            scores[tuple(f.tags[y] for y in path)] = s + sum(trans[a][b] for a, b in zip(path, path[1:]))
    top = max(scores.values())
    z = sum(math.exp(s - top) for s in scores.values())
    return {path: math.exp(s - top) / z for path, s in scores.items()}


@pytest.mark.parametrize("text", ["李四上海", "张三北大"])
def test_scores_and_nbest_against_enumeration(tagger, text):
    """A span's score is the total probability of the paths that give exactly that span its tags; the n-best are the
    most probable paths, in order, with their probabilities."""
    probs = enumerate_paths(tagger, text)  # 13^4 paths, about 4,000 of them allowed
    (entities,) = tagger.predict([text], confidence=True)
    best = max(probs, key=probs.get)
    assert [(e["start"], e["end"], e["type"]) for e in entities] == tags_to_spans(list(best), tagger.featurizer.scheme)
    for e in entities:
        own = best[e["start"] : e["end"]]
        expected = sum(p for path, p in probs.items() if path[e["start"] : e["end"]] == own)
        assert e["score"] == pytest.approx(expected, abs=1e-4)
    (ranked,) = tagger.nbest([text], k=5)
    top = sorted(probs.items(), key=lambda item: -item[1])[:5]
    assert [r["probability"] for r in ranked] == pytest.approx([p for _, p in top], abs=1e-5)
    for r, (path, _) in zip(ranked, top):
        assert [(e["start"], e["end"], e["type"]) for e in r["entities"]] == tags_to_spans(list(path), tagger.featurizer.scheme)
    assert ranked[0]["entities"] == tagger.predict([text], confidence=False)[0]


def test_nbest_edges(tagger):
    assert tagger.nbest(["", "李"], k=3)[0] == [{"probability": 1.0, "entities": []}]
    single = [t for t in tagger.featurizer.tags if t == "O" or t.startswith("S-")]
    assert len(tagger.nbest(["李"], k=50)[0]) == len(single)  # one character: only its O and S-X paths are allowed
    with pytest.raises(Exception, match="at most 256 characters"):
        tagger.nbest(["李" * 600])


def test_predict_command_confidence(tagger):
    import json

    from test_cli import zhner

    res = zhner("predict", "--confidence", "-", stdin="".join(t + "\n" for t in TEXTS))
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["entities"] for r in records] == tagger.predict(TEXTS, confidence=True)


def test_bio_scores_exclude_a_following_inside_tag(tmp_path):
    """In BIO a span B-X I-X ends only where the next tag is not I-X: its score is P(its tags, and no I-X after), which
    differs from the probability of its tags alone. A tiny untrained TENER on a BIO folder, with its output bias and
    transitions drawn so that it finds multi-character entities, checked against enumerating all 5^6 paths."""
    from conftest import REPO, TINY_TENER
    from zhner.config import load_config
    from zhner.train.assemble import prepare

    rows = [("张", "B-PER"), ("三", "I-PER"), ("在", "O"), ("北", "B-LOC"), ("京", "I-LOC"), ("。", "O")]
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.char.bmes").write_text(("".join(f"{c} {t}\n" for c, t in rows) + "\n") * 10, encoding="utf-8")
    # the random draws below were chosen with a constrained, normal-initialised CRF
    pinned = ["model.crf_init=normal", "model.crf_constraints=true", f"data.dataset={tmp_path}"]
    config = load_config(REPO / "zhner" / "configs" / "tener_resume.yaml", TINY_TENER + pinned)
    tagger = prepare(config, log=lambda _: None).tagger
    assert tagger.featurizer.scheme == "bio"
    torch.manual_seed(4)
    with torch.no_grad():
        tagger.model.out.bias.normal_(std=2.0)
        tagger.model.crf.transitions.normal_(std=1.0)
    differs = 0
    for text in ("张三在北京。", "北京张三李四"):
        probs = enumerate_paths(tagger, text)
        (entities,) = tagger.predict([text], confidence=True)
        assert any(e["end"] - e["start"] > 1 and e["end"] < len(text) for e in entities)  # a span the rule applies to
        for e in entities:
            s, end, inside = e["start"], e["end"], f"I-{e['type']}"
            own = max(probs, key=probs.get)[s:end]
            alone = sum(p for path, p in probs.items() if path[s:end] == own)
            closed = sum(p for path, p in probs.items() if path[s:end] == own and (end == len(text) or path[end] != inside))
            assert e["score"] == pytest.approx(closed, abs=1e-4)
            differs += abs(alone - closed) > 1e-3
    assert differs  # the test tells the two apart


def test_predict_command_nbest(tagger):
    """`zhner predict --nbest K`: the K most probable paths of each short text, best first, the first one being the
    Viterbi path; a text longer than one piece gets null; conll output refuses the option."""
    from test_cli import zhner

    long = "张三在北京工作。" * 100  # 800 characters: more than one piece
    res = zhner("predict", "--nbest", "3", "-", stdin="".join(t + "\n" for t in [*TEXTS, long]))
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert records[-1]["nbest"] is None
    for record, expected in zip(records, tagger.nbest(TEXTS, 3)):
        assert record["nbest"] == expected and 1 <= len(expected) <= 3
        probs = [p["probability"] for p in expected]
        assert probs == sorted(probs, reverse=True) and all(0 < p <= 1 for p in probs)
        assert expected[0]["entities"] == record["entities"]
    bad = zhner("predict", "--nbest", "3", "--format", "conll", "--text", "张三")
    assert bad.returncode == 2 and "--nbest needs --format jsonl" in bad.stderr


def test_nbest_does_not_depend_on_the_level_of_the_emissions(tagger, monkeypatch):
    """The same constant added to every tag's emission at a position leaves the CRF's distribution unchanged: n-best
    must too (it once filtered paths by their absolute score, and lost them all on a text scored below -5,000)."""
    text = "张三在北京工作，李四在上海。" * 18  # 252 characters: one piece, path scores in the thousands
    before = tagger.nbest([text], 2)
    emissions = tagger.model.emissions
    monkeypatch.setattr(tagger.model, "emissions", lambda batch: emissions(batch) - 20.0)
    after = tagger.nbest([text], 2)
    assert len(after[0]) == 2 and [p["entities"] for p in after[0]] == [p["entities"] for p in before[0]]
    assert [p["probability"] for p in after[0]] == pytest.approx([p["probability"] for p in before[0]], rel=2e-2)  # float32 sums

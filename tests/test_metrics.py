"""Tests of zhner.evaluate.metrics: strict numbers against seqeval, lenient spans by hand, file scoring."""
from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.scheme import IOB2, IOBES

from zhner.data.corpus import read_corpus
from zhner.data.schemes import all_tags, spans_to_tags, tags_to_spans
from zhner.errors import ZhnerError
from zhner.evaluate.metrics import (
    PRF,
    NERScorer,
    format_report,
    known_mentions,
    per_type_prf,
    score_files,
    span_f,
    span_prf,
    span_sentence_counts,
    type_accuracy,
)



def bmes_to_iobes(seq: list[str]) -> list[str]:
    return ["I-" + t[2:] if t.startswith("M-") else t for t in seq]


def seqeval_strict(gold: list[list[str]], pred: list[list[str]], scheme) -> tuple[float, float, float, dict]:
    with warnings.catch_warnings():  # seqeval warns (and returns 0) on empty denominators
        warnings.simplefilter("ignore")
        kw = {"mode": "strict", "scheme": scheme}
        report = classification_report(gold, pred, output_dict=True, zero_division=0, **kw)
        return (
            precision_score(gold, pred, zero_division=0, **kw),
            recall_score(gold, pred, zero_division=0, **kw),
            f1_score(gold, pred, zero_division=0, **kw),
            report,
        )


def assert_matches_seqeval(gold: list[list[str]], pred: list[list[str]], scheme: str) -> None:
    """Our strict micro and per-type numbers equal seqeval's strict mode on the same sequences."""
    if scheme == "bmes":
        sq_gold, sq_pred, sq_scheme = [bmes_to_iobes(s) for s in gold], [bmes_to_iobes(s) for s in pred], IOBES
    elif scheme == "bioes":
        sq_gold, sq_pred, sq_scheme = gold, pred, IOBES
    else:
        sq_gold, sq_pred, sq_scheme = gold, pred, IOB2
    p, r, f, report = seqeval_strict(sq_gold, sq_pred, sq_scheme)

    g_spans = [tags_to_spans(s, scheme, strict=True) for s in gold]
    p_spans = [tags_to_spans(s, scheme, strict=True) for s in pred]
    ours = span_prf(g_spans, p_spans)
    assert (ours.p, ours.r, ours.f1) == pytest.approx((p, r, f), abs=1e-12)

    per_type = per_type_prf(g_spans, p_spans)
    theirs = {k: v for k, v in report.items() if not k.endswith(" avg")}
    # seqeval lists the types of gold and pred entities; so do we.
    assert set(per_type) == set(theirs)
    for label, prf in per_type.items():
        t = theirs[label]
        assert (prf.p, prf.r, prf.f1) == pytest.approx((t["precision"], t["recall"], t["f1-score"]), abs=1e-12)
        assert prf.n_gold == t["support"]

    # The scorer (percent, rounded) gives the same numbers.
    scorer = NERScorer(scheme)
    for g, q in zip(gold, pred):
        scorer.add(g, q)
    res = scorer.result()
    assert res["strict"] == {"p": round(100 * p, 2), "r": round(100 * r, 2), "f1": round(100 * f, 2)}
    for label, t in theirs.items():
        assert res["per_type"][label]["f1"] == round(100 * t["f1-score"], 2)
        assert res["per_type"][label]["support"] == t["support"]


# --- strict mode against seqeval: hand-written edge cases --------------------------------------------------

# (gold, pred) pairs of BMES sentences covering the malformed shapes.
BMES_EDGE_CASES = [
    # exact match of B M E, S and B E
    (["B-PER", "M-PER", "E-PER", "O", "S-LOC", "B-ORG", "E-ORG"],
     ["B-PER", "M-PER", "E-PER", "O", "S-LOC", "B-ORG", "E-ORG"]),
    # orphan M and orphan E in pred: nothing decoded strictly
    (["B-PER", "M-PER", "E-PER", "O"], ["O", "M-PER", "E-PER", "O"]),
    (["B-PER", "E-PER", "O", "O"], ["O", "E-PER", "O", "E-PER"]),
    # B without its E (sentence end, then O, then another B)
    (["B-LOC", "E-LOC", "O"], ["B-LOC", "M-LOC", "M-LOC"]),
    (["B-LOC", "E-LOC", "O", "S-LOC"], ["B-LOC", "O", "B-LOC", "E-LOC"]),
    (["B-LOC", "M-LOC", "E-LOC"], ["B-LOC", "B-LOC", "E-LOC"]),
    # adjacent entities, same and different types
    (["B-PER", "E-PER", "B-PER", "E-PER", "S-PER", "S-ORG"],
     ["B-PER", "M-PER", "M-PER", "E-PER", "S-PER", "S-ORG"]),
    (["S-PER", "S-PER", "S-PER"], ["B-PER", "M-PER", "E-PER"]),
    # type switch mid-entity
    (["B-ORG", "M-ORG", "E-ORG"], ["B-ORG", "M-LOC", "E-ORG"]),
    (["B-ORG", "M-ORG", "E-ORG"], ["B-ORG", "M-ORG", "E-LOC"]),
    (["B-ORG", "E-ORG", "O"], ["B-LOC", "E-ORG", "O"]),
    # E after a finished entity, M after S
    (["B-PER", "E-PER", "E-PER", "O"], ["B-PER", "E-PER", "M-PER", "E-PER"]),
    (["S-PER", "M-PER", "E-PER"], ["S-PER", "O", "O"]),
    # empty predictions and empty gold
    (["B-PER", "E-PER", "S-LOC"], ["O", "O", "O"]),
    (["O", "O", "O"], ["S-LOC", "B-PER", "E-PER"]),
    (["O"], ["O"]),
]


@pytest.mark.parametrize("gold, pred", BMES_EDGE_CASES)
def test_strict_matches_seqeval_on_each_bmes_edge_case(gold, pred):
    assert_matches_seqeval([gold], [pred], "bmes")


def test_strict_matches_seqeval_on_all_bmes_edge_cases_together():
    gold = [g for g, _ in BMES_EDGE_CASES]
    pred = [p for _, p in BMES_EDGE_CASES]
    assert_matches_seqeval(gold, pred, "bmes")
    # and with gold and pred swapped (p and r trade places)
    assert_matches_seqeval(pred, gold, "bmes")


BIO_EDGE_CASES = [
    (["B-PER", "I-PER", "O", "B-LOC"], ["B-PER", "I-PER", "O", "B-LOC"]),
    (["B-PER", "I-PER", "O"], ["I-PER", "I-PER", "O"]),  # orphan I
    (["B-PER", "I-PER", "I-PER"], ["B-PER", "I-LOC", "I-PER"]),  # type switch
    (["B-PER", "B-PER", "I-PER"], ["B-PER", "I-PER", "I-PER"]),  # adjacent
    (["O", "B-ORG", "I-ORG"], ["O", "B-ORG", "I-ORG"]),  # entity at the end
    (["B-ORG", "O", "O"], ["O", "O", "O"]),
]


@pytest.mark.parametrize("gold, pred", BIO_EDGE_CASES)
def test_strict_bio_matches_seqeval_iob2(gold, pred):
    assert_matches_seqeval([gold], [pred], "bio")


# --- strict mode against seqeval: random sequences ---------------------------------------------------------

TYPES = ["PER", "LOC", "ORG"]


def random_uniform(rng: random.Random, scheme: str, n: int) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and pred tags drawn uniformly (same lengths): mostly malformed sequences."""
    tags = all_tags(TYPES, scheme)
    lengths = [rng.randint(1, 12) for _ in range(n)]
    gold = [[rng.choice(tags) for _ in range(k)] for k in lengths]
    pred = [[rng.choice(tags) for _ in range(k)] for k in lengths]
    return gold, pred


def random_spans(rng: random.Random, length: int) -> list[tuple[int, int, str]]:
    spans, i = [], 0
    while i < length:
        if rng.random() < 0.4:
            end = min(length, i + rng.randint(1, 4))
            spans.append((i, end, rng.choice(TYPES)))
            i = end
        else:
            i += 1
    return spans


def random_pairs(rng: random.Random, scheme: str, n: int) -> tuple[list[list[str]], list[list[str]]]:
    """Well-formed gold, pred = gold with some tags replaced: many exact matches and near misses."""
    tags = all_tags(TYPES, scheme)
    gold, pred = [], []
    for _ in range(n):
        length = rng.randint(1, 15)
        g = spans_to_tags(length, random_spans(rng, length), scheme)
        p = [rng.choice(tags) if rng.random() < 0.15 else t for t in g]
        gold.append(g)
        pred.append(p)
    return gold, pred


@pytest.mark.parametrize("scheme", ["bmes", "bioes", "bio"])
@pytest.mark.parametrize("seed", range(8))
def test_strict_matches_seqeval_on_random_sequences(scheme, seed):
    rng = random.Random(seed)
    assert_matches_seqeval(*random_uniform(rng, scheme, 40), scheme)
    gold, pred = random_pairs(rng, scheme, 40)
    assert_matches_seqeval(gold, pred, scheme)


# --- lenient mode (fastNLP's reading), spans written out by hand -------------------------------------------

@pytest.mark.parametrize(
    "tags, spans",
    [
        (["B-X", "M-X", "O"], [(0, 2, "X")]),  # B without E still counts
        (["O", "M-X", "E-X"], [(1, 3, "X")]),  # an orphan M starts the span
        (["E-X", "E-X"], [(0, 1, "X"), (1, 2, "X")]),  # E closes, so the next E starts anew
        (["B-X", "M-Y", "E-Y"], [(0, 1, "X"), (1, 3, "Y")]),  # type switch starts a new span
        (["S-X", "M-X", "E-X"], [(0, 1, "X"), (1, 3, "X")]),  # S cannot be continued
        (["B-X", "B-X", "E-X"], [(0, 1, "X"), (1, 3, "X")]),
        (["B-X", "O", "E-X"], [(0, 1, "X"), (2, 3, "X")]),
    ],
)
def test_lenient_bmes_spans(tags, spans):
    assert tags_to_spans(tags, "bmes", strict=False) == spans


def test_lenient_bio_spans():
    assert tags_to_spans(["O", "I-X", "I-X", "B-X", "I-Y"], "bio", strict=False) == [
        (1, 3, "X"),
        (3, 4, "X"),
        (4, 5, "Y"),
    ]


def test_scorer_lenient_differs_from_strict():
    # gold: strict {(0,3,X)}, lenient {(0,3,X)}
    # pred: strict {} (B without E), lenient {(0,3,X)} (B M M read as one span)
    scorer = NERScorer("bmes")
    scorer.add(["B-X", "M-X", "E-X", "O"], ["B-X", "M-X", "M-X", "O"])
    # gold: strict {} (orphan E), lenient {(1,2,X)}; pred: strict {(1,2,X)}, lenient {(1,2,X)}
    scorer.add(["O", "E-X"], ["O", "S-X"])
    res = scorer.result()
    # strict: tp 0, pred 1, gold 1 -> 0/0/0; lenient: tp 2, pred 2, gold 2 -> 100
    assert res["strict"] == {"p": 0.0, "r": 0.0, "f1": 0.0}
    assert res["lenient"] == {"p": 100.0, "r": 100.0, "f1": 100.0}
    assert (res["n_gold"], res["n_pred"], res["n_sentences"]) == (1, 1, 2)


# --- per type, span F, type accuracy on a hand case --------------------------------------------------------

HAND_GOLD = [
    [(0, 2, "PER"), (3, 5, "LOC"), (6, 7, "ORG")],
    [(0, 3, "ORG"), (4, 6, "PER")],
]
HAND_PRED = [
    [(0, 2, "PER"), (3, 5, "ORG"), (7, 8, "LOC")],  # right; right boundary wrong type; spurious
    [(0, 3, "ORG"), (4, 5, "PER")],  # right; boundary wrong
]


def test_hand_case_micro():
    # tp = 2 ((0,2,PER), (0,3,ORG)); pred 5; gold 5 -> p = r = f1 = 0.4
    prf = span_prf(HAND_GOLD, HAND_PRED)
    assert (prf.tp, prf.n_pred, prf.n_gold) == (2, 5, 5)
    assert (prf.p, prf.r, prf.f1) == pytest.approx((0.4, 0.4, 0.4))


def test_sentence_counts_sum_to_the_micro_counts():
    counts = span_sentence_counts(HAND_GOLD, HAND_PRED)
    assert counts == [(1, 3, 3), (1, 2, 2)]  # each sentence's (tp, pred, gold), as span_prf counts them
    prf = span_prf(HAND_GOLD, HAND_PRED)
    assert tuple(map(sum, zip(*counts))) == (prf.tp, prf.n_pred, prf.n_gold)
    with pytest.raises(ValueError, match="sentences"):
        span_sentence_counts(HAND_GOLD, HAND_PRED[:1])


def test_hand_case_per_type():
    got = per_type_prf(HAND_GOLD, HAND_PRED)
    assert list(got) == ["LOC", "ORG", "PER"]
    # LOC: gold 1 (3,5), pred 1 (7,8), tp 0 -> 0 / 0 / 0
    assert got["LOC"] == PRF(0.0, 0.0, 0.0, 0, 1, 1)
    # ORG: gold 2 ((6,7), (0,3)), pred 2 ((3,5), (0,3)), tp 1 -> 1/2, 1/2, 1/2
    assert got["ORG"] == PRF(0.5, 0.5, 0.5, 1, 2, 2)
    # PER: gold 2 ((0,2), (4,6)), pred 2 ((0,2), (4,5)), tp 1 -> 1/2, 1/2, 1/2
    assert got["PER"] == PRF(0.5, 0.5, 0.5, 1, 2, 2)


def test_hand_case_span_f_and_type_accuracy():
    # boundaries: gold {(0,2),(3,5),(6,7)} + {(0,3),(4,6)}; pred {(0,2),(3,5),(7,8)} + {(0,3),(4,5)}
    # boundary matches: (0,2), (3,5), (0,3) = 3 of 5 pred, 3 of 5 gold -> span F = 0.6
    sf = span_f(HAND_GOLD, HAND_PRED)
    assert (sf.tp, sf.n_pred, sf.n_gold) == (3, 5, 5)
    assert sf.f1 == pytest.approx(0.6)
    # of those 3 boundary matches, 2 have the gold type ((3,5) is LOC predicted ORG) -> 2/3
    assert type_accuracy(HAND_GOLD, HAND_PRED) == pytest.approx(2 / 3)


def test_scorer_result_on_hand_case_in_percent():
    scorer = NERScorer("bmes")
    for g, p in zip(HAND_GOLD, HAND_PRED):
        length = max(e for s in (g, p) for _, e, _ in s) + 1
        scorer.add(spans_to_tags(length, g, "bmes"), spans_to_tags(length, p, "bmes"))
    res = scorer.result()
    assert res["strict"] == {"p": 40.0, "r": 40.0, "f1": 40.0}
    assert res["lenient"] == res["strict"]  # well-formed tags decode the same both ways
    assert res["per_type"]["ORG"] == {"p": 50.0, "r": 50.0, "f1": 50.0, "support": 2}
    assert res["per_type"]["LOC"] == {"p": 0.0, "r": 0.0, "f1": 0.0, "support": 1}
    assert res["span_f"] == 60.0
    assert res["type_acc"] == 66.67  # 2/3 rounded to 2 decimals
    assert (res["n_sentences"], res["n_gold"], res["n_pred"]) == (2, 5, 5)
    report = format_report(res)
    for needle in ("strict", "lenient", "ORG", "40.00", "60.00", "66.67"):
        assert needle in report


def test_add_spans_counts_for_strict_and_lenient():
    scorer = NERScorer("bio")
    for g, p in zip(HAND_GOLD, HAND_PRED):
        scorer.add_spans(g, p)
    res = scorer.result()
    assert res["strict"]["f1"] == res["lenient"]["f1"] == 40.0


def test_seen_and_unseen_mentions_scored_apart_on_hand_case(tmp_path):
    train = tmp_path / "train.bmes"
    # 张三/PER and 北京/LOC are training entities; 北京 as ORG is not (same tokens, other type).
    train.write_text("张 B-PER\n三 E-PER\n去 O\n北 B-LOC\n京 E-LOC\n\n", encoding="utf-8")
    known = known_mentions(read_corpus(train))
    assert known == {(("张", "三"), "PER"), (("北", "京"), "LOC")}
    scorer = NERScorer("bmes")
    scorer.count_seen(known)
    tokens = list("张三和李四在北京")
    gold = ["B-PER", "E-PER", "O", "B-PER", "E-PER", "O", "B-LOC", "E-LOC"]  # 张三 seen, 李四 unseen, 北京 seen
    pred = ["B-PER", "E-PER", "O", "S-PER", "O", "O", "B-ORG", "E-ORG"]  # 张三 right; 李/PER and 北京/ORG unseen, wrong
    scorer.add(gold, pred, tokens)
    res = scorer.result()
    assert res["seen"]["seen"] == {"p": 100.0, "r": 50.0, "f1": 66.67, "n_gold": 2, "n_pred": 1}
    assert res["seen"]["unseen"] == {"p": 0.0, "r": 0.0, "f1": 0.0, "n_gold": 1, "n_pred": 2}
    # the two groups partition the micro counts
    groups = res["seen"].values()
    assert sum(g["n_gold"] for g in groups) == res["n_gold"] and sum(g["n_pred"] for g in groups) == res["n_pred"]
    assert "seen in training" in format_report(res)


def test_seen_split_needs_tokens_and_is_absent_by_default():
    scorer = NERScorer("bio")
    scorer.add(["B-X", "I-X"], ["B-X", "I-X"])
    assert "seen" not in scorer.result()
    scorer.count_seen(frozenset())
    with pytest.raises(ValueError, match="tokens"):
        scorer.add(["B-X", "I-X"], ["B-X", "I-X"])


def test_seen_split_adds_up_to_micro_counts_on_random_sequences():
    rng = random.Random(5)
    tags = all_tags({"A", "B"}, "bmes")
    chars = "甲乙丙"
    sentences = [([rng.choice(chars) for _ in range(8)], [rng.choice(tags) for _ in range(8)], [rng.choice(tags) for _ in range(8)]) for _ in range(200)]
    known = frozenset((tuple(toks[s:e]), t) for toks, g, _ in sentences[:100] for s, e, t in tags_to_spans(g, "bmes"))
    scorer = NERScorer("bmes")
    scorer.count_seen(known)
    tp = 0
    for toks, g, p in sentences[100:]:
        scorer.add(g, p, toks)
        tp += len(set(tags_to_spans(g, "bmes")) & set(tags_to_spans(p, "bmes")))
    res = scorer.result()
    seen, unseen = res["seen"]["seen"], res["seen"]["unseen"]
    assert seen["n_gold"] > 0 and unseen["n_gold"] > 0  # the case exercises both groups
    assert seen["n_gold"] + unseen["n_gold"] == res["n_gold"] and seen["n_pred"] + unseen["n_pred"] == res["n_pred"]
    tps = round(seen["r"] * seen["n_gold"] / 100) + round(unseen["r"] * unseen["n_gold"] / 100)
    assert tps == tp  # every exact match counted in exactly one group


def test_known_mentions_refuses_an_untagged_corpus(tmp_path):
    texts = tmp_path / "cls.tsv"
    texts.write_text("sentence\tlabel\n好\t1\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match="no entity tags"):
        known_mentions(read_corpus(texts))


# --- zeros: no ZeroDivisionError ---------------------------------------------------------------------------

def test_p_and_r_zero_give_zero():
    # gold 1, pred 1, no match: p = 0/1, r = 0/1, f1 = 0 (2pr/(p+r) would divide by zero)
    prf = span_prf([[(0, 1, "X")]], [[(1, 2, "X")]])
    assert (prf.p, prf.r, prf.f1) == (0.0, 0.0, 0.0)
    assert type_accuracy([[(0, 1, "X")]], [[(1, 2, "X")]]) == 0.0


def test_empty_inputs_give_zero():
    assert span_prf([[]], [[]]) == PRF(0.0, 0.0, 0.0, 0, 0, 0)
    assert span_f([], []).f1 == 0.0
    assert per_type_prf([[]], [[]]) == {}
    res = NERScorer("bmes").result()
    assert res["strict"] == res["lenient"] == {"p": 0.0, "r": 0.0, "f1": 0.0}
    assert (res["span_f"], res["type_acc"], res["n_sentences"]) == (0.0, 0.0, 0)
    format_report(res)  # must not fail on an empty result


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="sentences"):
        span_prf([[]], [])
    scorer = NERScorer("bmes")
    with pytest.raises(ValueError, match="tags"):
        scorer.add(["O", "O"], ["O"])
    with pytest.raises(ValueError, match="BMES"):
        scorer.add(["B-X", "I-X"], ["O", "O"])  # a BIO tag in a BMES scorer
    with pytest.raises(ValueError, match="scheme"):
        NERScorer("iob")


# --- score_files -------------------------------------------------------------------------------------------

def write_conll(path: Path, sentences: list[list[tuple[str, str]]]) -> Path:
    path.write_text("\n\n".join("\n".join(f"{c} {t}" for c, t in s) for s in sentences) + "\n", encoding="utf-8")
    return path


GOLD_SENTS = [
    [("张", "B-PER"), ("三", "E-PER"), ("在", "O"), ("京", "S-LOC")],
    [("我", "O"), ("爱", "O"), ("北", "B-LOC"), ("京", "E-LOC")],
]


def test_score_files(tmp_path):
    gold = write_conll(tmp_path / "gold.bmes", GOLD_SENTS)
    pred = write_conll(
        tmp_path / "pred.bmes",
        [
            [("张", "B-PER"), ("三", "E-PER"), ("在", "O"), ("京", "S-ORG")],  # (0,2,PER) right, (3,4) wrong type
            [("我", "O"), ("爱", "O"), ("北", "B-LOC"), ("京", "M-LOC")],  # B without E: lenient only
        ],
    )
    res = score_files(gold, pred)
    # strict: gold 3, pred 2, tp 1 -> p 50, r 33.33, f1 2/5 = 40
    assert res["strict"] == {"p": 50.0, "r": 33.33, "f1": 40.0}
    # lenient: pred also has (2,4,LOC): tp 2, pred 3, gold 3 -> 66.67 each
    assert res["lenient"] == {"p": 66.67, "r": 66.67, "f1": 66.67}
    # strict boundaries: (0,2), (3,4) both match -> 2 / (2+3) * 2 = 80; type acc 1/2
    assert res["span_f"] == 80.0
    assert res["type_acc"] == 50.0
    assert res["per_type"]["LOC"]["support"] == 2
    assert score_files(gold, gold)["strict"]["f1"] == 100.0


def test_score_files_length_mismatch_names_file_and_line(tmp_path):
    gold = write_conll(tmp_path / "gold.bmes", GOLD_SENTS)
    pred = write_conll(
        tmp_path / "pred.bmes",
        [GOLD_SENTS[0], [("我", "O"), ("爱", "O"), ("北", "B-LOC")]],
    )
    with pytest.raises(ZhnerError) as err:
        score_files(gold, pred)
    assert err.value.where == str(pred)
    assert err.value.line == 6  # sentence 2 starts after 4 token lines and a blank line
    assert "sentence 2 has 3 characters here but 4 in" in str(err.value)
    assert str(pred) in str(err.value)


def test_score_files_character_mismatch(tmp_path):
    gold = write_conll(tmp_path / "gold.bmes", GOLD_SENTS)
    pred = write_conll(
        tmp_path / "pred.bmes",
        [GOLD_SENTS[0], [("我", "O"), ("爱", "O"), ("南", "B-LOC"), ("京", "E-LOC")]],
    )
    with pytest.raises(ZhnerError) as err:
        score_files(gold, pred)
    assert err.value.where == str(pred)
    assert err.value.line == 8  # the line of '南'
    assert "sentence 2" in err.value.message and "'南'" in err.value.message


def test_score_files_sentence_count_mismatch(tmp_path):
    gold = write_conll(tmp_path / "gold.bmes", GOLD_SENTS)
    short = write_conll(tmp_path / "short.bmes", GOLD_SENTS[:1])
    with pytest.raises(ZhnerError, match="1 sentences here but 2") as err:
        score_files(gold, short)
    assert err.value.where == str(short)
    long = write_conll(tmp_path / "long.bmes", GOLD_SENTS + GOLD_SENTS[:1])
    with pytest.raises(ZhnerError, match="3 sentences here but 2") as err:
        score_files(gold, long)
    assert (err.value.where, err.value.line) == (str(long), 11)


def test_score_files_pred_tag_of_another_scheme(tmp_path):
    sents = [GOLD_SENTS[0], [("我", "O"), ("北", "B-LOC"), ("京", "M-LOC"), ("市", "E-LOC")]]  # M-: BMES, not BIOES
    gold = write_conll(tmp_path / "gold.bmes", sents)
    pred = write_conll(tmp_path / "pred.bmes", [GOLD_SENTS[0], [("我", "O"), ("北", "B-LOC"), ("京", "I-LOC"), ("市", "E-LOC")]])
    with pytest.raises(ZhnerError) as err:
        score_files(gold, pred)
    assert (err.value.where, err.value.line) == (str(pred), 8)


def test_a_gold_of_short_entities_takes_a_bioes_predictions_scheme(tmp_path):
    """Gold tags of B-/E-/S- only (every entity one or two characters) read alike as BMES and BIOES: it was taken as
    BMES and a BIOES prediction refused at its first I- (issue 46); now the prediction's BIOES decides. A BIO one is
    still refused, at its line."""
    gold = write_conll(tmp_path / "gold.txt", GOLD_SENTS)
    pred = write_conll(tmp_path / "pred.txt", [GOLD_SENTS[0], [("我", "B-PER"), ("爱", "I-PER"), ("北", "I-PER"), ("京", "E-PER")]])
    res = score_files(gold, pred)
    assert res["n_gold"] == 3 and res["n_pred"] == 3 and res["strict"]["f1"] == pytest.approx(66.67)
    assert score_files(gold, gold)["strict"]["f1"] == 100.0
    bio = write_conll(tmp_path / "bio.txt", [[("张", "B-PER"), ("三", "I-PER"), ("在", "O"), ("京", "B-LOC")],
                                             [("我", "O"), ("爱", "O"), ("北", "B-LOC"), ("京", "I-LOC")]])
    with pytest.raises(ZhnerError) as err:
        score_files(gold, bio)
    assert (err.value.where, err.value.line) == (str(bio), 2)


@pytest.mark.parametrize("split", ["train", "test"])
def test_score_files_real_corpus_against_itself(split):
    from zhner.data.registry import find_file

    path = find_file("mini", split)  # the corpus the package carries
    res = score_files(path, path)
    assert res["strict"]["f1"] == 100.0
    assert res["lenient"]["f1"] == 100.0
    assert res["span_f"] == 100.0 and res["type_acc"] == 100.0
    gold = read_corpus(path).spans()
    assert res["n_gold"] == res["n_pred"] == sum(map(len, gold)) > 0
    assert set(res["per_type"]) == {t for spans in gold for _, _, t in spans}
    assert all(m["f1"] == 100.0 for m in res["per_type"].values())


# --- lenient mode against seqeval's default mode and the Python port of conlleval -------------------------

def _conlleval_counts(gold: list[list[str]], pred: list[list[str]]) -> dict[str, tuple[int, int, int]]:
    """(correct, predicted, gold) chunks per type, from the `conlleval` package (IOBES tags, '-X-' between sentences)."""
    from conlleval import evaluate

    lines = []
    for g, p in zip(gold, pred):
        lines += [f"x {a} {b}" for a, b in zip(g, p)] + ["-X- O O"]
    slots = evaluate(lines)["slots"]["chunks"]
    return {t: (s["stats"]["correct"], s["stats"]["pred"], s["stats"]["gold"]) for t, s in slots.items()}


def _lenient_counts(gold: list[list[str]], pred: list[list[str]], scheme: str) -> dict[str, tuple[int, int, int]]:
    g_spans = [tags_to_spans(s, scheme, strict=False) for s in gold]
    p_spans = [tags_to_spans(s, scheme, strict=False) for s in pred]
    return {t: (prf.tp, prf.n_pred, prf.n_gold) for t, prf in per_type_prf(g_spans, p_spans).items()}


@pytest.mark.parametrize("scheme", ["bmes", "bioes", "bio"])
@pytest.mark.parametrize("seed", range(4))
def test_lenient_matches_seqeval_default_mode_and_conlleval_port(scheme, seed):
    """Arbitrary (mostly malformed) tag sequences: our lenient decoding finds exactly the entities of seqeval's default
    mode and of the Python conlleval, per type; BMES is given to them as IOBES (M -> I)."""
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(seed)
    gold, pred = random_uniform(rng, scheme, 200)
    for seq in gold + pred:
        theirs = sorted((start, end + 1, t) for t, start, end in get_entities(bmes_to_iobes(seq)))
        assert sorted(tags_to_spans(seq, scheme, strict=False)) == theirs, seq
    as_iobes = ([bmes_to_iobes(s) for s in gold], [bmes_to_iobes(s) for s in pred])
    assert _lenient_counts(gold, pred, scheme) == _conlleval_counts(*as_iobes)


def test_scorer_reports_lenient_per_type():
    scorer = NERScorer("bmes")
    scorer.add(["B-X", "M-X", "E-X", "O"], ["B-X", "M-X", "M-X", "O"])  # pred: lenient (0,3,X), strict nothing
    res = scorer.result()
    assert res["per_type"]["X"] == {"p": 0.0, "r": 0.0, "f1": 0.0, "support": 1}
    assert res["per_type_lenient"]["X"] == {"p": 100.0, "r": 100.0, "f1": 100.0, "support": 1}
    assert "lenient, per type:" in format_report(res)

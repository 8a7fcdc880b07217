"""The paired t-test and its Student-t CDF (our regularised incomplete beta) against scipy, a hand-checked case,
comparison of run sets by seed, and reading run sets from disk."""
import json
import math
import random

import pytest
from scipy import special, stats

from zhner.errors import ZhnerError
from zhner.evaluate.significance import betainc, compare, describe, paired_t_test, read_runs, student_t_cdf


@pytest.mark.parametrize("a,b,x", [(0.5, 0.5, 0.3), (2, 3, 0.9), (10, 0.5, 0.99), (4.5, 0.5, 0.2), (100, 0.5, 0.5), (0.5, 200, 1e-3)])
def test_betainc_matches_scipy(a, b, x):
    assert math.isclose(betainc(a, b, x), float(special.betainc(a, b, x)), rel_tol=1e-10, abs_tol=1e-300)


def test_t_cdf_matches_scipy():
    rng = random.Random(0)
    for _ in range(200):
        t, df = rng.uniform(-12, 12), rng.choice([1, 2, 3, 4, 5, 9, 19, 30, 100])
        assert math.isclose(student_t_cdf(t, df), float(stats.t.cdf(t, df)), rel_tol=1e-9, abs_tol=1e-14)
    assert student_t_cdf(0.0, 7) == 0.5


def test_paired_t_test_matches_scipy_on_random_samples():
    rng = random.Random(1)
    for _ in range(50):
        n = rng.randint(2, 12)
        a = [rng.gauss(70, 2) for _ in range(n)]
        b = [x - rng.gauss(0.5, 1) for x in a]
        ours = paired_t_test(a, b)
        ref = stats.ttest_rel(a, b)
        assert math.isclose(ours["t"], float(ref.statistic), rel_tol=1e-9)
        assert math.isclose(ours["p"], float(ref.pvalue), rel_tol=1e-8, abs_tol=1e-15)
        assert ours["df"] == n - 1


def test_paired_t_test_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, t = 2 / (1 / sqrt 3) = 2 sqrt 3; df 2: P(|T| > t) = 1 - t / sqrt(t^2 + 2) = 1 - sqrt(6/7)
    res = paired_t_test([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert math.isclose(res["t"], 2 * math.sqrt(3))
    assert math.isclose(res["p"], 1 - math.sqrt(6 / 7), rel_tol=1e-12)
    assert paired_t_test([1.0, 2.0], [1.0, 2.0])["p"] == 1.0  # identical: no evidence
    assert paired_t_test([2.0, 3.0], [1.0, 2.0])["p"] == 0.0  # a constant nonzero difference
    assert paired_t_test([1.0], [0.0])["p"] is None
    with pytest.raises(ValueError):
        paired_t_test([1.0], [1.0, 2.0])


def test_describe():
    d = describe([1.0, 2.0, 3.0, 4.0])
    assert d["n"] == 4 and d["mean"] == 2.5 and math.isclose(d["std"], math.sqrt(5 / 3))
    assert describe([5.0])["std"] is None


def run(seed, f1, dev=50.0):
    return {"seed": seed, "test": {"f1_strict": f1, "f1_lenient": f1, "p": f1, "r": f1}, "dev": {"f1_strict": dev}}


def test_compare_pairs_by_seed_number():
    a = {42: run(42, 90.0), 43: run(43, 92.0), 44: run(44, 91.0), 45: run(45, 80.0)}
    b = {44: run(44, 90.5), 42: run(42, 89.0), 43: run(43, 90.0)}  # no seed 45, other order
    res = compare(a, b)
    assert res["paired_seeds"] == [42, 43, 44]
    row = res["metrics"]["test.f1_strict"]
    assert row["a"]["n"] == 4 and row["b"]["n"] == 3
    expected = stats.ttest_rel([90.0, 92.0, 91.0], [89.0, 90.0, 90.5])
    assert math.isclose(row["paired"]["p"], float(expected.pvalue), rel_tol=1e-9)
    assert math.isclose(row["paired"]["mean_diff"], (1.0 + 2.0 + 0.5) / 3)


def test_read_runs_layouts_and_errors(tmp_path):
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "seeds.json").write_text(json.dumps([run(1, 80.0), run(2, 81.0)]), encoding="utf-8")
    assert sorted(read_runs(tmp_path / "set")) == [1, 2]
    for seed in (7, 8):
        d = tmp_path / "dirs" / f"seed{seed}"
        d.mkdir(parents=True)
        metrics = {
            "model": "atssa", "dataset": "resume", "seed": seed,
            "dev": {"strict": {"p": 1, "r": 1, "f1": 60.0}, "lenient": {"f1": 60.0}, "span_f": 1, "type_acc": 1},
            "test": {"strict": {"p": 1, "r": 1, "f1": 70.0 + seed}, "lenient": {"f1": 1}, "span_f": 1, "type_acc": 1},
        }
        (d / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    runs = read_runs(tmp_path / "dirs")
    assert sorted(runs) == [7, 8] and runs[8]["test"]["f1_strict"] == 78.0
    with pytest.raises(ZhnerError, match="no such run directory"):
        read_runs(tmp_path / "nope")
    with pytest.raises(ZhnerError, match="not a run directory"):
        read_runs(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "seeds.json").write_text("[{", encoding="utf-8")
    with pytest.raises(ZhnerError, match="seeds.json: corrupt JSON"):
        read_runs(tmp_path / "bad")
    (tmp_path / "bad" / "seeds.json").write_text(json.dumps([run(1, 80.0), run(1, 81.0)]), encoding="utf-8")
    with pytest.raises(ZhnerError, match="seed 1 appears twice"):
        read_runs(tmp_path / "bad")
    for summaries in ([{"seed": 1, "test": 5}], [{"seed": 1, "test": {"f1_strict": "x"}}], [{"seed": True, "test": None}]):
        (tmp_path / "bad" / "seeds.json").write_text(json.dumps(summaries), encoding="utf-8")
        with pytest.raises(ZhnerError, match="seeds.json: expected a list of run summaries"):
            read_runs(tmp_path / "bad")
    (tmp_path / "bad" / "seeds.json").unlink()
    (tmp_path / "bad" / "seeds.json").mkdir()
    with pytest.raises(ZhnerError, match="seeds.json: is a directory"):
        read_runs(tmp_path / "bad")


# -- two single runs: approximate randomization over sentences ---------------------------------------------------------


def _random_counts(rng, n, quality):
    """(tp, n_pred, n_gold) per sentence for a system that finds each gold entity with probability `quality`."""
    counts = []
    for _ in range(n):
        gold = rng.randint(0, 3)
        tp = sum(rng.random() < quality for _ in range(gold))
        counts.append((tp, tp + rng.randint(0, 1), gold))
    return counts


def _f1(counts):
    tp, pred, gold = (sum(c[i] for c in counts) for i in range(3))
    return 2 * tp / (pred + gold) if pred + gold else 0.0


def test_approximate_randomization_matches_exact_permutation_test():
    """With 10 sentences every one of the 2^10 swap patterns can be enumerated: the exact p-value. The shuffled
    estimate must land within its Monte-Carlo error of it."""
    import itertools

    from zhner.evaluate.significance import approximate_randomization

    rng = random.Random(3)
    a, b = _random_counts(rng, 10, 0.9), _random_counts(rng, 10, 0.5)
    b = [(min(tp, g), p, g) for (tp, p, _), (_, _, g) in zip(b, a)]  # the same gold entities as a
    observed = abs(_f1(a) - _f1(b))
    extreme = 0
    for swaps in itertools.product((False, True), repeat=10):
        a2 = [y if s else x for x, y, s in zip(a, b, swaps)]
        b2 = [x if s else y for x, y, s in zip(a, b, swaps)]
        extreme += abs(_f1(a2) - _f1(b2)) >= observed - 1e-12
    exact = extreme / 2**10
    result = approximate_randomization(a, b, resamples=20_000, seed=1)
    assert math.isclose(result["f1_a"], _f1(a)) and math.isclose(result["f1_b"], _f1(b))
    assert math.isclose(result["diff"], _f1(a) - _f1(b))
    assert 0.0 < exact < 1.0
    assert abs(result["p"] - exact) < 4 * math.sqrt(exact * (1 - exact) / 20_000) + 1e-4


def test_approximate_randomization_extremes_and_errors():
    from zhner.evaluate.significance import approximate_randomization

    rng = random.Random(4)
    a = _random_counts(rng, 300, 0.9)
    same = approximate_randomization(a, a, resamples=200)
    assert same["diff"] == 0.0 and same["p"] == 1.0  # every shuffle ties the observed difference
    nothing = [(0, 0, g) for _, _, g in a]  # a system that predicts no entity
    far = approximate_randomization(a, nothing, resamples=999, seed=5)
    assert far["f1_b"] == 0.0 and far["p"] == 1 / 1000  # no shuffle comes near: the smallest p 1000 shuffles give
    assert approximate_randomization(a, nothing, resamples=999, seed=5) == far  # the seed fixes the shuffles
    assert approximate_randomization(nothing, a, resamples=999, seed=5)["diff"] == -far["diff"]
    with pytest.raises(ValueError, match="300 and 299 sentences"):
        approximate_randomization(a, a[:-1])
    with pytest.raises(ValueError, match="different gold"):
        approximate_randomization(a, [(tp, p, g + 1) for tp, p, g in a])


def test_sentence_counts_of_a_scorer():
    from zhner.evaluate.metrics import NERScorer

    scorer = NERScorer("bmes", per_sentence=True)
    scorer.add(["B-PER", "E-PER", "O", "S-LOC"], ["B-PER", "E-PER", "O", "O"])
    scorer.add(["O", "O"], ["S-ORG", "O"])
    scorer.add(["B-LOC", "E-LOC"], ["M-LOC", "E-LOC"])  # an orphan M- starts the entity leniently, none strictly
    assert scorer.sentence_counts("strict") == [(1, 1, 2), (0, 1, 0), (0, 0, 1)]
    assert scorer.sentence_counts("lenient") == [(1, 1, 2), (0, 1, 0), (1, 1, 1)]
    result = scorer.result()
    assert result["n_gold"] == 3 and result["n_pred"] == 2  # the per-sentence counts add up to the micro ones
    with pytest.raises(ValueError, match="per_sentence=True"):
        NERScorer("bmes").sentence_counts()

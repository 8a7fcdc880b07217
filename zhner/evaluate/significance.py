"""Multi-seed comparison of two models: mean +- std of each metric and a paired t-test over matched seeds (the ATSSA
paper's Sec. 5.6: ten seeds per model, paired by seed, two-sided p-value); and, for two single runs, a paired
approximate randomization test over the test sentences (`approximate_randomization`).

The seed test asks whether one training recipe beats another; the sentence test only whether two given models differ on
this test set. It knows nothing of seed noise: two seeds of one recipe can differ significantly by it (measured, README
"The general model": seeds 42 and 43 on MSRA, p <= 1/10,001).

The Student-t distribution function is computed here from the regularised incomplete beta function (a continued fraction
evaluated by the modified Lentz method), so the toolkit needs no scipy; the tests check it against scipy.

A run set on disk is what `zhner train --seeds N` or `zhner sweep` writes: a directory with `seeds.json`, or a directory of
`seed<N>/metrics.json` run directories, or a single run directory (`metrics.json`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zhner.errors import ZhnerError
from zhner.evaluate.metrics import NERScorer, headline
from zhner.fileio import FileKind, parse_json, read_bytes

RUN_JSON = FileKind("a JSON file of a run", 16 * 2**20)  # metrics.json, seeds.json

METRICS = ("test.f1_strict", "test.f1_lenient", "test.p", "test.r", "dev.f1_strict")
CLASSIFICATION_METRICS = ("test.accuracy", "test.mcc", "test.macro_f1", "dev.accuracy", "dev.mcc")


# -- the t distribution ------------------------------------------------------------------------------------------------


def _beta_continued_fraction(a: float, b: float, x: float, eps: float = 1e-15, max_terms: int = 1000) -> float:
    """K = 1 + d_1 / (1 + d_2 / (1 + ...)), the continued fraction of I_x(a, b) = x^a (1-x)^b / (a B(a, b) K)
    (DLMF 8.17.22), by the modified Lentz method; it converges fast for x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300
    k, c, d = 1.0, 1.0, 0.0  # K_0 = 1; c and d are Lentz's ratios
    for j in range(1, max_terms + 1):
        m = j // 2
        if j % 2:  # d_{2m+1}
            coef = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        else:  # d_{2m}
            coef = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + coef * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + coef / c
        c = c if abs(c) > tiny else tiny
        k *= c * d
        if abs(c * d - 1.0) < eps:
            return k
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) for a, b > 0, 0 <= x <= 1."""
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1 (got {a}, {b}, {x})")
    if x in (0.0, 1.0):
        return x
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) / (a * _beta_continued_fraction(a, b, x))
    return 1.0 - math.exp(log_front) / (b * _beta_continued_fraction(b, a, 1.0 - x))  # I_x(a, b) = 1 - I_{1-x}(b, a)


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2) gives the two tails."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> dict:
    """Two-sided paired t-test of a against b (same length, paired by position) -> {n, mean_diff, t, df, p}.
    Fewer than two pairs: t and p are None. All differences equal: t = +-inf and p = 0, or t = 0 and p = 1 if zero."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length ({len(a)} vs {len(b)})")
    diffs = [x - y for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n if n else float("nan")
    if n < 2:
        return {"n": n, "mean_diff": mean, "t": None, "df": None, "p": None}
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0.0:
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    else:
        t = mean / (sd / math.sqrt(n))
    p = 2.0 * (1.0 - student_t_cdf(abs(t), n - 1))
    return {"n": n, "mean_diff": mean, "t": t, "df": n - 1, "p": min(1.0, p)}


def describe(values: Sequence[float]) -> dict:
    """{n, mean, std} with the sample standard deviation (n - 1); std is None for a single value."""
    n = len(values)
    mean = sum(values) / n if n else None
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return {"n": n, "mean": mean, "std": std}


# -- comparing run sets ------------------------------------------------------------------------------------------------


def _get(summary: dict, metric: str) -> float | None:
    split, key = metric.split(".")
    return (summary.get(split) or {}).get(key)


def compare(runs_a: dict[int, dict], runs_b: dict[int, dict], metrics: Sequence[str] | None = None) -> dict:
    """runs_*: seed -> run summary ({"test": {"f1_strict": ...}, "dev": {...}}). Mean +- std of each metric over every run of
    each set, and a paired t-test (a minus b) over the seeds both sets have. Default metrics: METRICS for taggers,
    CLASSIFICATION_METRICS for classifiers (their summaries have accuracy)."""
    kinds = {"accuracy" in (r.get("test") or {}) for r in (*runs_a.values(), *runs_b.values())}
    if len(kinds) > 1:
        raise ZhnerError("one run set is a classifier's and the other a tagger's: nothing to compare")
    if metrics is None:
        metrics = CLASSIFICATION_METRICS if kinds == {True} else METRICS
    paired_seeds = sorted(set(runs_a) & set(runs_b))
    result = {"seeds_a": sorted(runs_a), "seeds_b": sorted(runs_b), "paired_seeds": paired_seeds, "metrics": {}}
    for metric in metrics:
        va = {s: _get(r, metric) for s, r in runs_a.items()}
        vb = {s: _get(r, metric) for s, r in runs_b.items()}
        both = [s for s in paired_seeds if va[s] is not None and vb[s] is not None]
        result["metrics"][metric] = {
            "a": describe([v for v in va.values() if v is not None]),
            "b": describe([v for v in vb.values() if v is not None]),
            "paired": paired_t_test([va[s] for s in both], [vb[s] for s in both]),
        }
    return result


def _summary_from_metrics(metrics: dict) -> dict:
    return {k: metrics.get(k) for k in ("model", "dataset", "seed")} | {
        split: headline(metrics[split]) if metrics.get(split) else None for split in ("dev", "test")
    }


def _read_json(path: Path):
    try:
        return parse_json(read_bytes(path, RUN_JSON).decode("utf-8"))
    except ValueError as exc:  # not JSON, not UTF-8, nested too deeply, or a number too long to read
        raise ZhnerError(f"corrupt JSON ({type(exc).__name__})", path) from None


def _is_scores(value: object) -> bool:
    """A run summary's "dev" / "test": absent, or a flat mapping of metric -> number (or null)."""
    numbers = (int, float)
    return value is None or isinstance(value, dict) and all(
        v is None or isinstance(v, numbers) and not isinstance(v, bool) for v in value.values()
    )


def read_runs(path: str | Path) -> dict[int, dict]:
    """seed -> run summary of a run set: `seeds.json`, or `seed*/metrics.json`, or one run's `metrics.json`."""
    path = Path(path)
    if not path.is_dir():
        raise ZhnerError("no such run directory", path)
    if (path / "seeds.json").exists():
        summaries = _read_json(path / "seeds.json")
        where = path / "seeds.json"
    else:
        files = sorted(path.glob("seed*/metrics.json")) or ([path / "metrics.json"] if (path / "metrics.json").exists() else [])
        if not files:
            raise ZhnerError("no seeds.json, seed*/metrics.json or metrics.json: not a run directory", path)
        summaries = [_summary_from_metrics(_read_json(f)) for f in files]
        where = path
    if not isinstance(summaries, list) or not all(
        isinstance(s, dict) and type(s.get("seed")) is int and _is_scores(s.get("dev")) and _is_scores(s.get("test"))
        for s in summaries
    ):
        raise ZhnerError('expected a list of run summaries, each with an integer seed and "dev" / "test" scores', where)
    runs: dict[int, dict] = {}
    for s in summaries:
        if s["seed"] in runs:
            raise ZhnerError(f"seed {s['seed']} appears twice", where)
        if s.get("test") is None:
            continue  # a run that never finished an epoch
        runs[s["seed"]] = s
    if not runs:
        raise ZhnerError("no finished run in this run set", where)
    return runs


def format_comparison(result: dict, name_a: str, name_b: str) -> str:
    """A plain-text table: metric, mean +- std of each set, mean difference, p-value (n pairs)."""

    def ms(d: dict) -> str:
        if d["mean"] is None:
            return "-"
        return f"{d['mean']:.2f} ± {d['std']:.2f}" if d["std"] is not None else f"{d['mean']:.2f}"

    lines = [
        f"A = {name_a} (seeds {result['seeds_a']})",
        f"B = {name_b} (seeds {result['seeds_b']})",
        f"{'metric':16s} {'A mean ± std':>16s} {'B mean ± std':>16s} {'A - B':>7s} {'p (paired t)':>13s} {'pairs':>5s}",
    ]
    for metric, row in result["metrics"].items():
        paired = row["paired"]
        diff = f"{paired['mean_diff']:+.2f}" if paired["n"] else "-"
        p = f"{paired['p']:.4f}" if paired["p"] is not None else "-"
        lines.append(f"{metric:16s} {ms(row['a']):>16s} {ms(row['b']):>16s} {diff:>7s} {p:>13s} {paired['n']:>5d}")
    return "\n".join(lines)


# -- two single runs: approximate randomization over sentences ---------------------------------------------------------


def f1_of_counts(counts: np.ndarray) -> np.ndarray:
    """Micro F1 from summed (tp, n_pred, n_gold) counts: [..., 3] -> [...], 2tp / (n_pred + n_gold), 0 when both are 0."""
    tp, total = counts[..., 0], counts[..., 1] + counts[..., 2]
    return np.divide(2.0 * tp, total, out=np.zeros(np.shape(tp), dtype=float), where=total > 0)


def approximate_randomization(
    counts_a: Sequence[Sequence[int]],
    counts_b: Sequence[Sequence[int]],
    resamples: int = 10_000,
    seed: int = 0,
    chunk: int = 500,
) -> dict:
    """Two-sided paired approximate randomization test (Noreen 1989; Riezler and Maxwell 2005) of micro F1(A) - F1(B)
    over sentences, for two systems' outputs on the same sentences.

    counts_*: per sentence (tp, n_pred, n_gold), `NERScorer.sentence_counts`. Under the null hypothesis the two systems'
    outputs for a sentence are exchangeable, so each resample swaps them sentence by sentence with probability 1/2 and
    recomputes the corpus-level difference; p = (1 + #{|shuffled diff| >= |observed diff|}) / (1 + resamples), never 0
    and a valid p-value for any number of shuffles (Phipson and Smyth 2010); its floor is 1 / (1 + resamples). F1 is
    not a mean over sentences, which is why the outputs are shuffled rather than per-sentence scores t-tested.
    Returns {sentences, f1_a, f1_b, diff, p, resamples, seed} (fractions)."""
    a = np.asarray(counts_a, dtype=np.float64).reshape(-1, 3)  # [N, 3]
    b = np.asarray(counts_b, dtype=np.float64).reshape(-1, 3)  # [N, 3]
    if a.shape != b.shape:
        raise ValueError(f"the two systems were scored on {len(a)} and {len(b)} sentences; they must be the same")
    if not (a[:, 2] == b[:, 2]).all():
        raise ValueError("the two systems were scored against different gold entities")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1 (got {resamples})")
    sum_a, sum_b = a.sum(0), b.sum(0)  # [3]
    observed = float(f1_of_counts(sum_a) - f1_of_counts(sum_b))
    swap_gain = b - a  # [N, 3]: what A's sums gain (and B's lose) when a sentence is swapped
    rng = np.random.default_rng(seed)
    at_least = 0
    tolerance = 1e-12  # a shuffled difference equal to the observed one counts, whatever the float rounding
    for start in range(0, resamples, chunk):
        n = min(chunk, resamples - start)
        swapped = rng.integers(0, 2, size=(n, len(a))).astype(np.float64)  # [R, N]
        shift = swapped @ swap_gain  # [R, 3]
        diff = f1_of_counts(sum_a + shift) - f1_of_counts(sum_b - shift)  # [R]
        at_least += int((np.abs(diff) >= abs(observed) - tolerance).sum())
    return {
        "sentences": len(a),
        "f1_a": float(f1_of_counts(sum_a)),
        "f1_b": float(f1_of_counts(sum_b)),
        "diff": observed,
        "p": (1 + at_least) / (1 + resamples),
        "resamples": resamples,
        "seed": seed,
    }


def compare_sentences(scorer_a: NERScorer, scorer_b: NERScorer, resamples: int = 10_000, seed: int = 0) -> dict:
    """Strict and lenient micro F1 of two scorers filled with the same sentences (`NERScorer(per_sentence=True)`), each
    with its approximate randomization test: {"strict": {...}, "lenient": {...}}."""
    return {
        decoding: approximate_randomization(
            scorer_a.sentence_counts(decoding), scorer_b.sentence_counts(decoding), resamples, seed
        )
        for decoding in ("strict", "lenient")
    }


def format_sentence_comparison(result: dict, name_a: str, name_b: str) -> str:
    """A plain-text table of `compare_sentences`: F1 of each system in percent, A - B, p."""
    first = next(iter(result.values()))
    lines = [
        f"A = {name_a}",
        f"B = {name_b}",
        f"{first['sentences']} sentences, paired approximate randomization, {first['resamples']} resamples (seed {first['seed']})",
        f"{'metric':16s} {'A':>7s} {'B':>7s} {'A - B':>7s} {'p':>8s}",
    ]
    for decoding, row in result.items():
        lines.append(
            f"{'f1_' + decoding:16s} {100 * row['f1_a']:7.2f} {100 * row['f1_b']:7.2f} "
            f"{100 * row['diff']:+7.2f} {row['p']:8.4f}"
        )
    return "\n".join(lines)

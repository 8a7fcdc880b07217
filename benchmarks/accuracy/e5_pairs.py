"""Paired-by-seed comparisons of the pretrained rows (issue 34: e5-small, and LAC's states where the baseline's runs
survive only as a results file) with their models without them, from results files.

    python benchmarks/accuracy/e5_pairs.py      # writes benchmarks/results/e5_pairs.json and prints a markdown table

Each pair takes the seeds both results files have and runs zhner's two-sided paired t-test on test strict F1 (A - B).
A pair with one common seed has a difference and no p-value: one seed is an anecdote, and the table says so.
"""
from __future__ import annotations

import json
from pathlib import Path

from zhner.evaluate.significance import paired_t_test

RESULTS = Path(__file__).resolve().parents[1] / "results"
PAIRS = [  # (A, B, what A - B measures[, metric: test strict F1 unless named])
    ("bert_tagger_resume_e5_marked", "bert_tagger_resume_e5", "marked (▁x) piece against the bare one, Resume"),
    ("bert_tagger_weibo_e5_marked", "bert_tagger_weibo_e5", "marked (▁x) piece against the bare one, Weibo"),
    ("flat_resume_e5", "flat_resume", "FLAT + e5-small against FLAT (50-epoch SGD, CPU runs)"),
    ("nflat_resume_e5", "nflat_resume", "NFLAT + e5-small against NFLAT (50-epoch SGD, CPU runs)"),
    ("flat_weibo_e5", "flat_weibo_gpu", "FLAT + e5-small against FLAT, both on the same GPU"),
    ("flat_weibo_e5", "flat_weibo", "FLAT + e5-small against FLAT (CPU runs)"),
    ("flat_weibo_e5_frozen", "flat_weibo", "FLAT + frozen e5-small (20 epochs AdamW) against FLAT (50 epochs SGD), both CPU runs"),
    ("nflat_weibo_e5", "nflat_weibo", "NFLAT + e5-small against NFLAT (CPU runs)"),
    ("flat_msra_e5", "flat_msra", "FLAT + e5-small (2 epochs) against FLAT (10 epochs AdamW), MSRA"),
    ("nflat_msra_e5", "nflat_msra", "NFLAT + e5-small (2 epochs) against NFLAT, MSRA"),
    ("bert_tagger_resume_e5_llrd09", "bert_tagger_resume_e5_cpu", "BERT-CRF on e5-small, Resume: layer-wise lr decay 0.9 against one encoder rate (CPU runs)"),
    ("bert_tagger_msra_e5_lr1e4", "bert_tagger_msra_e5", "BERT-CRF on e5-small, MSRA: encoder lr 1e-4 x 4 epochs against 5e-5 x 3"),
    ("atssa_resume_e5", "atssa_resume", "ATSSA + e5-small (GPU, 6 epochs AdamW) against ATSSA (CPU, 50 epochs SGD)"),
    ("atssa_weibo_e5", "atssa_weibo", "ATSSA + e5-small (GPU, 10 epochs AdamW) against ATSSA (CPU, 50 epochs SGD)"),
    ("atssa_resume_e5_no_ssa", "atssa_resume_no_ssa", "ATSSA-SSA + e5-small against ATSSA-SSA, Resume"),
    ("atssa_weibo_e5_no_ssa", "atssa_weibo_no_ssa", "ATSSA-SSA + e5-small against ATSSA-SSA, Weibo"),
    ("atssa_resume_e5", "atssa_resume_e5_no_ssa", "selective attention on e5-small (ATSSA against -SSA), Resume"),
    ("atssa_weibo_e5", "atssa_weibo_e5_no_ssa", "selective attention on e5-small (ATSSA against -SSA), Weibo"),
    ("bert_classifier_chnsenticorp_e5_sla", "bert_classifier_chnsenticorp_e5", "SLA on e5-small against plain, ChnSentiCorp (2 epochs)", "accuracy"),
    ("bert_classifier_chnsenticorp_e5_wla", "bert_classifier_chnsenticorp_e5", "WLA on e5-small against plain, ChnSentiCorp (2 epochs)", "accuracy"),
    ("bert_classifier_chnsenticorp_e5_sla", "bert_classifier_chnsenticorp_e5_wla", "SLA against WLA on e5-small, ChnSentiCorp (2 epochs)", "accuracy"),
    ("bert_classifier_chnsenticorp_e5_sla_1epoch", "bert_classifier_chnsenticorp_e5_1epoch", "SLA on e5-small against plain, ChnSentiCorp (1 epoch)", "accuracy"),
    ("bert_classifier_chnsenticorp_e5_wla_1epoch", "bert_classifier_chnsenticorp_e5_1epoch", "WLA on e5-small against plain, ChnSentiCorp (1 epoch)", "accuracy"),
    ("bert_tagger_msra_e5_5k_sla", "bert_tagger_msra_e5_5k", "SLA on e5-small against plain, MSRA NER (CPU proxy: 5,000 training sentences, 2 epochs)"),
    ("bert_tagger_msra_e5_5k_wla", "bert_tagger_msra_e5_5k", "WLA on e5-small against plain, MSRA NER (the same proxy)"),
    ("bert_tagger_msra_e5_5k_sla", "bert_tagger_msra_e5_5k_wla", "SLA against WLA on e5-small, MSRA NER (the same proxy)"),
    ("bert_classifier_chnsenticorp_e5", "tener_classifier_chnsenticorp", "e5-small classifier (GPU, 2 epochs) against the TENER classifier on LAC vectors (CPU)", "accuracy"),
    ("nflat_weibo_lac", "nflat_weibo", "NFLAT + LAC's BiGRU states against NFLAT (the config's 100 epochs, CPU runs)"),
    ("atssa_weibo_lac", "atssa_weibo", "ATSSA + LAC's BiGRU states against ATSSA (the config's 50 epochs, CPU runs)"),
]


def per_seed(name: str, metric: str) -> dict[int, float]:
    r = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    return {seed: t[metric] for seed, t in zip(r["seeds"], r["per_seed_test"])}


def pair(a: str, b: str, what: str, metric: str = "f1_strict") -> dict:
    sa, sb = per_seed(a, metric), per_seed(b, metric)
    seeds = sorted(set(sa) & set(sb))
    test = paired_t_test([sa[s] for s in seeds], [sb[s] for s in seeds])
    return {
        "a": a, "b": b, "what": what, "metric": metric, "seeds": seeds, "a_test": [sa[s] for s in seeds], "b_test": [sb[s] for s in seeds],
        "mean_diff": round(test["mean_diff"], 2), "p": None if test["p"] is None else round(test["p"], 3),
    }


def main() -> None:
    rows = [pair(*p) for p in PAIRS]
    out = {"metric": "test strict F1 (test accuracy where a pair names it)", "test": "two-sided paired t-test over the common seeds", "pairs": rows}
    (RESULTS / "e5_pairs.json").write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(out))


def table(result: dict) -> str:
    """The pairs as a markdown table (the docs site's `e5-pairs` part)."""
    lines = [
        "| A | B | what A − B measures | metric | seeds | A (per seed) | B (per seed) | A − B | p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["pairs"]:
        p = "one seed: no test" if r["p"] is None else r["p"]
        seeds = ", ".join(map(str, r["seeds"]))
        a, b = (" / ".join(f"{x:.2f}" for x in r[k]) for k in ("a_test", "b_test"))
        metric = {"f1_strict": "test strict F1", "accuracy": "test accuracy"}[r["metric"]]
        lines.append(f"| {r['a']} | {r['b']} | {r['what']} | {metric} | {seeds} | {a} | {b} | {r['mean_diff']:+.2f} | {p} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

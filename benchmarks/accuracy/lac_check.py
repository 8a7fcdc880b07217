"""LAC's own NER read back without PaddlePaddle (zhner.pretrained.lac), scored against gold names: the check that the
GRU semantics are right. A correct forward pass gives LAC's real accuracy; the other GRU convention (origin_mode) or
raw, un-normalised characters give a much worse one.

    OMP_NUM_THREADS=1 python benchmarks/accuracy/lac_check.py      # writes benchmarks/results/lac_check.json, prints a table

LAC tags words PER / LOC / ORG (besides POS and TIME); they are scored, strict span P / R / F1 (zhner.evaluate), against
the gold names of each test set with its types mapped to those three: MSRA NR / NS / NT; Weibo's named mentions
(PER.NAM, LOC.NAM and GPE.NAM as LOC, ORG.NAM; nominal mentions left out); Resume NAME / LOC / ORG (the other five
types left out). LAC was not trained on these corpora's guidelines, so the figures measure agreement, not a ceiling.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from zhner.data.registry import load_dataset
from zhner.data.schemes import tags_to_spans
from zhner.evaluate.metrics import span_prf
from zhner.pretrained.lac import LacModel, entity_spans, load_lac_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

RESULTS = harness.RESULTS
LAC_TYPES = {"PER": "PER", "LOC": "LOC", "ORG": "ORG"}
GOLD_TYPES = {
    "msra": {"NR": "PER", "NS": "LOC", "NT": "ORG"},
    "weibo": {"PER.NAM": "PER", "LOC.NAM": "LOC", "GPE.NAM": "LOC", "ORG.NAM": "ORG"},
    "resume": {"NAME": "PER", "LOC": "LOC", "ORG": "ORG"},
}
VARIANTS = {  # name -> (origin_mode, normalize)
    "paddle default (origin_mode false), normalised characters": (False, True),
    "paddle default (origin_mode false), raw characters (jieba's reader)": (False, False),
    "origin_mode true, normalised characters": (True, True),
}


def gold_spans(dataset: str) -> tuple[list[list[str]], list[list[tuple[int, int, str]]]]:
    test = load_dataset(dataset)["test"]
    types = GOLD_TYPES[dataset]
    gold = [[(s, e, types[t]) for s, e, t in tags_to_spans(ex.tags, test.scheme) if t in types] for ex in test]
    return [ex.tokens for ex in test], gold


def score(model: LacModel, sentences: list[list[str]], gold: list[list[tuple[int, int, str]]]) -> dict:
    with harness.clocked() as clock:
        pred = [entity_spans(model.tag(chars), LAC_TYPES) for chars in sentences]
    seconds = clock.wall_s
    prf = span_prf(gold, pred)
    chars = sum(len(s) for s in sentences)
    return {
        "p": round(100 * prf.p, 2), "r": round(100 * prf.r, 2), "f1": round(100 * prf.f1, 2),
        "gold": prf.n_gold, "pred": prf.n_pred, "chars_per_s": round(chars / seconds),
    }


def main() -> None:
    provenance = harness.Run()
    lac = load_lac_model()
    rows = []
    for dataset in GOLD_TYPES:
        sentences, gold = gold_spans(dataset)
        for variant, (origin_mode, normalize) in VARIANTS.items():
            result = score(lac.variant(origin_mode, normalize), sentences, gold)
            rows.append({"dataset": dataset, "variant": variant, **result})
            print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    out = {
        "what": "LAC's PER/LOC/ORG words (jieba's lac_small, run by zhner.pretrained.lac) against gold names, test sets",
        "metric": "strict span P/R/F1 over PER/LOC/ORG (types mapped as benchmarks/accuracy/lac_check.py says)",
        "deterministic": True,
        "rows": rows,
    }
    harness.write(RESULTS / "lac_check.json", provenance.record(out), echo=False)
    print(table(out))


def table(result: dict) -> str:
    lines = ["| test set | GRU convention, characters | P | R | F1 | gold names |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['dataset']} | {r['variant']} | {r['p']:.2f} | {r['r']:.2f} | {r['f1']:.2f} | {r['gold']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

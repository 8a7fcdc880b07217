"""ACT-S robustness to the translation (Zhang et al., Sec. 5.2, Figures 3 and 4), re-scoring trained models without
retraining them:

- `mask` (Figure 3): a fraction r of each sentence's English words is replaced by [MASK] (round(r x words), chosen at
  random), to simulate a worse translation;
- `missing` (Figure 4): a fraction r of the sentences get, instead of their translation, a fixed-length run of [MASK]
  (the mean number of words of the training set's translations), as the paper does;
- `empty`: as `missing`, but the translation is "" -- how zhner itself represents a missing translation.

    python benchmarks/accuracy/acts_robustness.py runs/acts/w_full42 runs/acts/w_full43 runs/acts/w_full44 \
        --baseline "TENER=49.73" --json benchmarks/results/acts_robustness_weibo.json --png ...png

Each model directory is scored on the test split with its translator's translations (from the translation cache); the
masking is drawn with --seed, the same draw for every model. Per rate: mean and std of strict F1 over the models.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

from zhner.data.example import words_of
from zhner.data.registry import load_dataset
from zhner.evaluate.significance import describe
from zhner.tagger import Tagger
from zhner.translate import TranslationCache, fill_translations, make_translator, translation_cache_path

MASK = "[MASK]"
RATES = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def translated_splits(tagger: Tagger) -> dict:
    cfg = tagger.config.data
    splits = load_dataset(cfg.dataset, cfg.data_dir, msra_dev=cfg.msra_dev)
    spec = tagger.featurizer.fields["translation"].translator_spec
    if spec is None:
        raise SystemExit(f"{tagger.config.model.name}: the model has no translator to translate the test set with")
    fill_translations(splits.values(), make_translator(spec), TranslationCache(translation_cache_path()))
    return splits


def mask_words(translations: list[str], rate: float, rng: random.Random) -> list[str]:
    out = []
    for text in translations:
        words, _ = words_of(text)
        for i in rng.sample(range(len(words)), round(rate * len(words))):
            words[i] = MASK
        out.append(" ".join(words))
    return out


def drop_translations(translations: list[str], rate: float, rng: random.Random, filler: str) -> list[str]:
    dropped = set(rng.sample(range(len(translations)), round(rate * len(translations))))
    return [filler if i in dropped else t for i, t in enumerate(translations)]


def perturbed(mode: str, translations: list[str], rate: float, seed: int, mean_words: int) -> list[str]:
    rng = random.Random(f"{seed}-{mode}-{rate}")
    if mode == "mask":
        return mask_words(translations, rate, rng)
    return drop_translations(translations, rate, rng, " ".join([MASK] * mean_words) if mode == "missing" else "")


def score(tagger: Tagger, corpus, translations: list[str]) -> float:
    for example, translation in zip(corpus.sentences, translations):
        example.translation = translation
    return tagger.evaluate(corpus)["strict"]["f1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path, help="trained ACT-S model directories (one per seed)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--modes", default="mask,missing,empty")
    ap.add_argument("--rates", default=",".join(str(r) for r in RATES))
    ap.add_argument("--seed", type=int, default=0, help="the draw of masked words and dropped translations")
    ap.add_argument("--baseline", action="append", default=[], help="NAME=F1: a horizontal line in the plot, e.g. TENER")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--png", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    modes, rates = args.modes.split(","), [float(r) for r in args.rates.split(",")]
    per_model: dict[str, dict[str, list[float]]] = {}
    for model_dir in args.models:
        tagger = Tagger.load(model_dir)
        splits = translated_splits(tagger)
        corpus, given = splits[args.split], [ex.translation for ex in splits[args.split]]
        mean_words = round(sum(len(words_of(ex.translation)[0]) for ex in splits["train"]) / len(splits["train"]))
        per_model[str(model_dir)] = curves = {}
        for mode in modes:
            curves[mode] = [score(tagger, corpus, perturbed(mode, given, r, args.seed, mean_words)) for r in rates]
            print(f"{model_dir} {mode}: " + " ".join(f"{r:g}:{f:.2f}" for r, f in zip(rates, curves[mode])), flush=True)
    summary = {
        mode: [describe([curves[mode][i] for curves in per_model.values()]) for i in range(len(rates))] for mode in modes
    }
    baselines = {name: float(f1) for name, f1 in (b.split("=", 1) for b in args.baseline)}
    out = {
        "command": "python benchmarks/accuracy/acts_robustness.py " + " ".join(sys.argv[1:]),
        "split": args.split, "rates": rates, "seed": args.seed, "mean_words_filler": mean_words,
        "f1_strict": summary, "per_model": per_model, "baselines": baselines,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    if args.png:
        plot(out, args.png)
    for mode in modes:
        print(f"{mode}: " + " ".join(f"{r:g}:{s['mean']:.2f}" for r, s in zip(rates, summary[mode])))


def plot(out: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"mask": "words masked (Fig. 3)", "missing": "translations -> [MASK] run (Fig. 4)", "empty": "translations -> empty"}
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    x = [100 * r for r in out["rates"]]
    for mode, stats in out["f1_strict"].items():
        ax.errorbar(x, [s["mean"] for s in stats], yerr=[s["std"] or 0.0 for s in stats], marker="o", ms=3, capsize=2, label=labels[mode])
    for name, f1 in out["baselines"].items():
        ax.axhline(f1, ls="--", color="grey", lw=1)
        ax.text(x[-1], f1, f" {name}", va="bottom", ha="right", fontsize=8, color="grey")
    ax.margins(y=0.12)
    ax.set_xlabel("rate (%)")
    ax.set_ylabel(f"{out['split']} F1 strict")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()

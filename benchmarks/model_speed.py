"""Training and inference speed of several model variants side by side, measured interleaved so that load from other
processes hits every variant alike (SLA / WLA against plain BERT; ACT-S against TENER).

    python benchmarks/model_speed.py --model bert=bert_cola --model wla=bert_cola:model.local_attention=window \
        --model sla=bert_cola:model.local_attention=syntax --split test -o benchmarks/results/sla_speed.json

Each --model is NAME=CONFIG[:KEY=VALUE[:KEY=VALUE...]] (a shipped config name or YAML path and overrides). Models are
built with `prepare` (pretrained weights where the config has them; parses and translations come from their caches, as
in training). One torch thread. Per repeat and per variant: inference over the split's first --sentences sentences at
each batch size (featurisation included, as `predictions` does it) and --steps training steps of the config's batch size.
The figures are medians over repeats of sentences per second. An ACT-S model with a frozen English encoder has its
memo of English outputs emptied before each inference pass (a new text is never in it) but kept for training (its
steady state after the first epoch); `--parse` also times the SLA parser on the sentences without its cache.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing zhner
from zhner.cli import resolve_config  # noqa: E402
from zhner.config import load_config  # noqa: E402
from zhner.train.assemble import prepare  # noqa: E402
from zhner.train.trainer import make_optimizer, train_step  # noqa: E402


def parse_spec(spec: str) -> tuple[str, str, list[str]]:
    name, _, rest = spec.partition("=")
    config, *sets = rest.split(":")
    return name, config, sets


def english_memo(model: torch.nn.Module) -> dict | None:
    english = getattr(model, "english", None)
    return getattr(english, "memo", None)


def infer(run, examples: list, batch_size: int) -> float:
    memo = english_memo(run.tagger.model)
    kept = dict(memo) if memo is not None else {}
    if memo is not None:  # a new text is never in the memo; training's entries are put back afterwards
        memo.clear()
    t0 = time.perf_counter()
    run.tagger.predictions(examples, batch_size)
    seconds = time.perf_counter() - t0
    if memo is not None:
        memo.clear()
        memo.update(kept)
    return len(examples) / seconds


def train_steps(run, optimizer, batches: list[dict]) -> float:
    model = run.tagger.model
    model.train()
    t0 = time.perf_counter()
    for batch in batches:
        train_step(model, optimizer, batch, run.config.train)
    seconds = time.perf_counter() - t0
    model.eval()
    return sum(len(b["mask"]) if "mask" in b else len(next(iter(b.values()))) for b in batches) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="NAME=CONFIG[:KEY=VALUE...]")
    ap.add_argument("--split", default="test")
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--steps", type=int, default=20, help="training steps per repeat and variant")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parse", action="store_true", help="also time the first SLA model's parser without its cache")
    ap.add_argument("--translate", action="store_true", help="also time the first ACT-S model's translator without its cache")
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    runs, specs = {}, {}
    for spec in args.model:
        name, config, sets = parse_spec(spec)
        specs[name] = {"config": config, "set": sets}
        runs[name] = prepare(load_config(resolve_config(config), sets), log=lambda _: None)
    optimizers = {name: make_optimizer(run.tagger.model, run.config) for name, run in runs.items()}
    batches = {}
    for name, run in runs.items():
        f, bs = run.featurizer, run.config.train.batch_size
        train = run.splits["train"].sentences[: args.steps * bs]
        batches[name] = [f.collate([f.encode(s) for s in train[i : i + bs]]) for i in range(0, len(train), bs)]
        train_steps(run, optimizers[name], batches[name][:2])  # warm-up (and an ACT-S memo for these sentences)
        train_steps(run, optimizers[name], batches[name])
    examples = {name: run.splits[args.split].sentences[: args.sentences] for name, run in runs.items()}
    speeds: dict[str, dict[str, list[float]]] = {name: {} for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            for bs in args.batch:
                speeds[name].setdefault(f"infer_b{bs}", []).append(infer(run, examples[name], bs))
            speeds[name].setdefault("train", []).append(train_steps(run, optimizers[name], batches[name]))
    medians = {name: {k: round(statistics.median(v), 1) for k, v in s.items()} for name, s in speeds.items()}
    first = next(iter(medians))
    result = {
        "what": f"sentences/s, median over {args.repeats} interleaved repeats; inference on the first {args.sentences} "
        f"{args.split} sentences, training {args.steps} steps",
        "command": "python benchmarks/model_speed.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, torch {torch.__version__}, 1 thread",
        "models": specs,
        "sentences_per_s": medians,
        f"ratio_to_{first}": {
            name: {k: round(medians[first][k] / v, 2) for k, v in m.items()} for name, m in medians.items()
        },
    }
    if args.parse:
        result["parse"] = time_parser(runs, examples)
    if args.translate:
        result["translate"] = time_translator(runs, examples)
    print(json.dumps(result, indent=1))
    if args.output:
        args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def time_parser(runs: dict, examples: dict) -> dict | None:
    """Seconds per 1,000 sentences of the first syntax model's parser, parsing afresh (no cache)."""
    from zhner.data.example import Example

    for name, run in runs.items():
        field = run.featurizer.fields.get("syntax")
        if field is None or field.kind != "syntax":
            continue
        sentences = [Example(list(ex.tokens), spaces=ex.spaces) for ex in examples[name]]
        field.parser().parse(sentences[:1])  # loads the parser's model: not part of the per-sentence cost
        t0 = time.perf_counter()
        field.parser().parse(sentences)
        seconds = time.perf_counter() - t0
        return {"model": name, "parser": field.parser_spec, "sentences": len(sentences), "s_per_1000": round(1000 * seconds / len(sentences), 2)}
    return None


def time_translator(runs: dict, examples: dict) -> dict | None:
    """Sentences per second of the first translation model's translator, translating afresh (no cache), one text per
    call as prediction does it, and the model's inference speed when each text is translated on the fly."""
    from zhner.data.example import Example
    from zhner.translate import make_translator

    for name, run in runs.items():
        field = run.featurizer.fields.get("translation")
        if field is None or field.translator_spec is None:
            continue
        translator = make_translator(field.translator_spec)
        texts = [ex.text for ex in examples[name]]
        translator.translate(texts[:1])  # loads the dictionary / model
        t0 = time.perf_counter()
        for text in texts:
            translator.translate([text])
        translate_s = time.perf_counter() - t0
        fresh = [Example(list(ex.tokens)) for ex in examples[name]]  # translation None: the field translates
        memo = english_memo(run.tagger.model)
        if memo is not None:
            memo.clear()
        t0 = time.perf_counter()
        run.tagger.predictions(fresh, 16)
        predict_s = time.perf_counter() - t0
        return {
            "model": name, "translator": field.translator_spec, "sentences": len(texts),
            "translate_sentences_per_s": round(len(texts) / translate_s, 1),
            "infer_b16_translating_on_the_fly": round(len(texts) / predict_s, 1),
        }
    return None


if __name__ == "__main__":
    main()

"""Training speed of e5-small models with their first K layers frozen (`model.bert_frozen_layers`), one thread.

Usage: python benchmarks/frozen_layers_speed.py [--config bert_e5_resume] [--layers 0 6 9] [--sentences 200]
       [-o benchmarks/results/frozen_layers_speed.json]

For each K the config's model is prepared on its first `--sentences` training sentences and trained for two passes
over them, timed apart: the first pass runs the frozen layers on every sentence (a run's first epoch), the second reads
their output from the memo (every later epoch). Sentences per second, the optimiser step included; run it with nothing
else on the machine (the figures move with load, which the result records).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def passes(config_name: str, frozen: int, sentences: int) -> dict:
    from zhner.cli import resolve_config
    from zhner.config import load_config
    from zhner.data.batching import length_batches
    from zhner.train.assemble import prepare
    from zhner.train.trainer import make_optimizer, train_step

    overrides = [f"data.max_train_sentences={sentences}", "data.max_eval_sentences=8",
                 f"model.bert_frozen_layers={frozen}"]
    run = prepare(load_config(resolve_config(config_name), overrides), log=lambda _: None)
    model, tc = run.tagger.model, run.config.train
    items = [run.featurizer.encode(s) for s in run.splits["train"]]
    order = length_batches([it["n"] for it in items], tc.batch_size, shuffle=True, seed=0, max_cells=tc.max_batch_cells)
    batches = [run.featurizer.collate([items[i] for i in idx]) for idx in order]
    optimizer = make_optimizer(model, run.config)
    model.train()
    out = {"frozen_layers": frozen, "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    for name in ("first_pass", "later_pass"):
        start = time.perf_counter()
        for batch in batches:
            train_step(model, optimizer, batch, tc)
        out[f"{name}_sentences_per_s"] = round(len(items) / (time.perf_counter() - start), 1)
    return out


def table(result: dict) -> str:
    """The rows as a markdown table (the docs site's `frozen-layers-speed` part)."""
    lines = ["| frozen layers | trained parameters | first pass, sentences/s (the frozen layers run) | later passes "
             "(read from the memo) |", "|---|---|---|---|"]
    for r in result["rows"]:
        k = r["frozen_layers"]
        lines.append(f"| {k}{' (fine-tuning)' if k == 0 else ''} | {r['trained_parameters'] / 1e6:.1f} M | "
                     f"{r['first_pass_sentences_per_s']} | {r['later_pass_sentences_per_s']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="bert_e5_resume")
    parser.add_argument("--layers", type=int, nargs="+", default=[0, 6, 9])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("-o", "--output", default="benchmarks/results/frozen_layers_speed.json")
    parser.add_argument("--note", default="", help="the machine's conditions, recorded with the result")
    args = parser.parse_args()
    sys.path[:0] = [str(HERE.parent), str(HERE)]  # zhner from this checkout; runtime_onnx beside this file
    import torch
    from runtime_onnx import write_result

    torch.set_num_threads(1)
    load = os.getloadavg()
    rows = [passes(args.config, k, args.sentences) for k in args.layers]
    result = {"config": args.config, "train_sentences": args.sentences, "rows": rows,
              "command": shlex.join(["python", "benchmarks/frozen_layers_speed.py", *sys.argv[1:]])}
    write_result(result, load, args.note, args.output)


if __name__ == "__main__":
    main()

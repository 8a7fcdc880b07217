"""Training speed of e5-small models with their first K layers frozen (`model.bert_frozen_layers`), one thread.

Usage: python benchmarks/speed/frozen_layers_speed.py [--config bert_e5_resume] [--layers 0 6 9] [--sentences 200]
       [-o benchmarks/results/frozen_layers_speed.json]

For each K the config's model is prepared on its first `--sentences` training sentences and trained for two passes
over them, timed apart: the first pass runs the frozen layers on every sentence (a run's first epoch), the second reads
their output from the memo (every later epoch). Sentences per second, the optimiser step included; run it with nothing
else on the machine (the figures move with load, which the result records).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402


def passes(config_name: str, frozen: int, sentences: int) -> dict:
    from zhner.data.batching import length_batches
    from zhner.train.trainer import make_optimizer, train_step

    overrides = [f"data.max_train_sentences={sentences}", "data.max_eval_sentences=8",
                 f"model.bert_frozen_layers={frozen}"]
    run = harness.build(config_name, overrides)
    model, tc = run.tagger.model, run.config.train
    items = [run.featurizer.encode(s) for s in run.splits["train"]]
    order = length_batches([it["n"] for it in items], tc.batch_size, shuffle=True, seed=0, max_cells=tc.max_batch_cells)
    batches = [run.featurizer.collate([items[i] for i in idx]) for idx in order]
    optimizer = make_optimizer(model, run.config)
    model.train()
    out = {"frozen_layers": frozen, "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    for name in ("first_pass", "later_pass"):
        with harness.clocked() as clock:
            for batch in batches:
                train_step(model, optimizer, batch, tc)
        out[f"{name}_sentences_per_s"] = round(len(items) / clock.wall_s, 1)
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
    harness.output_options(parser, "frozen_layers_speed.json")
    args = parser.parse_args()
    harness.use_checkout()
    import torch

    torch.set_num_threads(1)
    provenance = harness.Run(note=args.note)
    rows = [passes(args.config, k, args.sentences) for k in args.layers]
    harness.write_result(provenance, {"config": args.config, "train_sentences": args.sentences, "rows": rows}, args.output)


if __name__ == "__main__":
    main()

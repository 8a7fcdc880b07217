"""Time zhner.nn.crf.CRF against pytorch-crf (torchcrf.CRF): NLL forward+backward and Viterbi decoding.

Usage: .venv/bin/python benchmarks/speed/crf_speed.py [--batch 16] [--length 50] [--tags 33] [--repeats 50]
One torch thread, float32, random emissions and a mask with lengths between L/2 and L. Prints median milliseconds.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
from zhner.data.schemes import all_tags  # noqa: E402
from zhner.nn.crf import CRF, allowed_transitions  # noqa: E402


def median_ms(fn: Callable[[], object], repeats: int, warmup: int = 5) -> float:
    clocks, _ = harness.repeated(fn, repeats, warmup)
    return 1000 * statistics.median(clock.wall_s for clock in clocks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--tags", type=int, default=33)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    try:
        import torchcrf
    except ImportError:
        raise SystemExit("pytorch-crf is not installed: pip install pytorch-crf") from None

    torch.set_num_threads(1)
    torch.manual_seed(0)
    B, L, T = args.batch, args.length, args.tags
    emissions = torch.randn(B, L, T, requires_grad=True)
    lengths = torch.randint(L // 2, L + 1, (B,))
    lengths[0] = L
    mask = torch.arange(L)[None, :] < lengths[:, None]
    tags = torch.randint(0, T, (B, L))

    ours = CRF(T, init="normal")
    theirs = torchcrf.CRF(T, batch_first=True)
    with torch.no_grad():
        theirs.transitions.copy_(ours.transitions)
        theirs.start_transitions.copy_(ours.start)
        theirs.end_transitions.copy_(ours.end)
    rows: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("NLL forward+backward", lambda: ours(emissions, tags, mask, reduction="sum").backward(),
         lambda: (-theirs(emissions, tags, mask=mask, reduction="sum")).backward()),
        ("Viterbi decode", lambda: ours.decode(emissions.detach(), mask),
         lambda: theirs.decode(emissions.detach(), mask=mask)),
    ]
    if (T - 1) % 4 == 0:  # T = 1 + 4k: a BMES tag set over k types, to time the constrained CRF as well
        bmes = all_tags([f"T{i:02d}" for i in range((T - 1) // 4)], "bmes")
        constrained = CRF(T, constraints=allowed_transitions(bmes, "bmes"), init="normal")
        rows.append(("NLL fwd+bwd, BMES-constrained", lambda: constrained(emissions, tags, mask, reduction="sum").backward(),
                     None))
        rows.append(("Viterbi, BMES-constrained", lambda: constrained.decode(emissions.detach(), mask), None))

    print(f"B={B} L={L} T={T}, float32, torch {torch.__version__}, threads={torch.get_num_threads()}, "
          f"median of {args.repeats}")
    print(f"{'operation':<32}{'zhner (ms)':>12}{'pytorch-crf (ms)':>18}{'speed-up':>10}")
    for name, ours_fn, theirs_fn in rows:
        a = median_ms(ours_fn, args.repeats)
        if theirs_fn is None:
            print(f"{name:<32}{a:>12.2f}{'-':>18}{'-':>10}")
            continue
        b = median_ms(theirs_fn, args.repeats)
        print(f"{name:<32}{a:>12.2f}{b:>18.2f}{b / a:>9.1f}x")


if __name__ == "__main__":
    main()

"""Length-bucketed batching: sentences of similar length share a batch, so little compute goes to padding."""
from __future__ import annotations

import random
from collections.abc import Sequence


def length_batches(
    lengths: Sequence[int],
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    pool_batches: int = 50,
    max_cells: int | None = None,
) -> list[list[int]]:
    """Split sentence indices into batches of similar length.

    Without shuffling: indices sorted by length (longest first), cut into batches; order is deterministic.
    With shuffling: indices are shuffled, cut into pools of `pool_batches` batches, sorted by length inside each pool,
    cut into batches, and the batches shuffled -- random across epochs (seeded) yet with little padding.
    max_cells: a batch whose attention-sized cost, sentences x longest length^2, exceeds it is cut (longest first) into
    consecutive batches within it; a sentence over it alone makes a batch. Applied last, so batches within the budget are
    exactly those of no budget (the same order, the same random stream).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    indices = list(range(len(lengths)))
    if not shuffle:
        indices.sort(key=lambda i: -lengths[i])
        return _within(
            [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)], lengths, max_cells
        )
    rng = random.Random(seed)
    rng.shuffle(indices)
    pool = batch_size * pool_batches
    batches = []
    for p in range(0, len(indices), pool):
        chunk = sorted(indices[p : p + pool], key=lambda i: -lengths[i])
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return _within(batches, lengths, max_cells)


def _within(batches: list[list[int]], lengths: Sequence[int], max_cells: int | None) -> list[list[int]]:
    """Cut each batch (sorted longest first) into consecutive parts of at most max_cells = sentences x longest^2."""
    if max_cells is None:
        return batches
    out: list[list[int]] = []
    for batch in batches:
        part: list[int] = []
        for i in batch:
            if part and (len(part) + 1) * lengths[part[0]] ** 2 > max_cells:
                out.append(part)
                part = []
            part.append(i)
        out.append(part)
    return out


def budget_batches(
    lengths: Sequence[int],
    batch_size: int,
    max_cells: int,
    min_ratio: float = 0.5,
    words: Sequence[int] | None = None,
    bucket: int = 4,
) -> list[list[int]]:
    """Longest-first batches of at most `batch_size` sentences whose attention-sized cost, sentences x longest length^2,
    stays within `max_cells` (a single sentence always makes a batch). Evaluation on MSRA, whose test set has a
    1,475-character sentence, would otherwise put 64 such sentences into one [B, H, L, L] tensor.
    A sentence shorter than `min_ratio` x the batch's longest starts a new batch: padding it would cost more than
    a call of its own (groups of 32 mixed Resume/MSRA sentences: 2.6-3x the sentences per CPU second of no such cut,
    `benchmarks/speed/batch_padding.py`).
    `words` (a lattice model's lexicon words per sentence): sentences within `bucket` characters of each other's
    length are ordered by their word count, so a batch pads fewer word keys (the three test sets with zh-small's
    lexicon: 72% of the batches' (character, word) cells real by length alone, 85% so, counted once)."""
    if words is None:
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    else:
        order = sorted(range(len(lengths)), key=lambda i: (-(lengths[i] // bucket), -words[i], -lengths[i]))
    batches: list[list[int]] = []
    longest = shortest = 0  # of the last batch
    for i in order:
        if batches:
            batch = batches[-1]
            wider, narrower = max(longest, lengths[i]), min(shortest, lengths[i])
            fits = len(batch) < batch_size and (len(batch) + 1) * wider * wider <= max_cells
            if fits and narrower >= min_ratio * wider:
                batch.append(i)
                longest, shortest = wider, narrower
                continue
        batches.append([i])
        longest = shortest = lengths[i]
    return batches

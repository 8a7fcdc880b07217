"""zhner.nn.crf against pytorch-crf (the oracle), brute-force enumeration, and the tag-scheme grammar."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from zhner.data.schemes import all_tags, first_violation
from zhner.nn.crf import CRF, DISALLOWED, allowed_transitions

torchcrf = pytest.importorskip("torchcrf")

torch.set_num_threads(1)

BMES_TAGS = all_tags(["GPE", "LOC", "ORG", "PER"], "bmes")  # 17 tags, 'O' first


def random_batch(
    seed: int, B: int, L: int, T: int, dtype: torch.dtype = torch.float64, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random emissions [B, L, T], tags [B, L] (padding -100) and a left-aligned mask with lengths 1..L (one of them L)."""
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(B, L, T, generator=g, dtype=dtype) * scale
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    lengths[0] = L
    mask = torch.arange(L)[None, :] < lengths[:, None]
    tags = torch.randint(0, T, (B, L), generator=g).masked_fill(~mask, -100)
    return emissions, tags, mask


def random_crf(T: int, seed: int, dtype: torch.dtype = torch.float64, constraints=None) -> CRF:
    torch.manual_seed(seed)
    crf = CRF(T, constraints=constraints, init="normal").to(dtype)
    with torch.no_grad():  # larger than the init, so the transitions matter
        for p in crf.parameters():
            p.normal_(std=1.0)
    return crf


def oracle_from(crf: CRF) -> "torchcrf.CRF":
    ref = torchcrf.CRF(crf.num_tags, batch_first=True).to(crf.transitions.dtype)
    with torch.no_grad():
        ref.transitions.copy_(crf.transitions)
        ref.start_transitions.copy_(crf.start)
        ref.end_transitions.copy_(crf.end)
    return ref


# ---- against pytorch-crf -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("shape", [(6, 9, 5), (1, 7, 4), (4, 1, 3), (3, 12, 33)])
def test_matches_pytorch_crf(seed: int, shape: tuple[int, int, int]) -> None:
    B, L, T = shape
    crf = random_crf(T, seed)
    ref = oracle_from(crf)
    emissions, tags, mask = random_batch(seed, B, L, T)
    ours = crf(emissions, tags, mask, reduction="sum")
    theirs = -ref(emissions, tags.clamp(min=0), mask=mask, reduction="sum")
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=0)
    per_seq = crf(emissions, tags, mask, reduction="none")
    assert per_seq.shape == (B,)
    assert torch.allclose(per_seq, -ref(emissions, tags.clamp(min=0), mask=mask, reduction="none"), atol=1e-4, rtol=0)
    assert torch.allclose(crf(emissions, tags, mask), per_seq.mean())
    assert crf.decode(emissions, mask) == ref.decode(emissions, mask=mask)


def test_float32_matches_float64() -> None:
    crf64 = random_crf(6, 0)
    crf32 = CRF(6).float()
    crf32.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in crf64.state_dict().items()})
    emissions, tags, mask = random_batch(1, 5, 10, 6)
    nll32 = crf32(emissions.float(), tags, mask, reduction="none")
    assert nll32.dtype == torch.float32
    assert torch.allclose(nll32.double(), crf64(emissions, tags, mask, reduction="none"), atol=1e-4)
    assert crf32.decode(emissions.float(), mask) == crf64.decode(emissions, mask)


def test_viterbi_tensor_pads_and_scores() -> None:
    crf = random_crf(5, 3)
    emissions, _, mask = random_batch(3, 6, 8, 5)
    paths, scores = crf.viterbi_tensor(emissions, mask)
    assert paths.shape == (6, 8) and paths.dtype == torch.long
    assert (paths[~mask] == 0).all()
    # The score returned is the score of the returned path.
    assert torch.allclose(scores, crf.score(emissions, paths, mask))
    decoded = crf.decode(emissions, mask)
    assert [len(p) for p in decoded] == mask.sum(1).tolist()
    assert all(p == row[: len(p)] for p, row in zip(decoded, paths.tolist()))


# ---- brute force ------------------------------------------------------------------------------------------------


def brute_force(crf: CRF, emissions: torch.Tensor, n: int) -> tuple[float, list[int], float]:
    """log Z, best path and its score of one sequence of length n, by enumerating every allowed path."""
    start, trans, end = crf.start.tolist(), crf.transitions.tolist(), crf.end.tolist()
    s_ok, t_ok, e_ok = crf.start_allowed.tolist(), crf.trans_allowed.tolist(), crf.end_allowed.tolist()
    e = emissions.tolist()
    scores: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(crf.num_tags), repeat=n):
        allowed = s_ok[path[0]] and e_ok[path[-1]] and all(t_ok[a][b] for a, b in zip(path, path[1:]))
        if not allowed:
            continue
        s = start[path[0]] + end[path[-1]] + sum(e[i][y] for i, y in enumerate(path))
        s += sum(trans[a][b] for a, b in zip(path, path[1:]))
        scores[path] = s
    top = max(scores.values())
    log_z = top + math.log(sum(math.exp(s - top) for s in scores.values()))
    best = max(scores, key=scores.get)
    return log_z, list(best), scores[best]


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_brute_force(constrained: bool, seed: int) -> None:
    tags = ["O", "B-PER", "M-PER", "E-PER", "S-PER"]
    constraints = allowed_transitions(tags, "bmes") if constrained else None
    crf = random_crf(len(tags), seed, constraints=constraints)
    emissions, _, mask = random_batch(seed, 4, 4, len(tags), scale=2.0)
    log_z = crf.log_partition(emissions, mask)
    paths, scores = crf.viterbi_tensor(emissions, mask)
    decoded = crf.decode(emissions, mask)
    for b, n in enumerate(mask.sum(1).tolist()):
        bf_log_z, bf_path, bf_score = brute_force(crf, emissions[b, :n], n)
        # Forbidden paths score about -1e4 in the CRF: their share of Z is far below float64 precision.
        assert log_z[b].item() == pytest.approx(bf_log_z, abs=1e-8)
        assert decoded[b] == bf_path
        assert scores[b].item() == pytest.approx(bf_score, abs=1e-8)


def test_nll_is_a_distribution() -> None:
    """exp(-NLL) summed over every path of a short sequence is 1."""
    crf = random_crf(3, 7)
    emissions, _, _ = random_batch(7, 1, 4, 3)
    paths = torch.tensor(list(itertools.product(range(3), repeat=4)))  # [81, 4]
    mask = torch.ones_like(paths, dtype=torch.bool)
    nll = crf(emissions.expand(len(paths), -1, -1), paths, mask, reduction="none")
    assert torch.exp(-nll).sum().item() == pytest.approx(1.0, abs=1e-10)


# ---- constraints ------------------------------------------------------------------------------------------------


def test_allowed_transitions_bio() -> None:
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    start, trans, end = allowed_transitions(tags, "bio")
    assert start.tolist() == [True, True, False, True, False]
    assert end.all()
    ok = {(a, b) for a in tags for b in tags if trans[tags.index(a), tags.index(b)]}
    assert ("B-PER", "I-PER") in ok and ("I-PER", "I-PER") in ok and ("I-PER", "O") in ok and ("B-PER", "B-LOC") in ok
    assert ("O", "I-PER") not in ok and ("B-LOC", "I-PER") not in ok and ("I-LOC", "I-PER") not in ok


@pytest.mark.parametrize("scheme", ["bio", "bioes", "bmes"])
def test_allowed_transitions_match_grammar(scheme: str) -> None:
    """A start / pair / end is allowed exactly when some well-formed sequence (per schemes.first_violation) has it.
    Sequences of up to 4 tags suffice: the longest witness is B-X, inside-X, inside-X, E-X."""
    tags = all_tags(["LOC", "PER"], scheme)
    T = len(tags)
    starts, ends, pairs = set(), set(), set()
    for n in range(1, 5):
        for seq in itertools.product(range(T), repeat=n):
            if first_violation([tags[t] for t in seq], scheme) is None:
                starts.add(seq[0])
                ends.add(seq[-1])
                pairs.update(zip(seq, seq[1:]))
    start, trans, end = allowed_transitions(tags, scheme)
    assert {i for i in range(T) if start[i]} == starts
    assert {i for i in range(T) if end[i]} == ends
    assert {(i, j) for i in range(T) for j in range(T) if trans[i, j]} == pairs


def test_allowed_transitions_rejects_foreign_tags() -> None:
    with pytest.raises(ValueError):
        allowed_transitions(["O", "M-PER"], "bio")
    with pytest.raises(ValueError):
        allowed_transitions(["O", "B-PER"], "iob2")


@pytest.mark.parametrize("seed", range(3))
def test_constrained_decode_is_well_formed(seed: int) -> None:
    T = len(BMES_TAGS)
    crf = random_crf(T, seed, constraints=allowed_transitions(BMES_TAGS, "bmes"))
    # Strong random emissions: unconstrained decoding would produce malformed sequences all the time.
    emissions, _, mask = random_batch(seed, 16, 20, T, scale=5.0)
    for path in crf.decode(emissions, mask):
        assert first_violation([BMES_TAGS[t] for t in path], "bmes") is None
    unconstrained = CRF(T)
    assert any(
        first_violation([BMES_TAGS[t] for t in path], "bmes") is not None
        for path in unconstrained.decode(emissions, mask)
    )


def test_gradients_are_finite_with_constraints() -> None:
    T = len(BMES_TAGS)
    crf = CRF(T, constraints=allowed_transitions(BMES_TAGS, "bmes"), init="normal")
    emissions, tags, mask = random_batch(0, 5, 11, T, dtype=torch.float32)
    emissions.requires_grad_(True)
    loss = crf(emissions, tags, mask)  # random gold tags violate the grammar: the loss is ~1e4, still finite
    assert torch.isfinite(loss)
    loss.backward()
    for grad in (emissions.grad, crf.transitions.grad, crf.start.grad, crf.end.grad):
        assert grad is not None and torch.isfinite(grad).all()
    assert emissions.grad.abs().sum() > 0
    # Forbidden entries are replaced by the constant, so they receive no gradient.
    assert (crf.transitions.grad[~crf.trans_allowed] == 0).all()


def test_gradcheck_log_partition() -> None:
    crf = random_crf(3, 0, constraints=allowed_transitions(["O", "B-X", "I-X"], "bio"))
    emissions, _, mask = random_batch(0, 2, 4, 3)
    emissions.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda e: crf.log_partition(e, mask), (emissions,))


# ---- edge cases and API ------------------------------------------------------------------------------------------


def test_length_one_and_batch_of_one() -> None:
    crf = random_crf(4, 0)
    emissions = torch.randn(1, 1, 4, dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)
    tags = torch.tensor([[2]])
    expected = torch.logsumexp(crf.start + emissions[0, 0] + crf.end, 0) - (crf.start[2] + emissions[0, 0, 2] + crf.end[2])
    assert torch.allclose(crf(emissions, tags, mask), expected)
    assert crf.decode(emissions, mask) == [[int((crf.start + emissions[0, 0] + crf.end).argmax())]]


def test_padding_does_not_matter() -> None:
    """Changing emissions and tags past the mask changes nothing."""
    crf = random_crf(5, 1)
    emissions, tags, mask = random_batch(1, 4, 8, 5)
    noisy = emissions.masked_fill(~mask[..., None], 1e3)
    nll = crf(emissions, tags.clamp(min=0), mask, reduction="none")
    assert torch.allclose(nll, crf(noisy, tags.masked_fill(~mask, 4), mask, reduction="none"))
    assert crf.decode(noisy, mask) == crf.decode(emissions, mask)


def test_init_and_buffers() -> None:
    assert (CRF(4).transitions == 0).all()
    assert CRF(4, init="normal").transitions.std() > 0
    with pytest.raises(ValueError):
        CRF(4, init="uniform")
    with pytest.raises(ValueError):
        CRF(4, constraints=(torch.ones(3, dtype=torch.bool),) * 3)
    crf = CRF(len(BMES_TAGS), constraints=allowed_transitions(BMES_TAGS, "bmes"))
    state = crf.state_dict()
    assert {"start_allowed", "trans_allowed", "end_allowed"} <= set(state)
    fresh = CRF(len(BMES_TAGS))
    fresh.load_state_dict(state)
    assert torch.equal(fresh.trans_allowed, crf.trans_allowed)
    assert DISALLOWED == -1e4


def test_bad_inputs() -> None:
    crf = CRF(3)
    emissions = torch.randn(2, 4, 3)
    with pytest.raises(ValueError):
        crf.decode(emissions, torch.tensor([[True] * 4, [False] * 4]))  # empty sequence
    with pytest.raises(ValueError):
        crf.decode(torch.randn(2, 4, 5), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError):
        crf(emissions, torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool), reduction="avg")


# ---- marginals and n-best ------------------------------------------------------------------------------------------


def path_scores(crf: CRF, emissions: torch.Tensor, n: int) -> dict[tuple[int, ...], float]:
    """The score of every allowed path of one sequence of length n."""
    start, trans, end = crf.start.tolist(), crf.transitions.tolist(), crf.end.tolist()
    s_ok, t_ok, e_ok = crf.start_allowed.tolist(), crf.trans_allowed.tolist(), crf.end_allowed.tolist()
    e = emissions.tolist()
    scores = {}
    for path in itertools.product(range(crf.num_tags), repeat=n):
        if s_ok[path[0]] and e_ok[path[-1]] and all(t_ok[a][b] for a, b in zip(path, path[1:])):
            scores[path] = start[path[0]] + end[path[-1]] + sum(e[i][y] for i, y in enumerate(path)) + sum(
                trans[a][b] for a, b in zip(path, path[1:])
            )
    return scores


SMALL_TAGS = ["O", "B-PER", "M-PER", "E-PER", "S-PER"]


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_subpath_marginals_against_enumeration(constrained: bool, seed: int) -> None:
    """P(y_i..y_{i+m-1} = tags) for every position, every tag pair and runs of 3 taken from real paths, against the sum
    over enumerated paths; unigram marginals sum to 1."""
    constraints = allowed_transitions(SMALL_TAGS, "bmes") if constrained else None
    crf = random_crf(len(SMALL_TAGS), seed, constraints=constraints)
    emissions, _, mask = random_batch(seed, 4, 5, len(SMALL_TAGS), scale=2.0)
    rng = torch.Generator().manual_seed(seed)
    queries, expected = [], []
    for b, n in enumerate(mask.sum(1).tolist()):
        scores = path_scores(crf, emissions[b, :n], n)
        log_z = math.log(sum(math.exp(s) for s in scores.values()))
        paths = list(scores)
        runs = [list(t) for m in (1, 2) for t in itertools.product(range(len(SMALL_TAGS)), repeat=m)]
        for i in range(n):
            picked = paths[int(torch.randint(len(paths), (1,), generator=rng))]
            for tags in runs + [list(picked[i : i + 3])]:
                if i + len(tags) <= n:
                    queries.append((b, i, tags))
                    expected.append(sum(math.exp(s - log_z) for p, s in scores.items() if list(p[i : i + len(tags)]) == tags))
    probs = crf.subpath_log_probs(emissions, mask, queries).exp()
    assert probs.tolist() == pytest.approx(expected, abs=1e-9)
    assert max(expected) > 0.3  # the runs from real paths have mass: not a test of zeros only
    alpha, beta, log_z = crf.forward_backward(emissions, mask)
    unigram = (alpha + beta - log_z.view(-1, 1, 1)).exp()  # [B, L, T]
    assert torch.allclose(unigram.sum(2)[mask], torch.ones(int(mask.sum()), dtype=unigram.dtype))


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_numpy_crf_against_enumeration(constrained: bool, seed: int) -> None:
    """The inference CRF in numpy (zhner.decoding: the tagger's CPU path and the runtime's): its batched Viterbi
    gives viterbi_tensor's paths, its batched forward-backward every subpath's probability as the sum over enumerated
    paths, on a ragged batch."""
    from zhner.decoding import BatchCRF, viterbi

    constraints = allowed_transitions(SMALL_TAGS, "bmes") if constrained else None
    crf = random_crf(len(SMALL_TAGS), seed, constraints=constraints)
    emissions, _, mask = random_batch(seed, 4, 5, len(SMALL_TAGS), scale=2.0)
    lengths = mask.sum(1).tolist()
    start, trans, end = (t.detach().numpy() for t in crf.scores(decoding=True))
    e = emissions.to(torch.float32).numpy()
    paths = viterbi(e, lengths, start.astype("float32"), trans.astype("float32"), end.astype("float32"))
    expected_paths, _ = crf.viterbi_tensor(emissions.to(torch.float32), mask)
    assert paths == [row[:n] for row, n in zip(expected_paths.tolist(), lengths)]
    assert crf.decode(emissions.to(torch.float32), mask) == paths  # CRF.decode on the CPU runs the numpy Viterbi
    queries, expected = [], []
    for b, n in enumerate(lengths):
        scores = path_scores(crf, emissions[b, :n], n)
        log_z = math.log(sum(math.exp(s) for s in scores.values()))
        for i in range(n):
            for tags in [list(t) for m in (1, 2) for t in itertools.product(range(len(SMALL_TAGS)), repeat=m)]:
                if i + len(tags) <= n:
                    queries.append((b, i, tags))
                    expected.append(sum(math.exp(s - log_z) for p, s in scores.items() if list(p[i : i + len(tags)]) == tags))
    got = np.exp(BatchCRF(emissions.numpy(), lengths, start, trans, end).subpath_log_probs(queries))
    assert got.tolist() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_nbest_against_enumeration(constrained: bool, seed: int) -> None:
    constraints = allowed_transitions(SMALL_TAGS, "bmes") if constrained else None
    crf = random_crf(len(SMALL_TAGS), seed, constraints=constraints)
    emissions, _, mask = random_batch(seed + 10, 4, 5, len(SMALL_TAGS), scale=2.0)
    k = 7
    paths, scores = crf.nbest(emissions, mask, k)
    best, _ = crf.viterbi_tensor(emissions, mask)
    assert torch.equal(paths[:, 0], best)  # the first of the k best is Viterbi's
    for b, n in enumerate(mask.sum(1).tolist()):
        ranked = sorted(path_scores(crf, emissions[b, :n], n).items(), key=lambda item: -item[1])[:k]
        found = min(k, len(ranked))  # a length-1 constrained sequence has only 2 allowed paths (O, S-PER)
        assert [tuple(p[:n]) for p in paths[b, :found].tolist()] == [p for p, _ in ranked]
        assert scores[b, :found].tolist() == pytest.approx([s for _, s in ranked], abs=1e-8)
        assert paths[b, :, n:].eq(0).all()
        if len(ranked) < k and not constrained:
            assert torch.isinf(scores[b, found:]).all()
    with pytest.raises(ValueError, match="k must be"):
        crf.nbest(emissions, mask, 0)


@pytest.mark.parametrize("seed", range(3))
def test_decode_constraints_apart_from_training(seed: int) -> None:
    """A CRF trained without constraints but decoding with them (FLAT's release trains that way; zhner decodes
    well-formed): the likelihood is the unconstrained one, Viterbi and n-best the best allowed paths, confidences are
    under the constrained distribution, and the decode masks are not part of the saved weights."""
    tags = ["O", "B-PER", "M-PER", "E-PER", "S-PER"]
    allowed = allowed_transitions(tags, "bmes")
    free = random_crf(len(tags), seed)
    crf = CRF(len(tags), None, "zero", decode_constraints=allowed)
    crf.load_state_dict(free.state_dict())  # same scores; the decode masks are rebuilt, not loaded
    assert not any(k.startswith("decode_") for k in crf.state_dict())
    constrained = random_crf(len(tags), seed, constraints=allowed)
    emissions, _, mask = random_batch(seed, 4, 4, len(tags), scale=3.0)
    assert torch.allclose(crf.log_partition(emissions, mask), free.log_partition(emissions, mask))
    assert crf.decode(emissions, mask) == constrained.decode(emissions, mask)
    paths, _ = crf.nbest(emissions, mask, 3)
    assert torch.equal(paths, constrained.nbest(emissions, mask, 3)[0])
    alpha, beta, log_z = crf.forward_backward(emissions, mask)
    assert torch.allclose(log_z, constrained.log_partition(emissions, mask))
    for b, n in enumerate(mask.sum(1).tolist()):
        _, best, _ = brute_force(constrained, emissions[b, :n], n)
        assert crf.decode(emissions, mask)[b] == best


def test_log_partition_for_decoding_sums_the_decodable_paths() -> None:
    tags = ["O", "B-PER", "M-PER", "E-PER", "S-PER"]
    allowed = allowed_transitions(tags, "bmes")
    crf = CRF(len(tags), None, "normal", decode_constraints=allowed)
    constrained = CRF(len(tags), allowed, "normal")
    constrained.load_state_dict({k: v for k, v in crf.state_dict().items() if not k.endswith("_allowed")}, strict=False)
    emissions, _, mask = random_batch(0, 3, 5, len(tags), scale=2.0)
    emissions = emissions.float()
    assert torch.allclose(crf.log_partition(emissions, mask, decoding=True), constrained.log_partition(emissions, mask))
    assert not torch.allclose(crf.log_partition(emissions, mask), constrained.log_partition(emissions, mask))

import random

import pytest

from zhner.data.schemes import (
    all_tags,
    convert_tags,
    detect_scheme,
    first_violation,
    spans_to_tags,
    split_tag,
    tags_to_spans,
)


def test_split_tag():
    assert split_tag("B-PER") == ("B", "PER")
    assert split_tag("M-PER.NOM") == ("M", "PER.NOM")
    assert split_tag("O") == ("O", "")
    for bad in ("B", "BPER", "B-", "X"):
        with pytest.raises(ValueError):
            split_tag(bad)


@pytest.mark.parametrize(
    "tags,scheme",
    [
        (["B-A", "M-A", "E-A", "O"], "bmes"),
        (["B-A", "I-A", "E-A", "S-B"], "bioes"),
        (["B-A", "I-A", "O"], "bio"),
        (["S-A", "O"], "bmes"),
        (["B-A", "O"], "bio"),
    ],
)
def test_detect_scheme(tags, scheme):
    assert detect_scheme(tags) == scheme


def test_strict_and_lenient_on_malformed_bmes():
    tags = ["O", "M-A", "E-A", "B-A", "M-A", "O", "S-B", "B-A", "E-A", "E-A"]
    assert tags_to_spans(tags, "bmes", strict=True) == [(6, 7, "B"), (7, 9, "A")]
    assert tags_to_spans(tags, "bmes", strict=False) == [(1, 3, "A"), (3, 5, "A"), (6, 7, "B"), (7, 9, "A"), (9, 10, "A")]


def test_bio_orphan_inside():
    tags = ["I-A", "I-A", "O", "B-A", "I-A", "I-B", "B-B"]
    assert tags_to_spans(tags, "bio", strict=True) == [(3, 5, "A"), (6, 7, "B")]
    assert tags_to_spans(tags, "bio", strict=False) == [(0, 2, "A"), (3, 5, "A"), (5, 6, "B"), (6, 7, "B")]


@pytest.mark.parametrize("scheme", ["bio", "bioes", "bmes"])
def test_roundtrip_random_spans(scheme):
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 30)
        spans, i = [], 0
        while i < n:
            if rng.random() < 0.3:
                j = min(n, i + rng.randint(1, 4))
                spans.append((i, j, rng.choice("XYZ")))
                i = j
            else:
                i += 1
        tags = spans_to_tags(n, spans, scheme)
        assert first_violation(tags, scheme) is None
        assert tags_to_spans(tags, scheme, strict=True) == spans
        assert tags_to_spans(tags, scheme, strict=False) == spans
        other = {"bio": "bmes", "bioes": "bio", "bmes": "bioes"}[scheme]
        assert tags_to_spans(convert_tags(tags, scheme, other), other) == spans


def test_first_violation():
    assert first_violation(["B-A", "E-A"], "bmes") is None
    assert first_violation(["O", "E-A"], "bmes") == 1
    assert first_violation(["B-A", "O"], "bmes") == 1
    assert first_violation(["B-A", "M-B", "E-B"], "bmes") == 1
    assert first_violation(["B-A", "M-A"], "bmes") == 1
    assert first_violation(["O", "I-A"], "bio") == 1


def test_spans_to_tags_rejects_overlap_and_out_of_range():
    with pytest.raises(ValueError, match="overlaps"):
        spans_to_tags(5, [(0, 3, "A"), (2, 4, "B")], "bmes")
    with pytest.raises(ValueError, match="outside"):
        spans_to_tags(3, [(1, 5, "A")], "bio")


def test_all_tags():
    assert all_tags(["B", "A"], "bmes") == ["O", "B-A", "M-A", "E-A", "S-A", "B-B", "M-B", "E-B", "S-B"]
    assert all_tags(["A"], "bio") == ["O", "B-A", "I-A"]

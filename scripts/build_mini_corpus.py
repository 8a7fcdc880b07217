"""Build the carried corpus `mini` (zhner/resources/corpus/mini/) from its source, corpus/mini.txt.

The source holds one sentence a line with its entities marked in place, `{张三|PER}在{北京大学|ORG}工作。`; this script
checks every line, splits the sentences into train / dev / test (80 / 10 / 10, a fixed shuffle) and writes them as
`CHAR TAG` BMES files, the layout of the other registered corpora. Run it after editing the source:

    python scripts/build_mini_corpus.py

It prints the sizes and sha256 of the files it writes and puts the sha256 values and sentence counts into the
catalogue's entry (zhner/data/catalogue.py); tests/test_mini_corpus.py checks that files, catalogue and source agree.
"""
from __future__ import annotations

import hashlib
import random
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CATALOGUE = REPO / "zhner" / "data" / "catalogue.py"
SOURCE = REPO / "corpus" / "mini.txt"
OUT = REPO / "zhner" / "resources" / "corpus" / "mini"
TYPES = ("PER", "LOC", "ORG")
MARK = re.compile(r"\{([^{}|]+)\|([A-Z]+)\}")
SPLIT_SEED = 20261128
FRACTIONS = {"dev": 0.1, "test": 0.1}  # the rest is train


def parse(line: str, where: str) -> tuple[str, list[tuple[int, int, str]]]:
    """A marked-up line as (text, [(start, end, type)]); a ValueError naming `where` for anything malformed."""
    text, entities, pos = "", [], 0
    for m in MARK.finditer(line):
        if m.group(2) not in TYPES:
            raise ValueError(f"{where}: unknown type {m.group(2)!r} (expected {', '.join(TYPES)})")
        text += line[pos:m.start()]
        start = len(text)
        text += m.group(1)
        entities.append((start, len(text), m.group(2)))
        pos = m.end()
    text += line[pos:]
    if any(c in text for c in "{}|") or any(c.isspace() for c in text):
        raise ValueError(f"{where}: stray markup or whitespace in {line!r}")
    return text, entities


def bmes(text: str, entities: list[tuple[int, int, str]]) -> list[str]:
    tags = ["O"] * len(text)
    for start, end, kind in entities:
        if end - start == 1:
            tags[start] = f"S-{kind}"
            continue
        tags[start] = f"B-{kind}"
        tags[start + 1:end - 1] = [f"M-{kind}"] * (end - start - 2)
        tags[end - 1] = f"E-{kind}"
    return [f"{c} {t}" for c, t in zip(text, tags)]


def read_source(path: Path = SOURCE) -> list[tuple[str, list[tuple[int, int, str]]]]:
    sentences, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        text, entities = parse(line.strip(), f"{path}:{number}")
        if text in seen:
            raise ValueError(f"{path}:{number}: the sentence is already in the corpus")
        seen.add(text)
        sentences.append((text, entities))
    return sentences


def split(sentences: list) -> dict[str, list]:
    order = list(range(len(sentences)))
    random.Random(SPLIT_SEED).shuffle(order)
    n_dev, n_test = (round(len(order) * FRACTIONS[s]) for s in ("dev", "test"))
    parts = {"dev": order[:n_dev], "test": order[n_dev:n_dev + n_test], "train": order[n_dev + n_test:]}
    return {name: [sentences[i] for i in sorted(idx)] for name, idx in parts.items()}  # source order within a split


def bmes_file(part: list) -> str:
    return "".join("\n".join(bmes(text, ents)) + "\n\n" for text, ents in part)


def update_catalogue(sha: dict[str, str], sizes: dict[str, int]) -> None:
    """Write the files' sha256 values into `_MINI_SHA` and the split sizes into mini's description."""
    text = CATALOGUE.read_text(encoding="utf-8")
    for name, digest in sha.items():
        text, n = re.subn(rf'(_MINI_SHA = \{{[^}}]*"{name}": ")[0-9a-f]*(")', rf"\g<1>{digest}\g<2>", text)
        assert n == 1, f"no _MINI_SHA entry for {name} in {CATALOGUE}"
    counts = "/".join(str(sizes[s]) for s in ("train", "dev", "test"))
    text, n = re.subn(r"(BMES; )[0-9/]+( sentences\")", rf"\g<1>{counts}\g<2>", text)
    assert n == 1, f"no sentence counts in mini's description in {CATALOGUE}"
    CATALOGUE.write_text(text, encoding="utf-8")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    sha, sizes = {}, {}
    for name, part in split(read_source()).items():
        body = bmes_file(part)
        path = OUT / f"{name}.char.bmes"
        path.write_text(body, encoding="utf-8")
        sha[name], sizes[name] = hashlib.sha256(body.encode("utf-8")).hexdigest(), len(part)
        print(f"{path.relative_to(REPO)}: {len(part)} sentences, {sum(len(e) for _, e in part)} entities, sha256 {sha[name]}")
    update_catalogue(sha, sizes)


if __name__ == "__main__":
    try:
        main()
    except ValueError as exc:
        sys.exit(f"error: {exc}")

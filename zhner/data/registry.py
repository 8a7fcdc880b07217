"""The dataset registry: where the benchmark corpora live, how to verify them, and how to load them.

The catalogue of datasets is `zhner.data.catalogue`; downloading is `zhner.data.download`. This module resolves a
dataset's files on disk, loads them as corpora and verifies them.

Data roots are searched in this order (`data_roots`):
1. an explicit `data_dir` argument;
2. `$ZHNER_DATA`;
3. the checkout's `shared/data`: next to the repository
   (`Path(zhner.__file__).resolve().parents[2] / "shared" / "data"`), and the current directory's `../shared/data`;
4. the user cache, `$ZHNER_CACHE` or `~/.cache/zhner/data` (where `fetch` / `zhner data fetch NAME` downloads to);
5. the corpora the package carries, `zhner/resources/corpus/` (`mini`, a small PER/LOC/ORG corpus written for zhner:
   what `zhner demo` and the test suite train on when no other corpus is reachable).

MSRA, SST-2 and CoLA have no dev split (GLUE's test labels are private, so GLUE's dev file is the registry's test
split, and the test corpus's path says so: " (GLUE dev used as test: ...)"). `load_dataset(..., msra_dev="heldout")` (the default) holds out a deterministic 5% of
train_dev (`HELDOUT_FRACTION`, a shuffle of sentence indices with `random.Random(HELDOUT_SEED)`); `msra_dev="test"`
reproduces the papers' practice of using test as dev, and labels the dev corpus so (its path ends in
" (test used as dev)").

OntoNotes 4 is licensed (LDC2011T03): it has no URL or checksum here. Users point `data_dir` (or `$ZHNER_DATA`) at a
folder holding `train.char.bmes`, `dev.char.bmes` and `test.char.bmes`, or pass that folder to `load_dataset`.
"""
from __future__ import annotations

import logging
import os
import random
from pathlib import Path

from zhner.data.catalogue import DATASETS, ONTONOTES_HOWTO, SPLITS, DatasetFile, DatasetInfo, get_info
from zhner.data.corpus import Corpus, read_corpus
from zhner.data.download import sha256_file, user_cache_dir
from zhner.errors import ZhnerError
from zhner.fileio import utf8_lines

log = logging.getLogger(__name__)

MSRA_DEV_OPTIONS = ("heldout", "test")
HELDOUT_FRACTION = 0.05
HELDOUT_SEED = 42  # random.Random(HELDOUT_SEED).shuffle(list(range(n))); the first round(5% of n) indices are dev
TEST_AS_DEV_LABEL = " (test used as dev)"
CARRIED_ROOT = Path(__file__).resolve().parents[1] / "resources" / "corpus"  # inside the package: always there


# ----------------------------------------------------------------------------------------------------------------
# Data roots and file lookup


def _shared_roots() -> list[Path]:
    """The checkout's `shared/data`: next to the repository holding the package, and `../shared/data` of the cwd."""
    import zhner

    return [
        Path(zhner.__file__).resolve().parents[2] / "shared" / "data",
        Path.cwd().resolve().parent / "shared" / "data",
    ]


def data_roots(explicit: str | Path | None = None) -> list[Path]:
    """The folders searched for dataset files, in order: explicit > $ZHNER_DATA > shared/data > user cache > the
    package's carried corpora.

    Duplicates are dropped. Roots that do not exist (yet) are kept, so error messages can say where we looked;
    an explicit folder that does not exist is a ZhnerError.
    """
    roots: list[Path] = []
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            raise ZhnerError("data folder does not exist (or is not a folder)", path)
        roots.append(path)
    env = os.environ.get("ZHNER_DATA")
    if env:
        roots.append(Path(env).expanduser())
    roots.extend(_shared_roots())
    roots.append(user_cache_dir())
    roots.append(CARRIED_ROOT)
    unique: list[Path] = []
    seen: set[Path] = set()
    for root in roots:
        key = root.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(root)
    return unique


def _candidates(root: Path, dfile: DatasetFile, flat: bool) -> list[Path]:
    """Paths under `root` that may hold `dfile`: the registry layout, and for an explicit folder the bare file name."""
    paths = [root / dfile.relpath]
    if flat:
        paths.append(root / Path(dfile.relpath).name)
    return paths


def find_file(name: str, split: str, data_dir: str | Path | None = None) -> Path:
    """The file of split `split` of dataset `name`, from the first data root that holds it.

    With an explicit `data_dir` the file may also sit directly in it (e.g. `/my/ontonotes/train.char.bmes`).
    """
    info = get_info(name)
    if split not in SPLITS:
        raise ZhnerError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    dfile = info.file(split)
    if dfile is None:
        raise ZhnerError(f"dataset {name!r} has no {split} split (see load_dataset's msra_dev option)")
    roots = data_roots(data_dir)
    looked: list[Path] = []
    for i, root in enumerate(roots):
        for path in _candidates(root, dfile, flat=data_dir is not None and i == 0):
            if path.is_file():
                return path
            looked.append(path)
    where = "; ".join(str(p) for p in looked)
    if info.carried:
        hint = "it is carried inside the zhner package: this installation lacks its files, reinstall zhner"
    elif dfile.url is None:
        hint = ONTONOTES_HOWTO
    else:
        hint = f"download it with `zhner data fetch {name}`, or set $ZHNER_DATA"
    raise ZhnerError(f"{name} {split} file not found (looked in: {where}); {hint}")


# ----------------------------------------------------------------------------------------------------------------
# Loading


def heldout_split(
    corpus: Corpus, fraction: float = HELDOUT_FRACTION, seed: int = HELDOUT_SEED
) -> tuple[Corpus, Corpus]:
    """Split `corpus` into (train, dev): dev is round(fraction * n) sentences picked by a fixed-seed shuffle.

    Both keep the file order of their sentences; `corpus` is left unchanged.
    """
    n = len(corpus)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    dev_idx = set(order[: max(1, round(n * fraction))]) if n >= 2 else set()  # a dev set, however small the corpus
    train = [s for i, s in enumerate(corpus.sentences) if i not in dev_idx]
    dev = [s for i, s in enumerate(corpus.sentences) if i in dev_idx]
    label = f"{fraction:.0%} held out, seed {seed}"
    return (
        Corpus(train, corpus.scheme, f"{corpus.path} (train minus held-out dev: {label})"),
        Corpus(dev, corpus.scheme, f"{corpus.path} (held-out dev: {label})"),
    )


def _fill_dev(train: Corpus, test: Corpus, policy: str, what: str) -> dict[str, Corpus]:
    """Make a dev split for a dataset without one, as `policy` ("heldout" / "test") says."""
    if policy == "test":
        log.warning("%s has no dev split: using TEST as dev (the papers' practice); dev scores are test scores", what)
        dev = Corpus(test.sentences, test.scheme, test.path + TEST_AS_DEV_LABEL)
        return {"train": train, "dev": dev, "test": test}
    new_train, dev = heldout_split(train)
    if not dev:
        too_few = f"no dev split, and {len(train)} train sentence(s) are too few to hold one out: add a dev file"
        raise ZhnerError(too_few, train.path)
    log.info("%s has no dev split: held out %d of %d train sentences as dev (seed %d)",
             what, len(dev), len(train), HELDOUT_SEED)
    return {"train": new_train, "dev": dev, "test": test}


def _check_dev_policy(msra_dev: str) -> None:
    if msra_dev not in MSRA_DEV_OPTIONS:
        raise ZhnerError(f"unknown msra_dev option {msra_dev!r}; expected one of {', '.join(MSRA_DEV_OPTIONS)}")


def load_dataset(
    name_or_path: str | Path,
    data_dir: str | Path | None = None,
    msra_dev: str = "heldout",
    strict: bool = False,
    unit: str = "char",
) -> dict[str, Corpus]:
    """Load a dataset as {"train", "dev", "test"} corpora.

    name_or_path: a registry name (see DATASETS) or a folder holding train/dev/test files (`train.char.bmes`,
        `dev.bmes`, `test.bio`, `train.jsonl`, `valid.txt`, `weiboNER_2nd_conll.train`, ...; see `detect_split_files`).
    msra_dev: for datasets without a dev split (MSRA, or a folder with no dev file): "heldout" (default) holds out a
        deterministic 5% of train as dev; "test" uses the test set as dev, as the papers' code does, and labels it
        (the dev corpus's path ends in " (test used as dev)").
    strict: passed to read_corpus (reject tag sequences that break the scheme).
    unit: for a folder of classification files, "char" (Chinese) or "word" (English); a registered dataset has its own.
    A registered dataset whose test split is something else (GLUE dev) has that said in its test corpus's path.
    """
    _check_dev_policy(msra_dev)
    key = str(name_or_path)
    if key in DATASETS:
        info = DATASETS[key]
        corpora = {f.split: _read_registered(info, f.split, data_dir, strict) for f in info.files}
        if "dev" not in corpora:
            return _fill_dev(corpora["train"], corpora["test"], msra_dev, info.name)
        return {split: corpora[split] for split in SPLITS}
    folder = Path(name_or_path).expanduser()
    try:
        is_folder = folder.is_dir()
    except OSError:  # e.g. a name over the file system's 255 bytes
        is_folder = False
    if not is_folder:
        raise ZhnerError(
            f"{key!r} is neither a known dataset ({', '.join(sorted(DATASETS))}) nor a folder of train/dev/test files"
        )
    files = detect_split_files(folder)
    corpora = {split: read_corpus(path, "auto", None, strict, unit=unit) for split, path in files.items()}
    if "dev" not in corpora:
        return _fill_dev(corpora["train"], corpora["test"], msra_dev, str(folder))
    return {split: corpora[split] for split in SPLITS}


def _read_registered(info: DatasetInfo, split: str, data_dir: str | Path | None, strict: bool) -> Corpus:
    """One split of a registered dataset, its path labelled when the split stands in for another (GLUE dev)."""
    corpus = read_corpus(find_file(info.name, split, data_dir), info.fmt, info.scheme, strict, unit=info.unit)
    if split == "test" and info.test_label:
        corpus = Corpus(corpus.sentences, corpus.scheme, f"{corpus.path} ({info.test_label})")
    return corpus


def dataset_split(data: str, default_split: str = "test") -> tuple[str, str]:
    """DATASET[:SPLIT] as (DATASET, SPLIT), `default_split` where none is named; a SPLIT that is not one is an error
    naming DATA and the splits it could be."""
    name, _, split = data.partition(":")
    if split and split not in SPLITS:
        raise ZhnerError(f"unknown split {split!r}; expected one of {', '.join(f'{name}:{s}' for s in SPLITS)}", data)
    return name, split or default_split


def load_corpus(data: str, unit: str = "char", default_split: str = "test") -> Corpus:
    """What a command's DATA names: one split of a registered dataset (DATASET[:SPLIT], `default_split` where none is
    named), or a corpus file read in the token unit `unit` (a model's). A file of that name wins over a dataset."""
    if Path(data).exists() or data.partition(":")[0] not in DATASETS:
        return read_corpus(data, unit=unit)
    name, split = dataset_split(data, default_split)
    return load_dataset(name)[split]


def raw_texts(source: str, all_splits: bool = False) -> list[str]:
    """The texts of a registered dataset (its train split, or every split), a corpus file, or a .txt file (a text a
    line, blank lines skipped; a line that is not UTF-8 is an error naming it)."""
    if not Path(source).exists() and source in DATASETS:
        splits = load_dataset(source)
        return [ex.text for name, corpus in splits.items() if all_splits or name == "train" for ex in corpus]
    if Path(source).suffix == ".txt":
        return [text for _, line in utf8_lines(source, "a text file") if (text := line.strip())]
    return [ex.text for ex in read_corpus(source)]


# Split aliases, and the file-name patterns of a split's file (`{}` = the alias); a split matched by two files, by one
# pattern or by two (train.char.bmes and train.bmes), is an error naming them.
_SPLIT_ALIASES = {"train": ("train", "train_dev"), "dev": ("dev", "valid", "val", "development"), "test": ("test",)}
_PATTERNS = (
    "{}.char.bmes",
    "{}.bmes",
    "{}.bioes",
    "{}.bio",
    "{}.jsonl",
    "{}.json",
    "{}.txt",
    "{}.conll",
    "{}.tsv",
    "{}",
    "*.{}",  # weiboNER_2nd_conll.train
    "{}.*.bmes",  # train.all.bmes
)


def detect_split_files(folder: str | Path) -> dict[str, Path]:
    """Find the train/dev/test files in `folder` (dev may be missing); ZhnerError when train or test is, or a
    pattern matches several files."""
    folder = Path(folder)
    found: dict[str, Path] = {}
    for split, aliases in _SPLIT_ALIASES.items():
        hits = {p for pattern in _PATTERNS for alias in aliases for p in folder.glob(pattern.format(alias))}
        matches = sorted(p for p in hits if p.is_file() and not p.name.startswith("."))
        if len(matches) > 1:
            names = ", ".join(p.name for p in matches)
            raise ZhnerError(f"several {split} files ({names}); keep one, or pass each file explicitly", folder)
        if matches:
            found[split] = matches[0]
    missing = [s for s in ("train", "test") if s not in found]
    if missing:
        raise ZhnerError(
            f"no {' or '.join(missing)} file found (expected names like train.char.bmes, dev.bio, test.jsonl)", folder
        )
    return found


# ----------------------------------------------------------------------------------------------------------------
# Verification


def check(name: str, data_dir: str | Path | None = None) -> list[dict]:
    """Verify a dataset's files. One dict per file:

    split, relpath, path (str, or None when not found), status ("ok" / "mismatch" / "missing", or "unverified" for a
    file without a registered digest), sha256 (actual, or None), expected, sentences (count, or None), error (a
    message when the file could not be read as a corpus, else None).
    """
    info = get_info(name)
    report = []
    for dfile in info.files:
        row = {
            "split": dfile.split,
            "relpath": dfile.relpath,
            "path": None,
            "status": "missing",
            "sha256": None,
            "expected": dfile.sha256,
            "sentences": None,
            "error": None,
        }
        try:
            path = find_file(name, dfile.split, data_dir)
        except ZhnerError:
            report.append(row)
            continue
        actual = sha256_file(path)
        row.update(path=str(path), sha256=actual)
        if dfile.sha256 is None:
            row["status"] = "unverified"
        else:
            row["status"] = "ok" if actual == dfile.sha256 else "mismatch"
        try:
            row["sentences"] = len(read_corpus(path, info.fmt, info.scheme, unit=info.unit))
        except ZhnerError as exc:
            row["error"] = str(exc)
        report.append(row)
    return report

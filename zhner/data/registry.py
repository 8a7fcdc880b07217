"""The dataset registry: where the benchmark corpora live, how to verify them, and how to load them.

Each registered dataset names its files relative to a *data root*, laid out as in the project's `shared/data` folder
(`resume_ner/train.char.bmes`, `weibo_ner/bmes/train.all.bmes`, ...), with a sha256 and a public source URL per file.

Data roots are searched in this order (`data_roots`):
1. an explicit `data_dir` argument;
2. `$ZHNER_DATA`;
3. the checkout's `shared/data`: next to the repository
   (`Path(zhner.__file__).resolve().parents[2] / "shared" / "data"`), and the current directory's `../shared/data`;
4. the user cache, `$ZHNER_CACHE` or `~/.cache/zhner/data` (where `fetch` / `zhner data fetch NAME` downloads to).

MSRA has no dev split. `load_dataset(..., msra_dev="heldout")` (the default) holds out a deterministic 5% of
train_dev (`HELDOUT_FRACTION`, a shuffle of sentence indices with `random.Random(HELDOUT_SEED)`); `msra_dev="test"`
reproduces the papers' practice of using test as dev, and labels the dev corpus so (its path ends in
" (test used as dev)").

OntoNotes 4 is licensed (LDC2011T03): it has no URL or checksum here. Users point `data_dir` (or `$ZHNER_DATA`) at a
folder holding `train.char.bmes`, `dev.char.bmes` and `test.char.bmes`, or pass that folder to `load_dataset`.
"""
from __future__ import annotations

import hashlib
import logging
import os
import random
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from zhner.data.corpus import Corpus, read_corpus
from zhner.errors import ZhnerError
from zhner.fileio import atomic_open

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
MSRA_DEV_OPTIONS = ("heldout", "test")
HELDOUT_FRACTION = 0.05
HELDOUT_SEED = 42  # random.Random(HELDOUT_SEED).shuffle(list(range(n))); the first round(5% of n) indices are dev
TEST_AS_DEV_LABEL = " (test used as dev)"


@dataclass(frozen=True)
class DatasetFile:
    """One file of a dataset: its split, its path relative to a data root, its sha256 and public source URL."""

    split: str
    relpath: str
    sha256: str | None
    url: str | None


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset. `fmt` and `scheme` are what `read_corpus` is given for its files."""

    name: str
    description: str
    files: tuple[DatasetFile, ...]
    fmt: str
    scheme: str
    citation: str
    licence: str
    has_dev: bool

    def file(self, split: str) -> DatasetFile | None:
        """The file of `split`, or None when the dataset has none (MSRA's dev)."""
        return next((f for f in self.files if f.split == split), None)


def _raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_LATTICE = ("jiesutd/LatticeLSTM", "24d17f4270f11d2f75046789d8b67eaa2b907dce")
_NER_DATA = ("orangeecc/NER_data", "72c0e71237d8897df7a25eafc3aa0648ed89c84b")
_GOLDEN_HORSE = ("hltcoe/golden-horse", "7a73c08e45ed94312af4ef2d97cc35a47d029e99")
_MSRA_IE = ("12190143/IE", "09843c872a194e2df960ca87d9655aa6e39d3dbf")

_WEIBO_CITATION = (
    "Nanyun Peng and Mark Dredze. 2015. Named Entity Recognition for Chinese Social Media with Jointly Trained "
    "Embeddings. EMNLP 2015. Revised annotations: Hangfeng He and Xu Sun. 2016. F-Score Driven Max Margin Neural "
    "Network for Named Entity Recognition in Chinese Social Media. arXiv:1611.04234."
)
_WEIBO_LICENCE = (
    "Annotations CC BY-SA 3.0 (hltcoe/golden-horse README); the messages follow Weibo's terms of service. "
    "The BMES conversion (orangeecc/NER_data) carries no licence of its own."
)

# sha256 per file, from each dataset's shared/data PROVENANCE.md.
_WEIBO_BMES_SHA = {
    "all": {
        "train": "7a55b503854caba99452660d03219d2f1f7b86611b4a63d1c7dff344f9a10ae8",
        "dev": "d262f07ec356ebfaf5d4201deff0cf8f230fe3b2e3921d426a5b7c08264a9ffd",
        "test": "8442b6c64946d1f625926eef9597083cc91ec0e9f5e6f96ae06977380a9d09ce",
    },
    "ne": {
        "train": "73bf81c33e039d25ea3642454e3cdc569d7488c400cffc9ce6f2e0cf2a8b2e2b",
        "dev": "8fdca776c6e4e45f875006d659ace0fca7c1a4396f943062737b4115e33b0d49",
        "test": "b5466f239ec8d1923bd2218583db8d0e01983a58086d8255ab056b78f034bb75",
    },
    "nm": {
        "train": "e10f25b7eb22954c7b4a6c41eeaccc32b7d922bbcf08c3a4f89993b4f7db11cf",
        "dev": "6710cadcdcae1c7c3aeb5e332f9a0fa0ab87b79cabcfce5d0f0add7dca2ff8d9",
        "test": "a2f62129a4c9649795525d253ef3bb3d5febaef5299ebe1c83a3cfbf4eb2d5b4",
    },
}


def _weibo_bmes(variant: str, what: str) -> DatasetInfo:
    name = "weibo" if variant == "all" else f"weibo-{variant}"
    files = tuple(
        DatasetFile(
            split,
            f"weibo_ner/bmes/{split}.{variant}.bmes",
            _WEIBO_BMES_SHA[variant][split],
            _raw(*_NER_DATA, f"WeiboNER/{split}.{variant}.bmes"),
        )
        for split in SPLITS
    )
    return DatasetInfo(
        name=name,
        description=f"Weibo NER (revised 2nd version), BMES, {what}; 1350/270/270 messages",
        files=files,
        fmt="conll",
        scheme="bmes",
        citation=_WEIBO_CITATION,
        licence=_WEIBO_LICENCE,
        has_dev=True,
    )


DATASETS: dict[str, DatasetInfo] = {
    "resume": DatasetInfo(
        name="resume",
        description="Resume NER (Sina Finance resumes), BMES, 8 types; 3821/463/477 sentences",
        files=tuple(
            DatasetFile(split, f"resume_ner/{split}.char.bmes", sha, _raw(*_LATTICE, f"ResumeNER/{split}.char.bmes"))
            for split, sha in (
                ("train", "93b9bb0be5dd4730121587f9dc1378de3fbbe55cba1c575edec271f822c27be7"),
                ("dev", "1b0d67153e6e8543e9444936ed1b107bd843078c282533898085e1a9aa293952"),
                ("test", "c4a9f42622819a4b59f66e184d446ebfa89b2f1dbba06e11d70675e59fe7e79b"),
            )
        ),
        fmt="conll",
        scheme="bmes",
        citation="Yue Zhang and Jie Yang. 2018. Chinese NER Using Lattice LSTM. ACL 2018.",
        licence="No licence file upstream (jiesutd/LatticeLSTM); research use, cite Zhang & Yang (2018).",
        has_dev=True,
    ),
    "weibo": _weibo_bmes("all", "named and nominal mentions (the set papers report)"),
    "weibo-ne": _weibo_bmes("ne", "named mentions only"),
    "weibo-nm": _weibo_bmes("nm", "nominal mentions only"),
    "weibo-original": DatasetInfo(
        name="weibo-original",
        description="Weibo NER, revised 2nd version as released (CHARn<TAB>TAG, BIO, 8 types); 1350/270/270 messages",
        files=tuple(
            DatasetFile(
                split,
                f"weibo_ner/original_2nd_conll/weiboNER_2nd_conll.{split}",
                sha,
                _raw(*_GOLDEN_HORSE, f"data/weiboNER_2nd_conll.{split}"),
            )
            for split, sha in (
                ("train", "4e8954c54ab33b0afc9a8abb85715c47422645cc6d1b49fdb24540f4a427e997"),
                ("dev", "e72730d83aac680505280b6301c879b3ba470d29ac308979d48cdc58ee4907cc"),
                ("test", "faaf6c0ebde5348b935cfd5c89f0f22c9e0779d60667d8b5efbc647b6707d50e"),
            )
        ),
        fmt="weibo",
        scheme="bio",
        citation=_WEIBO_CITATION,
        licence=_WEIBO_LICENCE,
        has_dev=True,
    ),
    "msra": DatasetInfo(
        name="msra",
        description=(
            "MSRA NER (SIGHAN 2006), canonical Lattice/FLAT split, BMES, NR/NS/NT; train_dev 46364 / test 4365 "
            "sentences, no dev split (see load_dataset's msra_dev)"
        ),
        files=(
            DatasetFile(
                "train",
                "msra_ner/train_dev.char.bmes",
                "98a5c331fa6e3e51858a3b9f98ae618b253947aaf7f39f9f51a3a8caa171431e",
                _raw(*_MSRA_IE, "data/MSRANER/train_dev.char.bmes"),
            ),
            DatasetFile(
                "test",
                "msra_ner/test.char.bmes",
                "9cebc5ce1ea06477d1230d17be90daafa670e78f07eb628c27103af4a6e6dc3b",
                _raw(*_MSRA_IE, "data/MSRANER/test.char.bmes"),
            ),
        ),
        fmt="conll",
        scheme="bmes",
        citation=(
            "Gina-Anne Levow. 2006. The Third International Chinese Language Processing Bakeoff: Word Segmentation "
            "and Named Entity Recognition. SIGHAN 2006."
        ),
        licence="No licence file upstream (12190143/IE); SIGHAN 2006 bakeoff data, distributed for research use.",
        has_dev=False,
    ),
    "ontonotes4": DatasetInfo(
        name="ontonotes4",
        description=(
            "OntoNotes 4.0 Chinese NER (PER/LOC/ORG/GPE), BMES, the Che et al. 2013 / Zhang & Yang 2018 split; "
            "licensed, user-supplied files only"
        ),
        files=tuple(DatasetFile(split, f"ontonotes4/{split}.char.bmes", None, None) for split in SPLITS),
        fmt="conll",
        scheme="bmes",
        citation=(
            "Ralph Weischedel et al. 2011. OntoNotes Release 4.0. LDC2011T03. Linguistic Data Consortium. "
            "Split: Wanxiang Che et al. 2013 (NAACL), as used by Zhang & Yang (2018)."
        ),
        licence="Licensed by the LDC (LDC2011T03); not redistributable. Use your own licensed copy.",
        has_dev=True,
    ),
}

_ONTONOTES_HOWTO = (
    "OntoNotes 4.0 is licensed by the LDC (LDC2011T03) and cannot be downloaded by zhner. If you hold a licence, "
    "put train.char.bmes, dev.char.bmes and test.char.bmes (CHAR TAG, BMES) in a folder and either pass that folder "
    "(load_dataset('/path/to/folder') or data_dir='/path/to/folder'), or place it as ontonotes4/ under $ZHNER_DATA."
)


def get_info(name: str) -> DatasetInfo:
    """The registry entry of `name`; a ZhnerError listing the known names for an unknown one."""
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        raise ZhnerError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}") from None


# ----------------------------------------------------------------------------------------------------------------
# Data roots and file lookup


def user_cache_dir() -> Path:
    """Where `fetch` downloads to by default: `$ZHNER_CACHE` or `~/.cache/zhner/data`."""
    env = os.environ.get("ZHNER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "zhner" / "data"


def _shared_roots() -> list[Path]:
    """The checkout's `shared/data`: next to the repository holding the package, and `../shared/data` of the cwd."""
    import zhner

    return [
        Path(zhner.__file__).resolve().parents[2] / "shared" / "data",
        Path.cwd().resolve().parent / "shared" / "data",
    ]


def data_roots(explicit: str | Path | None = None) -> list[Path]:
    """The folders searched for dataset files, in order: explicit > $ZHNER_DATA > shared/data > user cache.

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
    hint = _ONTONOTES_HOWTO if dfile.url is None else f"download it with `zhner data fetch {name}`, or set $ZHNER_DATA"
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
    dev_idx = set(order[: round(n * fraction)])
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
) -> dict[str, Corpus]:
    """Load a dataset as {"train", "dev", "test"} corpora.

    name_or_path: a registry name (see DATASETS) or a folder holding train/dev/test files (`train.char.bmes`,
        `dev.bmes`, `test.bio`, `train.jsonl`, `valid.txt`, `weiboNER_2nd_conll.train`, ...; see `detect_split_files`).
    msra_dev: for datasets without a dev split (MSRA, or a folder with no dev file): "heldout" (default) holds out a
        deterministic 5% of train as dev; "test" uses the test set as dev, as the papers' code does, and labels it
        (the dev corpus's path ends in " (test used as dev)").
    strict: passed to read_corpus (reject tag sequences that break the scheme).
    """
    _check_dev_policy(msra_dev)
    key = str(name_or_path)
    if key in DATASETS:
        info = DATASETS[key]
        corpora = {
            f.split: read_corpus(find_file(info.name, f.split, data_dir), info.fmt, info.scheme, strict)
            for f in info.files
        }
        if "dev" not in corpora:
            return _fill_dev(corpora["train"], corpora["test"], msra_dev, info.name)
        return {split: corpora[split] for split in SPLITS}
    folder = Path(name_or_path).expanduser()
    if not folder.is_dir():
        raise ZhnerError(
            f"{key!r} is neither a known dataset ({', '.join(sorted(DATASETS))}) nor a folder of train/dev/test files"
        )
    files = detect_split_files(folder)
    corpora = {split: read_corpus(path, "auto", None, strict) for split, path in files.items()}
    if "dev" not in corpora:
        return _fill_dev(corpora["train"], corpora["test"], msra_dev, str(folder))
    return {split: corpora[split] for split in SPLITS}


# Split aliases, and file-name patterns tried in order (`{}` = the alias); the first pattern that matches wins.
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
        for pattern in _PATTERNS:
            hits = {p for alias in aliases for p in folder.glob(pattern.format(alias))}
            matches = sorted(p for p in hits if p.is_file() and not p.name.startswith("."))
            if len(matches) > 1:
                names = ", ".join(p.name for p in matches)
                raise ZhnerError(f"several {split} files ({names}); keep one, or pass each file explicitly", folder)
            if matches:
                found[split] = matches[0]
                break
    missing = [s for s in ("train", "test") if s not in found]
    if missing:
        raise ZhnerError(
            f"no {' or '.join(missing)} file found (expected names like train.char.bmes, dev.bio, test.jsonl)", folder
        )
    return found


# ----------------------------------------------------------------------------------------------------------------
# Verification and download


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
            row["sentences"] = len(read_corpus(path, info.fmt, info.scheme))
        except ZhnerError as exc:
            row["error"] = str(exc)
        report.append(row)
    return report


def fetch(
    name: str, cache_dir: Path | None = None, base_url: str | None = None, timeout: float = 30
) -> list[Path]:
    """Download a dataset's files into `cache_dir` (default: the user cache), verifying each sha256.

    Each file streams into a temporary file next to its target and is renamed into place only when its digest
    matches; a mismatch or a failed download is a ZhnerError and leaves no file behind. A file already present with
    the right digest is not downloaded again. `base_url` (a mirror, or a test server) replaces the source URL:
    the file is fetched from f"{base_url}/{relpath}". Returns the paths of all the dataset's files.
    """
    info = get_info(name)
    if any(f.url is None for f in info.files):
        raise ZhnerError(f"{name} cannot be fetched: {_ONTONOTES_HOWTO}")
    root = Path(cache_dir).expanduser() if cache_dir is not None else user_cache_dir()
    paths = []
    for dfile in info.files:
        target = root / dfile.relpath
        if target.is_file() and dfile.sha256 is not None and sha256_file(target) == dfile.sha256:
            log.info("%s: already present and verified", target)
        else:
            url = f"{base_url.rstrip('/')}/{dfile.relpath}" if base_url else dfile.url
            assert url is not None
            _download(url, target, dfile, timeout)
        paths.append(target)
    return paths


def _download(url: str, target: Path, dfile: DatasetFile, timeout: float) -> None:
    """Stream `url` to `target` through a temporary file; keep it only if its sha256 is the expected one."""
    # Folders we create, so a failed download can remove them again (deepest first).
    created = [p for p in [target.parent, *target.parent.parents] if not p.exists()]
    log.info("downloading %s -> %s", url, target)
    request = urllib.request.Request(url, headers={"User-Agent": "zhner"})
    hint = "check the network, pass base_url=<a mirror>, or copy the file there by hand"
    try:
        # A fresh opener reads the proxy settings of the environment at call time.
        with urllib.request.build_opener().open(request, timeout=timeout) as response:
            with atomic_open(target, "wb") as out:
                digest = hashlib.sha256()
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    digest.update(chunk)
                    out.write(chunk)
                actual = digest.hexdigest()
                if dfile.sha256 is not None and actual != dfile.sha256:
                    # Raising inside atomic_open discards the temporary file.
                    raise ZhnerError(
                        f"sha256 mismatch for {dfile.relpath}: expected {dfile.sha256}, got {actual}; "
                        "the download was discarded",
                        url,
                    )
    except ZhnerError:
        _remove_empty(created)
        raise
    except urllib.error.HTTPError as exc:
        _remove_empty(created)
        raise ZhnerError(f"download of {dfile.relpath} failed: HTTP {exc.code} {exc.reason}; {hint}", url) from None
    except urllib.error.URLError as exc:
        _remove_empty(created)
        raise ZhnerError(f"download of {dfile.relpath} failed: {exc.reason}; {hint}", url) from None
    except (OSError, ValueError) as exc:  # timeouts, resets, malformed URLs
        _remove_empty(created)
        raise ZhnerError(f"download of {dfile.relpath} failed: {exc}; {hint}", url) from None
    log.info("%s: verified (sha256 %s)", target, dfile.sha256)


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            return

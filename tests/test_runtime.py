"""zhner.runtime, the torch-free ONNX tagger: its lexicon matching, CRF decoding and features equal the PyTorch path's,
an exported model tags like Tagger (entities and confidences, long text included), and it runs in a virtual
environment where torch cannot be imported."""
import json
import os
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest
import torch

from conftest import MINI, REPO
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.lexicon.lexicon import Lexicon
from zhner.nn.crf import CRF, allowed_transitions
from zhner.decoding import BatchCRF
from zhner.runtime.matcher import WordMatcher
from zhner.tagger import Tagger, default_model_dir
from zhner.train.trainer import train

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
from zhner.export import export_onnx  # noqa: E402
from zhner.runtime import RuntimeTagger  # noqa: E402

# FLAT with a word vocabulary (words + bigrams): the runtime's richest inputs. Every other exported model's runtime
# inputs (TENER's normalised digits and LAC's features, NFLAT, ATSSA, BiLSTM-CRF) are checked against PyTorch on the
# sentences of mini by tests/test_export.py.
TINY = {"flat_resume": ["model.heads=2", "model.head_dim=8", "model.word_embedding=table"]}
TEXTS = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作，电话010-12345678。", "", "王五生于广州市。"]


def test_word_matcher_finds_what_the_lexicon_finds():
    from zhner.data.registry import load_dataset

    lexicon = Lexicon.load(default_model_dir() / "lexicon.txt")
    matcher = WordMatcher.load(default_model_dir() / "lexicon.txt")
    mini = load_dataset("mini")
    texts = [s.text for s in (mini["test"].sentences + mini["dev"].sentences)[:200]] + ["", "中华人民共和国国务院总理", "ab"]
    assert sum(len(lexicon.match(t)) for t in texts) > 1000
    assert [matcher.match(t) for t in texts] == [lexicon.match(t) for t in texts]


def test_span_probabilities_equal_the_crf():
    g = torch.Generator().manual_seed(0)
    tags = ["O", "B-A", "I-A", "B-B", "I-B"]
    crf = CRF(len(tags), constraints=allowed_transitions(tags, "bio"), init="normal")
    emissions = torch.randn(1, 7, len(tags), generator=g) * 2
    mask = torch.ones(1, 7, dtype=torch.bool)
    queries = [(0, 0, [1, 2]), (0, 3, [0]), (0, 2, [3, 4, 4, 0]), (0, 6, [1])]
    expected = crf.subpath_log_probs(emissions, mask, queries).tolist()
    start, trans, end = (t.detach().numpy() for t in crf.scores(decoding=True))
    batch = BatchCRF(emissions.numpy(), [7], start, trans, end)
    assert batch.subpath_log_probs(queries).tolist() == pytest.approx(expected, abs=1e-4)


@pytest.fixture(scope="module", params=list(TINY))
def exported(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "model"
    # 200 of mini's sentences, 4 epochs (with 2 the model tags no entity yet)
    common = [*MINI, "data.max_train_sentences=200", "data.max_eval_sentences=20", "train.epochs=4", "train.batch_size=10",
              "train.optimizer=adamw", "train.lr=0.005"]
    train(load_config(resolve_config(request.param), TINY[request.param] + common), out, log=lambda _: None)
    tagger = Tagger.load(out)
    export_onnx(tagger, out / "model.onnx")
    return out, tagger


def test_runtime_tags_like_pytorch(exported):
    from zhner.data.registry import load_dataset

    out, tagger = exported
    mini = load_dataset("mini").values()  # all of mini: more characters than Resume's test set, which this test used
    texts = [s.text for corpus in mini for s in corpus.sentences] + TEXTS
    texts.append("。".join(texts[:40]) + "".join(texts[40:45]) * 3)  # a long line: cut at sentence ends, then windows
    assert len(texts[-1]) > 3 * tagger.piece_chars()
    runtime = RuntimeTagger.load(out)
    assert runtime.piece_chars() == tagger.piece_chars()
    expected, got = tagger.predict(texts, confidence=False), runtime.predict(texts, batch_size=7)
    gold = sum(len(spans) for corpus in mini for spans in corpus.spans())
    assert sum(map(len, expected)) > gold / 5  # a model that tags entities, so that equality means something
    assert got == expected


def test_runtime_confidences_equal_pytorch(exported):
    out, tagger = exported
    expected = tagger.predict(TEXTS, confidence=True)
    got = RuntimeTagger.load(out).predict(TEXTS, confidence=True)
    strip = lambda rows: [[{k: v for k, v in e.items() if k != "score"} for e in row] for row in rows]  # noqa: E731
    assert strip(got) == strip(expected) and sum(map(len, got)) > 0
    for row_got, row_expected in zip(got, expected):
        for a, b in zip(row_got, row_expected):
            assert a["score"] == pytest.approx(b["score"], abs=2e-4)


def test_a_model_without_a_graph_is_exported_once_into_the_cache(exported, tmp_path, monkeypatch):
    """load_runtime on a directory without model.onnx (as the shipped models) exports its graph into $ZHNER_CACHE on
    first use, reads it from there afterwards, and a changed model gets a graph of its own."""
    import shutil

    from zhner.export import cache_graph
    from zhner.runtime import load_runtime
    from zhner.runtime.cache import cached_graph

    out, tagger = exported
    bare = tmp_path / "bare"
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("model.onnx"))
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "cache"))
    _, path = cached_graph(bare)
    assert not path.exists() and path.is_relative_to(tmp_path / "cache")
    with pytest.raises(ZhnerError, match="no exported graph for this model in the cache yet"):
        load_runtime(str(bare))  # the runtime alone never imports torch, so it cannot export
    assert cache_graph(str(bare)) == path
    runtime = load_runtime(str(bare))
    assert path.is_file() and runtime.predict(TEXTS) == tagger.predict(TEXTS, confidence=False)
    made = path.stat().st_mtime_ns
    cache_graph(str(bare))
    load_runtime(str(bare))
    assert path.stat().st_mtime_ns == made and not list(path.parent.glob(".*"))  # read back; no partial file left
    import zhner.runtime.cache

    monkeypatch.setattr(zhner.runtime.cache, "PIECE_CHARS", 128)  # the graph records where text is cut: a new one
    assert cached_graph(bare)[1] != path
    monkeypatch.undo()
    monkeypatch.setenv("ZHNER_CACHE", str(tmp_path / "cache"))
    (bare / "config.yaml").write_text((bare / "config.yaml").read_text() + "\n")
    assert cached_graph(bare)[1] != path  # another model: another graph
    assert cached_graph(out)[1] == out / "model.onnx"  # a directory's own graph is used as it is


def test_runtime_errors(exported, tmp_path):
    out, _ = exported
    with pytest.raises(ZhnerError, match="no such model directory"):
        RuntimeTagger.load(tmp_path / "missing")
    (tmp_path / "vocab.json").write_text(json.dumps({"format": 2, "fields": {"syntax": {}}, "task": {
        "kind": "tagging", "labels": ["O"], "scheme": "bio"}}))
    with pytest.raises(ZhnerError, match="reads syntax, which the torch-free runtime does not build"):
        RuntimeTagger.load(tmp_path)
    with pytest.raises(ZhnerError, match="no such ONNX file"):
        RuntimeTagger.load(out, tmp_path / "none.onnx")
    with pytest.raises(TypeError, match="a single str"):
        RuntimeTagger.load(out).predict("张三")


def _with_dependencies(names: tuple[str, ...]) -> set[str]:
    """The installed distributions `names` and everything they require (markers evaluated, extras left out)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _top_level(distribution_name: str) -> set[str]:
    """The top-level modules and directories a distribution installed (its .dist-info left out)."""
    from importlib.metadata import distribution

    tops = set()
    for file in distribution(distribution_name).files or []:
        top = file.parts[0]
        if not top.endswith((".dist-info", ".pth")) and top != ".." and not top.startswith("__"):
            tops.add(top)
    return tops


def _torch_free_venv(where: Path, packages: tuple[str, ...] = ("numpy", "onnxruntime")) -> Path:
    """A venv (no pip) whose only packages are `packages` and their dependencies, and this checkout's zhner: a
    directory of symlinks to them, put on the path by a .pth file. Returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    exposed = where / "exposed"
    exposed.mkdir()
    site = Path(torch.__file__).parents[1]  # the test environment's site-packages
    dists = _with_dependencies(packages)
    assert "torch" not in dists and "onnxruntime" in dists
    for name in sorted({top for dist in dists for top in _top_level(dist)}):
        if (site / name).exists() and not (exposed / name).exists():
            (exposed / name).symlink_to(site / name)
    (exposed / "zhner").symlink_to(REPO / "zhner")
    (site_dir,) = where.glob("lib/python*/site-packages")
    (site_dir / "exposed.pth").write_text(f"{exposed}\n")
    return where / "bin" / "python"


def _torch_free_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run_torch_free(python: Path, script: str, cwd: Path):
    """`script` run by the torch-free venv's python with TEXTS as JSON on stdin; what it printed, read as JSON."""
    res = subprocess.run([str(python), "-c", script], input=json.dumps(TEXTS), capture_output=True, text=True,
                         env=_torch_free_env(), cwd=cwd)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_runtime_runs_without_torch(exported, tmp_path):
    out, tagger = exported
    python = _torch_free_venv(tmp_path / "venv", ("numpy", "onnxruntime", "jieba"))
    script = (
        "import json, sys\n"
        "try:\n    import torch\nexcept ImportError:\n    pass\nelse:\n    sys.exit('torch is importable')\n"
        "from zhner.runtime import RuntimeTagger\n"
        "from zhner.pretrained.lac import char_features, load_lac_model\n"  # LAC's features (zh-accurate) need no torch
        "assert char_features(load_lac_model(), [list('张三在北京')], 'lac')[0].shape == (5, 256)\n"
        f"print(json.dumps(RuntimeTagger.load({str(out)!r}).predict(json.loads(sys.stdin.read()), confidence=True)))\n"
        "assert not any(m == 'torch' or m.startswith(('torch.', 'zhner.models', 'zhner.nn', 'zhner.train'))"
        " for m in sys.modules), sorted(sys.modules)\n"
    )
    got = _run_torch_free(python, script, tmp_path)
    expected = tagger.predict(TEXTS, confidence=True)
    assert [[(e["start"], e["end"], e["type"]) for e in row] for row in got] == [
        [(e["start"], e["end"], e["type"]) for e in row] for row in expected]


CLI_PACKAGES = ("numpy", "onnxruntime", "typer", "tqdm")  # zhner's CLI needs typer, predict's progress bar tqdm


def test_cli_predicts_with_the_runtime_without_torch(exported, tmp_path):
    """`zhner predict --runtime onnx` in the torch-free venv (plus the CLI's own packages) prints what the PyTorch
    path prints, confidences included."""
    out, _ = exported
    python = _torch_free_venv(tmp_path / "venv", CLI_PACKAGES)
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    env = _torch_free_env()
    args = ["-m", "zhner.cli", "predict", str(tmp_path / "in.txt"), "-m", str(out), "--confidence"]
    res = subprocess.run([str(python), *args, "--runtime", "onnx"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    expected = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO)
    assert expected.returncode == 0, expected.stderr
    assert res.stdout == expected.stdout and res.stdout.count("\n") == len(TEXTS)


def test_cli_runtime_refuses_what_it_cannot_do(exported):
    out, _ = exported
    res = subprocess.run([sys.executable, "-m", "zhner.cli", "predict", "-m", str(out), "--runtime", "onnx", "--nbest", "2",
                          "--text", "张三"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode != 0 and res.stderr.strip() == (
        "error: --nbest: not with --runtime onnx (the exported graph runs on the CPU, its long-text pieces fixed at "
        "export); use --runtime torch")


def test_piece_length_comes_from_the_graphs_metadata(exported, tmp_path):
    """An export records Tagger.piece_chars(); a graph exported before that cuts at Tagger's default, 512; a value
    that is not a length is an error naming the file."""
    import onnx

    out, tagger = exported
    graph = onnx.load(str(out / "model.onnx"))
    assert {p.key: p.value for p in graph.metadata_props} == {"zhner.piece_chars": str(tagger.piece_chars())}
    del graph.metadata_props[:]
    onnx.save(graph, str(tmp_path / "old.onnx"))
    assert RuntimeTagger.load(out, tmp_path / "old.onnx").piece_chars() == 512
    onnx.helper.set_model_props(graph, {"zhner.piece_chars": "many"})
    onnx.save(graph, str(tmp_path / "bad.onnx"))
    with pytest.raises(ZhnerError, match=r"bad.onnx: malformed metadata zhner.piece_chars='many'"):
        RuntimeTagger.load(out, tmp_path / "bad.onnx")


def test_a_lattice_model_on_bert_cuts_text_at_the_encoders_window(tiny_sp_bert, tmp_path):
    """FLAT + a BERT encoder: a piece of text is at most one BERT window (here 62 of 64 positions), so the exported
    graph, which takes one window, gets pieces it can take, and the runtime tags long text as PyTorch does."""
    from zhner.data.registry import load_dataset

    overrides = [*MINI, "data.max_train_sentences=60", "data.max_eval_sentences=10", "train.epochs=1", "train.batch_size=10",
                 f"model.bert={tiny_sp_bert}", "model.heads=2", "model.head_dim=8"]
    train(load_config(resolve_config("flat_e5_resume"), overrides), tmp_path, log=lambda _: None)
    tagger = Tagger.load(tmp_path)
    assert tagger.piece_chars() == tagger.model.bert_encoder().window == 62
    export_onnx(tagger, tmp_path / "model.onnx")
    runtime = RuntimeTagger.load(tmp_path)
    assert runtime.piece_chars() == 62
    texts = [s.text for s in load_dataset("mini")["test"].sentences[:40]]
    texts.append("".join(texts[:12]).replace("。", "，"))  # one sentence of several windows
    assert len(texts[-1]) > 3 * 62
    expected = tagger.predict(texts, confidence=False)
    assert sum(map(len, expected)) > 20 and runtime.predict(texts, batch_size=7) == expected


SERVE_PACKAGES = ("numpy", "onnxruntime", "pyyaml", "fastapi", "uvicorn", "httpx")  # the service, its test client


def test_the_service_runs_the_runtime_without_torch(exported, tmp_path):
    """The HTTP app over the exported graph (`zhner serve --runtime onnx`), in the torch-free venv: the entities and
    confidences of RuntimeTagger.predict, /health saying which runtime answers, and n-best (PyTorch only) a 422."""
    out, tagger = exported
    python = _torch_free_venv(tmp_path / "venv", SERVE_PACKAGES)
    script = (
        "import json, sys\n"
        "try:\n    import torch\nexcept ImportError:\n    pass\nelse:\n    sys.exit('torch is importable')\n"
        "from fastapi.testclient import TestClient\n"
        "from zhner.serve.app import create_app\n"
        "from zhner.serve.workers import load_served\n"
        f"model, served = load_served({str(out)!r}, 'cpu', 'onnx')\n"
        "texts = json.loads(sys.stdin.read())\n"
        "with TestClient(create_app(model, served=served)) as client:\n"
        "    answers = [client.post('/v1/ner', json={'texts': texts, 'confidence': True}),\n"
        "               client.post('/v1/ner', json={'text': texts[0], 'nbest': 2}), client.get('/health'),\n"
        "               client.get('/v1/labels')]\n"
        "print(json.dumps([[a.status_code, a.json()] for a in answers]))\n"
    )
    (tagged, nbest, health, labels) = _run_torch_free(python, script, tmp_path)
    assert tagged[0] == 200 and [r["entities"] for r in tagged[1]["results"]] == RuntimeTagger.load(out).predict(
        TEXTS, confidence=True)
    assert sum(len(r["entities"]) for r in tagged[1]["results"]) > 0
    assert nbest == [422, {"error": "nbest needs the PyTorch runtime; this service runs the onnx runtime", "field": "nbest"}]
    assert health[0] == 200 and health[1]["runtime"] == "onnx" and health[1]["model"] == "flat"
    assert health[1]["dataset"] == "mini" and health[1]["test_scores"] == {"mini": tagger.metrics["test"]["strict"]["f1"]}
    assert labels == [200, {"labels": sorted({t[2:] for t in tagger.featurizer.tags if t != "O"}),
                            "tags": list(tagger.featurizer.tags), "scheme": tagger.featurizer.scheme}]


def test_zhner_serve_runtime_onnx_workers_never_import_torch(exported, tmp_path):
    """`zhner serve --runtime onnx --workers 2` in the torch-free venv: the supervisor and both workers start without
    torch (an import of it would fail there), answer what RuntimeTagger.predict answers, and say so in /health; the
    model directory's own model.onnx is read (no export needed)."""
    import urllib.request

    from test_serve import free_port

    out, _ = exported
    python = _torch_free_venv(tmp_path / "venv", CLI_PACKAGES + SERVE_PACKAGES[2:-1])  # no httpx: urllib asks
    env = _torch_free_env()
    port = free_port()
    proc = subprocess.Popen([str(python), "-m", "zhner.cli", "serve", "-m", str(out), "--port", str(port), "--workers",
                             "2", "--runtime", "onnx"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    url, deadline = f"http://127.0.0.1:{port}", time.time() + 90

    def ask(path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url + path, data, {"content-type": "application/json"} if data else {})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    try:
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                health = ask("/health")
                break
            except OSError:
                assert time.time() < deadline, "zhner serve --runtime onnx did not start"
                time.sleep(0.2)
        assert health["runtime"] == "onnx" and health["model"] == "flat"
        tagged = ask("/v1/ner", {"texts": TEXTS, "confidence": True})
        assert [r["entities"] for r in tagged["results"]] == RuntimeTagger.load(out).predict(TEXTS, confidence=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "the onnx runtime" in err


def test_zhner_serve_runtime_onnx_refuses_what_it_cannot_do(exported):
    out, _ = exported
    for extra, message in ((["--device", "cuda"], "error: --device cuda: not with --runtime onnx"),
                           (["--runtime", "tensorrt"], "error: --runtime must be torch or onnx, not 'tensorrt'")):
        res = subprocess.run([sys.executable, "-m", "zhner.cli", "serve", "-m", str(out), "--runtime", "onnx", *extra],
                             capture_output=True, text=True, cwd=REPO, timeout=120)
        assert res.returncode != 0 and res.stderr.strip().startswith(message), res.stderr

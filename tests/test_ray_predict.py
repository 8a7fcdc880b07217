"""Batch tagging on Ray Data (zhner.integrations.ray, `zhner predict --engine ray`): a local Ray instance with two model
actors must write exactly what `zhner predict` writes, in the same order, and handle bad lines as --on-error says."""
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import deadline
from test_serve import run_main
from zhner.data.registry import load_dataset
from zhner.errors import ZhnerError
from zhner.serve.predict import predict_stream
from zhner.tagger import Tagger

ray = pytest.importorskip("ray")
from zhner.integrations.ray import predict_file  # noqa: E402  (needs ray)

BAD_LINES = {  # line number in the input -> what is wrong with it
    5: b"{not json",
    9: b'{"id": "no-text"}',
    12: b'{"id": "latin-1", "text": "caf\xe9"}',
}


@pytest.fixture(scope="module")
def model_dir(finds_entities_model):
    return finds_entities_model  # TINY_TENER + FINDS_ENTITIES, trained once per test process (tests/conftest.py)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module: two model actors plus a CPU for the read tasks."""
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """1,000 JSONL records (mini's sentences with ids, a long document among them, a BOM, CRLF line ends, a U+2028
    inside a text, a blank line) with three bad lines; and the same file without the bad lines."""
    sentences = [s.text for split in ("train", "dev") for s in load_dataset("mini")[split].sentences][:1000]
    lines = [json.dumps({"id": i, "text": t}, ensure_ascii=False).encode() for i, t in enumerate(sentences)]
    lines[20] = json.dumps({"id": "long", "text": "".join(sentences[:150])}, ensure_ascii=False).encode()  # ~4,000 chars
    lines[30] = json.dumps({"id": "sep", "text": "张三\u2028在北京"}, ensure_ascii=False).encode()
    lines[40] = lines[40] + b"\r"
    lines[50] = b""
    for number, raw in BAD_LINES.items():
        lines[number - 1] = raw
    folder = tmp_path_factory.mktemp("ray_inputs")
    with_bad, good = folder / "with_bad.jsonl", folder / "good.jsonl"
    with_bad.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    good.write_bytes(b"\xef\xbb\xbf" + b"\n".join(r for i, r in enumerate(lines, 1) if i not in BAD_LINES) + b"\n")
    return with_bad, good


@pytest.fixture(scope="module")
def local_output(model_dir, inputs, tmp_path_factory):
    """What a local predict (no Ray) writes for the good lines: the file both Ray paths must write, byte for byte."""
    _, good = inputs
    expected = tmp_path_factory.mktemp("ray_local") / "local.jsonl"
    predict_stream(Tagger.load(model_dir), str(good), expected, jsonl_input=True)
    return expected


def test_the_cli_writes_what_predict_writes_and_nothing_of_rays_own(model_dir, inputs, local_output, tmp_path):
    """`zhner predict --engine ray` as a user runs it, starting (and stopping) its own local Ray instance: the records
    of a local predict, and stderr empty -- no token-authentication notice, no core worker line, no deprecation."""
    from cli_runner import run_zhner

    _, good = inputs
    expected = local_output
    res = run_zhner("predict", "-m", model_dir, "--engine", "ray", "--workers", "1", good, "-o", tmp_path / "ray.jsonl",
                    cwd=tmp_path, timeout=600)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert (tmp_path / "ray.jsonl").read_text(encoding="utf-8") == expected.read_text(encoding="utf-8")


def test_ray_address_joins_the_cluster_it_names(monkeypatch):
    """--ray-address (predict_file's `address`), else $RAY_ADDRESS, is the cluster ray.init joins; neither: a local
    instance with one CPU more than the actors."""
    from zhner.integrations import ray as engine

    calls = []
    monkeypatch.setattr(engine.ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    engine.start_ray(2, "ray://head:10001")
    engine.start_ray(3)
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    engine.start_ray(2)
    assert [(c.get("address"), c.get("num_cpus")) for c in calls] == [("ray://head:10001", None), (None, 4), ("auto", None)]
    assert all(c["log_to_driver"] is False for c in calls)


def test_ray_writes_what_predict_writes_and_skips_bad_lines(model_dir, local_ray, inputs, local_output, tmp_path):
    with_bad, _ = inputs
    expected = local_output
    reports: list[str] = []
    written, skipped = predict_file(  # 200 lines a call: five calls over the two actors, whose order must be kept
        str(with_bad), tmp_path / "ray.jsonl", model_dir, workers=2, jsonl=True, on_error="skip", log=reports.append,
        lines_per_call=200,
    )
    assert (tmp_path / "ray.jsonl").read_text(encoding="utf-8") == expected.read_text(encoding="utf-8")
    records = [json.loads(line) for line in expected.read_text(encoding="utf-8").split("\n") if line]  # not splitlines: U+2028
    assert written == len(records) > 990 and skipped == len(BAD_LINES)
    assert sum(len(r["entities"]) for r in records) > 100  # the model finds entities: offsets are compared too
    assert any(r["id"] == "long" and len(r["text"]) > 3000 for r in records)  # a long text, cut and stitched alike
    assert [line.split(":")[1] for line in reports[:-1]] == [str(n) for n in BAD_LINES]  # each bad line, by number
    assert "invalid JSON" in reports[0] and '"text"' in reports[1] and "not valid UTF-8" in reports[2]
    assert reports[-1] == f"skipped 3 bad line(s) of {with_bad}"


def test_ray_fails_on_the_first_bad_line_and_writes_nothing(model_dir, local_ray, inputs, tmp_path):
    with_bad, _ = inputs
    out = tmp_path / "out.jsonl"
    with pytest.raises(ZhnerError) as error:
        predict_file(str(with_bad), out, model_dir, workers=2, jsonl=True, on_error="fail")
    assert str(error.value).startswith(f"{with_bad}:5: ") and not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left either


@pytest.mark.parametrize(
    "args, message",
    [
        (["--engine", "spark"], "--engine must be local or ray, not 'spark'"),
        (["--engine", "ray", "--on-error", "ignore"], "--on-error must be fail or skip, not 'ignore'"),
        (["--engine", "ray", "--format", "conll", "in.txt"], "--engine ray writes jsonl records"),
        (["--engine", "ray", "--text", "张三"], "--engine ray writes jsonl records"),
        (["--ray-address", "auto", "in.txt"], "--ray-address is for --engine ray"),
    ],
)
def test_bad_engine_options_are_one_line(tmp_path, monkeypatch, capsys, args, message):
    code, err = run_main(monkeypatch, capsys, "predict", "-m", tmp_path, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_engine_ray_reads_a_file_not_stdin(model_dir, monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "predict", "-m", model_dir, "--engine", "ray", "-")
    assert code == 2 and err.strip() == "error: --engine ray reads a file (not stdin)"


@pytest.mark.parametrize("hostile", ["long-line", "fifo", "dev-zero"])
def test_engine_ray_reads_input_through_the_local_bounded_reader_before_ray_starts(model_dir, monkeypatch, capsys, tmp_path,
                                                                                   hostile):
    """A file without a newline over the line limit is the local engine's one-line error, before Ray starts (issue 46,
    item 6: it was tagged for minutes by a worker over 1 GB); a FIFO or /dev/zero is refused without reading it."""
    source = tmp_path / "in.txt"
    if hostile == "long-line":
        source.write_bytes(b"\xe5\xa5\xbd" * (6 * 2**20))  # 18 MiB, one line
        expected = f"error: {source}:1: a line longer than 16,777,216 bytes (zhner's limit): not a text file?"
    elif hostile == "fifo":
        os.mkfifo(source)
        expected = f"error: {source}: a FIFO, expected a file of texts"
    else:
        source.symlink_to("/dev/zero")
        expected = f"error: {source}: a character device, expected a file of texts"
    monkeypatch.setattr(ray, "init", lambda *a, **kw: pytest.fail("Ray started"))
    with deadline(60):
        code, err = run_main(monkeypatch, capsys, "predict", "-m", model_dir, "--engine", "ray", str(source))
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.strip().startswith(expected), err
    if hostile == "long-line":
        local = run_main(monkeypatch, capsys, "predict", "-m", model_dir, str(source))
        assert local == (code, err)  # the same error as the local engine's


@pytest.mark.parametrize("data", [b"", b"a", b"a\n", b"a\n\n", b"\nab\ncd\r\n\n" * 5 + b"tail", b"x" * 10 + b"\n" + b"y" * 7])
def test_the_read_tasks_split_lines_as_predict_does_whatever_the_chunks(monkeypatch, data):
    import io

    import zhner.integrations.ray as zray

    expected = data.split(b"\n")
    if expected[-1] == b"":  # the newline that ends the last line opens no line of its own
        expected.pop()
    monkeypatch.setattr(zray, "LINES_PER_BLOCK", 4)
    for chunk in (1, 3, 1 << 20):
        monkeypatch.setattr(zray, "CHUNK_BYTES", chunk)
        blocks = list(zray.LinesDatasource._read_stream(None, io.BytesIO(data), "in.txt"))
        rows = [row for block in blocks for row in block.to_pylist()]
        assert [r["raw"] for r in rows] == expected and [r["line"] for r in rows] == list(range(1, len(expected) + 1))

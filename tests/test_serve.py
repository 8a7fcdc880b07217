"""The HTTP service, tested through a real uvicorn server on loopback with a tiny model trained here."""
import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from conftest import FINDS_ENTITIES, REPO  # noqa: F401 - FINDS_ENTITIES: the other service tests import it from here
from test_acts import tiny_config
from zhner.config import config_from_dict
from zhner.data.registry import load_dataset
from zhner.serve.app import Limits, ServedModel, create_app
from zhner.serve.batcher import MicroBatcher, Overloaded
from zhner.serve.server import protocol_class
from zhner.tagger import Tagger
from zhner.train.assemble import prepare

LIMITS = Limits(max_body_bytes=20_000, max_text_chars=500, max_texts=8, batch_wait_ms=20, read_timeout_s=2)


@contextmanager
def live_server(app):
    """uvicorn in a background thread on a free loopback port; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    http = protocol_class(app.state.limits.read_timeout_s)
    server = uvicorn.Server(uvicorn.Config(app, http=http, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        assert thread.is_alive() and time.time() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def model_dir(finds_entities_model):
    return finds_entities_model  # trained once per test process (tests/conftest.py), shared with the workers' and Ray's tests


@pytest.fixture(scope="module")
def server(model_dir):
    tagger = Tagger.load(model_dir)
    with live_server(create_app(tagger, LIMITS)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client, tagger


@pytest.fixture(scope="module")
def sentences():
    return [s.text for s in load_dataset("mini")["test"].sentences[:40]]


def check_records(texts, records, tagger):
    assert [r["text"] for r in records] == texts
    assert [r["entities"] for r in records] == tagger.predict(texts, confidence=False)  # the service adds nothing and loses nothing
    for r in records:
        for e in r["entities"]:
            assert r["text"][e["start"] : e["end"]] == e["text"] and e["end"] > e["start"]


def test_one_text_and_several_texts(server, sentences):
    client, tagger = server
    res = client.post("/v1/ner", json={"text": sentences[0]})
    assert res.status_code == 200 and res.headers["content-type"] == "application/json"
    check_records([sentences[0]], [res.json()], tagger)
    records = []
    for i in range(0, 24, 8):
        res = client.post("/v1/ner", json={"texts": sentences[i : i + 8]})
        assert res.status_code == 200, res.text
        records += res.json()["results"]
    check_records(sentences[:24], records, tagger)
    assert sum(len(r["entities"]) for r in records) > 0  # the tiny model finds entities, so offsets are checked


def test_offsets_are_code_points(server, sentences):
    """An astral-plane character (two UTF-16 units) before the entities: a UTF-16 offset would point one too far."""
    client, tagger = server
    texts = ["🙂" + s for s in sentences[:8]]
    res = client.post("/v1/ner", json={"texts": texts})
    check_records(texts, res.json()["results"], tagger)
    shifted = [e for r in res.json()["results"] for e in r["entities"] if e["start"] >= 1]
    assert shifted, "no entity after the emoji: the test would not see an offset bug"
    # the same request written with \\ud83d\\ude42 escapes (what JSON.stringify-style ASCII encoders send)
    ascii_body = json.dumps({"texts": texts}, ensure_ascii=True).encode("ascii")
    again = client.post("/v1/ner", content=ascii_body, headers={"content-type": "application/json"})
    assert again.json() == res.json()


@pytest.mark.parametrize(
    "text",
    [
        "\ufffd张三\ufffd毕业于北京大学",  # replacement characters
        "ＡＢＣ公司的张三，１９６５年出生",  # full-width Latin and digits
        "Zhang San（张三）went to 北京大学 in 1999. Привет! مرحبا",  # mixed scripts
        "👨‍👩‍👧 e\u0301 \u200b\x00 🇨🇳 𠀀𪚥",  # ZWJ sequence, combining mark, zero-width space, NUL, flags, CJK ext. B
    ],
)
def test_unicode_edge_cases(server, text):
    client, tagger = server
    res = client.post("/v1/ner", json={"text": text})
    assert res.status_code == 200, res.text
    check_records([text], [res.json()], tagger)


def test_empty_texts_are_not_errors(server):
    client, _ = server
    assert client.post("/v1/ner", json={"text": ""}).json() == {"text": "", "entities": []}
    assert client.post("/v1/ner", json={"texts": []}).json() == {"results": []}
    assert client.post("/v1/ner", json={"texts": ["", " "]}).json()["results"] == [
        {"text": "", "entities": []},
        {"text": " ", "entities": []},
    ]


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    "body,headers,status,field,message",
    [
        (b'{"text": "abc"', JSON, 400, "body", "not valid JSON"),
        (b'{"text": "\xff\xfe"}', JSON, 400, "body", "not valid UTF-8 (byte 0xff"),
        (b'{"text": "abc"}', {"content-type": "text/plain"}, 415, "content-type", "application/json"),
        (b'{"text": "abc"}', {}, 415, "content-type", "missing"),
        (b"[1, 2]", JSON, 422, "body", "dictionary"),
        (b"", JSON, 400, "body", "not valid JSON"),
        (b'{"text": 5}', JSON, 422, "text", "valid string"),
        (b'{"texts": "abc"}', JSON, 422, "texts", "valid list"),
        (b'{"texts": ["a", null]}', JSON, 422, "texts[1]", "valid string"),
        (b'{"text": "a", "texts": ["b"]}', JSON, 422, "body", "exactly one"),
        (b"{}", JSON, 422, "body", "exactly one"),
        (b'{"text": "a", "lang": "zh"}', JSON, 422, "lang", "not permitted"),
        (b'{"texts": ["ok", "\\ud800x"]}', JSON, 422, "texts[1]", "lone surrogate U+D800"),
        (json.dumps({"texts": ["a", "b", "c", "长" * 501]}).encode(), JSON, 413, "texts[3]", "501 characters"),
        (json.dumps({"text": "长" * 501}).encode(), JSON, 413, "text", "limit of 500"),
        (json.dumps({"texts": ["a"] * 9}).encode(), JSON, 413, "texts", "9 texts"),
        (json.dumps({"text": "a" * 30_000}).encode(), JSON, 413, "body", "20000 bytes"),
    ],
)
def test_bad_requests_get_clear_json_errors(server, body, headers, status, field, message):
    client, _ = server
    res = client.post("/v1/ner", content=body, headers=headers)
    assert res.status_code == status, res.text
    assert res.json()["field"] == field
    assert message in res.json()["error"]


def test_streamed_body_over_the_limit_and_the_worker_survives(server):
    """A chunked body declares no length: the limit is enforced while reading it."""
    client, _ = server

    def chunks():
        for _ in range(30):
            yield b" " * 1000

    res = client.post("/v1/ner", content=chunks(), headers=JSON)
    assert res.status_code == 413 and res.json()["field"] == "body"
    assert client.get("/nope").json() == {"error": "Not Found", "field": None}
    assert client.get("/v1/ner").status_code == 405
    assert client.post("/v1/ner", json={"text": "张三"}).status_code == 200  # nothing above hurt the server


def test_confidence_field(server, sentences):
    client, tagger = server
    res = client.post("/v1/ner", json={"texts": sentences[:8], "confidence": True})
    assert res.status_code == 200, res.text
    assert [r["entities"] for r in res.json()["results"]] == tagger.predict(sentences[:8], confidence=True)
    scores = [e["score"] for r in res.json()["results"] for e in r["entities"]]
    assert scores and all(0 <= x <= 1 for x in scores)
    plain = client.post("/v1/ner", json={"texts": sentences[:8]}).json()["results"]
    assert all("score" not in e for r in plain for e in r["entities"])  # only when asked
    bad = client.post("/v1/ner", json={"text": "张三", "confidence": "yes"})
    assert bad.status_code == 422 and bad.json()["field"] == "confidence"


def test_nbest_field(server, sentences):
    client, tagger = server
    res = client.post("/v1/ner", json={"texts": sentences[:4], "nbest": 3})
    assert res.status_code == 200, res.text
    results = res.json()["results"]
    assert [r["nbest"] for r in results] == tagger.nbest(sentences[:4], 3)
    assert all(r["nbest"][0]["entities"] == r["entities"] for r in results)  # the best path is the one predicted
    assert "nbest" not in client.post("/v1/ner", json={"text": "张三"}).json()  # only when asked
    for body in [{"text": "张三", "nbest": "3"}, {"text": "张三", "nbest": 21}]:
        bad = client.post("/v1/ner", json=body)
        assert bad.status_code == 422 and bad.json()["field"] == "nbest", bad.text
    # a text of more than one piece (this server's text limit is below that, so ask the handler's helper directly)
    from zhner.serve.app import RequestError, _nbest

    with pytest.raises(RequestError) as err:
        asyncio.run(_nbest(None, tagger, ["张三", "李" * (tagger.piece_chars() + 1)], 2))
    assert (err.value.status, err.value.field) == (422, "texts[1]")


def test_translations_reach_an_acts_model(tmp_path):
    """An ACT-S model reads the translation(s) a request gives, as Tagger.predict / nbest do; an untrained one finds many
    entities, so scores that move with the translation show it arrived."""
    from fastapi.testclient import TestClient

    run = prepare(config_from_dict(tiny_config(tmp_path)), log=lambda _: None)  # no translator; mini's sentences
    tagger, texts = run.tagger, [ex.text for ex in run.splits["train"]][:3]
    given = ["Ouyang Zhenyu attended an investment fair in Chengdu", None, "Incomes kept growing this year"]
    with TestClient(create_app(tagger, LIMITS)) as client:
        one = client.post("/v1/ner", json={"text": texts[0], "translation": given[0], "confidence": True})
        assert one.status_code == 200, one.text
        assert one.json()["entities"] == tagger.predict(texts[:1], confidence=True, translations=given[:1])[0]
        assert one.json()["entities"] != tagger.predict(texts[:1], confidence=True)[0]
        several = client.post("/v1/ner", json={"texts": texts, "translations": given, "confidence": True})
        assert [r["entities"] for r in several.json()["results"]] == tagger.predict(texts, confidence=True, translations=given)
        ranked = client.post("/v1/ner", json={"text": "高勇：男", "translation": "Gao Yong, male", "nbest": 2}).json()["nbest"]
        assert ranked == tagger.nbest(["高勇：男"], 2, translations=["Gao Yong, male"])[0] != tagger.nbest(["高勇：男"], 2)[0]
        bad = [
            ({"texts": texts, "translations": given[:2]}, "translations", "2 translations for 3 texts"),
            ({"text": texts[0], "translations": given[:1]}, "translations", "with 'text' give 'translation'"),
            ({"texts": texts, "translation": "x"}, "translation", "with 'texts' give 'translations'"),
            ({"text": texts[0], "translation": 5}, "translation", "valid string"),
            ({"texts": texts[:1], "translations": [5]}, "translations[0]", "valid string"),
            ({"texts": texts[:2], "translations": [None, "a \ud800 b"]}, "translations[1]", "lone surrogate U+D800"),
        ]
        for body, field, message in bad:  # json.dumps escapes a lone surrogate as JSON may carry it
            res = client.post("/v1/ner", content=json.dumps(body), headers={"content-type": "application/json"})
            assert res.status_code == 422 and res.json()["field"] == field and message in res.json()["error"], res.text
        res = client.post("/v1/ner", json={"text": texts[0], "translation": "x" * 501})  # the text limit (500) holds for it too
        assert res.status_code == 413 and res.json()["field"] == "translation", res.text


def test_translations_need_a_model_that_reads_them(server):
    client, _ = server
    bodies = [({"text": "张三", "translation": "Zhang San"}, "translation"), ({"texts": ["张三"], "translations": [None]}, "translations")]
    for body, field in bodies:
        res = client.post("/v1/ner", json=body)
        assert res.status_code == 422 and res.json()["field"] == field, res.text
        assert "model.name: tener) has no translation field" in res.json()["error"]


def test_long_text_beside_short_requests(model_dir, sentences):
    """A 6,000-character text is tagged as its sentences, stitched back as `predict` does, while short requests sent
    beside it are answered before it is done."""
    tagger = Tagger.load(model_dir)
    limits = Limits(max_text_chars=10_000, max_body_bytes=100_000, batch_texts=2, read_timeout_s=5)
    long = "".join(s if s.endswith("。") else s + "。" for s in sentences * 5)[:6_000]

    async def run(url: str) -> tuple[dict, list[float], float]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as aclient:
            started = time.monotonic()
            pending = asyncio.ensure_future(aclient.post("/v1/ner", json={"text": long}))
            while not pending.done() and (await aclient.get("/health")).json()["pending_texts"] == 0:  # queued
                await asyncio.sleep(0.001)
            short_done = []
            for s in sentences[:5]:
                assert (await aclient.post("/v1/ner", json={"text": s})).status_code == 200
                short_done.append(time.monotonic() - started)
            res = await pending
            return res.json(), short_done, time.monotonic() - started

    with live_server(create_app(tagger, limits)) as url:
        record, short_done, long_done = asyncio.run(run(url))
    assert record["entities"] == tagger.predict([long], confidence=False)[0]
    assert max(short_done) < long_done  # five short requests in turn, all answered while the long one ran


def test_a_client_gone_before_its_answer_leaves_the_queue(model_dir):
    """A 6,000-character text (about 180 pieces, one per model call here) whose client hangs up right after sending it:
    its pieces are dropped, not tagged for no one."""
    limits = Limits(max_text_chars=10_000, max_body_bytes=100_000, batch_texts=1, read_timeout_s=5)
    text = "张三毕业于北京大学。" * 600
    body = json.dumps({"text": text}).encode()
    with live_server(create_app(Tagger.load(model_dir), limits)) as url, httpx.Client(base_url=url, timeout=30) as client:
        sock = raw_connection(client)
        sock.sendall(HEAD.replace(b"1000", str(len(body)).encode()) + body)
        while client.get("/health").json()["pending_texts"] == 0:  # queued
            time.sleep(0.001)
        sock.close()
        deadline = time.monotonic() + 30
        while client.get("/health").json()["pending_texts"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.get("/health").json()["model_calls"] < 100
        assert client.post("/v1/ner", json={"text": "张三"}).status_code == 200


def test_deeply_nested_json_is_a_400(server):
    client, _ = server
    for body in (b"[" * 19_000, b"{\"text\": " + b"[" * 9_000 + b"]" * 9_000 + b"}"):  # LIMITS: 20,000 bytes
        res = client.post("/v1/ner", content=body, headers=JSON)
        assert res.status_code == 400 and res.json()["field"] == "body" and "nested too deeply" in res.json()["error"]
    # Python converts at most 4,300 digits to an int: json.loads raises a ValueError that is not a JSONDecodeError
    res = client.post("/v1/ner", content=b'{"text": "a", "nbest": ' + b"9" * 5000 + b"}", headers=JSON)
    assert res.status_code == 400 and res.json()["field"] == "body" and "too long" in res.json()["error"]
    assert client.post("/v1/ner", json={"text": "张三"}).status_code == 200


@contextmanager
def uvicorn_log():
    """The records uvicorn's error logger gets meanwhile (it does not propagate to pytest's caplog)."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def raw_connection(client) -> socket.socket:
    return socket.create_connection((client.base_url.host, client.base_url.port), timeout=20)


HEAD = b"POST /v1/ner HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"


def test_client_gone_mid_body_logs_one_line_at_most(server):
    client, _ = server
    with uvicorn_log() as records:
        sock = raw_connection(client)
        sock.sendall(HEAD + b'{"text": "ab')
        time.sleep(0.3)
        sock.close()
        time.sleep(0.5)
        assert client.post("/v1/ner", json={"text": "张三"}).status_code == 200  # and the server is fine
    assert len(records) <= 1 and not any(r.exc_info for r in records), [r.getMessage() for r in records]


def read_response(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while chunk := sock.recv(4096):  # the server closes the connection after a timeout
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def trickle(sock: socket.socket, data: bytes, every_s: float) -> int:
    """Send `data` a byte every `every_s` seconds until the server answers; returns how many bytes were sent."""
    for sent, byte in enumerate(data):
        if select.select([sock], [], [], every_s)[0]:  # readable: an answer (or the close) came
            return sent
        sock.send(bytes([byte]))
    return len(data)


def test_slow_clients_are_timed_out(server):
    """Headers trickled one byte at a time (slowloris) get 408 and a closed connection after read_timeout_s (2 s
    here), though every byte came well within uvicorn's keep-alive timeout; so does a trickled body."""
    client, _ = server
    with raw_connection(client) as sock:
        sent = trickle(sock, HEAD * 10, 0.05)  # 40 s of trickling, were the connection left open
        assert sent < len(HEAD)  # cut off before the head was complete
        status, body = read_response(sock)
    assert status == 408 and body["field"] == "headers"
    with raw_connection(client) as sock:
        sock.sendall(HEAD + b'{"text": "')
        assert trickle(sock, b"a" * 100, 0.1) < 100  # a byte every 0.1 s: 10 s, over the 2 s limit
        status, body = read_response(sock)
    assert status == 408 and body["field"] == "body" and "not received within 2 s" in body["error"]
    assert client.post("/v1/ner", json={"text": "张三"}).status_code == 200


def test_health_shows_no_host_paths(server):
    """A model trained from a folder (`data.dataset=/abs/path`) shows the folder's name, not where it lives."""
    from dataclasses import replace

    from fastapi.testclient import TestClient

    _, tagger = server
    served = ServedModel.of_pipeline(tagger)
    assert served.corpora == ["mini"]
    with TestClient(create_app(tagger, LIMITS, replace(served, corpora=["/home/someone/corpora/my_ner"]))) as client:
        health = client.get("/health")
    assert health.json()["dataset"] == "my_ner" and "/home/someone" not in health.text


def test_health_labels_and_openapi(server):
    client, tagger = server
    health = client.get("/health").json()
    types = sorted({t[2:] for t in tagger.featurizer.tags if t != "O"})
    assert health["status"] == "ok" and health["model"] == "tener" and health["dataset"] == "mini"
    assert health["test_scores"] == {"mini": tagger.metrics["test"]["strict"]["f1"]}  # one corpus: its own test
    assert health["labels"] == types and health["limits"]["max_text_chars"] == 500
    assert health["uptime_s"] > 0
    time.sleep(0.01)
    assert client.get("/health").json()["uptime_s"] > health["uptime_s"]
    labels = client.get("/v1/labels").json()
    assert labels["labels"] == types and labels["tags"] == tagger.featurizer.tags

    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/v1/ner"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/NERRequest"}
    assert {"400", "408", "413", "415", "422", "503"} <= set(post["responses"])
    schemas = spec["components"]["schemas"]
    assert set(schemas["NERRequest"]["properties"]) == {"text", "texts", "confidence", "nbest", "translation", "translations"}
    assert set(schemas["Entity"]["required"]) == {"type", "start", "end", "text"}
    assert set(schemas["ErrorBody"]["properties"]) == {"error", "field"}
    assert "/health" in spec["paths"] and "/v1/labels" in spec["paths"]


def test_concurrent_requests_share_model_calls(server, sentences):
    """32 clients at once: each gets its own texts' entities back, in fewer model calls than requests."""
    client, tagger = server
    calls_before = client.get("/health").json()["model_calls"]

    async def run() -> list[dict]:
        async with httpx.AsyncClient(base_url=str(client.base_url), timeout=30) as aclient:
            posts = [aclient.post("/v1/ner", json={"texts": [s]}) for s in sentences[:32]]
            return [r.json() for r in await asyncio.gather(*posts)]

    results = asyncio.run(run())
    check_records(sentences[:32], [r["results"][0] for r in results], tagger)
    calls = client.get("/health").json()["model_calls"] - calls_before
    assert 1 <= calls < 32


class FakePieces:
    """A stand-in tagger: texts split at '|'; a piece's one span covers it; join reports lengths and the scores kept."""

    def __init__(self, seconds_per_call: float = 0.0):
        self.calls: list[list[str]] = []
        self.translations: list[list | None] = []  # per call: the translations keyword (None: not passed)
        self.seconds_per_call = seconds_per_call

    def split(self, text: str) -> list[tuple[int, str]]:
        pieces, offset = [], 0
        for part in text.split("|"):
            pieces.append((offset, part))
            offset += len(part) + 1
        return pieces

    def piece_translations(self, pieces, translation):
        return [None if translation is None else f"{translation}{k}" for k in range(len(pieces))]

    def piece_spans(self, chunks, batch_size, confidence=False, translations=None):
        self.calls.append(list(chunks))
        self.translations.append(translations)
        time.sleep(self.seconds_per_call)
        if "boom" in chunks:
            raise ValueError("model failed")
        return [[(0, len(c), "X", 0.5)] if confidence else [(0, len(c), "X")] for c in chunks]

    def join(self, text, pieces, spans):
        return [{"n": [s[0][1] for s in spans], "scored": [len(s[0]) == 4 for s in spans]}]


def run_batcher(fake: FakePieces, body, **options) -> None:
    async def run():
        batcher = MicroBatcher(fake, **options)
        await batcher.start()
        try:
            await body(batcher)
            assert batcher.pending_texts == 0
        finally:
            await batcher.stop()

    asyncio.run(run())


def test_micro_batcher_slices_results_and_survives_errors():
    fake = FakePieces()

    async def body(batcher):
        jobs = [batcher.submit(["a" * i, "b" * (i + 10)]) for i in range(3)]
        results = await asyncio.gather(*jobs)
        assert results == [[[{"n": [i], "scored": [False]}], [{"n": [i + 10], "scored": [False]}]] for i in range(3)]
        assert len(fake.calls) == 1 and len(fake.calls[0]) == 6  # three requests, one model call
        failed = await asyncio.gather(batcher.submit(["boom"]), return_exceptions=True)
        assert isinstance(failed[0], ValueError)
        assert await batcher.submit(["xy"]) == [[{"n": [2], "scored": [False]}]]  # the worker lives on
        with pytest.raises(Overloaded):
            await batcher.submit(["x"] * 11)

    run_batcher(fake, body, max_texts=8, max_wait_ms=50, max_pending_texts=10)


def test_micro_batcher_carries_translations_with_their_pieces():
    fake = FakePieces()

    async def body(batcher):
        await asyncio.gather(batcher.submit(["a|bb", "c"], translations=["T", None]), batcher.submit(["ddd"]))
        assert len(fake.calls) == 1  # the two requests share a call; each piece keeps its own translation
        assert dict(zip(fake.calls[0], fake.translations[0])) == {"a": "T0", "bb": "T1", "c": None, "ddd": None}
        await batcher.submit(["e"])
        assert fake.translations[-1] is None  # no request with translations in the call: the keyword stays out

    run_batcher(fake, body, max_texts=8, max_wait_ms=50)


def test_run_alone_uses_the_model_thread_the_backlog_and_the_timeout():
    """n-best work (MicroBatcher.run_alone) runs on the batcher's one model thread, counts against max_pending_texts and
    gets Overloaded after timeout_s, like tagging."""
    fake = FakePieces()

    async def body(batcher):
        assert await batcher.run_alone(lambda: threading.current_thread().name, 2) == "zhner-model_0"
        with pytest.raises(Overloaded, match="already waiting"):
            await batcher.run_alone(lambda: None, 11)
        with pytest.raises(Overloaded, match="not done within"):
            await batcher.run_alone(lambda: time.sleep(0.5), 1)

    run_batcher(fake, body, max_pending_texts=10, timeout_s=0.1)


def test_long_texts_share_model_calls_fairly():
    """A text of 200 pieces runs as a series of calls; a short request sent while it runs rides in the next call,
    beside the long text's pieces, instead of waiting for all of them. Pieces are taken within the cost budget."""
    fake = FakePieces(seconds_per_call=0.005)

    async def body(batcher):
        long = asyncio.ensure_future(batcher.submit(["|".join(["ab"] * 200)], confidence=True))
        while not fake.calls:
            await asyncio.sleep(0.001)
        short = await batcher.submit(["xyz"])
        assert short == [[{"n": [3], "scored": [False]}]]  # scores asked for by its batch-mate are not leaked
        assert not long.done()
        (first,) = [i for i, call in enumerate(fake.calls) if "xyz" in call]
        assert first <= 2 and len(fake.calls[first]) == 4  # within two calls, in a call filled with the long text's pieces
        (record,) = await long
        assert record[0]["n"] == [2] * 200 and all(record[0]["scored"])
        assert len(fake.calls) >= 50
        assert max(map(len, fake.calls)) == 4
        fake.calls.clear()
        await batcher.submit(["a" * 100 + "|" + "b" * 100 + "|" + "c" * 5])  # costs 100 * (1 + 100 / 32) each
        assert [len(c) for c in fake.calls] == [1, 2]  # 412.5 + 412.5 > 700: the second long piece waits

    run_batcher(fake, body, max_texts=4, max_wait_ms=1, max_cost=700)


def test_a_request_out_of_time_gets_503_and_leaves_the_queue():
    fake = FakePieces(seconds_per_call=0.02)

    async def body(batcher):
        with pytest.raises(Overloaded, match="not done within 0.1 s"):
            await batcher.submit(["|".join(["ab"] * 400)])  # 100 calls of 0.02 s: 2 s, over the 0.1 s budget
        calls = len(fake.calls)
        assert calls < 20
        assert await batcher.submit(["xy"]) == [[{"n": [2], "scored": [False]}]]
        assert len(fake.calls) <= calls + 2  # the rest of the long request's pieces were dropped

    run_batcher(fake, body, max_texts=4, max_wait_ms=1, timeout_s=0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command(model_dir):
    """`zhner serve` as a user starts it: serves, and stops cleanly on Ctrl-C."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zhner.cli", "serve", "-m", str(model_dir), "--port", str(port), "--max-texts", "3"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except httpx.TransportError:
                assert time.time() < deadline, "zhner serve did not start"
                time.sleep(0.2)
        assert health["limits"]["max_texts"] == 3
        res = httpx.post(f"http://127.0.0.1:{port}/v1/ner", json={"texts": ["张三毕业于北京大学。"] * 4})
        assert res.status_code == 413 and res.json()["field"] == "texts"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def run_main(monkeypatch, capsys, *args) -> tuple[int, str]:
    """`zhner ARGS` in this process (a subprocess would spend seconds importing torch): exit code and stderr."""
    from zhner import cli

    monkeypatch.setattr(sys, "argv", ["zhner", *map(str, args)])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    return exit_.value.code, capsys.readouterr().err


def test_serve_errors_are_one_line(tmp_path, monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "serve", "-m", tmp_path / "none")
    assert code == 2 and err.strip().startswith("error: ") and "no such model directory" in err
    with socket.socket() as taken:  # uvicorn logged its own error and exited 3
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_main(monkeypatch, capsys, "serve", "-m", tmp_path / "none", "--port", port)
    assert code == 2 and err.strip() == f"error: --host 127.0.0.1 --port {port}: cannot listen there (Address already in use)"
    monkeypatch.setitem(sys.modules, "fastapi", None)  # as if fastapi were not installed
    monkeypatch.delitem(sys.modules, "zhner.serve.app")
    code, err = run_main(monkeypatch, capsys, "serve", "-m", tmp_path)
    assert code == 2 and err.strip() == "error: the HTTP service needs fastapi: pip install 'zhner[serve]'"


def test_resolve_model_dir(tmp_path, monkeypatch):
    from zhner import cli
    from zhner import shipped
    from zhner.errors import ZhnerError

    monkeypatch.setattr(shipped, "DEFAULT_MODEL", tmp_path / "default_model")
    assert cli.resolve_model_dir(tmp_path / "mine") == tmp_path / "mine"
    with pytest.raises(ZhnerError, match="no model given.*pass -m DIR"):
        cli.resolve_model_dir(None)
    (tmp_path / "default_model").mkdir()
    with pytest.raises(ZhnerError, match="no model given"):  # a directory without weights is not a model
        cli.resolve_model_dir(None)
    (tmp_path / "default_model" / "model.safetensors").write_bytes(b"")
    assert cli.resolve_model_dir(None) == tmp_path / "default_model"


# -- zhner predict: batch tagging of files and streams ---------------------------------------------------------------
def test_chunks_bound_lines_and_characters():
    from zhner.serve.predict import chunks

    texts = ["ab", "cde", "", "x" * 9, "fg", "h"]
    groups = list(chunks(iter(texts), max_lines=3, max_chars=6))
    assert [t for g in groups for t in g] == texts  # order kept, nothing lost
    assert groups == [["ab", "cde", ""], ["x" * 9], ["fg", "h"]]  # a text over max_chars makes a group of its own
    assert list(chunks(iter([]), 3, 6)) == []


def test_predict_streams_stdin(model_dir):
    """The first chunk's records come out while stdin is still open: nothing waits for (or holds) the whole input."""
    import queue

    from zhner.serve.predict import CHUNK_LINES

    proc = subprocess.Popen(
        [sys.executable, "-m", "zhner.cli", "predict", "-m", str(model_dir), "-"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [out.put(line) for line in proc.stdout], daemon=True).start()
    texts = [f"{i}号张三毕业于北京大学。" * (1 + i % 3) for i in range(CHUNK_LINES + 40)]
    try:
        proc.stdin.write("".join(t + "\n" for t in texts[: CHUNK_LINES + 1]).encode())
        proc.stdin.flush()
        first = [json.loads(out.get(timeout=60)) for _ in range(CHUNK_LINES)]
        assert proc.poll() is None  # still reading stdin
        proc.stdin.write("".join(t + "\n" for t in texts[CHUNK_LINES + 1 :]).encode())
        proc.stdin.close()
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        proc.kill()
    rest = []
    while not out.empty():
        rest.append(json.loads(out.get()))
    records = first + rest
    assert [r["text"] for r in records] == texts  # sorted by length for the model, written back in input order
    tagger = Tagger.load(model_dir)
    assert [r["entities"] for r in records[:50]] == tagger.predict(texts[:50], confidence=False)


def test_load_test_client_against_the_live_server(server, sentences):
    """benchmarks/service/load_test.py's closed-loop client, for one second: no errors, latencies recorded."""
    sys.path.insert(0, str(REPO / "benchmarks" / "service"))
    from load_test import run_level

    client, _ = server
    result = asyncio.run(run_level(str(client.base_url).rstrip("/"), 2, 1.0, sentences, os.getpid()))
    assert result["errors"] == 0 and result["requests"] > 0
    assert 0 < result["latency_ms"]["p50"] <= result["latency_ms"]["p99"]
    assert result["rss_mb_every_10s"]

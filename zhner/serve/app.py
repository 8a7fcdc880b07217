"""The HTTP service: `POST /v1/ner` (taggers) or `POST /v1/classify` (sentence classifiers), `GET /health`,
`GET /v1/labels`, OpenAPI at /openapi.json, Swagger UI at /docs (its files served by the service itself, from the
fastapi-swagger package of the serve extra, so the page works on a host with no internet). The endpoint of the other
task answers 404 saying which one the served model takes.

    app = create_app(Tagger.load("runs/tener_resume"), Limits(max_text_chars=20_000))
    uvicorn.run(app, host="127.0.0.1", port=8000)

The body is read and parsed here rather than by FastAPI, so that every bad request -- too large, not JSON, not UTF-8,
wrong content type, wrong field types, lone surrogates -- gets the same JSON error `{"error": "...", "field": "..."}`
with a fitting status (400, 408, 413, 415, 422, 503), and no request can crash the worker. Offsets are code points, as in
`zhner predict` (Python string indices: an emoji counts as one character, not two UTF-16 units).
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import json
import logging
import os
import time
from collections.abc import Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from zhner import __version__
from zhner.data.corpus import lone_surrogate
from zhner.data.longtext import PIECE_CHARS
from zhner.data.schemes import split_tag
from zhner.errors import ZhnerError
from zhner.evaluate.metrics import test_scores_by_corpus
from zhner.serve.batcher import MicroBatcher, Overloaded

log = logging.getLogger("uvicorn.error")
T = TypeVar("T")


@dataclass(frozen=True)
class ServedModel:
    """What the service says of the model it serves (/health, /v1/labels) and which request options it takes."""

    kind: str  # tagging or classification
    tags: list[str]  # a tagger's tags, a classifier's labels
    scheme: str | None
    model: str  # the architecture, e.g. flat
    corpora: list[str]  # trained on: data.dataset, then data.union's
    metrics: dict = dataclasses.field(default_factory=dict)
    crf: bool = False  # confidence and nbest need a CRF head
    nbest: bool = True  # the torch-free runtime has no n-best decoding
    runtime: str = "torch"

    @classmethod
    def of_pipeline(cls, pipeline: Any) -> "ServedModel":
        """A zhner.tagger.Tagger's or zhner.classifier.Classifier's description, from its config and metrics."""
        data = pipeline.config.data
        union = [part.dataset for part in getattr(data, "union", None) or []]
        return cls(
            kind=pipeline.task.kind,
            tags=list(pipeline.featurizer.tags),
            scheme=getattr(pipeline.featurizer, "scheme", None),
            model=pipeline.config.model.name,
            corpora=[data.dataset, *union],
            metrics=getattr(pipeline, "metrics", None) or {},
            crf=getattr(pipeline.model, "crf", None) is not None,
        )

    @property
    def labels(self) -> list[str]:
        """Entity types (tagging) or class labels (classification)."""
        return sorted({split_tag(t)[1] for t in self.tags if t != "O"}) if self.kind == "tagging" else list(self.tags)


class Limits(BaseModel):
    """What one request may carry. Longer texts are fine for the model (they are split at sentence ends); the limits
    bound the time and memory one request can take."""

    max_body_bytes: int = Field(1_048_576, gt=0, description="largest request body, in bytes")
    max_text_chars: int = Field(20_000, gt=0, description="longest text, in characters (code points)")
    max_texts: int = Field(256, gt=0, description="most texts in one request")
    batch_texts: int = Field(32, gt=0, description="texts the micro-batcher gathers into one model call")
    batch_wait_ms: float = Field(2.0, ge=0, description="longest wait for more requests before a model call")
    max_pending_texts: int = Field(4096, gt=0, description="texts waiting for the model before requests get 503")
    read_timeout_s: float = Field(10.0, gt=0, description="time a client has to send a request's headers, and again its body (408 after)")
    request_timeout_s: float = Field(30.0, gt=0, description="time a request may wait for and use the model before it gets 503")


# -- request and response bodies ------------------------------------------------------------------------------------
class NERRequest(BaseModel):
    """Exactly one of `text` (one document) or `texts` (a list of documents); for an ACT-S model, optionally their
    English translations: `translation` with `text`, `translations` (one per text) with `texts`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"text": "张三毕业于北京大学。"}]})
    text: StrictStr | None = Field(None, description="one text; the response is one record")
    texts: list[StrictStr] | None = Field(None, description="several texts; the response holds one record per text")
    confidence: StrictBool = Field(False, description="add each entity's probability under the model's CRF as `score`")
    nbest: int = Field(0, ge=0, le=20, strict=True, description="add the k most probable tag paths of each text as `nbest` "
                       f"(texts of one piece only: at most {PIECE_CHARS} characters)")
    translation: StrictStr | None = Field(None, description="with `text`, ACT-S models only: its English translation "
                                          "(absent: the model's translator makes one, or the text has none)")
    translations: list[StrictStr | None] | None = Field(None, description="with `texts`, ACT-S models only: one English "
                                                         "translation per text, null to have the model translate that one")

    @model_validator(mode="after")
    def _exactly_one(self) -> "NERRequest":
        if (self.text is None) == (self.texts is None):
            raise ValueError("give exactly one of 'text' or 'texts'")
        return self


class ClassifyRequest(BaseModel):
    """Exactly one of `text` (one text) or `texts` (a list of texts)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"text": "a charming and affecting journey ."}]})
    text: StrictStr | None = Field(None, description="one text; the response is one record")
    texts: list[StrictStr] | None = Field(None, description="several texts; the response holds one record per text")

    @model_validator(mode="after")
    def _exactly_one(self) -> "ClassifyRequest":
        if (self.text is None) == (self.texts is None):
            raise ValueError("give exactly one of 'text' or 'texts'")
        return self


class Classified(BaseModel):
    text: str
    label: str | None = Field(description="the most probable label (null for an empty text)")
    scores: dict[str, float] = Field(description="every label's probability")


class ClassifiedRecords(BaseModel):
    results: list[Classified]


class Entity(BaseModel):
    type: str = Field(description="entity type, e.g. PER")
    start: int = Field(description="offset of the first character, in code points")
    end: int = Field(description="offset after the last character (exclusive), in code points")
    text: str = Field(description="the entity's characters: text[start:end]")
    score: float | None = Field(None, description="with `confidence`: the probability that exactly these characters carry this entity's tags")


class RankedPath(BaseModel):
    probability: float = Field(description="the path's probability under the model's CRF")
    entities: list[Entity]


class Record(BaseModel):
    text: str
    entities: list[Entity]
    nbest: list[RankedPath] | None = Field(None, description="with `nbest`: the most probable tag paths, best first")


class Records(BaseModel):
    results: list[Record]


class ErrorBody(BaseModel):
    error: str = Field(description="what is wrong, in one line")
    field: str | None = Field(None, description="the request field at fault, e.g. texts[3]")


class Health(BaseModel):
    status: str
    version: str
    model: str = Field(description="model architecture, e.g. tener")
    runtime: str = Field("torch", description="torch (the model in PyTorch) or onnx (its exported graph, torch-free)")
    dataset: str = Field(description="the dataset it was trained on (a folder's name only, never its path); a union "
                         "of corpora (data.union) as their names joined by ' + '")
    test_scores: dict[str, float] = Field(
        default_factory=dict, description="test score of each corpus it was trained on, by the corpus's name (percent: "
        "strict entity F1, or a classifier's accuracy); empty when the model directory has no metrics"
    )
    task: str = Field(description="tagging or classification")
    labels: list[str] = Field(description="entity types (tagging) or class labels (classification) it predicts")
    uptime_s: float
    pid: int = Field(description="the process that answered: with `zhner serve --workers N`, one of N workers")
    model_calls: int = Field(description="batched model calls since start")
    pending_texts: int = Field(description="texts waiting for the model now")
    limits: Limits


class Labels(BaseModel):
    labels: list[str]
    tags: list[str] | None = None
    scheme: str | None = None


class RequestError(Exception):
    def __init__(self, status: int, error: str, field: str | None = None):
        self.status, self.error, self.field = status, error, field


def _error(status: int, error: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "field": field}, status_code=status, headers=headers)


# -- parsing ----------------------------------------------------------------------------------------------------------
class Disconnected(Exception):
    """The client went away before its answer: there is no one to answer, and nothing to log but a line."""


async def read_body(request: Request, limit: int, timeout_s: float = 10.0) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes (declared or streamed), and with 408 when it has
    not all arrived within `timeout_s` (a client trickling it byte by byte would hold a connection for ever)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"body of {declared} bytes is over the limit of {limit} bytes", "body")
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"body is over the limit of {limit} bytes", "body")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(408, f"body not received within {timeout_s:g} s ({size} bytes arrived)", "body") from None
    except ClientDisconnect:
        raise Disconnected(f"client disconnected after {size} of {declared or 'unknown'} body bytes") from None
    return b"".join(chunks)


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client has gone away. Called once the body is read, so the disconnect is the only message left."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, or Disconnected (with `work` cancelled) if the client goes away first: a client that sends a
    20,000-character text and hangs up does not leave its pieces in the queue for others to wait behind."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        raise Disconnected("client disconnected before its texts were tagged")
    return task.result()


def parse_request(body: bytes, content_type: str | None, limits: Limits, schema: type[BaseModel] = NERRequest) -> Any:
    """Bytes -> a validated request, or a RequestError naming the field at fault."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json":
        raise RequestError(415, f"content type must be application/json, not {media or 'missing'!r}", "content-type")
    try:
        decoded = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(400, f"body is not valid UTF-8 (byte {body[exc.start]:#04x} at offset {exc.start})", "body") from None
    try:
        payload = json.loads(decoded)
    except json.JSONDecodeError as exc:
        raise RequestError(400, f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", "body") from None
    except RecursionError:  # e.g. 100,000 nested '[': the parser recurses once per level
        raise RequestError(400, "body is not valid JSON for this service: arrays or objects nested too deeply", "body") from None
    except ValueError:  # an integer of over 4,300 digits, which Python refuses to convert
        raise RequestError(400, "body is not valid JSON for this service: a number too long to read", "body") from None
    try:
        request = schema.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        raise RequestError(422, first["msg"], _field_name(first["loc"])) from None
    if request.texts is not None and len(request.texts) > limits.max_texts:
        raise RequestError(413, f"{len(request.texts)} texts is over the limit of {limits.max_texts}", "texts")
    if request.texts is not None and len(request.texts) > limits.max_pending_texts:  # 503 would say "retry": it never fits
        raise RequestError(
            413, f"{len(request.texts)} texts can never fit the queue of {limits.max_pending_texts} (max_pending_texts)", "texts"
        )
    for field, text in _named_texts(request):
        _check_text(text, field, limits)
    return request


NBEST_CHUNK = 16  # texts per n-best model call: short calls, so that micro-batches run between them


async def _nbest(
    batcher: MicroBatcher, tagger, texts: list[str], k: int, translations: list[str | None] | None = None
) -> list[list[dict]]:
    """Tagger.nbest on the batcher's model thread, a few texts per call between its micro-batches (one model call at a
    time, the backlog limit and the request timeout hold as for tagging); a text of more than one piece is a 422."""
    for i, text in enumerate(texts):
        if len(text) > tagger.piece_chars():
            field = "text" if len(texts) == 1 else f"texts[{i}]"
            raise RequestError(422, f"nbest takes texts of at most {tagger.piece_chars()} characters, not {len(text)}", field)
    ranked: list[list[dict]] = []
    for start in range(0, len(texts), NBEST_CHUNK):
        chunk = texts[start : start + NBEST_CHUNK]
        given = translations[start : start + NBEST_CHUNK] if translations is not None else None
        ranked += await batcher.run_alone(functools.partial(tagger.nbest, chunk, k, translations=given), len(chunk))
    return ranked


def _translations(request: NERRequest, tagger: Any) -> list[str | None] | None:
    """The request's translations, one per text (None: it gives none), or a 422 naming the field: `translation` goes
    with `text`, `translations` with `texts` (as many), and only a model with a translation field (ACT-S) takes them."""
    if request.translation is None and request.translations is None:
        return None
    if not hasattr(tagger, "check_translations"):
        field = "translation" if request.translation is not None else "translations"
        raise RequestError(422, "this model reads no translations", field)
    if request.text is not None and request.translations is not None:
        raise RequestError(422, "'translations' goes with 'texts'; with 'text' give 'translation'", "translations")
    if request.texts is not None and request.translation is not None:
        raise RequestError(422, "'translation' goes with 'text'; with 'texts' give 'translations', one per text", "translation")
    field = "translation" if request.text is not None else "translations"
    translations = [request.translation] if request.text is not None else list(request.translations or [])
    try:
        tagger.check_translations(translations, 1 if request.text is not None else len(request.texts or []))
    except ZhnerError as exc:
        raise RequestError(422, str(exc), field) from None
    return translations


def _field_name(loc: tuple) -> str:
    """('texts', 3) -> 'texts[3]'; () -> 'body' (the payload as a whole is wrong)."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def _named_texts(request: Any) -> list[tuple[str, str]]:
    """Every text of the request with its field name, translations included (checked against the same limits)."""
    if request.text is not None:
        named = [("text", request.text)]
    else:
        named = [(f"texts[{i}]", t) for i, t in enumerate(request.texts or [])]
    if getattr(request, "translation", None) is not None:
        named.append(("translation", request.translation))
    named += [(f"translations[{i}]", t) for i, t in enumerate(getattr(request, "translations", None) or []) if t is not None]
    return named


def _check_text(text: str, field: str, limits: Limits) -> None:
    if len(text) > limits.max_text_chars:
        raise RequestError(413, f"text of {len(text)} characters is over the limit of {limits.max_text_chars}", field)
    # JSON allows "\ud800" escapes, but such a string cannot be written back as UTF-8
    bad = lone_surrogate(text)
    if bad is not None:
        raise RequestError(422, f"lone surrogate U+{ord(bad):04X} at character {text.index(bad)} (not a Unicode character)", field)


def dataset_name(dataset: str) -> str:
    """A registry name as is; a folder or file the model was trained from by its last component only: a public
    service should not show its host's file layout."""
    return PurePath(dataset.replace("\\", "/")).name or dataset


# -- the app --------------------------------------------------------------------------------------------------------
def create_app(tagger: Any, limits: Limits | None = None, served: ServedModel | None = None) -> FastAPI:
    """A FastAPI app serving `tagger`: a zhner.tagger.Tagger or Classifier, or anything with their `split` /
    `piece_spans` / `join` (zhner.serve.batcher.Pieces) and `record` described by `served` (the torch-free runtime's
    tagger: zhner.serve.workers.load_served)."""
    limits = limits or Limits()
    served = served or ServedModel.of_pipeline(tagger)
    batcher = MicroBatcher(
        tagger, limits.batch_texts, limits.batch_wait_ms, limits.max_pending_texts, timeout_s=limits.request_timeout_s
    )
    started = time.monotonic()
    kind, tags, labels = served.kind, served.tags, served.labels
    endpoint = "/v1/ner" if kind == "tagging" else "/v1/classify"

    def wrong_endpoint() -> JSONResponse:
        return _error(404, f"this service runs a {kind} model: POST {endpoint}", None)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await batcher.start()
        # The model's objects (lexicon, vocabularies, weights' wrappers) live as long as the service: frozen out of the
        # cyclic collector, whose full passes over them take 60-90 ms (zh-small's runtime, gc.collect() timed) while
        # no request is answered; the load test's p99 did not move beyond its run-to-run noise either way
        gc.collect()
        gc.freeze()
        yield
        gc.unfreeze()
        await batcher.stop()

    swagger = swagger_ui_files()
    # FastAPI's own /docs and /redoc load their scripts from a CDN: a blank page on a host with no internet. /docs is
    # served below from local files instead (FastAPI's CDN page only when fastapi-swagger is missing); /redoc is off
    app = FastAPI(title="zhner", version=__version__, lifespan=lifespan, description="Chinese named entity recognition, "
                  "English tagging and sentence classification with zhner's models.",
                  docs_url=None if swagger else "/docs", redoc_url=None)
    app.state.batcher = batcher
    app.state.limits = limits
    errors = {code: {"model": ErrorBody} for code in (400, 408, 413, 415, 422, 503)}

    # summaries: the titles Swagger UI shows at /docs (FastAPI would title them by function name: "Ner")
    @app.post("/v1/ner", response_model=Record | Records, responses=errors, openapi_extra=_request_body_spec(),
              summary="Tag the entities of one text or several")
    async def ner(request: Request):
        """Entities in one text (`{"text": ...}` -> one record) or several (`{"texts": [...]}` -> `{"results": [...]}`)."""
        if kind != "tagging":
            return wrong_endpoint()
        try:
            body = await read_body(request, limits.max_body_bytes, limits.read_timeout_s)
            parsed = parse_request(body, request.headers.get("content-type"), limits)
            if not served.crf and (parsed.confidence or parsed.nbest):
                option = "confidence" if parsed.confidence else "nbest"
                raise RequestError(422, f"{option} needs a CRF head; this model has a softmax head", option)
            if parsed.nbest and not served.nbest:
                raise RequestError(422, f"nbest needs the PyTorch runtime; this service runs the {served.runtime} runtime",
                                   "nbest")
            texts = [parsed.text] if parsed.text is not None else list(parsed.texts or [])
            translations = _translations(parsed, tagger)
            entities = await unless_disconnected(request, batcher.submit(texts, parsed.confidence, translations))
            if parsed.nbest:
                ranked = await unless_disconnected(request, _nbest(batcher, tagger, texts, parsed.nbest, translations))
            else:
                ranked = None
        except RequestError as exc:  # after a 408 the rest of the body may still come: the connection is unusable
            return _error(exc.status, exc.error, exc.field, {"Connection": "close"} if exc.status == 408 else None)
        except Disconnected as exc:  # one line in the log, not the ASGI stack
            log.info("%s", exc)
            return Response(status_code=499)
        except Overloaded as exc:
            return _error(503, f"server busy: {exc}", None, {"Retry-After": "1"})
        records = [{"text": t, "entities": e} for t, e in zip(texts, entities)]
        if ranked is not None:
            records = [{**r, "nbest": paths} for r, paths in zip(records, ranked)]
        return JSONResponse(records[0] if parsed.text is not None else {"results": records})

    @app.post("/v1/classify", response_model=Classified | ClassifiedRecords, responses=errors,
              summary="Classify one text or several",
              openapi_extra=_request_body_spec("ClassifyRequest"))
    async def classify(request: Request):
        """The label of one text (`{"text": ...}` -> one record) or several (`{"texts": [...]}` -> `{"results": [...]}`),
        with every label's probability."""
        if kind != "classification":
            return wrong_endpoint()
        try:
            body = await read_body(request, limits.max_body_bytes, limits.read_timeout_s)
            parsed = parse_request(body, request.headers.get("content-type"), limits, ClassifyRequest)
            texts = [parsed.text] if parsed.text is not None else list(parsed.texts or [])
            predictions = await unless_disconnected(request, batcher.submit(texts))
        except RequestError as exc:
            return _error(exc.status, exc.error, exc.field, {"Connection": "close"} if exc.status == 408 else None)
        except Disconnected as exc:
            log.info("%s", exc)
            return Response(status_code=499)
        except Overloaded as exc:
            return _error(503, f"server busy: {exc}", None, {"Retry-After": "1"})
        records = [tagger.record(t, p) for t, p in zip(texts, predictions)]
        return JSONResponse(records[0] if parsed.text is not None else {"results": records})

    @app.get("/health", response_model=Health, summary="Liveness, and the model being served")
    async def health() -> dict:
        """Liveness and what is being served."""
        corpora = [dataset_name(name) for name in served.corpora]
        return {
            "status": "ok",
            "version": __version__,
            "model": served.model,
            "runtime": served.runtime,
            "dataset": " + ".join(corpora),
            "test_scores": test_scores_by_corpus(served.metrics, corpora),
            "task": kind,
            "labels": labels,
            "uptime_s": round(time.monotonic() - started, 3),
            "pid": os.getpid(),
            "model_calls": batcher.model_calls,
            "pending_texts": batcher.pending_texts,
            "limits": limits,
        }

    # load balancers probe with HEAD (405 before); the body is left out by the server, the headers are GET's
    app.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)

    @app.get("/v1/labels", response_model=Labels, summary="The model's entity types, tags and scheme")
    async def get_labels() -> dict:
        """Entity types, and the tag set and scheme the model decodes with (a classifier: its labels)."""
        if kind != "tagging":
            return {"labels": labels}
        return {"labels": labels, "tags": tags, "scheme": served.scheme}

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:  # 404, 405 in our error shape
        return _error(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        return _error(422, str(first.get("msg")), _field_name(tuple(first.get("loc", ()))))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        return _error(500, f"internal error: {type(exc).__name__}")

    def openapi() -> dict:
        # the request body is parsed by hand (see the module docstring), so its schema is added here
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            for schema in (NERRequest, ClassifyRequest):
                schemas[schema.__name__] = schema.model_json_schema(ref_template="#/components/schemas/{model}")
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    if swagger:
        @app.get("/docs", include_in_schema=False)
        async def swagger_ui(request: Request) -> HTMLResponse:
            root = request.scope.get("root_path", "").rstrip("/")  # behind a proxy that mounts the service under a path
            return get_swagger_ui_html(
                openapi_url=root + app.openapi_url, title="zhner - Swagger UI",
                swagger_js_url=f"{root}/docs/swagger-ui-bundle.js", swagger_css_url=f"{root}/docs/swagger-ui.css",
                swagger_favicon_url=f"{root}/docs/favicon-32x32.png",
                swagger_ui_parameters={"validatorUrl": None},  # no call to swagger.io's online validator
            )

        @app.get("/docs/{name}", include_in_schema=False)
        async def swagger_file(name: str) -> Response:
            if name not in swagger:
                return _error(404, f"no such file: /docs/{name}", None)
            path, media_type = swagger[name]
            return Response(path.read_bytes(), media_type=media_type, headers={"Cache-Control": "public, max-age=86400"})

    return app


SWAGGER_FILES = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8", "swagger-ui.css": "text/css; charset=utf-8",
                 "favicon-32x32.png": "image/png"}


def swagger_ui_files() -> dict[str, tuple[Any, str]] | None:
    """Swagger UI's files as the fastapi-swagger package ships them (name -> (path, media type)), or None when it is
    not installed or lacks one of them. Swagger UI itself is Apache-2.0; the package around it, MIT."""
    try:
        from importlib import resources

        root = resources.files("fastapi_swagger.resources")
    except (ModuleNotFoundError, TypeError):
        log.warning("fastapi-swagger is not installed (pip install 'zhner[serve]'): /docs loads Swagger UI from a CDN")
        return None
    files = {name: (root / name, media_type) for name, media_type in SWAGGER_FILES.items()}
    if not all(path.is_file() for path, _ in files.values()):
        log.warning("fastapi-swagger ships no %s: /docs loads Swagger UI from a CDN", ", ".join(SWAGGER_FILES))
        return None
    return files


def _request_body_spec(schema: str = "NERRequest") -> dict:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
        }
    }

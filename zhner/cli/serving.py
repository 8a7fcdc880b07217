"""`zhner serve`: the HTTP service, one process or several workers on one port."""
from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from zhner.cli.common import (
    MAX_SERVE_WORKERS, Runtime, choice_option, echo_err, export_graph, model_option, resolve_model_dir, torch_device,
)
from zhner.errors import ZhnerError

if TYPE_CHECKING:
    from zhner.serve.app import Limits


def serve(
    model_dir: Optional[str] = model_option(),
    host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0: every interface)"),
    port: int = typer.Option(8000, min=0, max=65535),
    max_body_bytes: int = typer.Option(1_048_576, min=1, help="largest request body (413 above)"),
    max_text_chars: int = typer.Option(20_000, min=1, help="longest text in characters (413 above)"),
    max_texts: int = typer.Option(256, min=1, help="most texts per request (413 above)"),
    batch_texts: int = typer.Option(32, min=1, help="texts of concurrent requests tagged in one model call"),
    batch_wait_ms: float = typer.Option(2.0, min=0, help="longest wait for more requests before a model call"),
    max_pending_texts: int = typer.Option(4096, min=1, help="queued texts before requests get 503"),
    read_timeout_s: float = typer.Option(10.0, min=0.001, help="seconds a client has to send a request's headers, and again its body (408 after)"),
    request_timeout_s: float = typer.Option(30.0, min=0.001, help="seconds a request may wait for and use the model (503 after)"),
    access_log: bool = typer.Option(False, "--access-log", help="log every request to stderr"),
    workers: int = typer.Option(
        1, "--workers", min=1, max=MAX_SERVE_WORKERS, help="processes answering on the port, each with its own copy of "
        "the model (about one per CPU core; uvicorn's supervisor starts, restarts and stops them)"
    ),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, or auto (a GPU when CUDA is available)"),
    runtime: Runtime = choice_option(
        Runtime.torch, "--runtime", help="torch (the model in PyTorch), or onnx: its exported graph run by zhner.runtime "
        "on the CPU, the workers never importing torch (character taggers; exported once into the user cache if the "
        "model directory has no model.onnx, which needs torch; no nbest, no translations)"
    ),
) -> None:
    """HTTP service: POST /v1/ner (taggers) or /v1/classify (classifiers) {"text": ...} or {"texts": [...]}; GET /health;
    OpenAPI at /openapi.json."""
    try:  # the `serve` extra, before anything else (its modules are imported again where they are used)
        import uvicorn  # noqa: F401

        from zhner.serve.app import Limits
        from zhner.serve.server import protocol_class  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("fastapi", "uvicorn", "starlette"):
            raise ZhnerError(f"the HTTP service needs {exc.name}: pip install 'zhner[serve]'") from None
        raise

    _check_listen(host, port)  # before the model loads; uvicorn would log its own error and exit 3
    path = resolve_model_dir(model_dir)
    limits = Limits(
        max_body_bytes=max_body_bytes,
        max_text_chars=max_text_chars,
        max_texts=max_texts,
        batch_texts=batch_texts,
        batch_wait_ms=batch_wait_ms,
        max_pending_texts=max_pending_texts,
        read_timeout_s=read_timeout_s,
        request_timeout_s=request_timeout_s,
    )
    if runtime == Runtime.onnx:
        _prepare_graph(path, device)
    elif device != "cpu" or workers == 1:  # the supervisor of several workers never imports torch (~300 MB) for cpu
        torch_device(device)  # a bad --device fails here, once, rather than in every worker
    if workers > 1:
        _serve_workers(path, device, limits, workers, host, port, access_log, runtime)
    else:
        _serve_one(path, device, limits, host, port, access_log, runtime)


def _prepare_graph(path: Path, device: str) -> None:
    """--runtime onnx: the model's graph made (once, into the user cache) before any worker starts, so that each
    worker only reads it; options the runtime cannot honour are errors."""
    from zhner.info import task_kind
    from zhner.runtime.cache import graph_path

    if device != "cpu":
        raise ZhnerError(f"--device {device}: not with --runtime onnx (the exported graph runs on the CPU); use --runtime torch")
    if task_kind(path) != "tagging":
        raise ZhnerError("--runtime onnx serves taggers; serve a classifier with --runtime torch", path)
    graph_path(path, export_graph)


def _serve_workers(
    path: Path, device: str, limits: Limits, workers: int, host: str, port: int, access_log: bool, runtime: Runtime
) -> None:
    """Several processes on one port, started, restarted and stopped by uvicorn's supervisor."""
    from zhner.info import task_kind
    from zhner.serve.workers import serve_workers

    kind = task_kind(path)  # a missing or foreign directory fails here, before any worker starts
    echo_err(f"serving {path} on http://{host}:{port} with {workers} workers ({_endpoints(kind, runtime)})")
    serve_workers(path, device, limits, workers, host, port, access_log, runtime.value)


def _serve_one(path: Path, device: str, limits: Limits, host: str, port: int, access_log: bool, runtime: Runtime) -> None:
    """This process answers: the model loaded here, uvicorn run until it is stopped."""
    import uvicorn

    from zhner.serve.app import create_app
    from zhner.serve.server import protocol_class
    from zhner.serve.workers import load_served

    model, served = load_served(path, device, runtime.value)
    app = create_app(model, limits, served)
    echo_err(f"serving {path} on http://{host}:{port} ({_endpoints(served.kind, runtime)})")
    log_level = "info" if access_log else "warning"
    http = protocol_class(limits.read_timeout_s)
    with _exit_cleanly_after_draining():
        uvicorn.run(app, host=host, port=port, http=http, access_log=access_log, log_level=log_level)


@contextlib.contextmanager
def _exit_cleanly_after_draining():
    """uvicorn stops on SIGINT / SIGTERM after draining its requests, then raises the signal again for the handler it
    found: Python's Ctrl-C or the CLI's SIGTERM handler would turn a clean stop into exit 130 / 143. Here that second
    delivery is a no-op, so `zhner serve` exits 0 after a graceful stop, with one worker as with several."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in stops}
    for sig in stops:
        signal.signal(sig, lambda signum, frame: None)  # uvicorn installs its own for the time it serves
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _endpoints(kind: str, runtime: Runtime = Runtime.torch) -> str:
    where = ", the onnx runtime" if runtime == Runtime.onnx else ""
    return f"POST {'/v1/ner' if kind == 'tagging' else '/v1/classify'}, GET /health, docs at /docs{where}"


def _check_listen(host: str, port: int) -> None:
    """Fail early, with one line, on an address the service cannot listen on (unknown host, port in use)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            # as uvicorn binds: a socket still closing from an earlier run is no obstacle
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise ZhnerError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None

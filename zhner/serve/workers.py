"""`zhner serve --workers N`: N processes answer on one port, each with its own copy of the model.

uvicorn's own process supervisor does the work: the parent binds the listening sockets and spawns N workers that
accept on them; it restarts a worker that dies and stops them all on SIGINT / SIGTERM. On Linux each worker has a socket
of its own on the one port (SO_REUSEPORT), and the kernel spreads new connections over them by address: with one
socket shared by all, whichever worker woke first took the connections of a burst (measured: 32 keep-alive clients
arriving at once held 32 of their connections on one of two workers, the other idle). Elsewhere the workers share one
socket. zhner adds only what a spawned worker needs to build its app: the model directory, device and limits
travel in the environment variable ZHNER_SERVE_WORKER, and `app_from_environment` (the app factory uvicorn calls in
each worker) loads the model once there. A worker whose model cannot load prints one line and exits with uvicorn's
startup-failure code, which makes the parent stop the others (`serve_workers` then raises that line).

On Linux each worker also asks the kernel for SIGTERM when its parent dies, so that even a SIGKILLed parent leaves no
worker behind holding the port. A worker that dies is logged at WARNING with its replacement (uvicorn says so at INFO
only, below `zhner serve`'s log level).
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from zhner.errors import ZhnerError
from zhner.fileio import read_committed, read_model_mapping
from zhner.info import trained_on
from zhner.serve.app import Limits, ServedModel, create_app
from zhner.serve.server import protocol_class

SETTINGS_ENV = "ZHNER_SERVE_WORKER"
FACTORY = "zhner.serve.workers:app_from_environment"
STARTUP_FAILURE = 3  # = uvicorn.config.STARTUP_FAILURE: the supervisor stops instead of restarting the worker
PR_SET_PDEATHSIG = 1  # linux/prctl.h
log = logging.getLogger("uvicorn.error")  # uvicorn's own: its handler and format, at the server's log level


def worker_settings(model_dir: Path, device: str, limits: Limits, runtime: str = "torch") -> str:
    """What each worker needs to build its app, as the JSON that ZHNER_SERVE_WORKER carries."""
    return json.dumps({"model_dir": str(model_dir), "device": device, "limits": limits.model_dump(), "runtime": runtime})


def die_with_parent() -> None:
    """Linux: have the kernel send this process SIGTERM when its parent exits, however it exits (elsewhere: nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # a libc without prctl: the supervisor's own shutdown still stops the workers
        pass
    if os.getppid() == 1:  # the parent was already gone before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def load_pipeline(model_dir: str | Path, device: str) -> Any:
    """The model directory's pipeline on `device`: what each worker serves."""
    import zhner
    from zhner.device import resolve_device

    torch_device = resolve_device(device)
    pipeline = zhner.load(model_dir)
    pipeline.model.to(torch_device)
    return pipeline


def load_served(model_dir: str | Path, device: str, runtime: str = "torch") -> tuple[Any, ServedModel]:
    """What a service answers with, and its description. runtime "torch": the model directory's pipeline on `device`;
    "onnx": its exported graph run by zhner.runtime on the CPU, torch never imported (the graph must be in the
    directory or the cache already: `zhner serve --runtime onnx` exports it once before the workers start)."""
    if runtime == "torch":
        pipeline = load_pipeline(model_dir, device)
        return pipeline, ServedModel.of_pipeline(pipeline)
    from zhner.runtime import load_runtime

    tagger = load_runtime(str(model_dir))
    config, metrics = read_committed(tagger.directory, _config_and_metrics)  # the files of one save
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    served = ServedModel(
        kind="tagging", tags=tagger.tags, scheme=tagger.task.scheme, model=str(model.get("name")),
        corpora=trained_on(data), metrics=metrics, crf=tagger.has_crf, nbest=False, runtime="onnx",
    )
    return tagger, served


def _config_and_metrics(path) -> tuple[dict, dict]:
    config = read_model_mapping(path("config.yaml"), "yaml")
    metrics = read_model_mapping(path("metrics.json"), "json") if os.path.lexists(path("metrics.json")) else {}
    return config, metrics


def app_from_environment() -> Any:
    """uvicorn's app factory in each worker process: the app serving ZHNER_SERVE_WORKER's model."""
    die_with_parent()
    settings = json.loads(os.environ[SETTINGS_ENV])
    try:
        model, served = load_served(settings["model_dir"], settings["device"], settings.get("runtime", "torch"))
    except ZhnerError as exc:
        print(f"error: worker {os.getpid()}: {exc}", file=sys.stderr, flush=True)
        sys.exit(STARTUP_FAILURE)
    return create_app(model, Limits(**settings["limits"]), served)


def serve_workers(
    model_dir: Path, device: str, limits: Limits, workers: int, host: str, port: int, access_log: bool = False,
    runtime: str = "torch",
) -> None:
    """Serve with `workers` processes on host:port until SIGINT / SIGTERM; ZhnerError when the workers could not start."""
    import uvicorn

    os.environ[SETTINGS_ENV] = worker_settings(model_dir, device, limits, runtime)  # spawned workers inherit the environment
    config = uvicorn.Config(
        FACTORY, factory=True, host=host, port=port, workers=workers, http=protocol_class(limits.read_timeout_s),
        access_log=access_log, log_level="info" if access_log else "warning",
    )
    if reuse_port_spreads():
        own = worker_sockets(host, port, workers, config.backlog)
        supervisor = supervisor_class()(config, sockets=own[:1], per_worker=[[s] for s in own])
    else:
        supervisor = supervisor_class()(config, sockets=[config.bind_socket()])
    supervisor.run()
    if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
        raise ZhnerError("the workers could not start (see the worker's error above)")


def reuse_port_spreads() -> bool:
    """Whether sockets on one port with SO_REUSEPORT share its connections out: Linux (3.9 on). BSD and macOS accept
    the option without balancing connections that way, Windows has none."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def worker_sockets(host: str, port: int, n: int, backlog: int) -> list[socket.socket]:
    """n listening sockets on host:port, each with SO_REUSEPORT: one per worker. Port 0 takes a free port for the first
    and the others join it. The CLI has already checked that no other process listens there (zhner.cli.serving's
    probe binds without SO_REUSEPORT, so it fails on a port that another server shares out this way too)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]  # port 0: the others take the port the first was given
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ZhnerError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    return sockets


def exit_reason(exitcode: int | None) -> str:
    """How a process ended, in words: "killed by SIGKILL", "exit code 1"."""
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def supervisor_class() -> type:
    """uvicorn's Multiprocess supervisor, which gives worker i the sockets `per_worker[i]` (its own SO_REUSEPORT
    socket; a replacement takes the same one, so connections queued there meanwhile are not lost) and logs a worker's
    death and its replacement at WARNING. Without per_worker every worker takes `sockets`, as uvicorn's own."""
    from uvicorn.supervisors.multiprocess import Multiprocess, Process

    class Supervisor(Multiprocess):
        def __init__(self, config: Any, sockets: list[socket.socket], per_worker: list[list[socket.socket]] | None = None):
            super().__init__(config, sockets)
            self.per_worker = per_worker

        def _process(self, slot: int) -> Any:
            process = Process(self.config, self.per_worker[slot] if self.per_worker else self.sockets)
            process.start()
            return process

        def init_processes(self) -> None:
            self.processes = [self._process(slot) for slot in range(self.processes_num)]

        def restart_all(self) -> None:  # SIGHUP: each worker replaced once its replacement is ready
            for slot, old in enumerate(self.processes):
                if self.should_exit.is_set():
                    return
                new = self._process(slot)
                if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
                    new.kill()
                    new.join()
                    return
                old.terminate()
                old.join()
                self.processes[slot] = new

        def keep_subprocess_alive(self) -> None:
            if self.should_exit.is_set():
                return
            for slot, old in enumerate(self.processes):
                if old.is_alive(timeout=self.config.timeout_worker_healthcheck):
                    continue
                old.kill()  # dead, or hung: killed
                old.join()
                if old.exitcode == STARTUP_FAILURE:  # it could not load the model: neither would a new one
                    log.error("worker %s failed to start; stopping the server", old.pid)
                    self.should_exit.set()
                    return
                if self.should_exit.is_set():
                    return
                self.processes[slot] = self._process(slot)
                log.warning("worker %s died (%s); restarting it as worker %s", old.pid, exit_reason(old.exitcode),
                            self.processes[slot].pid)

    return Supervisor

"""`zhner serve --workers N` and `--device`: processes sharing one port, started, used and stopped as a user would."""
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from conftest import REPO
from test_serve import free_port, run_main
from zhner.serve import server as server_module
from zhner.tagger import Tagger


@pytest.fixture(scope="module")
def model_dir(finds_entities_model):
    return finds_entities_model  # TINY_TENER + FINDS_ENTITIES, trained once per test process (tests/conftest.py)


def start_workers(model_dir, workers: int | None = 2) -> tuple[subprocess.Popen, str]:
    """`zhner serve --workers N` (None: without --workers, one process), once it answers /health."""
    port = free_port()
    option = [] if workers is None else ["--workers", str(workers)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "zhner.cli", "serve", "-m", str(model_dir), "--port", str(port), *option],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        assert proc.poll() is None, proc.stderr.read()
        try:
            httpx.get(f"{url}/health", timeout=2).raise_for_status()
            return proc, url
        except httpx.TransportError:
            assert time.time() < deadline, f"zhner serve {' '.join(option)} did not start"
            time.sleep(0.2)


def worker_pids(url: str, workers: int, tries: int = 400) -> set[int]:
    """The pids that answer /health, over new connections made 8 at a time (the kernel gives each connection to one
    worker), until `workers` distinct ones have answered."""
    seen: set[int] = set()
    with ThreadPoolExecutor(8) as pool:
        for _ in range(tries // 8):
            seen |= set(pool.map(lambda _: httpx.get(f"{url}/health", timeout=10).json()["pid"], range(8)))
            if len(seen) >= workers:
                break
    return seen


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids: set[int], seconds: float = 20) -> set[int]:
    deadline = time.time() + seconds
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def test_two_workers_answer_on_one_port_and_stop_together(model_dir):
    """Both workers serve (two pids answer /health), each tags as the model does, and Ctrl-C stops all of them."""
    proc, url = start_workers(model_dir)
    try:
        pids = worker_pids(url, 2)
        assert len(pids) == 2 and proc.pid not in pids, pids
        # keep-alive connections opened together spread over both workers (each has its own SO_REUSEPORT socket);
        # from one shared socket a burst could land on one worker alone. 24 connections hashed over two sockets: fewer
        # than 3 on one of them has probability below 1e-4
        clients = [httpx.Client(base_url=url, timeout=10) for _ in range(24)]
        try:
            with ThreadPoolExecutor(24) as pool:
                served_by = list(pool.map(lambda c: c.get("/health").json()["pid"], clients))
            assert all(c.get("/health").json()["pid"] == pid for c, pid in zip(clients, served_by))  # kept alive
        finally:
            for c in clients:
                c.close()
        if sys.platform.startswith("linux"):  # elsewhere the workers share one socket (zhner.serve.workers)
            assert {p: served_by.count(p) >= 3 for p in pids} == {p: True for p in pids}, served_by
        texts = ["张三毕业于北京大学。", "李四在上海工作。"]
        answers = [httpx.post(f"{url}/v1/ner", json={"texts": texts}, timeout=30) for _ in range(6)]
        expected = Tagger.load(model_dir).predict(texts, confidence=False)  # the service scores on request only
        assert all(r.status_code == 200 and [x["entities"] for x in r.json()["results"]] == expected for r in answers)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert wait_gone(pids) == set()  # no orphan worker holds the port
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT spreads connections on Linux only")
def test_worker_sockets_share_one_port_and_refuse_a_taken_one():
    """One listening socket per worker on one port (port 0: the first takes a free one, the others join it); the kernel
    hands connections to all of them; a port another process listens on is a one-line ZhnerError."""
    import socket

    from zhner.errors import ZhnerError
    from zhner.serve.workers import worker_sockets

    sockets = worker_sockets("127.0.0.1", 0, 3, 64)
    try:
        ports = {s.getsockname()[1] for s in sockets}
        assert len(ports) == 1 and all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in sockets)
        port = ports.pop()
        conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
        accepted, per_socket = [], []
        for s in sockets:
            s.setblocking(False)
            before = len(accepted)
            while True:
                try:
                    accepted.append(s.accept()[0])
                except BlockingIOError:
                    break
            per_socket.append(len(accepted) - before)
        assert sum(per_socket) == 30 and min(per_socket) > 0, per_socket  # 30 hashed over 3: none empty, p > 0.999
        for c in conns + accepted:
            c.close()
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            with pytest.raises(ZhnerError, match="cannot listen there"):
                worker_sockets("127.0.0.1", taken.getsockname()[1], 2, 64)
    finally:
        for s in sockets:
            s.close()


def test_workers_die_with_a_killed_parent(model_dir):
    """SIGKILL leaves the supervisor no chance to stop its workers: the kernel does (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    proc, url = start_workers(model_dir)
    try:
        pids = worker_pids(url, 2)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert pids and wait_gone(pids) == set()


def test_workers_that_cannot_load_the_model_stop_the_server(model_dir, tmp_path):
    """A directory that looks like a model but whose weights are corrupt: each worker fails to load it, the parent
    stops (no restart loop) and exits non-zero with one-line errors, no traceback."""
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    proc = subprocess.run(
        [sys.executable, "-m", "zhner.cli", "serve", "-m", str(broken), "--port", str(free_port()), "--workers", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors and "corrupt weights file" in errors[0] and errors[-1].startswith("error: the workers could not start")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "0"], "Invalid value for '--workers'"),
        (["--workers", "two"], "Invalid value for '--workers'"),
        (["--device", "tpu"], "--device must be one of auto, cpu, cuda (or cuda:N), not 'tpu'"),
    ],
)
def test_bad_workers_or_device_is_one_line(tmp_path, monkeypatch, capsys, args, message):
    code, err = run_main(monkeypatch, capsys, "serve", "-m", tmp_path, "--port", free_port(), *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_device_without_cuda_is_one_line(tmp_path, monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, err = run_main(monkeypatch, capsys, "serve", "-m", tmp_path, "--port", free_port(), "--device", "cuda")
    assert code == 2 and err.startswith("error: --device cuda: no CUDA device is available") and len(err.splitlines()) == 1


def test_missing_model_fails_before_any_worker_starts(tmp_path, monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "serve", "-m", tmp_path / "none", "--port", free_port(), "--workers", "2")
    assert code == 2 and err.strip().startswith("error: ") and "no such model directory" in err


def test_protocol_class_pickles_by_name():
    """uvicorn pickles its config, our protocol class included, into each spawned worker: a fresh interpreter must
    find the class by name (module __getattr__ rebuilds it), with its deadline."""
    cls = server_module.protocol_class(2.5)
    assert pickle.loads(pickle.dumps(cls)) is cls
    check = f"import pickle, sys; cls = pickle.loads(sys.stdin.buffer.read()); print(cls.__name__, cls.header_timeout_s)"
    out = subprocess.run([sys.executable, "-c", check], input=pickle.dumps(cls), capture_output=True, cwd=REPO, check=True)
    assert out.stdout.decode().split() == [cls.__name__, "2.5"]


def test_load_test_counts_every_process_of_the_server():
    """benchmarks/service/load_test.py sums RSS and CPU over the server's process tree (the supervisor and its workers)."""
    sys.path.insert(0, str(REPO / "benchmarks" / "service"))
    from load_test import process_tree, rss_mb, total

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pids = process_tree(os.getpid())
        assert pids[0] == os.getpid() and child.pid in pids
        assert total(rss_mb, os.getpid()) >= rss_mb(os.getpid()) + rss_mb(child.pid) - 1  # rounding
    finally:
        child.kill()
        child.wait()


def drained_request(url: str, results: list) -> threading.Thread:
    """A request of 200 texts of 1,000 characters, in a thread: in flight when the server is told to stop."""
    texts = ["张三毕业于北京大学，现任中国人民银行行长。" * 48] * 200
    thread = threading.Thread(target=lambda: results.append(httpx.post(f"{url}/v1/ner", json={"texts": texts}, timeout=120)))
    thread.start()
    return thread


def sigterm(proc: subprocess.Popen) -> str:
    """SIGTERM to the server; its stderr once it has exited."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=120)[1]


def sigterm_during_a_request(proc: subprocess.Popen, url: str) -> tuple[list, str]:
    """SIGTERM half a second into a drained_request: the request's response (if it got one) and the server's stderr."""
    results: list = []
    try:
        thread = drained_request(url, results)
        time.sleep(0.5)
    finally:
        err = sigterm(proc)
    thread.join(120)
    return results, err


def test_a_killed_worker_is_logged_and_replaced_and_sigterm_drains(model_dir):
    """A SIGKILLed worker: the supervisor logs its death and its replacement at WARNING, and the replacement serves.
    SIGTERM then lets an in-flight request finish and the server exits 0. The supervisor never loads torch."""
    proc, url = start_workers(model_dir)
    try:
        pids = worker_pids(url, 2)
        maps = Path(f"/proc/{proc.pid}/maps")
        if maps.exists():
            assert "libtorch" not in maps.read_text()  # ~300 MB it would hold for nothing
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        deadline = time.time() + 120
        new: set[int] = set()
        while not new:
            assert time.time() < deadline, "the killed worker was not replaced"
            new = worker_pids(url, 1, tries=8) - pids
    except BaseException:
        sigterm(proc)
        raise
    results, err = sigterm_during_a_request(proc, url)
    assert proc.returncode == 0, err
    assert results and results[0].status_code == 200 and len(results[0].json()["results"]) == 200
    replacement = next(iter(new))
    assert f"WARNING:  worker {victim} died (killed by SIGKILL); restarting it as worker {replacement}" in err.splitlines()
    assert "Traceback" not in err and wait_gone(pids | new) == set()


def test_one_worker_drains_and_exits_0_on_sigterm(model_dir):
    """Without --workers, SIGTERM stops the server as Ctrl-C does: the request in flight is answered, exit 0 (uvicorn
    raises the signal again once it has stopped; that is not a failure)."""
    proc, url = start_workers(model_dir, workers=None)
    results, err = sigterm_during_a_request(proc, url)
    assert proc.returncode == 0, err
    assert results and results[0].status_code == 200
    assert "Traceback" not in err and "terminated" not in err

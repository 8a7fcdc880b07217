"""`zhner serve` process by process: the memory of the supervisor and of each worker, how long a SIGKILLed worker
takes to be replaced and to answer again, and how the server stops on SIGTERM.

    python benchmarks/service/serve_processes.py                      # zh-small, 1 and 2 workers -> benchmarks/results/serve_processes.json
    python benchmarks/service/serve_processes.py -m zh-accurate --workers 2 --output /tmp/serve.json

For each --workers value a fresh server starts (`python -m zhner.cli serve`, one torch thread), answers --requests
requests (so that each worker has tagged text, as in service), and then each of its processes is measured from /proc:
VmRSS (resident memory, counting pages shared with other processes in full) and Pss (proportional: shared pages
divided among the processes sharing them, so the Pss of all processes adds up to what the server takes). With several
workers, one is SIGKILLed: the time until the supervisor has started its replacement (a new pid among its children),
and until that replacement answers /health; the supervisor's stderr must hold the WARNING line naming both. Last,
SIGTERM: the exit code and how long the server took to stop. The machine's load average is recorded before and after:
on a busy machine the times stretch.
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402
from harness import load_average, process_tree, rss_mb  # noqa: E402
from load_test import start_server  # noqa: E402

REPO = harness.REPO

TEXT = "张三毕业于北京大学，现任中国人民银行行长。"


def pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no Pss")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health_pid(url: str) -> int | None:
    try:
        return httpx.get(f"{url}/health", timeout=2).json()["pid"]
    except (httpx.TransportError, ValueError, KeyError):
        return None


def answering_pids(url: str, count: int, tries: int = 400) -> set[int]:
    """The pids that answer /health over new connections, until `count` distinct ones have."""
    seen: set[int] = set()
    for _ in range(tries):
        pid = health_pid(url)
        if pid is not None:
            seen.add(pid)
        if len(seen) >= count:
            break
    return seen


def processes(supervisor: int, workers: set[int]) -> list[dict]:
    """Each process of the server: the supervisor, the workers (the pids that answer), and helpers (multiprocessing's
    resource tracker, which uvicorn's spawned workers bring along)."""
    def role(pid: int) -> str:
        return "supervisor" if pid == supervisor and supervisor not in workers else "worker" if pid in workers else "helper"

    return [{"pid": pid, "role": role(pid), "rss_mb": rss_mb(pid), "pss_mb": pss_mb(pid)} for pid in process_tree(supervisor)]


def workers_of(supervisor: int, helpers: set[int]) -> set[int]:
    return {pid for pid in process_tree(supervisor) if pid != supervisor and pid not in helpers}


def measure(model: str, workers: int, requests: int) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    proc = start_server(model, port, ["--workers", str(workers)])
    result: dict = {"workers": workers, "load_before": load_average(), "start_s": round(time.monotonic() - started, 2)}
    for _ in range(requests):  # new connections: the kernel spreads them over the workers
        httpx.post(f"{url}/v1/ner", json={"text": TEXT}, timeout=60).raise_for_status()
    time.sleep(2)
    answering = answering_pids(url, workers)
    result["processes"] = processes(proc.pid, answering)
    for key in ("rss_mb", "pss_mb"):
        result[f"total_{key}"] = round(sum(p[key] for p in result["processes"]), 1)
    if workers > 1:
        helpers = {p["pid"] for p in result["processes"] if p["role"] == "helper"}
        before = workers_of(proc.pid, helpers)
        assert before == answering, (before, answering)
        victim = min(before)
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        replacement = None
        while replacement is None and time.monotonic() - killed < 120:
            new = workers_of(proc.pid, helpers) - before
            replacement = min(new) if new else None
            time.sleep(0.01)
        replaced_s = time.monotonic() - killed
        answered = None
        while answered is None and time.monotonic() - killed < 180:
            with httpx.Client() as client:  # a new connection each time: any worker may take it
                for _ in range(8):
                    try:
                        if client.get(f"{url}/health", timeout=5, headers={"connection": "close"}).json()["pid"] == replacement:
                            answered = time.monotonic() - killed
                            break
                    except httpx.TransportError:
                        pass
            time.sleep(0.05)
        result["restart"] = {"killed_pid": victim, "new_pid": replacement, "replacement_started_s": round(replaced_s, 2),
                             "replacement_answers_s": round(answered, 2) if answered is not None else None}
    stopping = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    result["sigterm"] = {"exit_code": proc.returncode, "stop_s": round(time.monotonic() - stopping, 2)}
    result["stderr_warnings"] = [line for line in err.splitlines() if "WARNING" in line]
    result["load_after"] = load_average()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", default="zh-small")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--output", type=Path, default=harness.RESULTS / "serve_processes.json")
    args = parser.parse_args()
    provenance = harness.Run()
    runs = [measure(args.model, n, args.requests) for n in args.workers]
    report = {"model": args.model, "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "runs": runs}
    harness.write(args.output, provenance.record(report))


if __name__ == "__main__":
    main()

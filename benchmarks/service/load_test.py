"""Load test of `zhner serve` on loopback: requests/s, sentences/s, p50/p99 latency, errors and server memory
at 1, 8 and 32 concurrent clients.

    python benchmarks/service/load_test.py -m runs/tener_resume                    # 60 s per level, writes benchmarks/results/load_test.json
    python benchmarks/service/load_test.py -m runs/x --seconds 10 --levels 1 8 --output /tmp/lt.json
    python benchmarks/service/load_test.py -m DIR --long-clients 1 --levels 1 8 --output benchmarks/results/load_test_mixed.json
    python benchmarks/service/load_test.py -m DIR --workers 1 2 --long-clients 0 1 --levels 1 8 32 128 --seconds 10 \
        --output benchmarks/results/load_test_workers.json      # one run per (workers, long clients), `zhner serve --workers`

The server runs as a subprocess (`python -m zhner.cli serve`, one torch thread). Each client is a loop in one asyncio
process that sends one real test sentence per request ({"text": ...}, Resume and MSRA test sentences in turn) and
waits for the answer before sending the next: a closed loop, so the load is bounded and latency is honest.
The server's RSS is read from /proc every 10 s and at the start and end of each level, after a warm-up at the
highest level; `rss_growth_mb` over a level should stay within the noise (a few MB either way).
With --long-clients N, N more clients send a --long-chars text (MSRA test sentences joined, 20,000 characters by
default) in the same closed loop beside the short ones; the short requests' latencies are reported as before and the
long ones' under "long".
With several --workers or --long-clients values, each combination is a run of its own (a fresh server) under "runs";
RSS and CPU are then summed over the server's processes (the supervisor and its workers), and each run records the
machine's load average before and after it (other processes on the machine compete for the same cores).
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx  # only to wait for the server to come up

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402
from harness import load_average, long_text, process_tree, rss_mb, test_sentences  # noqa: E402

harness.use_checkout()
REPO = harness.REPO


def total(measure, pid: int) -> float:
    """`measure` summed over the server's processes; one that exits meanwhile counts nothing."""
    result = 0.0
    for p in process_tree(pid):
        try:
            result += measure(p)
        except (FileNotFoundError, ProcessLookupError, RuntimeError):
            pass
    return round(result, 2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (fields 14 and 15 of /proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(model_dir: str, port: int, extra: list[str]) -> subprocess.Popen:
    env = harness.tree_env(REPO)
    cmd = [sys.executable, "-m", "zhner.cli", "serve", "-m", model_dir, "--port", str(port), *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read()}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).raise_for_status()
            return proc
        except httpx.TransportError:
            if time.time() > deadline:
                proc.kill()
                raise SystemExit("server did not start in 120 s")
            time.sleep(0.3)


class Connection:
    """A minimal HTTP/1.1 keep-alive client over asyncio streams. httpx costs the client several ms of CPU per
    request, which on 2 shared cores throttles the very server it measures; this costs a fraction of that."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, payload: dict) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        body = json.dumps(payload, ensure_ascii=False).encode()
        head = f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        self.writer.write(head.encode() + body)
        status_line, *header_lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in header_lines if ": " in line)
        data = await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("connection") == "close":
            await self.close()
        return int(status_line.split()[1]), data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


def latency_summary(latencies: list[float]) -> dict:
    latencies = sorted(latencies)
    n = len(latencies)
    return {
        "p50": round(1000 * latencies[n // 2], 2) if n else None,
        "p99": round(1000 * latencies[min(n - 1, int(n * 0.99))], 2) if n else None,
        "mean": round(1000 * statistics.fmean(latencies), 2) if n else None,
        "max": round(1000 * latencies[-1], 2) if n else None,
    }


async def run_level(
    url: str,
    clients: int,
    seconds: float,
    sentences: list[str],
    pid: int | None = None,
    long_clients: int = 0,
    long: str = "",
) -> dict:
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    long_latencies: list[float] = []
    errors: dict[str, int] = {}
    sent_chars = 0
    counter = itertools.count()
    stop_at = time.perf_counter() + seconds

    async def client(texts: list[str] | None = None, record: list[float] = latencies) -> None:
        nonlocal sent_chars
        conn = Connection(host, int(port))
        while time.perf_counter() < stop_at:
            text = (texts or sentences)[next(counter) % len(texts or sentences)]
            t0 = time.perf_counter()
            try:
                status, data = await conn.post_json("/v1/ner", {"text": text})
                ok = status == 200 and json.loads(data)["text"] == text
                key = None if ok else f"http {status}"
            except (OSError, asyncio.IncompleteReadError, ValueError, KeyError) as exc:
                key = type(exc).__name__
                await conn.close()
            if key is None:
                record.append(time.perf_counter() - t0)
                sent_chars += len(text)
            else:
                errors[key] = errors.get(key, 0) + 1
        await conn.close()

    rss: list[float] = []

    async def sample_rss() -> None:  # every 10 s: growth that levels off is allocator warm-up, steady growth a leak
        while pid is not None and time.perf_counter() < stop_at:
            rss.append(total(rss_mb, pid))
            await asyncio.sleep(min(10.0, max(0.0, stop_at - time.perf_counter())))

    t0, client_cpu = time.perf_counter(), time.process_time()
    long_loops = [client([long], long_latencies) for _ in range(long_clients)]
    await asyncio.gather(sample_rss(), *(client() for _ in range(clients)), *long_loops)
    elapsed = time.perf_counter() - t0
    client_cpu = time.process_time() - client_cpu
    n = len(latencies)
    extra = {"long": {"clients": long_clients, "chars": len(long), "requests": len(long_latencies)} | {
        "latency_ms": latency_summary(long_latencies)}} if long_clients else {}
    return extra | {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "requests": n,
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "requests_per_s": round(n / elapsed, 1),
        "sentences_per_s": round(n / elapsed, 1),  # one sentence per request
        "chars_per_s": round(sent_chars / elapsed),
        "rss_mb_every_10s": rss,
        "latency_ms": latency_summary(latencies),
        # the clients' own CPU (this process): on 2 shared cores it is CPU the server does not get
        "client_cpu_cores": round(client_cpu / elapsed, 2),
        "client_cpu_ms_per_request": round(1000 * client_cpu / max(1, n + len(long_latencies)), 2),
    }


def measure_run(args, sentences: list[str], long: str, workers: int, long_clients: int) -> dict:
    """One server (`--workers workers`), its levels, and the machine's load before and after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    load_before = load_average()
    serve_args = args.serve_args.split() + (["--workers", str(workers)] if workers > 1 else [])
    server = start_server(args.model, port, serve_args)
    url = f"http://127.0.0.1:{port}"
    try:
        if workers > 1:  # every worker up (the first /health may come from the first worker ready)
            wait_for_workers(url, workers)
        health = httpx.get(f"{url}/health").json()
        rss_loaded = total(rss_mb, server.pid)
        # the allocator's warm-up (~35 MB in the first seconds under load, then flat) is not a leak: keep it out of the levels
        asyncio.run(run_level(url, max(args.levels), args.warmup, sentences))
        rss_warm = total(rss_mb, server.pid)
        levels = []
        for clients in args.levels:
            before, cpu_before = total(rss_mb, server.pid), total(cpu_seconds, server.pid)
            result = asyncio.run(run_level(url, clients, args.seconds, sentences, server.pid, long_clients, long))
            result["rss_mb_start"], result["rss_mb_end"] = before, total(rss_mb, server.pid)
            # below `workers` the server was starved of CPU by other processes (or waited on the clients)
            server_cpu = total(cpu_seconds, server.pid) - cpu_before
            result["server_cpu_cores"] = round(server_cpu / result["seconds"], 2)
            # CPU per answered request: what the throughput would be with the cores to itself, whatever else ran
            answered = result["requests"] + result.get("long", {}).get("requests", 0)
            result["server_cpu_ms_per_request"] = round(1000 * server_cpu / max(1, answered), 2)
            result["rss_growth_mb"] = round(result["rss_mb_end"] - before, 1)
            result["load_average_after"] = load_average()
            levels.append(result)
            print(json.dumps({"workers": workers, **result}), flush=True)
        model_calls = httpx.get(f"{url}/health").json()["model_calls"]
    finally:
        server.terminate()
        server.wait(30)
    return {
        "workers": workers,
        "long_clients": long_clients,
        "request": '{"text": one sentence}; closed loop: each client waits for its answer before the next request'
        + (f"; plus {long_clients} client(s) sending {len(long)}-character texts" if long_clients else ""),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "server_rss_mb_model_loaded": rss_loaded,
        "server_rss_mb_after_warmup": rss_warm,
        "model_calls_total_of_one_worker": model_calls,
        "levels": levels,
        "health": health,
    }


def wait_for_workers(url: str, workers: int, seconds: float = 120) -> None:
    """Until `workers` distinct pids have answered /health (each on a new connection)."""
    seen: set[int] = set()
    deadline = time.time() + seconds
    while len(seen) < workers:
        if time.time() > deadline:
            raise SystemExit(f"only {len(seen)} of {workers} workers answered in {seconds:g} s")
        seen.add(httpx.get(f"{url}/health", timeout=10).json()["pid"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True, help="model directory to serve")
    parser.add_argument("--seconds", type=float, default=60.0, help="duration of each concurrency level")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds of load at the highest level before measuring")
    harness.output_options(parser, "load_test.json")
    parser.add_argument("--serve-args", default="", help="extra options for zhner serve, e.g. '--batch-wait-ms 5'")
    parser.add_argument("--workers", type=int, nargs="+", default=[1], help="`zhner serve --workers`: one run per value")
    parser.add_argument("--long-clients", type=int, nargs="+", default=[0],
                        help="clients sending long texts beside the short ones: one run per value")
    parser.add_argument("--long-chars", type=int, default=20_000, help="characters of each long text")
    args = parser.parse_args()

    provenance = harness.Run(note=args.note)
    sentences = test_sentences()
    long = long_text(args.long_chars) if any(args.long_clients) else ""
    runs = [measure_run(args, sentences, long, w, n) for n in args.long_clients for w in args.workers]
    health = runs[0].pop("health")
    for run in runs[1:]:
        run.pop("health")
    report = provenance.record({
        "benchmark": "load_test",
        "model_dir": str(args.model),
        "model": health["model"],
        "dataset": health["dataset"],
        "limits": health["limits"],
        "sentences": f"{len(sentences)} test sentences of Resume and MSRA, alternating (mean {statistics.fmean(map(len, sentences)):.1f} chars)",
        **(runs[0] if len(runs) == 1 else {"runs": runs}),
        "machine": harness.machine(),
        "threads": "server: one torch thread per worker (OMP_NUM_THREADS=1); clients: one asyncio process (raw HTTP/1.1 keep-alive) on the same machine",
    })
    harness.write(args.output, report, echo=False)


if __name__ == "__main__":
    main()

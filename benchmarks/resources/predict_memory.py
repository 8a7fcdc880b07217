"""`zhner predict` streams: its memory stays flat however large the input.

    python benchmarks/resources/predict_memory.py -m runs/tener_resume                  # up to 1 GB or 120 s of input
    python benchmarks/resources/predict_memory.py -m runs/x --megabytes 50 --seconds 60 --output /tmp/pm.json

Runs `python -m zhner.cli predict -m DIR -` as a subprocess and pipes generated text into it (real Resume and MSRA
test sentences, numbered so no two lines are equal, and every 50th line a ~3,000-character document that gets split
at sentence ends), without ever holding the input: a pipe behaves like a file of any size, yet needs no disk.
Output goes to a counting reader. Every second it samples the subprocess's RSS; the report gives the RSS after the
first 10% of the run and at the end. The input stops at --megabytes or --seconds, whichever comes first.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402
from harness import rss_mb, test_sentences  # noqa: E402

harness.use_checkout()
REPO = harness.REPO


def lines(sentences: list[str]):
    for i in itertools.count():
        text = sentences[i % len(sentences)]
        if i % 50 == 49:
            text = "".join(sentences[(i + k) % len(sentences)] for k in range(60))[:3000]
        yield f"{i}：{text}\n".encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--megabytes", type=float, default=1024.0)
    parser.add_argument("--seconds", type=float, default=120.0)
    harness.output_options(parser, "predict_memory.json")
    args = parser.parse_args()

    provenance = harness.Run(note=args.note)
    env = harness.tree_env(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zhner.cli", "predict", "-m", args.model, "-"],
        cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    counts = {"records": 0, "bytes_in": 0}

    def read_output() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            json.loads(line)
            counts["records"] += 1

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    limit = int(args.megabytes * 1024 * 1024)
    start = time.perf_counter()
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                samples.append((round(time.perf_counter() - start, 1), rss_mb(proc.pid)))
            except (OSError, RuntimeError):  # the process has ended
                return
            stop.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stdin is not None
    lines_in = 0
    try:
        for line in lines(test_sentences()):
            proc.stdin.write(line)
            counts["bytes_in"] += len(line)
            lines_in += 1
            if counts["bytes_in"] >= limit or time.perf_counter() - start > args.seconds:
                break
        proc.stdin.close()
        rc = proc.wait()
    finally:
        stop.set()
        proc.kill()
    reader.join(30)
    elapsed = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"zhner predict failed ({rc}): {proc.stderr.read().decode()[-2000:]}")
    assert counts["records"] == lines_in, (counts, lines_in)
    early = [rss for t, rss in samples if t >= 0.1 * elapsed][:3]
    report = provenance.record({
        "benchmark": "predict_memory",
        "model_dir": args.model,
        "input": "pipe of numbered Resume/MSRA test sentences; every 50th line a 3,000-character document",
        "lines": lines_in,
        "megabytes_in": round(counts["bytes_in"] / 2**20, 1),
        "seconds": round(elapsed, 1),
        "lines_per_s": round(lines_in / elapsed, 1),
        "rss_mb_at_10pct": round(statistics.fmean(early), 1) if early else None,
        "rss_mb_end": samples[-1][1] if samples else None,
        "rss_mb_max": max(r for _, r in samples) if samples else None,
        "rss_samples": samples[:: max(1, len(samples) // 60)],
    })
    harness.write(args.output, report, echo=False)
    print(json.dumps({k: v for k, v in report.items() if k != "rss_samples"}, ensure_ascii=False))


if __name__ == "__main__":
    main()

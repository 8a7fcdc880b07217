"""What the benchmarks share: the checkout, the texts they tag, an earlier revision beside this one, the processes they
watch and the cold start they time. A script of benchmarks/GROUP/ imports it with its parent folder on sys.path:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
    import harness  # noqa: E402

Nothing here imports zhner at import time: a worker of ab_speed.py or same_entities.py runs zhner from another
revision (its PYTHONPATH), and the harness must not put this checkout's in its way.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def use_checkout() -> None:
    """zhner from this checkout, ahead of an installed one (a script run as `python benchmarks/GROUP/NAME.py`)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


# -- texts ------------------------------------------------------------------------------------------------------------


def long_text(chars: int) -> str:
    """MSRA test sentences joined until `chars` characters, cut there: one long text of real sentences."""
    from zhner.data.corpus import read_corpus  # imported here: load_test.py's client needs zhner only for this text
    from zhner.data.registry import find_file

    text = ""
    for sentence in read_corpus(find_file("msra", "test")).sentences:
        text += sentence.text
        if len(text) >= chars:
            break
    return text[:chars]


def test_sentences(limit: int = 2000) -> list[str]:
    """Resume and MSRA test sentences in turn, the first `limit`: short texts of two kinds, as a service meets them."""
    from zhner.data.registry import load_dataset

    resume = [s.text for s in load_dataset("resume")["test"].sentences]
    msra = [s.text for s in load_dataset("msra")["test"].sentences]
    mixed = [s for pair in itertools.zip_longest(resume, msra) for s in pair if s]  # alternate the two corpora
    return mixed[:limit]


# -- an earlier revision beside this one (ab_speed.py, same_entities.py) ----------------------------------------------


def extract(revision: str, into: Path) -> Path:
    """The files of `revision` (git archive) written into the new folder `into`, which is returned."""
    into.mkdir()
    archive = subprocess.run(["git", "archive", revision], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def tree_env(root: Path) -> dict[str, str]:
    """The environment of a process that imports zhner from `root`, one thread, finding the corpora as this tree does
    (a tree extracted elsewhere has no shared/data beside it)."""
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    if "ZHNER_DATA" not in env and (REPO.parent / "shared" / "data").is_dir():
        env["ZHNER_DATA"] = str(REPO.parent / "shared" / "data")
    return env


# -- processes and the machine ----------------------------------------------------------------------------------------


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (`uptime`)."""
    return [round(x, 2) for x in os.getloadavg()]


def rss_mb(pid: int) -> float:
    """A process's resident memory (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS")


def process_tree(pid: int) -> list[int]:
    """A process and its descendants (`zhner serve --workers N`: the supervisor, its workers and helpers)."""
    pids, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        for child in Path("/proc").glob(f"{parent}/task/*/children"):
            found = [int(c) for c in child.read_text().split()]
            pids += found
            frontier += found
    return pids


# -- a cold start (runtime_onnx.py, shipped_models.py) ----------------------------------------------------------------

SENTENCE = "张三毕业于北京大学，现任中国人民银行行长。"

FIRST_ANSWER = r"""
import json, resource, sys, time
kind, directory, text = sys.argv[1:4]
if kind == "torch":
    import zhner
    tagger = zhner.load(directory)
else:
    from zhner.runtime import RuntimeTagger
    tagger = RuntimeTagger.load(directory)
loaded = time.perf_counter()
tagger.predict([text])
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"load_done": loaded, "answer": time.perf_counter(), "cpu_s": usage.ru_utime + usage.ru_stime,
                  "rss_mb": usage.ru_maxrss / 1024, "torch_imported": "torch" in sys.modules}))
"""


def first_answer(kind: str, directory: Path, env: dict) -> dict:
    """A fresh Python process that loads the model in `directory` ("torch": zhner.load; else the torch-free runtime)
    and tags one sentence: the time from its start to the answer, its CPU seconds and peak RSS."""
    start = time.time()
    out = subprocess.run([sys.executable, "-c", FIRST_ANSWER, kind, str(directory), SENTENCE], env=env, check=True,
                         capture_output=True, text=True)
    result = json.loads(out.stdout)
    # perf_counter is not comparable across processes: time the child from outside, subtract nothing
    return {"first_answer_s": time.time() - start, "cpu_s": result["cpu_s"], "rss_mb": result["rss_mb"],
            "torch_imported": result["torch_imported"]}


def write_result(result: dict, load_before: tuple[float, ...], note: str, output: str) -> None:
    """`result` with the machine's conditions (one thread, the cores, load before and after, date), printed and written
    to `output` as JSON."""
    result |= {
        "threads": 1,
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": load_average(),
        "note": note,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(json.dumps(result, ensure_ascii=False, indent=2))
    Path(output).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

"""What the benchmarks share: how a run is recorded (its command, commit and the machine's load, written with the
figures as JSON), the clock, the models and texts they measure, an earlier revision beside this one, the processes
they watch and the cold start they time. A script of benchmarks/GROUP/ imports it with its parent folder on sys.path:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
    import harness  # noqa: E402

    provenance = harness.Run()                     # the command and the load as the measurement starts
    with harness.clocked() as clock:
        tagger.predict(texts)
    harness.write(args.output, provenance.record({"sentences_per_cpu_s": len(texts) / clock.cpu_s}))

Nothing here imports zhner at import time: a worker of ab_speed.py or same_entities.py runs zhner from another
revision (its PYTHONPATH), and the harness must not put this checkout's in its way.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def use_checkout() -> None:
    """zhner from this checkout, ahead of an installed one (a script run as `python benchmarks/GROUP/NAME.py`)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


# -- a run's record: command, commit, load, date ----------------------------------------------------------------------


def command_line(argv: list[str] | None = None) -> str:
    """How this script was run, as a line to paste into a shell: OMP_NUM_THREADS when it is set, `python`, the script's
    path in this checkout (benchmarks/GROUP/NAME.py, whatever the working directory) and its arguments."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0]).resolve()
    name = script.relative_to(REPO).as_posix() if script.is_relative_to(REPO) else argv[0]
    threads = [f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"] if "OMP_NUM_THREADS" in os.environ else []
    return shlex.join([*threads, "python", name, *argv[1:]])


def commit(revision: str | None = None, repo: Path = REPO) -> str:
    """The short hash of what ran: the working tree's HEAD with "+dirty" when tracked files differ from it, or a named
    `revision`'s; "unknown" outside a git checkout."""
    found = subprocess.run(["git", "rev-parse", "--short", revision or "HEAD"], cwd=repo, capture_output=True, text=True)
    if found.returncode:
        return "unknown"
    dirty = revision is None and subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                                capture_output=True, text=True).stdout.strip()
    return found.stdout.strip() + ("+dirty" if dirty else "")


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


class Run:
    """One run of a benchmark: its command and the machine's load when it starts (make it before measuring); `record`
    puts them beside the figures with the note (what else ran: --note), the commit measured and the load at the end.
    Timings on a shared machine move with its load, so every results file says what the load was."""

    def __init__(self, repo: Path = REPO, note: str | None = None):
        self.repo, self.note = repo, note
        self.command = command_line()
        self.load_before = load_average()

    def record(self, result: dict) -> dict:
        """{"command", **result, "note" (when given), "commit", "load": {"before", "after"} (1, 5, 15-minute
        averages), "date"}."""
        note = {} if self.note is None else {"note": self.note}
        return {"command": self.command, **result, **note, "commit": commit(repo=self.repo),
                "load": {"before": self.load_before, "after": load_average()}, "date": utc_now()}


def output_options(parser: argparse.ArgumentParser, results_file: str) -> None:
    """The options of a script that writes one results file: -o/--output (benchmarks/results/`results_file` unless
    given) and --note, recorded in the file (what else ran on the machine, where the model came from)."""
    parser.add_argument("-o", "--output", default=str(RESULTS / results_file), help="where the JSON goes")
    parser.add_argument("--note", default="", help="recorded in the JSON, e.g. what else ran on the machine")


def sentence_pair_options(parser: argparse.ArgumentParser, results_file: str) -> None:
    """The options of a script that tags the test sets with two variants of the shipped models and tests them paired
    over sentences (accuracy/int8_pairs.py, accuracy/window_pairs.py): --models, --sentences, the randomization test's
    --resamples and --seed, --batch, and --out (benchmarks/results/`results_file` unless given)."""
    parser.add_argument("--models", nargs="+", default=["zh-small", "zh-accurate"])
    parser.add_argument("--sentences", type=int, default=None, help="first N sentences of each test set (default all)")
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0, help="the randomization test's shuffles")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default=str(RESULTS / results_file))


def paired_sentence_test(gold: list, a: list, b: list, resamples: int, seed: int) -> tuple[dict, int]:
    """Strict span F1 of entities `a` against `b` (per sentence, [(start, end, type)]) on `gold`: the paired
    approximate randomization test over the sentences (zhner.evaluate.significance; f1_a, f1_b, diff, p) and the
    number of sentences whose entities differ."""
    from zhner.evaluate.metrics import span_sentence_counts
    from zhner.evaluate.significance import approximate_randomization

    test = approximate_randomization(span_sentence_counts(gold, a), span_sentence_counts(gold, b), resamples, seed)
    return test, sum(set(x) != set(y) for x, y in zip(a, b))


def machine() -> str:
    """The machine in a line: architecture, cores, Python."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}"


def write(path: str | Path, result: dict, echo: bool = True, indent: int = 2) -> None:
    """`result` as JSON at `path` (UTF-8, written whole: a reader never sees half a file); on stdout the JSON when
    `echo`, else where it went."""
    text = json.dumps(result, indent=indent, ensure_ascii=False) + "\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    print(text if echo else f"wrote {path}", end="" if echo else "\n", flush=True)


# -- the clock --------------------------------------------------------------------------------------------------------


@dataclass
class Clock:
    cpu_s: float = 0.0  # this process's CPU seconds: what other processes on a shared machine move least
    wall_s: float = 0.0


@contextmanager
def clocked() -> Iterator[Clock]:
    """Times the block: `with clocked() as clock: ...`, then clock.cpu_s and clock.wall_s."""
    clock = Clock()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield clock
    finally:
        clock.cpu_s, clock.wall_s = time.process_time() - cpu, time.perf_counter() - wall


def repeated(fn: Callable[[], object], repeats: int, warmup: int = 0) -> tuple[list[Clock], object]:
    """`fn` called `warmup` times untimed, then `repeats` times, each clocked: the clocks and the last call's result."""
    for _ in range(warmup):
        fn()
    clocks, result = [], None
    for _ in range(repeats):
        with clocked() as clock:
            result = fn()
        clocks.append(clock)
    return clocks, result


# -- models -----------------------------------------------------------------------------------------------------------


def load(model: str | Path):
    """`zhner.load(model)` (a shipped name or a directory) with torch on one thread, as the benchmarks time it."""
    import torch

    import zhner

    torch.set_num_threads(1)
    return zhner.load(model)


def build(config: str, overrides: Iterable[str] = ()):
    """A config's model prepared as training prepares it (a shipped config name or a YAML path, with KEY=VALUE
    overrides): the `prepare` result, its tagger untrained unless the config loads weights."""
    from zhner.cli import resolve_config
    from zhner.config import load_config
    from zhner.train.assemble import prepare

    return prepare(load_config(resolve_config(config), list(overrides)), log=lambda _: None)


def runtime_graph(model: str, int8: bool = False) -> Path:
    """The torch-free runtime's graph of `model`: the one the user cache holds (exported there on first use), or with
    `int8` a graph with int8 linear layers (`zhner export --int8`: onnxruntime's dynamic quantisation) kept beside it
    in $ZHNER_CACHE/onnx8, exported once."""
    from zhner.export import cache_graph, export_onnx
    from zhner.runtime.cache import cache_root
    from zhner.tagger import Tagger

    plain = cache_graph(model)
    if not int8:
        return plain
    quantised = cache_root().parent / "onnx8" / plain.parent.name / "model.onnx"
    if not quantised.is_file():
        quantised.parent.mkdir(parents=True, exist_ok=True)
        export_onnx(Tagger.load(model), quantised, int8=True)
    return quantised


def forget_features(tagger) -> None:
    """Empty a LAC field's memo (any version's) before a timed pass: each pass meets its texts cold, as a service meets
    new text (a memo of 10^6 characters once let a second pass over a test set skip LAC's BiGRU)."""
    fields = getattr(getattr(tagger, "featurizer", None), "fields", {})
    lac = fields.get("lac") if isinstance(fields, dict) else None
    if lac is not None and hasattr(lac, "_memo"):
        lac._memo.clear()
        for counter in ("_memo_chars", "_memo_bytes"):
            if hasattr(lac, counter):
                setattr(lac, counter, 0)


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


def split_texts(dataset: str, split: str = "test", limit: int | None = None) -> list[str]:
    """The texts of a corpus's split (a registry name: msra, weibo, resume, ...), the first `limit` of them."""
    from zhner.data.registry import load_dataset

    return [ex.text for ex in load_dataset(dataset)[split]][:limit]


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


def two_trees(base: str, into: Path, runtimes: tuple[str, str]) -> list[tuple[Path, str, dict[str, str]]]:
    """The revision `base` extracted into `into`/base, and this checkout: for each, base first, its root, how it tags
    (its entry of `runtimes`) and the environment of a process that runs its zhner."""
    roots = (extract(base, into / "base"), REPO)
    return [(root, runtime, tree_env(root)) for root, runtime in zip(roots, runtimes)]


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


def write_result(run: Run, result: dict, output: str | Path) -> None:
    """`result` recorded by `run`, with the conditions every cold-start and throughput figure needs (one thread, the
    cores), printed and written to `output` as JSON."""
    write(output, run.record(result | {"threads": 1, "cpus": os.cpu_count()}))

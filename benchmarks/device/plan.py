"""The device run's parts, their budgets, and the runner that trains them at once and writes a results file per part.

    python benchmarks/device/plan.py list [--tiny]                       # the parts and their commands (what runs)
    python benchmarks/device/plan.py run --e5 DIR --parses FILE --runs DIR --out DIR [--tiny] [--jobs N]

Every part is one `zhner train` (python -m zhner.cli train) with `--set model.bert=DIR` (the carried pack, see
encoder.py) and, for SLA, `--set model.parser=conllu:FILE` (the carried parses, see parses.py). All parts start
together (one H200 holds them all; each is bound by its own Python process more than by the GPU) and share one wall
clock deadline. A part stops three ways, mildest first: train.max_minutes (at the end of the epoch that passes it,
chosen so that the next epoch would not end before the deadline at the estimated speed), then the part's timeout
(the process group is killed; the run directory keeps its best epoch, which the trainer scores on test when dev
improves). After each part its results file is written from its run directory (log.jsonl: every epoch's dev;
metrics.json: the best epoch's dev and test), so a part cut off still leaves one.

Estimates (seconds on one H200 shared by the eight parts), from benchmarks/results/bert_tagger_msra_e5.json (BERT-CRF
272 training sentences/s with 13-19 runs sharing an H200), flat_msra_e5.json / nflat_msra_e5.json (378 / 367 at
batch 32, 3 runs sharing) and the tiny mode's preparation times here (docs/reproduction.md).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

SEED = 42
TOTAL_S = 600  # run.sh's whole budget on the device
SETUP_S = 45  # run.sh before the parts: wheels, corpora, encoder, parses (a guess; run.sh prints the real figure)
COLLECT_S = 35  # after the deadline: the last results files and the transfer back
MSRA_TRAIN = 44_046  # MSRA's training sentences once the 5% dev is held out
UNION_TRAIN = 49_217  # flat_e5_accurate's union (MSRA, Weibo's named mentions, Resume)
TINY_TRAIN, TINY_TEST = 200, 60  # the tiny mode's corpus sizes (prepare.sh cuts the corpora to them)
RESULTS_BACK = 8  # files a device call brings back from $OUT: one results file per part, the log stays in stdout
# issue 50's switches together, as benchmarks/accuracy/unseen_pairs.py's "both" arm
SWITCHES_BOTH = ("embeddings.word_types=both", "train.mention_replacement=0.3", "train.mention_replacement_source=train")


@dataclass(frozen=True)
class Part:
    name: str  # the results file is device_<name>.json
    what: str  # what it measures, for the results file
    config: str
    overrides: tuple[str, ...]
    epochs: int
    prepare_s: float  # estimated: data, lexicon, encoder, features before the first step
    epoch_s: float  # estimated: one epoch's training and its dev pass
    uses_parses: bool = False
    union: bool = False

    @property
    def results(self) -> str:
        return f"device_{self.name}.json"

    def estimate_s(self) -> float:
        return self.prepare_s + self.epochs * self.epoch_s


@dataclass
class Paths:
    e5: Path  # the dequantised BERT directory (encoder.py unpack)
    parses: Path  # MSRA's parses as CoNLL-U (parses.py)
    runs: Path  # run directories, one per part
    out: Path  # results files


def epoch_seconds(sentences: int, per_s: float, eval_s: float = 15) -> float:
    return round(sentences / per_s + eval_s)


def parts(tiny: bool = False) -> list[Part]:
    """The run: MSRA to a plateau for BERT-CRF, FLAT and NFLAT + e5-small (issue 50, first item); SLA / WLA / plain
    BERT-CRF at one recipe (SLA Table 3's NER row); the e5 candidate of zh-accurate, one epoch longer than its CPU run."""
    bert = ("train.bert_lr=0.0001",)  # bert_tagger_msra_e5_lr1e4.json: +2.2 F1 over 5e-5 in 4 epochs, still rising
    # training sentences/s of each of eight runs sharing one H200: a guess between the runs measured there (BERT-CRF
    # 272 with 13-19 runs sharing, FLAT / NFLAT + e5-small 378 / 367 with 3); run.sh's first results replace it
    per_s = 330
    msra, union = epoch_seconds(MSRA_TRAIN, per_s), epoch_seconds(UNION_TRAIN, per_s, 25)
    sla_epoch = round(msra * 1.3)  # a guess: the local attention's extra masked attention and gate per layer
    out = [
        Part("bert_e5_msra", "BERT-CRF on e5-small, whole MSRA, 3 epochs", "bert_e5_msra", bert, 3, 25, msra),
        Part("flat_e5_msra", "FLAT + e5-small, whole MSRA, 3 epochs", "flat_e5_msra", (), 3, 45, msra),
        Part("nflat_e5_msra", "NFLAT + e5-small, whole MSRA, 3 epochs", "nflat_e5_msra", (), 3, 45, msra),
        # MSRA's one seed for the best switch arm on Resume (unseen_pairs_flat_resume_replacement.json: both), paired
        # with flat_e5_msra by seed; LAC's reading of jieba's 337k words alone comes first (about a minute)
        Part("flat_e5_msra_both", "FLAT + e5-small, whole MSRA, 3 epochs, with typed lexicon words (jieba and LAC) "
             "and mention replacement (0.3, from the training set): the pair of flat_e5_msra", "flat_e5_msra",
             SWITCHES_BOTH, 3, 105, msra),
        Part("bert_e5_msra_table3_plain", "SLA Table 3 NER row: plain BERT-CRF on e5-small, whole MSRA", "bert_e5_msra",
             bert, 2, 25, msra),
        Part("bert_e5_msra_table3_wla", "SLA Table 3 NER row: + WLA (window k 3)", "bert_e5_msra",
             (*bert, "model.local_attention=window"), 2, 25, sla_epoch),
        Part("bert_e5_msra_table3_sla", "SLA Table 3 NER row: + SLA (tree distance m 3, udchinese parses made on the CPU)",
             "bert_e5_msra", (*bert, "model.local_attention=syntax"), 2, 30, sla_epoch, uses_parses=True),
        # zh-accurate's e5 candidate ran 2 epochs at batch 16 on the CPU (accurate_model_e5.json, dev still rising):
        # 3 here, at batch 32 so that they fit; LAC's BiGRU features of the union's 2.6M characters come first
        Part("flat_e5_accurate", "zh-accurate's e5 candidate (FLAT + LAC + e5-small on the union), 3 epochs",
             "flat_e5_accurate", ("train.batch_size=32",), 3, 150, union, union=True),
    ]
    if tiny:  # the same parts on the tiny corpora: one epoch, a small time limit
        out = [Part(p.name, p.what + " (TINY: smoke test, not a measurement)", p.config,
                    p.overrides, 1, p.prepare_s, p.epoch_s, p.uses_parses, p.union) for p in out]
    return out


def parts_budget_s(tiny: bool = False) -> float:
    """Wall seconds the parts share: the whole budget less setup and collection (tiny: a generous CPU allowance)."""
    return 1800.0 if tiny else float(TOTAL_S - SETUP_S - COLLECT_S)


def max_minutes(part: Part, budget_s: float) -> float:
    """train.max_minutes: past it no epoch starts, so set where the last epoch would still end inside the budget at
    the estimated speed (the trainer's clock starts after preparation and counts the dev passes)."""
    train_s = max(budget_s - part.prepare_s, part.epoch_s)
    return round(train_s * (part.epochs - 1) / part.epochs / 60, 2) if part.epochs > 1 else round(train_s / 60, 2)


def command(part: Part, paths: Paths, device: str, budget_s: float, threads: int) -> list[str]:
    """The part's `zhner train` command line (without the interpreter: run as python -m zhner.cli)."""
    sets = [*part.overrides, f"train.epochs={part.epochs}", f"model.bert={paths.e5}", f"train.seed={SEED}", f"train.threads={threads}",
            f"train.max_minutes={max_minutes(part, budget_s)}"]
    if part.uses_parses:
        sets.append(f"model.parser=conllu:{paths.parses}")
    return ["zhner", "train", part.config, "-o", str(paths.runs / part.name), "--device", device,
            *[arg for s in sets for arg in ("--set", s)]]


# -- running ----------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    exit: int | None  # None: killed at the timeout
    wall_s: float
    log_tail: list[str] = field(default_factory=list)


def run_command(argv: list[str], log: Path, timeout_s: float, threads: int) -> Outcome:
    """argv as python -m zhner.cli in its own process group (so a timeout ends all of it), output into `log`."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.Popen([sys.executable, "-m", "zhner.cli", *argv[1:]], stdout=handle, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = None
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return Outcome(code, round(time.perf_counter() - start, 1), lines[-15:])


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def part_result(part: Part, argv: list[str], run_dir: Path, outcome: Outcome, tiny: bool) -> dict:
    """The results file's figures: the command and seed, every epoch's dev (and test where dev improved), the best
    epoch's dev and test, how the part ended."""
    from zhner.evaluate.metrics import headline

    metrics_path = run_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    status = metrics.get("status", "no epoch finished")
    if outcome.exit is None:
        status = f"killed at its timeout ({status} when killed)"
    elif outcome.exit != 0:
        status = f"failed (exit {outcome.exit})"
    result = {
        "part": part.name, "what": part.what, "tiny": tiny,
        "training_command": shlex.join(argv), "seeds": [SEED],
        "model": metrics.get("model"), "dataset": metrics.get("dataset"), "status": status,
        "epochs_planned": part.epochs, "epochs": metrics.get("epochs_run"), "best_epoch": metrics.get("best_epoch"),
        "dev_label": metrics.get("dev_label"),
        "dev": headline(metrics["dev"]) if metrics.get("dev") else None,
        "test": headline(metrics["test"]) if metrics.get("test") else None,
        "per_epoch": read_jsonl(run_dir / "log.jsonl"),
        "train_seconds": metrics.get("train_seconds"), "wall_s": outcome.wall_s,
        "estimate_s": part.estimate_s(), "device": device_name(),
    }
    if "test_per_corpus" in metrics:
        result["test_per_corpus"] = metrics["test_per_corpus"]
    if outcome.exit != 0:
        result["log_tail"] = outcome.log_tail
    return result


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else harness.machine()


def carried_commit(carry: Path | None) -> str:
    """The commit prepare.sh recorded (a device copy of the tree has no .git), else this checkout's."""
    recorded = carry / "commit.txt" if carry else None
    return recorded.read_text().strip() if recorded and recorded.is_file() else harness.commit()


def run_part(part: Part, paths: Paths, args: argparse.Namespace, deadline: float) -> dict:
    """Train one part (until its epochs, max_minutes or the deadline), then write its results file."""
    argv = command(part, paths, args.device, args.budget_s, args.threads)
    paths.runs.mkdir(parents=True, exist_ok=True)
    record = harness.Run(note=args.note)  # the command and the load before, now
    outcome = run_command(argv, paths.runs / f"{part.name}.log", deadline - time.time(), args.threads)
    result = part_result(part, argv, paths.runs / part.name, outcome, args.tiny)
    result = record.record(result) | {"commit": carried_commit(args.carry)}  # the device's copy has no .git
    harness.write(paths.out / part.results, result, echo=False)
    print(f"{part.name}: {result['status']}, {outcome.wall_s:.0f} s, best epoch {result['best_epoch']}, "
          f"test F1 {(result['test'] or {}).get('f1_strict')}", flush=True)
    return result


def run(args: argparse.Namespace) -> None:
    harness.use_checkout()
    paths = Paths(args.e5, args.parses, args.runs, args.out)
    deadline = time.time() + args.budget_s
    todo = [p for p in parts(args.tiny) if not args.only or p.name in args.only]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda p: run_part(p, paths, args, deadline), todo))
    for r in results:
        print(f"  {r['part']:<28} {r['wall_s']:>7.1f} s (estimate {r['estimate_s']:.0f})  {r['status']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    for verb in ("list", "run"):
        p = sub.add_parser(verb)
        p.add_argument("--tiny", action="store_true", help="the CPU smoke test: tiny corpora, one epoch")
        p.add_argument("--e5", type=Path, default=Path("E5_DIR"))
        p.add_argument("--parses", type=Path, default=Path("PARSES.conllu"))
        p.add_argument("--runs", type=Path, default=Path("runs/device"))
        p.add_argument("--out", type=Path, default=harness.RESULTS)
        p.add_argument("--device", default="cuda")
        p.add_argument("--threads", type=int, default=2, help="torch / OpenMP threads per part")
        p.add_argument("--jobs", type=int, default=8, help="parts at once")
        p.add_argument("--budget-s", type=float, default=None, help="wall seconds the parts share")
        p.add_argument("--only", nargs="*", help="these parts alone")
        p.add_argument("--carry", type=Path, default=None, help="the carried folder (its commit.txt)")
        p.add_argument("--note", default="", help="recorded in every results file")
    args = ap.parse_args()
    args.budget_s = args.budget_s or parts_budget_s(args.tiny)
    if args.verb == "list":
        paths = Paths(args.e5, args.parses, args.runs, args.out)
        for part in parts(args.tiny):
            print(f"{part.name}\t{part.estimate_s():.0f}\t{shlex.join(command(part, paths, args.device, args.budget_s, args.threads))}")
    else:
        run(args)


if __name__ == "__main__":
    main()

"""The device run's parts, their budgets, and the runner that trains them at once and writes a results file per part.

    python benchmarks/device/plan.py list [--tiny]                       # the parts and their commands (what runs)
    python benchmarks/device/plan.py run --e5 DIR --parses FILE --runs DIR --out DIR [--tiny] [--jobs N]

Every part is one `zhner train` (python -m zhner.cli train) with `--set model.bert=DIR` (the carried pack, see
encoder.py) and, for SLA, `--set model.parser=conllu:FILE` (the carried parses, see parses.py). The parts not yet
done start together (one H200 holds them; each is bound by its own Python process more than by the GPU) and share one
wall clock deadline. A part is done when benchmarks/results/device_<part>.json in the tree says it completed the
plan's epochs for the same `what` (the device's copy of the tree carries the results of the runs before): a later
device call trains what is left, `--all` everything. A part stops three ways, mildest first: train.max_minutes (at the
end of the epoch that passes it, chosen so that the next epoch would not end before the deadline at the estimated
speed), then the part's timeout (the process group is killed; the run directory keeps its best epoch, which the
trainer scores on test when dev improves). Then a part with `seen_in` is scored on the test mentions seen / unseen in
its training split (`zhner evaluate RUN msra --seen-in msra`, inside the time it reserves), and its results file is
written from its run directory (log.jsonl: every epoch's dev; metrics.json: the best epoch's dev and test), so a part
cut off still leaves one.

Estimates: each part's epoch as measured with eight parts sharing an H200 (EPOCH_S_SHARED_8), scaled for fewer
parts by FLAT + e5's speed with three sharing (flat_msra_e5.json); preparation from the first device run's walls.
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
SEEN_S = 30  # a seen_in part's scoring after its training: loading the model and tagging MSRA's test set (a guess)
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
    seen_in: str | None = None  # after training, the test split's mentions seen / unseen in this dataset's train

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


# Seconds an epoch (training and its dev pass) took each part with eight parts sharing the H200 (device_<part>.json:
# train_seconds / epochs, the first device run); flat_e5_accurate, which ran out of GPU memory there, is FLAT + e5's
# figure scaled by its union's 49,217 training sentences against MSRA's 44,046 (a guess)
EPOCH_S_SHARED_8 = {"bert_e5_msra": 137, "flat_e5_msra": 218, "nflat_e5_msra": 222, "flat_e5_msra_both": 212,
                    "bert_e5_msra_table3_plain": 150, "bert_e5_msra_table3_wla": 172, "bert_e5_msra_table3_sla": 184,
                    "flat_e5_accurate": 254}
# FLAT + e5-small's training speed per run with three runs sharing an H200 (flat_msra_e5.json: 378 sentences/s)
# against eight (202): fewer parts at once, faster each; between the two a straight line (a guess)
SPEED_3, SPEED_8 = 378, 202


def sharing_factor(n_parts: int) -> float:
    """An epoch's time with n parts sharing the GPU, against its time with eight."""
    n = min(max(n_parts, 3), 8)
    speed = SPEED_3 + (SPEED_8 - SPEED_3) * (n - 3) / 5
    return SPEED_8 / speed


def parts(tiny: bool = False, n_sharing: int = 8) -> list[Part]:
    """The run: MSRA for BERT-CRF, FLAT and NFLAT + e5-small (issue 50, first item) and FLAT + e5 with issue 50's
    switches, its pair; SLA / WLA / plain BERT-CRF at one recipe (SLA Table 3's NER row); the e5 candidate of
    zh-accurate at GPU batch 32. Epoch estimates for `n_sharing` parts at once (see EPOCH_S_SHARED_8)."""
    bert = ("train.bert_lr=0.0001",)  # bert_tagger_msra_e5_lr1e4.json: +2.2 F1 over 5e-5 in 4 epochs, still rising
    factor = sharing_factor(n_sharing)

    def epoch(name: str) -> float:
        return round(EPOCH_S_SHARED_8[name] * factor)

    # FLAT and NFLAT + e5 train 2 epochs, where 3 were planned first: at the measured speed the third did not fit, and
    # a run stopped by its time limit before the end of its linear decay scores below one whose schedule ended
    # (device_flat_e5_msra.json 88.01 after 2 of 3 epochs; flat_msra_e5.json 91.35 after a whole 2-epoch schedule)
    out = [
        Part("bert_e5_msra", "BERT-CRF on e5-small, whole MSRA, 3 epochs", "bert_e5_msra", bert, 3, 25, epoch("bert_e5_msra")),
        Part("flat_e5_msra", "FLAT + e5-small, whole MSRA, 2 epochs", "flat_e5_msra", (), 2, 40, epoch("flat_e5_msra"),
             seen_in="msra"),
        Part("nflat_e5_msra", "NFLAT + e5-small, whole MSRA, 2 epochs", "nflat_e5_msra", (), 2, 40,
             epoch("nflat_e5_msra"), seen_in="msra"),
        # MSRA's one seed for the best switch arm on Resume (unseen_pairs_flat_resume_replacement.json: both), paired
        # with flat_e5_msra by seed; LAC's reading of jieba's 337k words alone comes first (about 35 s measured)
        Part("flat_e5_msra_both", "FLAT + e5-small, whole MSRA, 2 epochs, with typed lexicon words (jieba and LAC) "
             "and mention replacement (0.3, from the training set): the pair of flat_e5_msra", "flat_e5_msra",
             SWITCHES_BOTH, 2, 75, epoch("flat_e5_msra_both"), seen_in="msra"),
        Part("bert_e5_msra_table3_plain", "SLA Table 3 NER row: plain BERT-CRF on e5-small, whole MSRA", "bert_e5_msra",
             bert, 2, 25, epoch("bert_e5_msra_table3_plain")),
        Part("bert_e5_msra_table3_wla", "SLA Table 3 NER row: + WLA (window k 3)", "bert_e5_msra",
             (*bert, "model.local_attention=window"), 2, 25, epoch("bert_e5_msra_table3_wla")),
        Part("bert_e5_msra_table3_sla", "SLA Table 3 NER row: + SLA (tree distance m 3, udchinese parses made on the CPU)",
             "bert_e5_msra", (*bert, "model.local_attention=syntax"), 2, 30, epoch("bert_e5_msra_table3_sla"),
             uses_parses=True),
        # zh-accurate's e5 candidate ran 2 epochs at batch 16 on the CPU (accurate_model_e5.json, dev still rising):
        # here 2 at batch 32 (3 do not fit 10 minutes at the measured speeds); LAC's features of the union's 2.6M
        # characters come first
        Part("flat_e5_accurate", "zh-accurate's e5 candidate (FLAT + LAC + e5-small on the union), 2 epochs at batch 32",
             "flat_e5_accurate", ("train.batch_size=32",), 2, 150, epoch("flat_e5_accurate"), union=True),
    ]
    if tiny:  # the same parts on the tiny corpora: one epoch, a small time limit
        out = [Part(p.name, p.what + " (TINY: smoke test, not a measurement)", p.config,
                    p.overrides, 1, p.prepare_s, p.epoch_s, p.uses_parses, p.union, p.seen_in) for p in out]
    return out


def parts_budget_s(tiny: bool = False) -> float:
    """Wall seconds the parts share: the whole budget less setup and collection (tiny: a generous CPU allowance)."""
    return 1800.0 if tiny else float(TOTAL_S - SETUP_S - COLLECT_S)


def train_budget_s(part: Part, budget_s: float) -> float:
    """The part's share of the budget for training: all of it, less the seen / unseen scoring after it."""
    return budget_s - (SEEN_S if part.seen_in else 0)


def max_minutes(part: Part, budget_s: float) -> float:
    """train.max_minutes: past it no epoch starts, so set where the last epoch would still end inside the budget at
    the estimated speed (the trainer's clock starts after preparation and counts the dev passes)."""
    train_s = max(train_budget_s(part, budget_s) - part.prepare_s, part.epoch_s)
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
    # expandable segments: in the first run the seven other parts held 5-24 GB each, mostly blocks cached after MSRA's
    # longest batches, and flat_e5_accurate, asking for 288 MB, found 280 MB free (device_flat_e5_accurate.json)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1",
               PYTORCH_CUDA_ALLOC_CONF=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"))
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


def seen_unseen(part: Part, run_dir: Path, device: str, timeout_s: float) -> dict | str:
    """Strict F1 on the test mentions seen / unseen in the training split (`zhner evaluate --seen-in --json`), or why
    there is none."""
    if not (run_dir / "model.safetensors").is_file():
        return "no model saved"
    argv = [sys.executable, "-m", "zhner.cli", "evaluate", str(run_dir), part.seen_in, "--seen-in", part.seen_in,
            "--json", "--device", device]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=max(timeout_s, 1))
        split = json.loads(done.stdout)["seen"]
    except subprocess.TimeoutExpired:
        return f"not scored: past its {timeout_s:.0f} s"
    except (json.JSONDecodeError, KeyError, TypeError):
        return f"not scored: zhner evaluate exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    return {"command": shlex.join(["zhner", *argv[3:]]), "seen": split["seen"], "unseen": split["unseen"]}


def run_part(part: Part, paths: Paths, args: argparse.Namespace, deadline: float) -> dict:
    """Train one part (until its epochs, max_minutes or the deadline), score it seen / unseen, write its results."""
    argv = command(part, paths, args.device, args.budget_s, args.threads)
    paths.runs.mkdir(parents=True, exist_ok=True)
    record = harness.Run(note=args.note)  # the command and the load before, now
    seen_s = SEEN_S if part.seen_in else 0
    outcome = run_command(argv, paths.runs / f"{part.name}.log", deadline - seen_s - time.time(), args.threads)
    result = part_result(part, argv, paths.runs / part.name, outcome, args.tiny)
    if part.seen_in:
        result["test_seen_unseen"] = seen_unseen(part, paths.runs / part.name, args.device, deadline - time.time())
    result = record.record(result) | {"commit": carried_commit(args.carry)}  # the device's copy has no .git
    harness.write(paths.out / part.results, result, echo=False)
    print(f"{part.name}: {result['status']}, {outcome.wall_s:.0f} s, best epoch {result['best_epoch']}, "
          f"test F1 {(result['test'] or {}).get('f1_strict')}", flush=True)
    return result


def done(part: Part, results: Path, tiny: bool) -> bool:
    """The tree holds this part's results file for the same plan, completed (not cut off, not failed)."""
    path = results / part.results
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return (recorded.get("status") == "completed" and recorded.get("what") == part.what and bool(recorded.get("tiny")) == tiny
            and recorded.get("epochs_planned") == part.epochs)


def todo(args: argparse.Namespace) -> list[Part]:
    """The parts this call trains (--only, else those not done unless --all), their estimates for that many at once."""
    chosen = [p for p in parts(args.tiny) if (p.name in args.only if args.only else args.all or not done(p, args.done_in, args.tiny))]
    return [p for p in parts(args.tiny, n_sharing=len(chosen)) if p.name in {c.name for c in chosen}]


def run(args: argparse.Namespace) -> None:
    harness.use_checkout()
    paths = Paths(args.e5, args.parses, args.runs, args.out)
    deadline = time.time() + args.budget_s
    chosen = todo(args)
    skipped = [p.name for p in parts(args.tiny) if p.name not in {c.name for c in chosen}]
    print(f"parts: {', '.join(p.name for p in chosen) or 'none'}" + (f"; done before: {', '.join(skipped)}" if skipped else ""), flush=True)
    with ThreadPoolExecutor(max_workers=max(1, min(args.jobs, len(chosen)))) as pool:
        results = list(pool.map(lambda p: run_part(p, paths, args, deadline), chosen))
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
        p.add_argument("--all", action="store_true", help="every part, also those the tree's results say are done")
        p.add_argument("--done-in", type=Path, default=harness.RESULTS, help="where the results of earlier calls lie")
        p.add_argument("--carry", type=Path, default=None, help="the carried folder (its commit.txt)")
        p.add_argument("--note", default="", help="recorded in every results file")
    args = ap.parse_args()
    args.budget_s = args.budget_s or parts_budget_s(args.tiny)
    if args.verb == "list":
        paths = Paths(args.e5, args.parses, args.runs, args.out)
        for part in todo(args):
            print(f"{part.name}\t{part.estimate_s():.0f}\t{shlex.join(command(part, paths, args.device, args.budget_s, args.threads))}")
    else:
        run(args)


if __name__ == "__main__":
    main()

"""Peak memory and time per sentence against sentence length, FLAT vs NFLAT (the NFLAT paper's Section V-F, Fig. 5).

Usage: python benchmarks/resources/length_sweep.py [--lengths 100 200 400 700 1000 1500 3000] [--cap-mb 8000] [--out benchmarks/results]

- Text: MSRA test sentences ($ZHNER_DATA or ../shared/data) concatenated in file order and cut at exactly N characters, with their gold
  tags; lexicon matches from jieba's dictionary (words of >= 2 characters), as the models see them in training.
- Models: the shipped configs (default flat_msra, nflat_msra), randomly initialised (time and memory do not depend on the
  weights); vocabularies built from the sweep text, so the embedding tables are small and what is measured is the part
  that grows with the sentence.
- Each (model, length, mode) point runs in a fresh subprocess with one torch thread, batch 1:
  mode "train": forward + backward of the CRF loss (what the paper's memory figure is about; no optimiser step),
  mode "infer": emissions + Viterbi decoding under no_grad.
- Memory: in the child, after setup, `malloc_trim` returns freed heap pages, the kernel's peak-RSS counter is reset
  (writing 5 to /proc/self/clear_refs) and peak_mb = VmHWM after the step - VmRSS before it: the step's own peak,
  unaffected by import/setup peaks (which ru_maxrss would include). Where the reset is not allowed, ru_maxrss is used
  and the row says so (`memory_method`).
- Safety: a child's address space is capped at its size before the step + --cap-mb (RLIMIT_AS), so a point that needs
  more fails with an allocation error and is recorded as status "oom" (peak_mb and seconds null) instead of swapping
  out the machine; a point running longer than --timeout-s is recorded as "timeout".
- Time: the median of --repeats steps (the first, measured for memory, included) for steps under 5 s, else the first.
- zhner's FLAT computes only the character queries in its last layer (the only layer of the shipped configs): its
  attention is n (n + m), like NFLAT's n (m + 1) + n^2. The paper compares with the release's FLAT, whose layer updates
  every span: (n + m)^2. That one is measured too (`extra_rows`, variant "all_span_queries": the same model and weights,
  every span a query, characters read out), so both comparisons are on record.

Writes length_sweep.json ({"rows": [{"model", "length", "mode", "peak_mb", "seconds", ...}], ...}), length_sweep.md and
length_sweep.png into --out.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
REPO = harness.REPO
LENGTHS = [100, 200, 400, 700, 1000, 1500, 3000]


# -- child: one measured point ----------------------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> str:
    """Return freed heap to the OS and reset VmHWM; the method name goes into the row."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return "VmHWM reset"
    except OSError:
        return "ru_maxrss"


def _all_span_queries_emissions(model, batch):
    """FLAT as the release computes it: every layer updates all n + m spans ([B, H, n+m, n+m] scores); then characters."""
    from zhner.nn.flat_attention import span_attention_mask

    x, heads, tails, span_mask = model.lattice(batch)
    L = batch["chars"].shape[1]
    positions = model.position(heads, tails, max_distance=L - 1)
    allowed = span_attention_mask(heads, tails, span_mask, L, model.config.msm, model.config.mld)
    for layer in model.layers:
        x = layer(x, positions, allowed)
    return model.out(model.fc_dropout(x[:, :L]))


def run_point(spec_path: str) -> dict:
    import torch

    from zhner.models import MODELS

    torch.set_num_threads(1)
    spec = torch.load(spec_path, weights_only=False)
    config_class, model_class = MODELS[spec["model"]["name"]]
    torch.manual_seed(0)
    sizes = {"labels": spec["tags"], "scheme": spec["scheme"], "vocab_sizes": spec["vocab_sizes"]}
    model = model_class(config_class.model_validate(spec["model"] | sizes))
    batch, mode = spec["batch"], spec["mode"]
    if spec.get("variant") == "all_span_queries":
        model.emissions = types.MethodType(_all_span_queries_emissions, model)

    def step() -> None:
        if mode == "train":
            model.train()
            model.zero_grad(set_to_none=True)
            model(batch).backward()
        else:
            model.eval()
            with torch.no_grad():
                model.decode(batch)

    cap = spec["cap_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (_status_kb("VmSize") * 1024 + cap, resource.RLIM_INFINITY))
    method = _reset_peak()
    before_kb = _status_kb("VmRSS")
    try:
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
    except (RuntimeError, MemoryError) as exc:
        if "memory" not in str(exc).lower() and not isinstance(exc, MemoryError):
            raise
        return {"status": "oom", "peak_mb": None, "seconds": None, "memory_method": method}
    peak_kb = _status_kb("VmHWM") if method == "VmHWM reset" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = [first]
    while first < 5.0 and len(times) < spec["repeats"]:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {
        "status": "ok",
        "peak_mb": round((peak_kb - before_kb) / 1024, 1),
        "seconds": round(statistics.median(times), 4),
        "timed_steps": len(times),
        "memory_method": method,
    }


# -- parent: text, batches, one subprocess per point -------------------------------------------------------------------


def sweep_text(max_len: int):
    """MSRA test sentences in file order, concatenated until max_len characters: (chars, tags)."""
    from zhner.data.corpus import read_corpus
    from zhner.data.registry import find_file

    corpus = read_corpus(find_file("msra", "test"))
    chars: list[str] = []
    tags: list[str] = []
    for sent in corpus.sentences:
        chars.extend(sent.tokens)
        tags.extend(sent.tags)
        if len(chars) >= max_len:
            break
    return chars[:max_len], tags[:max_len], corpus.scheme


def build_batches(lengths: list[int]):
    """The featurizer over the longest text (jieba lexicon) and one batch of size 1 per length."""
    from zhner.data.corpus import Corpus, Example
    from zhner.data.registry import find_file
    from zhner.lexicon.lexicon import Lexicon
    from zhner.models.inputs import Featurizer
    from zhner.tasks import SpanTagging

    chars, tags, scheme = sweep_text(max(lengths))
    corpus = Corpus([Example(chars, tags)], scheme, find_file("msra", "test"))
    splits = {"train": corpus}
    featurizer = Featurizer.build(splits, ["chars", "bigrams", "lexicon"], SpanTagging.build(splits), normalize_digits=True,
                                  lexicon=Lexicon.from_jieba())
    batches = {n: featurizer.collate([featurizer.encode(Example(chars[:n], tags[:n]))]) for n in lengths}
    return featurizer, batches


def measure(model_cfg: dict, featurizer, batch, mode: str, args, variant: str | None = None) -> dict:
    import torch

    spec = {
        "model": model_cfg, "vocab_sizes": featurizer.vocab_sizes(), "tags": featurizer.tags, "scheme": featurizer.scheme,
        "batch": batch, "mode": mode, "cap_mb": args.cap_mb, "repeats": args.repeats, "variant": variant,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.pt"
        torch.save(spec, path)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(path)], capture_output=True, text=True, env=env, timeout=args.timeout_s
            )
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "peak_mb": None, "seconds": None}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        oom = "memory" in last.lower() or proc.returncode in (-9, 137)
        return {"status": "oom" if oom else "error", "peak_mb": None, "seconds": None, "detail": last[:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _label(row: dict) -> str:
    return {"flat": "FLAT", "nflat": "NFLAT"}.get(row["model"], row["model"]) + (
        " (all span queries)" if row.get("variant") == "all_span_queries" else ""
    )


def write_outputs(result: dict, out: Path) -> None:
    from zhner.fileio import atomic_open, atomic_write_text

    harness.write(out / "length_sweep.json", result, echo=False)
    rows = result["rows"] + result["extra_rows"]
    lines = [
        "| model | mode | length | lexicon words | peak MB | seconds / sentence | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mb = "-" if r["peak_mb"] is None else f"{r['peak_mb']:.1f}"
        sec = "-" if r["seconds"] is None else f"{r['seconds']:.3f}"
        lines.append(f"| {_label(r)} | {r['mode']} | {r['length']} | {r['words']} | {mb} | {sec} | {r['status']} |")
    ratio = ["", "NFLAT peak memory / FLAT's (zhner FLAT, and FLAT with all span queries as in the release):", ""]
    for mode in ("train", "infer"):
        for n in sorted({r["length"] for r in rows}):
            got = {_label(r): r["peak_mb"] for r in rows if r["length"] == n and r["mode"] == mode}
            nflat = got.get("NFLAT")
            parts = [f"{nflat / got[k]:.2f} vs {k}" for k in ("FLAT", "FLAT (all span queries)") if nflat and got.get(k)]
            if parts:
                ratio.append(f"- {mode}, {n} characters: " + "; ".join(parts))
    header = [f"Command: `{result['command']}` ({result['date']}, {result['machine']}).", ""]
    atomic_write_text(out / "length_sweep.md", "\n".join(header + lines + ratio) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = sorted({_label(r) for r in rows})
    for (key, ylabel), ax in zip([("peak_mb", "peak memory of the step (MB)"), ("seconds", "seconds per sentence")], axes):
        for label in labels:
            for mode, style in (("train", "-"), ("infer", "--")):
                pts = [(r["length"], r[key]) for r in rows if _label(r) == label and r["mode"] == mode and r[key] is not None]
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", label=f"{label} {mode}")
        ax.set_xlabel("sentence length (characters); batch 1, one CPU thread")
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("FLAT vs NFLAT on MSRA test text with jieba lexicon matches (train = forward + backward)")
    fig.tight_layout()
    with atomic_open(out / "length_sweep.png", "wb") as handle:
        fig.savefig(handle, format="png", dpi=110)


def _model_name(config_name: str) -> str:
    from zhner.cli import resolve_config
    from zhner.config import load_config

    return load_config(resolve_config(config_name)).model.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    parser.add_argument("--configs", nargs="+", default=["flat_msra", "nflat_msra"], help="shipped config names or YAML paths")
    parser.add_argument("--modes", nargs="+", default=["train", "infer"], choices=["train", "infer"])
    parser.add_argument("--cap-mb", type=int, default=8000, help="memory cap of one point (address space above setup)")
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--no-release-flat", action="store_true", help="skip FLAT with every span as a query")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_point(args.child)))
        return

    from zhner.cli import resolve_config
    from zhner.config import load_config

    provenance = harness.Run()
    featurizer, batches = build_batches(args.lengths)
    rows, extra_rows = [], []
    runs = [(name, None) for name in args.configs]
    runs += [(name, "all_span_queries") for name in args.configs if not args.no_release_flat and "flat" == _model_name(name)]
    for name, variant in runs:
        model_cfg = load_config(resolve_config(name)).model.model_dump(mode="json")
        for mode in args.modes:
            failed = False
            for n in sorted(args.lengths):
                batch = batches[n]
                row = {"model": model_cfg["name"], "config": name, "length": n, "mode": mode,
                       "words": int(batch["word_mask"].sum())} | ({"variant": variant} if variant else {})
                # a longer sentence needs more: once a point fails, the longer ones are recorded as skipped
                point = {"status": "skipped", "peak_mb": None, "seconds": None} if failed else measure(
                    model_cfg, featurizer, batch, mode, args, variant
                )
                failed = failed or point["status"] != "ok"
                (extra_rows if variant else rows).append(row | point)
                print(json.dumps(row | point), file=sys.stderr, flush=True)
    result = provenance.record({
        "rows": rows,
        "extra_rows": extra_rows,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, one torch thread",
        "text": "MSRA test sentences concatenated in file order, cut at each length; jieba lexicon (>= 2 characters)",
        "cap_mb": args.cap_mb,
        "notes": "train = forward + backward of the CRF loss; infer = no_grad emissions + Viterbi; batch 1; fresh process "
        "per point; peak_mb = VmHWM after the step - VmRSS before it (VmHWM reset before the step); seconds = median step time",
    })
    args.out.mkdir(parents=True, exist_ok=True)
    write_outputs(result, args.out)


if __name__ == "__main__":
    main()

"""Many runs of one config: several seeds (`zhner train --seeds N`) and one-parameter sweeps (`zhner sweep`).

    zhner train CONFIG -o DIR --seeds 3           DIR/seed42, seed43, seed44 (run directories) + DIR/seeds.json
    zhner sweep CONFIG -o DIR --param model.topk=1,2,3 [--seeds N]
                                                  DIR/topk=1, topk=2, topk=3 (each a run or a seed set) + DIR/sweep.json

Running the same command again resumes: an interrupted run continues from its checkpoint, and a finished run with the
same config is read back instead of being trained again (a finished run with another config is an error).
"""
from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from zhner.config import MAX_SEED, Config, apply_overrides, config_from_dict, parse_override
from zhner.errors import ZhnerError
from zhner.evaluate.metrics import headline
from zhner import fileio
from zhner.pipeline import METRICS, WEIGHTS, read_json, read_yaml
from zhner.train.assemble import log_info
from zhner.train.rundir import CHECKPOINT, check_ours
from zhner.train.trainer import train

# set by the trainer from the vectors, the data and the BERT directory: a saved config differs there by design
_DERIVED = ("char_dim", "bigram_dim", "labels", "scheme", "vocab_sizes", "bert_config")


def _mean_std(values: list[float]) -> dict:
    """{n, mean, std} (sample std; None for fewer than two values), as zhner.evaluate.significance.describe."""
    return {
        "n": len(values),
        "mean": statistics.fmean(values) if values else None,
        "std": statistics.stdev(values) if len(values) > 1 else None,
    }


def run_summary(metrics: dict) -> dict:
    """The line a multi-run summary keeps per run: identity, epochs and headline dev/test metrics."""
    return {k: metrics[k] for k in ("model", "dataset", "seed", "best_epoch", "epochs_run", "status")} | {
        "metric": metrics.get("metric", "f1_strict"),
        "dev": headline(metrics["dev"]) if metrics.get("dev") else None,
        "test": headline(metrics["test"]) if metrics.get("test") else None,
    }


def _comparable(raw: dict) -> dict:
    model = {k: v for k, v in raw.get("model", {}).items() if k not in _DERIVED}
    train = {k: v for k, v in raw.get("train", {}).items() if k != "max_minutes"}  # where it stopped, not what it is
    return raw | {"model": model, "train": train}


def _finished_metrics(out: Path, config: Config) -> dict | None:
    """The metrics of a finished run in `out` made with `config`, or None if `out` holds no finished run."""
    if not (out / WEIGHTS).exists() or (out / CHECKPOINT).exists() or not (out / METRICS).exists():
        return None
    metrics = read_json(out / METRICS)  # errors name the file: a damaged run is reported, not trained over
    if metrics.get("status") in (None, "running"):
        return None
    missing = [k for k in ("model", "dataset", "seed", "best_epoch", "epochs_run") if k not in metrics]
    if missing:
        what = f"not the metrics of a finished run (no {', '.join(missing)}); delete the run to train it again"
        raise ZhnerError(what, out / METRICS)
    saved = read_yaml(out / "config.yaml")
    try:  # fields added to the config since the run was made count as their defaults
        saved = config_from_dict(saved).model_dump(mode="json")
    except ZhnerError:
        pass
    if _comparable(saved) != _comparable(config.model_dump(mode="json")):
        raise ZhnerError("holds a finished run with a different config; use another -o or --overwrite", out)
    return metrics


def train_one(config: Config, out: Path, log: Callable[[str], None], overwrite: bool, device: str = "auto") -> dict:
    """Train one run, or read back a finished one made with the same config (unless `overwrite`)."""
    if not overwrite:
        metrics = _finished_metrics(out, config)
        if metrics is not None:
            log(f"{out}: finished run found, not trained again")
            return metrics
    return train(config, out, log=log, overwrite=overwrite, device=device)


def train_seeds(
    config: Config,
    out: str | Path,
    seeds: int,
    log: Callable[[str], None] = log_info,
    overwrite: bool = False,
    device: str = "auto",
) -> list[dict]:
    """Seeds config.train.seed, +1, ...: one run directory `seed<N>` each, and `seeds.json` (a list of run summaries)."""
    out = Path(out)
    check_ours(out, lambda entry: entry.name == "seeds.json" or re.fullmatch(r"seed\d+", entry.name) is not None, "a seed set of zhner's")
    first = config.train.seed
    if first + seeds - 1 > MAX_SEED:
        raise ZhnerError(f"--seeds {seeds} from train.seed {first}: the last seed would be over 2^32 - 1")
    earlier = _earlier_summaries(out / "seeds.json")
    summaries = []
    for k in range(seeds):
        seed = first + k
        seeded = config.model_copy(update={"train": config.train.model_copy(update={"seed": seed})})
        summaries.append(run_summary(train_one(seeded, out / f"seed{seed}", log, overwrite, device)))
        # partial sets are readable; a rerun keeps the summaries of the seeds it has not reached yet
        later = [earlier[s] for s in range(seed + 1, first + seeds) if s in earlier]
        _write_json(out / "seeds.json", summaries + later)
    return summaries


def _write_json(path: Path, value: object) -> None:
    """A file of zhner's own folder: a new file renamed over its name, never written through a planted link."""
    with fileio.replacing(path) as handle:
        handle.write(json.dumps(value, indent=2, ensure_ascii=False))


def _earlier_summaries(path: Path) -> dict[int, dict]:
    """seed -> summary of an earlier seeds.json ({} when there is none or it cannot be read: it is rewritten)."""
    try:
        summaries = fileio.read_json(path, fileio.MODEL_FILE)  # bounded: a FIFO or /dev/zero there is not read
    except ZhnerError:
        return {}
    if not isinstance(summaries, list):
        return {}
    return {s["seed"]: s for s in summaries if isinstance(s, dict) and type(s.get("seed")) is int}


def parse_param(spec: str) -> tuple[str, list]:
    """'model.topk=1,2,3' -> ('model.topk', [1, 2, 3]); each value is read as YAML."""
    key, _, values = spec.partition("=")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not key or not items:
        raise ZhnerError(f"--param {spec!r}: expected KEY=V1,V2,..., e.g. model.topk=1,2,3")
    return key, [parse_override(f"{key}={item}", "--param")[1] for item in items]


def run_dir_name(key: str, value: object) -> str:
    """The sub-directory of one swept value, 'topk=3': one path component whatever the value holds (a dataset path
    such as '../x' or '/data/x' would otherwise place the run outside the sweep's folder)."""
    text = str(value).replace("/", "%2F").replace("\\", "%5C")
    name = f"{key.rsplit('.', 1)[-1]}={text}"
    if len(name.encode("utf-8")) <= 200:
        return name
    return name[:150] + "..." + hashlib.sha1(name.encode("utf-8")).hexdigest()[:12]  # file systems allow 255 bytes


def sweep(
    raw: dict,
    out: str | Path,
    param: str,
    seeds: int = 1,
    log: Callable[[str], None] = log_info,
    overwrite: bool = False,
    source: str = "config",
) -> dict:
    """Train the raw config (a dict, overrides applied) once per value of `param` ('model.topk=1,2,3'), `seeds` seeds each.
    Writes `sweep.json`: the parameter, and per value its directory, run summaries and mean +- std of the F1s."""
    out = Path(out)
    check_ours(out, lambda entry: entry.name == "sweep.json" or "=" in entry.name, "a sweep of zhner's")
    key, values = parse_param(param)
    configs = [config_from_dict(apply_overrides(json.loads(json.dumps(raw)), [f"{key}={json.dumps(v)}"]), source) for v in values]
    result = {"param": key, "seeds": seeds, "runs": []}
    for value, config in zip(values, configs):
        name = run_dir_name(key, value)
        log(f"sweep {key} = {value} -> {out / name}")
        if seeds == 1:
            summaries = [run_summary(train_one(config, out / name, log, overwrite))]
        else:
            summaries = train_seeds(config, out / name, seeds, log, overwrite)
        # the selection metric of the runs' task (tagging: f1_strict; classification: accuracy, mcc, ...)
        field = next((s.get("metric") for s in summaries if s.get("metric")), "f1_strict")
        means = {f"{split}.{field}": _mean_std([s[split][field] for s in summaries if s[split]]) for split in ("test", "dev")}
        result["runs"].append({"value": value, "dir": name, "metric": field, "summaries": summaries} | means)
        _write_json(out / "sweep.json", result)
    return result

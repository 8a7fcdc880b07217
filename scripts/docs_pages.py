"""The generated parts of the documentation site: tables from benchmarks/results/*.json, the CLI reference from the
CLI's own --help, the HTTP API from the service's OpenAPI spec. Nothing here is typed by hand.

A page asks for a part with a marker line `<!-- zhner:generated NAME -->` (NAME: see `PARTS`, or `findings:FILE`,
`ablation:FILE`, `sweep:FILE` for benchmarks/results/<kind>_FILE.json). MkDocs runs this file as a hook (mkdocs.yml,
`hooks:`), so the site is never stale; an unknown marker or a missing results file fails the build.

    python scripts/docs_pages.py docs/speed.md      # print a page with its markers filled in
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MARKER = re.compile(r"^<!-- zhner:generated ([\w:.-]+) -->$", re.MULTILINE)


@cache
def _benchmark(name: str) -> ModuleType:
    """A script of benchmarks/ as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(kind: str, name: str) -> dict:
    path = RESULTS / f"{kind}_{name}.json"
    if not path.is_file():
        raise ValueError(f"no results file {path.relative_to(REPO)}")
    return json.loads(path.read_text(encoding="utf-8"))


# The results files say how each figure was measured in the words of the day it was measured ("the new default", "the
# session's training"); the site states findings, not their history (CHANGELOG.md keeps that), so the tables it shows
# name the presets by what they are. The files themselves stay as they were written.
PLAIN_WORDS = [
    ("default (before)", "constrained CRF"),
    ("the new default preset", "the release-style CRF"),
    ("the new default", "the release-style CRF"),
    ("new default", "release-style CRF"),
    (", the default since)", ")"),
    ("the issue's seed-7 probe", "a seed-7 probe"),
    ("the session's training and parse", "the machine's other training and parse"),
    ("the two trainings of the session", "the machine's two other trainings"),
]


def _plain(text: str) -> str:
    for old, new in PLAIN_WORDS:
        text = text.replace(old, new)
    return text


def _source(*files: str) -> str:
    return "\n\n<small>Generated from " + ", ".join(f"`benchmarks/results/{f}`" for f in files) + ".</small>"


MODEL_NAMES = {"tener": "TENER", "bilstm_crf": "BiLSTM-CRF", "flat": "FLAT", "nflat": "NFLAT", "atssa": "ATSSA",
               "bert_tagger": "BERT-CRF", "bert_classifier": "BERT classifier", "tener_classifier": "TENER classifier",
               "acts": "ACT-S"}
MODEL_ORDER = list(MODEL_NAMES)
DATASET_NAMES = {"msra": "MSRA", "resume": "Resume", "weibo": "Weibo (all mentions)", "conll2003": "CoNLL-2003 (English)",
                 "chnsenticorp": "ChnSentiCorp", "sst2": "SST-2 (English; test = GLUE dev)",
                 "cola": "CoLA (English; test = GLUE dev)"}
DATASET_ORDER = list(DATASET_NAMES)
# the encoders a results file's model reads, named in its table row (the variant says which, see _encoder)
LAC = "LAC char vectors"
ENCODER_NOTE = (
    f"*Encoder*: **{LAC}**: characters as Baidu LAC's 128-d vectors, bigrams (and a lattice model's jieba words) as the "
    "mean of their characters' vectors, all trained on ([Resources](resources.md)); **+ LAC states** / **+ LAC scores**: "
    "the same, plus LAC's frozen BiGRU states or tag scores per character (`model.char_features`); **e5-small**: "
    "multilingual-E5-small, fine-tuned unless the variant says frozen ([Pretrained encoders](pretrained.md)); "
    "**MiniLM-L6**: the English all-MiniLM-L6-v2.")
# what each word of a results file's variant (`--variant`, the file name's tail) changed
VARIANT_WORDS = {
    "no_ssa": "−SSA (`model.selective=false`)",
    "fast": "`--recipe fast`",
    "gpu": "on a GPU",
    "5k": "5,000 train sentences, 2 epochs",
    "sla": "+ SLA",
    "wla": "+ WLA",
    "lr1e4": "encoder lr 1e-4, 4 epochs",
    "cpu": "on the CPU",
    "frozen": "encoder frozen (`--recipe frozen`)",
    "k6": "first 6 encoder layers frozen",
    "llrd09": "layer-wise lr decay 0.9",
    "marked": "word-start pieces (`model.e5_piece=marked`)",
    "1epoch": "1 epoch",
    "full_train": "all of train, 1 epoch",
}
NO_VARIANT = "—"
VARIANT_NOTE = (f"*Variant*: what the row changed from the config; {NO_VARIANT} is the config as shipped (its "
                "schedule may still be shortened: see each file's `command`).")


def _variant_words(variant: str | None) -> list[str]:
    words, rest = [], (variant or "").split("_")
    while rest:  # two-word names first (no_ssa, full_train, lac_scores)
        pair = "_".join(rest[:2])
        if len(rest) > 1 and (pair in VARIANT_WORDS or pair == "lac_scores"):
            words.append(pair)
            rest = rest[2:]
        else:
            words.append(rest.pop(0))
    return [w for w in words if w]


def _encoder(model: str, words: list[str]) -> str:
    if "e5" in words:
        return "e5-small"
    if model in ("bert_tagger", "bert_classifier"):
        return "MiniLM-L6"
    if "lac_scores" in words:
        return f"{LAC} + LAC scores"
    if "lac" in words:
        return f"{LAC} + LAC states"
    return LAC


def _label(r: dict) -> tuple[str, str, str]:
    """(model, encoder, variant) of a results file: e5 rows never share a label with the plain ones."""
    words = _variant_words(r.get("variant"))
    variant = ", ".join(VARIANT_WORDS.get(w, f"`{w}`") for w in words if w not in ("e5", "lac", "lac_scores"))
    return MODEL_NAMES.get(r["model"], r["model"]), _encoder(r["model"], words), variant or NO_VARIANT


def _device(r: dict) -> str:
    command = r["command"] if isinstance(r["command"], str) else " ".join(r["command"])
    return "GPU" if "--device cuda" in command else "CPU"


def _epochs(r: dict) -> str:
    """Each seed's best epoch, then the epochs run: `48, 49, 28 / 50` (or `5 / 6, 9 / 10` when the runs differ)."""
    if len(set(r["epochs"])) == 1:
        return ", ".join(str(b) for b in r["best_epoch"]) + f" / {r['epochs'][0]}"
    return ", ".join(f"{b} / {e}" for b, e in zip(r["best_epoch"], r["epochs"]))


def _mean(r: dict, key: str, part: str = "test") -> str:
    value = r[part][key]
    if part == "test" and len(r["seeds"]) > 1:
        return f"{value} ± {r['test_std'][key]:.2f}"
    return f"{value}"


def _results_files(classification: bool) -> list[dict]:
    files = []
    for path in sorted(RESULTS.glob("*_*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(r, dict) or "test" not in r or "model" not in r or ("accuracy" in r["test"]) != classification:
            continue
        files.append(r | {"_file": path.name})
    model_rank = {m: i for i, m in enumerate(MODEL_ORDER)}
    return sorted(files, key=lambda r: (DATASET_ORDER.index(r["dataset"]) if r["dataset"] in DATASET_ORDER else 99,
                                        r["dataset"], model_rank.get(r["model"], 99), r["model"],
                                        "e5" in _variant_words(r.get("variant")), r.get("variant") or ""))


def _dataset_heading(dataset: str) -> str:
    return f"### {DATASET_NAMES.get(dataset, dataset)}"


def results_table() -> str:
    """The taggers' results files: one table per dataset (model, encoder, variant; test F1, P, R, dev F1, seeds, best
    epochs), then one table of the remaining columns (Span F, type accuracy, training speed and device)."""
    files = _results_files(classification=False)
    parts = []
    for dataset in dict.fromkeys(r["dataset"] for r in files):
        lines = [_dataset_heading(dataset), "",
                 "| model | encoder | variant | test F1 | lenient F1 | P | R | dev F1 | seeds | best epoch / run |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in files if r["dataset"] == dataset):
            t = r["test"]
            lines.append(f"| {' | '.join(_label(r))} | **{_mean(r, 'f1_strict')}** | {t['f1_lenient']} | {t['p']} | "
                         f"{t['r']} | {r['dev']['f1_strict']} | {len(r['seeds'])} | {_epochs(r)} |")
        parts.append("\n".join(lines))
    more = ["### Span F, type accuracy and training speed", "",
            "| dataset | model | encoder | variant | Span F | Type Acc | train sent/s | device |",
            "|---|---|---|---|---|---|---|---|"]
    for r in files:
        t = r["test"]
        speed = NO_VARIANT if r["train_sentences_per_s"] is None else f"{r['train_sentences_per_s']:.1f}"
        more.append(f"| {r['dataset']} | {' | '.join(_label(r))} | {t['span_f']} | {t['type_acc']} | {speed} | "
                    f"{_device(r)} |")
    notes = [
        "*Test F1*: strict span F1 on test at the best dev epoch, mean ± sample std over the seeds when there are "
        "several; *lenient F1* reads malformed tag sequences as conlleval does ([Metrics](metrics.md)). *Best epoch / "
        "run*: each seed's best dev epoch, then the epochs it ran.",
        ENCODER_NOTE, VARIANT_NOTE,
        "*Span F*: F1 of the spans alone, types ignored; *Type Acc*: the share of correctly delimited spans that get "
        f"the right type. *Train sent/s*: the median epoch speed of the run itself, on whatever else shared the "
        f"machine ({NO_VARIANT} where the file records none: runs resumed from recorded seeds); for comparable speeds "
        "see [Speed and memory](speed.md).",
    ]
    return ("\n\n".join(parts) + "\n\n" + "\n\n".join(notes[:3]) + "\n\n" + "\n".join(more) + "\n\n" + notes[3]
            + _source("<model>_<dataset>[_<variant>].json"))


def classification_table() -> str:
    files = _results_files(classification=True)
    parts = []
    for dataset in dict.fromkeys(r["dataset"] for r in files):
        lines = [_dataset_heading(dataset), "",
                 "| model | encoder | variant | test accuracy | test MCC | test macro-F1 | dev accuracy | dev MCC | seeds | "
                 "device |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in files if r["dataset"] == dataset):
            lines.append(f"| {' | '.join(_label(r))} | {_mean(r, 'accuracy')} | {_mean(r, 'mcc')} | "
                         f"{_mean(r, 'macro_f1')} | {r['dev']['accuracy']} | {r['dev']['mcc']} | {len(r['seeds'])} | "
                         f"{_device(r)} |")
        parts.append("\n".join(lines))
    return ("\n\n".join(parts) + "\n\n" + ENCODER_NOTE + " " + VARIANT_NOTE
            + _source("<model>_<dataset>[_<variant>].json"))


SPEED_MISSING = ("the results file records no time or conditions; these two rows were measured on 2026-11-22, earlier "
                 "in the day than the FLAT, NFLAT and TENER rows, ATSSA's with both cores busy")


def speed_table() -> str:
    """`zhner bench` results: one row per file, labelled by model and encoder; the time and conditions of each
    measurement as numbered notes below the table (identical ones share a number)."""
    rows, notes = [], {}
    for path in sorted(RESULTS.glob("bench_*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if "train_sentences_per_s" not in r:  # another benchmark's file under the same prefix (bench_flat_attention)
            continue
        stem = path.stem.removeprefix("bench_")
        words = stem.split("_")
        encoder = _encoder(r["model"], words)
        if "cells1m" in words:
            encoder += ", `train.max_batch_cells=1000000`"
        when = _plain(f"{r['measured']}: {r['conditions']}") if r.get("measured") else SPEED_MISSING
        note = notes.setdefault(when, len(notes) + 1)
        rows.append((DATASET_ORDER.index(r["dataset"]) if r["dataset"] in DATASET_ORDER else 99, "e5" in words,
                     MODEL_ORDER.index(r["model"]) if r["model"] in MODEL_ORDER else 99,
                     f"| {MODEL_NAMES.get(r['model'], r['model'])} | {encoder} | {r['dataset']} | "
                     f"{r['train_sentences_per_s']} | {r['infer_sentences_per_s_b1']} | {r['infer_sentences_per_s_b16']} | "
                     f"{r['peak_rss_mb']:,.0f} | [{note}](#speed-note-{note}) |"))
    lines = ["| model | encoder | dataset | train sent/s | tag sent/s, batch 1 | tag sent/s, batch 16 | peak RSS, MB | "
             "when |", "|---|---|---|---|---|---|---|---|"]
    lines += [row for *_, row in sorted(rows)]
    legend = [f'{n}. <span id="speed-note-{n}"></span>{when}' for when, n in notes.items()]
    return ("\n".join(lines) + "\n\n" + ENCODER_NOTE + " Sentences per second on one thread; *when*: the "
            "measurement's time and what else ran:\n\n" + "\n".join(legend)
            + _source("bench_<config>.json (`zhner bench CONFIG --json`)"))


def length_sweep() -> str:
    """benchmarks/length_sweep.py's own Markdown output, as it wrote it."""
    return (RESULTS / "length_sweep.md").read_text(encoding="utf-8").strip() + _source("length_sweep.md")


def e5_pairs() -> str:
    return _benchmark("e5_pairs").table(_result("e5", "pairs")) + _source("e5_pairs.json")


def e5_frozen() -> str:
    return _benchmark("e5_frozen").table(_result("e5", "frozen")) + _source("e5_frozen.json", "<model>_<dataset>_e5_frozen.json")


def frozen_layers_speed() -> str:
    return _benchmark("frozen_layers_speed").table(_result("frozen", "layers_speed")) + _source("frozen_layers_speed.json")


def lac_check() -> str:
    return _benchmark("lac_check").table(_result("lac", "check")) + _source("lac_check.json")


def lac_pairs() -> str:
    return _benchmark("lac_pairs").table(_result("lac", "pairs")) + _source("lac_pairs.json")


def cli_reference() -> str:
    """`zhner --help` and the --help of every command, as the installed CLI prints them (plain text, 100 columns)."""
    import typer.core
    import typer.main

    from zhner.cli import app

    typer.core.HAS_RICH = False  # plain click help: boxes drawn by rich do not survive Markdown
    root = typer.main.get_command(app)
    # click.core, vendored by typer >= 0.29 (typer._click.core), else click's own: the module of TyperGroup's base
    click = sys.modules[type(root).__mro__[1].__module__]
    parts = [_help(click, root, "zhner", None)]
    parts += [section for section, _ in _commands(root, click, "zhner")]
    return "\n\n".join(parts)


def _help(click: ModuleType, command, name: str, parent) -> str:
    ctx = click.Context(command, info_name=name.rsplit(" ", 1)[-1], parent=parent, terminal_width=100, max_content_width=100)
    return f"### `{name}`\n\n```text\n{command.get_help(ctx).rstrip()}\n```"


def _commands(group, click: ModuleType, prefix: str, parent=None):
    """(help section, command) for every command under `group`, sub-groups (zhner data ...) included, in CLI order."""
    ctx = click.Context(group, info_name=prefix.rsplit(" ", 1)[-1], parent=parent)
    for name, command in group.commands.items():
        full = f"{prefix} {name}"
        yield _help(click, command, full, ctx), command
        if getattr(command, "commands", None):
            yield from _commands(command, click, full, ctx)


def _type_text(node) -> str:
    """An annotation as a reader wants it: `Literal["a", "b"] | None` -> `"a" / "b" / null`."""
    import ast

    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return f"{_type_text(node.left)} / {_type_text(node.right)}"
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal":
        values = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return " / ".join(json.dumps(ast.literal_eval(v)) for v in values)
    if isinstance(node, ast.Constant) and node.value is None:
        return "null"
    text = ast.unparse(node)
    return {"Dropout": "float in [0, 1)", "Positive": "int ≥ 1", "Ratio": "float > 0"}.get(text, text)


def _field_comments(cls: type) -> dict[str, tuple[str, str]]:
    """{field: (type, comment)} of the fields a config class declares in its own body: the annotation (with the bounds
    of a `Field(...)`), and the comment lines above the field joined with the comment at its end."""
    import ast
    import inspect
    import textwrap

    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    out = {}
    for node in tree.body[0].body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        above, k = [], node.lineno - 2
        while k >= 0 and lines[k].strip().startswith("#"):
            above.insert(0, lines[k].strip().lstrip("#").strip())
            k -= 1
        _, hash_, after = lines[node.end_lineno - 1].partition("  # ")
        comment = " ".join(above + ([after.strip()] if hash_ else []))
        kind = _type_text(node.annotation)
        if isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "Field":
            signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥"}
            bounds = [f"{signs[kw.arg]} {ast.unparse(kw.value)}".replace("MAX_SEED", "2^32 - 1")
                      for kw in node.value.keywords if kw.arg in signs]
            kind += "".join(", " + b for b in bounds)
        out[node.target.id] = (kind, comment)
    return out


def _default(value) -> str:
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        text = json.dumps(value, ensure_ascii=False)
        return f"`{text}`" if len(text) < 40 else "see the code"
    return f"`{value}`"


def _fields_table(cls: type, concrete: type | None = None) -> str:
    """The fields `cls` declares itself, their defaults as `concrete` (a subclass that may override them) has them."""
    fields = (concrete or cls).model_fields
    lines = ["| field | type | default | what |", "|---|---|---|---|"]
    for name, (kind, comment) in _field_comments(cls).items():
        info = fields[name]
        default = "required" if info.is_required() else _default(info.get_default(call_default_factory=True))
        kind, comment = kind.replace("|", "/"), comment.replace("|", "/")
        lines.append(f"| `{name}` | {kind} | {default} | {comment or NO_VARIANT} |")
    return "\n".join(lines)


def config_reference() -> str:
    """Every field of a run config (`zhner train CONFIG`, `--set SECTION.FIELD=VALUE`), read from zhner.config and the
    model configs: its type, default and the comment beside it in the code."""
    import inspect

    from zhner import config
    from zhner.models import MODELS
    from zhner.models.base import BaseModelConfig, CharInputConfig, LocalAttentionSettings, TaggerConfig
    from zhner.models.modeling_bert import BertSettings

    parts = []
    for section, cls in (("data", config.DataConfig), ("embeddings", config.EmbeddingConfig), ("train", config.TrainConfig)):
        parts.append(f"## `{section}`\n\n{_fields_table(cls)}")
        if section == "data":
            parts.append(f"Each entry of `data.union`:\n\n{_fields_table(config.UnionPart)}")
    parts.append("## `model`\n\n`model.name` picks the model: " + ", ".join(f"`{n}`" for n in MODELS) + ". Besides its "
                 "own fields below, every model config holds these, filled from the data when training starts and "
                 f"saved with the model (not set by hand):\n\n{_fields_table(BaseModelConfig)}")
    shared = [(TaggerConfig, "Output layer of the taggers"), (CharInputConfig, "Character input"),
              (LocalAttentionSettings, "Local attention (SLA / WLA)"), (BertSettings, "BERT encoder")]
    for base, title in shared:
        users = [n for n, (cfg, _) in MODELS.items() if issubclass(cfg, base)]
        doc = " ".join(inspect.cleandoc(base.__doc__ or "").split())
        parts.append(f"### {title}\n\nIn " + ", ".join(f"`{n}`" for n in users) + (f". {doc}" if doc else ".")
                     + f" A model may change a default: see its own table.\n\n{_fields_table(base)}")
    for name, (cfg, _) in MODELS.items():
        own = [c for c in cfg.__mro__ if c.__module__.startswith("zhner.models.modeling_") and c is not BertSettings]
        tables = [_fields_table(c, cfg) for c in own if _field_comments(c)]
        parts.append(f"### `{name}`\n\n" + ("\n\n".join(tables) if tables else "Only the shared fields above."))
    return "\n\n".join(parts) + "\n\n<small>Generated from `zhner/config.py` and `zhner/models/` (each field's comment in " \
                                "the code).</small>"


class _SpecOnlyTagger:
    """What create_app reads from a tagger while it builds its routes; the spec does not depend on the model (loading
    the shipped one would cost the build seconds: jieba's dictionary), and no request is ever served here."""

    task = SimpleNamespace(kind="tagging")
    featurizer = SimpleNamespace(tags=["O"], scheme="bmes")
    config = None


def openapi_reference() -> str:
    """The service's endpoints from the OpenAPI spec FastAPI builds for the shipped model, and the spec itself."""
    from zhner.serve.app import create_app

    spec = create_app(_SpecOnlyTagger()).openapi()
    lines = ["| method | path | what | responses |", "|---|---|---|---|"]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            what = " ".join((op.get("description") or op.get("summary") or "").split())
            codes = ", ".join(op.get("responses", {}))
            lines.append(f"| {method.upper()} | `{path}` | {what.replace('|', '/')} | {codes} |")
    body = json.dumps(spec, ensure_ascii=False, indent=1)
    return "\n".join(lines) + f"\n\nThe whole spec (`GET /openapi.json` of a running service):\n\n```json\n{body}\n```"


PARTS: dict[str, Callable[[], str]] = {
    "results": results_table,
    "classification": classification_table,
    "speed": speed_table,
    "length-sweep": length_sweep,
    "e5-pairs": e5_pairs,
    "e5-frozen": e5_frozen,
    "frozen-layers-speed": frozen_layers_speed,
    "lac-check": lac_check,
    "lac-pairs": lac_pairs,
    "cli-reference": cli_reference,
    "config-reference": config_reference,
    "openapi": openapi_reference,
}


def part(name: str) -> str:
    """The Markdown of one marker's part; ValueError for an unknown name."""
    if name in PARTS:
        return PARTS[name]()
    kind, _, file = name.partition(":")
    if kind == "findings":
        return _plain(_benchmark("findings").table(_result("findings", file))) + _source(f"findings_{file}.json")
    if kind == "ablation":
        path = RESULTS / f"ablation_{file}.json"
        _result("ablation", file)  # a clear error when it is missing
        return _benchmark("collect_results").ablation_table(path) + _source(path.name)
    if kind == "sweep":
        return _benchmark("plot_sweep").table(_result("atssa", file.removeprefix("atssa_"))) + _source(f"{file}.json")
    raise ValueError(f"unknown generated part {name!r} (known: {', '.join(PARTS)}, findings:F, ablation:F, sweep:F)")


def fill(markdown: str, where: str = "") -> str:
    """`markdown` with every marker replaced by its part."""

    def replace(match: re.Match) -> str:
        try:
            return part(match.group(1))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # the MkDocs hook
    return fill(markdown, page.file.src_uri)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(fill(Path(arg).read_text(encoding="utf-8"), arg))

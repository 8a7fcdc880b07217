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
def _benchmark(script: str) -> ModuleType:
    """A script of benchmarks/ as a module, named by its path there without ".py" ("accuracy/findings"): the scripts
    are not a package."""
    spec = importlib.util.spec_from_file_location(f"_docs_{script.replace('/', '_')}", REPO / "benchmarks" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
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
    ("the default rows ran at 01d59da", "the constrained-CRF and release-style-CRF rows ran at 01d59da"),
    ("the session's training and parse", "the machine's other training and parse"),
    ("the two trainings of the session", "the machine's two other trainings"),
]


def _plain(text: str) -> str:
    for old, new in PLAIN_WORDS:
        text = text.replace(old, new)
    return text


def _dash_empty(markdown: str, note: str) -> str:
    """Every empty cell of the Markdown tables in `markdown` as "—", and `note` (what "—" means there) after the part
    when there was one."""
    lines, filled = [], False
    for line in markdown.split("\n"):
        if line.startswith("|") and not re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", line.strip()):
            new = re.sub(r"(?<=\|)\s*(?=\|)", " — ", line)
            filled |= new != line
            line = new
        lines.append(line)
    return "\n".join(lines) + (f"\n\n{note}" if filled else "")


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
LAC = "LAC vectors"
ENCODER_NOTE = (
    f"*Encoder*: **{LAC}**: characters as Baidu LAC's 128-d vectors, bigrams (and a lattice model's jieba words) as the "
    "mean of their characters' vectors, all trained on ([Resources](resources.md)); **+ LAC states** / **+ LAC scores**: "
    "the same, plus LAC's frozen BiGRU states or tag scores per character (`model.char_features`); **e5-small**: "
    "multilingual-E5-small, fine-tuned unless the variant says frozen ([Pretrained encoders](pretrained.md)); "
    "**MiniLM-L6**: the English all-MiniLM-L6-v2.")
# what each word of a results file's variant (`--variant`, the file name's tail) changed: (label, what it means)
VARIANT_WORDS = {
    "no_ssa": ("−SSA", "selective attention off, `model.selective=false`"),
    "fast": ("fast", "`--recipe fast`, the config's short recipe"),
    "gpu": ("GPU", "the config, trained on a GPU"),
    "5k": ("5k, 2 ep.", "the first 5,000 train sentences, 2 epochs"),
    "sla": ("+SLA", "syntax-aware local attention, `model.local_attention=syntax`"),
    "wla": ("+WLA", "window local attention, `model.local_attention=window`"),
    "lr1e4": ("lr 1e-4", "encoder learning rate 1e-4, 4 epochs"),
    "cpu": ("CPU", "the config, trained on the CPU"),
    "frozen": ("frozen", "the encoder frozen and memoised, `--recipe frozen`"),
    "k6": ("6 frozen", "the encoder's first 6 layers frozen, `model.bert_frozen_layers=6`"),
    "llrd09": ("LLRD 0.9", "layer-wise decay of the encoder's rate, `train.bert_layer_decay=0.9`"),
    "marked": ("marked", "word-start pieces, `model.e5_piece=marked`"),
    "1epoch": ("1 ep.", "1 epoch"),
    "full_train": ("full train", "all of train for 1 epoch (the plain rows: its first 20,000 sentences)"),
}
NO_VARIANT = "—"


def _variant_note(used: set[str]) -> str:
    """The legend of the variants `used` in a table, in VARIANT_WORDS' order."""
    items = [f"**{label}**: {what}" for word, (label, what) in VARIANT_WORDS.items() if word in used]
    return (f"*Variant*: what the run changed from the config; **{NO_VARIANT}**: the config as shipped (its schedule "
            "may still be shortened: see each file's `command`)" + "".join("; " + i for i in items) + ".")


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
    variant = ", ".join(VARIANT_WORDS[w][0] if w in VARIANT_WORDS else f"`{w}`" for w in words
                        if w not in ("e5", "lac", "lac_scores"))
    return MODEL_NAMES.get(r["model"], r["model"]), _encoder(r["model"], words), variant or NO_VARIANT


def _variants_used(files: list[dict]) -> set[str]:
    return {w for r in files for w in _variant_words(r.get("variant"))}


def _device(r: dict) -> str:
    command = r["command"] if isinstance(r["command"], str) else " ".join(r["command"])
    return "GPU" if "--device cuda" in command else "CPU"


def _epochs(r: dict) -> str:
    """The seeds' best epochs, then the epochs run: `28–49 / 50` (the range over seeds; each seed's is in the file)."""
    best, run = r["best_epoch"], r["epochs"]
    span = (lambda v: f"{min(v)}–{max(v)}" if min(v) != max(v) else f"{v[0]}")
    return f"{span(best)} / {span(run)}"


def _mean(r: dict, key: str, part: str = "test") -> str:
    value = r[part][key]
    if part == "test" and len(r["seeds"]) > 1:
        return f"{value} ± {r['test_std'][key]:.2f}"
    return f"{value}"


def _results_files(classification: bool) -> list[dict]:
    files = []
    for path in sorted(RESULTS.glob("*_*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(r, dict) or not r.get("test") or "model" not in r or ("accuracy" in r["test"]) != classification:
            continue
        if "part" in r:  # a device run's part (benchmarks/device/plan.py): one seed, its own table in reproduction.md
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
                 "| model | encoder | variant | test F1 | lenient | P / R | dev F1 | seeds | best epoch / run |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in files if r["dataset"] == dataset):
            t = r["test"]
            lines.append(f"| {' | '.join(_label(r))} | **{_mean(r, 'f1_strict')}** | {t['f1_lenient']} | "
                         f"{t['p']} / {t['r']} | {r['dev']['f1_strict']} | {len(r['seeds'])} | {_epochs(r)} |")
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
        "several; *lenient*: the F1 of conlleval's reading of malformed tag sequences ([Metrics](metrics.md)); *P / R*: "
        "strict precision and recall. *Best epoch / run*: the seeds' best dev epochs (their range), then the epochs "
        "they ran.",
        ENCODER_NOTE, _variant_note(_variants_used(files)),
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
                 "| model | encoder | variant | test accuracy | test MCC | test macro-F1 | dev accuracy / MCC | seeds | "
                 "device |", "|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in files if r["dataset"] == dataset):
            lines.append(f"| {' | '.join(_label(r))} | {_mean(r, 'accuracy')} | {_mean(r, 'mcc')} | "
                         f"{_mean(r, 'macro_f1')} | {r['dev']['accuracy']} / {r['dev']['mcc']} | {len(r['seeds'])} | "
                         f"{_device(r)} |")
        parts.append("\n".join(lines))
    return ("\n\n".join(parts) + "\n\n" + ENCODER_NOTE + " " + _variant_note(_variants_used(files))
            + _source("<model>_<dataset>[_<variant>].json"))


SPEED_MISSING = ("the results file records no time or conditions; these two rows were measured on 2026-11-22, earlier "
                 "in the day than the FLAT, NFLAT and TENER rows, ATSSA's with both cores busy")


def speed_table() -> str:
    """`zhner bench` results: one row per file, labelled by model and encoder; the time and conditions of each
    measurement as numbered notes below the table (identical ones share a number, numbered in table order)."""
    rows = []
    for path in sorted(RESULTS.glob("bench_*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if "train_sentences_per_s" not in r:  # another benchmark's file under the same prefix (bench_flat_attention)
            continue
        words = path.stem.removeprefix("bench_").split("_")
        encoder = _encoder(r["model"], words)
        if "cells1m" in words:
            encoder += ", `train.max_batch_cells=1000000`"
        when = _plain(f"{r['measured']}: {r['conditions']}") if r.get("measured") else SPEED_MISSING
        key = (DATASET_ORDER.index(r["dataset"]) if r["dataset"] in DATASET_ORDER else 99, "e5" in words,
               MODEL_ORDER.index(r["model"]) if r["model"] in MODEL_ORDER else 99, encoder)
        cells = (f"| {MODEL_NAMES.get(r['model'], r['model'])} | {encoder} | {r['dataset']} | "
                 f"{r['train_sentences_per_s']} | {r['infer_sentences_per_s_b1']} | {r['infer_sentences_per_s_b16']} | "
                 f"{r['peak_rss_mb']:,.0f} |")
        rows.append((key, cells, when))
    notes: dict[str, int] = {}
    lines = ["| model | encoder | dataset | train sent/s | tag sent/s, batch 1 | tag sent/s, batch 16 | peak RSS, MB | "
             "when |", "|---|---|---|---|---|---|---|---|"]
    for _, cells, when in sorted(rows):
        note = notes.setdefault(when, len(notes) + 1)
        lines.append(f"{cells} [{note}](#speed-note-{note}) |")
    legend = [f'{n}. <span id="speed-note-{n}"></span>{when}' for when, n in notes.items()]
    return ("\n".join(lines) + "\n\n" + ENCODER_NOTE + " Sentences per second on one thread; *when*: the "
            "measurement's time and what else ran:\n\n" + "\n".join(legend)
            + _source("bench_<config>.json") + "\n<small>Written by `zhner bench CONFIG --json`.</small>")


def length_sweep() -> str:
    """benchmarks/resources/length_sweep.py's own Markdown output, as it wrote it."""
    return (RESULTS / "length_sweep.md").read_text(encoding="utf-8").strip() + _source("length_sweep.md")


def e5_pairs() -> str:
    return _benchmark("accuracy/e5_pairs").table(_result("e5", "pairs")) + _source("e5_pairs.json")


def e5_frozen() -> str:
    table = _dash_empty(_benchmark("accuracy/e5_frozen").table(_result("e5", "frozen")),
                        "— : the fine-tuned row, which the frozen rows below it are compared with.")
    return table + _source("e5_frozen.json", "<model>_<dataset>_e5_frozen.json")


def frozen_layers_speed() -> str:
    return _benchmark("speed/frozen_layers_speed").table(_result("frozen", "layers_speed")) + _source("frozen_layers_speed.json")


def lac_check() -> str:
    return _benchmark("accuracy/lac_check").table(_result("lac", "check")) + _source("lac_check.json")


def lac_pairs() -> str:
    return _benchmark("accuracy/lac_pairs").table(_result("lac", "pairs")) + _source("lac_pairs.json")


# issue 50's paired measurements of typed lexicon words and mention replacement, each arm against none by seed (the
# GPU's 0.6-minute snapshot, unseen_pairs_device.json, is left out: its runs stopped in their first epochs)
UNSEEN_PAIRS = ("device_cpu", "flat_resume", "flat_resume_replacement", "flat_resume_pooled", "nflat_weibo",
                "nflat_weibo_replacement", "nflat_resume", "flat_msra")


def unseen_pairs() -> str:
    rows = [row for name in UNSEEN_PAIRS for row in _result("unseen_pairs", name)["rows"]]
    return _benchmark("accuracy/unseen_pairs").table({"rows": rows}) + _source(*(f"unseen_pairs_{n}.json" for n in UNSEEN_PAIRS))


def window_cost() -> str:
    """The window size of over-long sentences: what a window costs, and the entities' F1 with the two sizes."""
    cost = _benchmark("speed/window_cost").table(_result("window", "cost"))
    pairs = _benchmark("accuracy/window_pairs").table(_result("window", "pairs"))
    return cost + "\n\n" + pairs + _source("window_cost.json", "window_pairs.json")


def results_index() -> str:
    """Every results file with what makes it and whether it is current: benchmarks/index.py's tables, made from the
    folder when the site is built (benchmarks/results/INDEX.md is the same, committed)."""
    index = _benchmark("index")
    return index.body(index.entries(), "###")


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


# What a field without a comment in the code does (a comment there wins): short, and true for every model that has it
FIELD_NOTES = {
    "max_eval_sentences": "a prefix of dev and of test, for demos and tests",
    "bigrams": "read character bigrams as a second input (a bigram table)",
    "word_vectors": "as bigram_vectors, for the lexicon's word table",
    "optimizer": "SGD with momentum, or AdamW",
    "lr": "the learning rate after the warmup",
    "momentum": "SGD's momentum",
    "weight_decay": "the optimiser's weight decay (torch's SGD: L2 in the gradient; AdamW: decoupled)",
    "batch_size": "sentences per training batch (the global batch under torchrun)",
    "eval_batch_size": "sentences per batch when scoring dev and test",
    "epochs": "passes over train",
    "decay": "the inverse schedule's decay",
    "clip_value": "clip each gradient element to ± this (null: no clipping by value)",
    "clip_norm": "clip the gradients' global L2 norm to this (null: no clipping by norm)",
    "seed": "seeds the model's initialisation, the batch order and dropout",
    "threads": "torch threads the CLI sets for the run",
    "labels": "tags (or class labels) in output order",
    "vocab_sizes": "the size of each vocabulary the model embeds",
    "head": "a CRF over the tags, or a softmax per token",
    "crf_init": "the CRF's transition scores start at zero or normally distributed",
    "embed_dropout": "on the character input",
    "bert_config": "filled from `bert` when training starts",
    "bert_prune": "keep only the encoder's pieces the data can meet (a smaller embedding table)",
    "bert_trainable": "fine-tune the encoder, or keep it frozen",
    "bert_shape": "replaces fields of the encoder's config when `bert_weights` is false",
    "local_attention": "none, WLA (window) or SLA (syntax)",
    "parser": "SLA's dependency parser: spacy, udchinese or conllu:PATH (null: spacy for words, udchinese for characters)",
    "name": "the model",
    "dropout": "between the LSTM layers and before the output layer",
    "heads": "attention heads",
    "head_dim": "width of each head (the model's width is heads x head_dim)",
    "layers": "encoder layers",
    "ff_ratio": "the feed-forward layer's width, as a multiple of the model's",
    "scaled": "scale attention scores by 1/sqrt(head_dim)",
    "project_k": "project the keys (false: K is the layer input)",
    "out_proj": "an output projection after attention",
    "position_fusion": "how the four span distances are fused: ff_two (head-head, tail-tail), ff_four (Eq. 8), head",
    "preset": "compat: the release's code (no real residual, unscaled attention, K unprojected, no output projection, "
              "its CRF decoded without constraints); fields set explicitly keep their value",
    "english_bert_config": "filled from `english_bert` when training starts",
    "english_shape": "replaces fields of the English encoder's config when `english_weights` is false",
    "crf_constraints": "train the CRF with the transitions the tag scheme does not allow forbidden",
    "constrained_decoding": "decode with those transitions forbidden (null: as crf_constraints)",
}


def _default(value) -> str:
    """A default as YAML would read it, in plain text (a code span would break inside the word in a narrow column)."""
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) < 40 else "see the code"
    return f"{value}"


def _fields_table(cls: type, concrete: type | None = None) -> str:
    """The fields `cls` declares itself, their defaults as `concrete` (a subclass that may override them) has them."""
    fields = (concrete or cls).model_fields
    lines = ["| field | type | default | what |", "|---|---|---|---|"]
    for name, (kind, comment) in _field_comments(cls).items():
        info = fields[name]
        default = "required" if info.is_required() else _default(info.get_default(call_default_factory=True))
        comment = comment or FIELD_NOTES.get(name, "")
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


def openapi_reference() -> str:
    """The service's endpoints from the OpenAPI spec FastAPI builds for the shipped model, and the spec itself."""
    from zhner.serve.app import ServedModel, create_app

    # the spec does not depend on the model: a description stands for one (loading the shipped model would cost the
    # build seconds, jieba's dictionary), and no request is ever served here
    served = ServedModel(kind="tagging", tags=["O"], scheme="bmes", model="flat", corpora=[])
    spec = create_app(None, served=served).openapi()
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
    "window-cost": window_cost,
    "unseen-pairs": unseen_pairs,
    "results-index": results_index,
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
        table = _dash_empty(_plain(_benchmark("accuracy/findings").table(_result("findings", file))),
                            "— in *vs base* and *p*: the base row the others are paired with; in *p* alone: one seed, "
                            "no t-test.")
        return table + _source(f"findings_{file}.json")
    if kind == "ablation":
        path = RESULTS / f"ablation_{file}.json"
        _result("ablation", file)  # a clear error when it is missing
        return _benchmark("accuracy/collect_results").ablation_table(path) + _source(path.name)
    if kind == "sweep":
        return _benchmark("accuracy/plot_sweep").table(_result("atssa", file.removeprefix("atssa_"))) + _source(f"{file}.json")
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

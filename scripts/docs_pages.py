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


def _source(*files: str) -> str:
    return "\n\n<small>Generated from " + ", ".join(f"`benchmarks/results/{f}`" for f in files) + ".</small>"


def results_table() -> str:
    return _benchmark("collect_results").markdown_table() + _source("<model>_<dataset>.json")


def classification_table() -> str:
    return _benchmark("collect_results").classification_table() + _source("<model>_<dataset>.json")


def speed_table() -> str:
    lines = [
        "| model | dataset | train sent/s | infer sent/s, batch 1 | infer sent/s, batch 16 | peak RSS MB | measured | conditions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(RESULTS.glob("bench_*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if "train_sentences_per_s" not in r:  # another benchmark's file under the same prefix (bench_flat_attention)
            continue
        lines.append(
            f"| {r['model']} | {r['dataset']} | {r['train_sentences_per_s']} | {r['infer_sentences_per_s_b1']} | "
            f"{r['infer_sentences_per_s_b16']} | {r['peak_rss_mb']} | {r.get('measured', '')} | {r.get('conditions', '')} |"
        )
    return "\n".join(lines) + _source("bench_<model>_<dataset>.json (`zhner bench CONFIG --json`)")


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
    return f"## `{name}`\n\n```text\n{command.get_help(ctx).rstrip()}\n```"


def _commands(group, click: ModuleType, prefix: str, parent=None):
    """(help section, command) for every command under `group`, sub-groups (zhner data ...) included, in CLI order."""
    ctx = click.Context(group, info_name=prefix.rsplit(" ", 1)[-1], parent=parent)
    for name, command in group.commands.items():
        full = f"{prefix} {name}"
        yield _help(click, command, full, ctx), command
        if getattr(command, "commands", None):
            yield from _commands(command, click, full, ctx)


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
    "openapi": openapi_reference,
}


def part(name: str) -> str:
    """The Markdown of one marker's part; ValueError for an unknown name."""
    if name in PARTS:
        return PARTS[name]()
    kind, _, file = name.partition(":")
    if kind == "findings":
        return _benchmark("findings").table(_result("findings", file)) + _source(f"findings_{file}.json")
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

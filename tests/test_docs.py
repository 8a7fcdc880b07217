"""The documentation site builds with `mkdocs build --strict` (a broken link or page fails), its menu is the one
mkdocs.yml names, its tables, CLI, HTTP and config reference are generated from the results files and the code
(scripts/docs_pages.py), not typed, each results row says which model and encoder it is, the pages state findings
rather than their history, and every `zhner` command in its pages still parses."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("mkdocs")
pytest.importorskip("material")


def _pages_module():
    spec = importlib.util.spec_from_file_location("docs_pages", REPO / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = _build(REPO / "mkdocs.yml", site)
    assert done.returncode == 0, done.stderr[-4000:]
    return site


def test_site_builds_with_generated_tables(site):
    flat = json.loads((REPO / "benchmarks" / "results" / "flat_resume.json").read_text(encoding="utf-8"))
    results = (site / "results" / "index.html").read_text(encoding="utf-8")
    assert "zhner:generated" not in results  # every marker was filled
    assert f"{flat['test']['f1_strict']}" in results or f"{flat['test']['f1_strict']:.2f}" in results
    findings = (site / "findings" / "index.html").read_text(encoding="utf-8")
    assert "+ constrained normal-init CRF" in findings  # a row of findings_flat_resume_switches.json


def test_the_menu_is_shaped_for_its_readers():
    """An explicit nav: a newcomer's page first, then guides, models, results, reference and development; every page
    of docs/ is in it (mkdocs' omitted_files check fails the strict build otherwise)."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    sections = [next(iter(item)) for item in config["nav"]]
    assert sections == ["Home", "Get started", "Guides", "Models", "Results", "Reference", "Development"]
    nav = {next(iter(item)): next(iter(item.values())) for item in config["nav"]}
    reference = {next(iter(page)) for page in nav["Reference"]}
    assert {"CLI", "HTTP API", "Python API", "Config fields", "Errors and guarantees"} <= reference
    assert len(nav["Models"]) == len(list((REPO / "docs" / "models").glob("*.md")))  # one page per paper
    # one page per subject: the CLI and the error pages were two each
    assert not (REPO / "docs" / "cli-reference.md").exists() and not (REPO / "docs" / "error-handling.md").exists()


def _tables(markdown: str) -> list[list[list[str]]]:
    """The Markdown tables of a page: each a list of rows, each a list of its cells (header first, the rule left out)."""
    tables, rows = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", line.strip()):
                rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def test_results_rows_are_labelled_by_model_and_encoder():
    """Each row of the generated results and speed tables is told apart by its label (model, encoder, variant; for
    speed also the dataset): an e5-small row never reads like the plain model's. No cell is left empty, and no table
    is wider than 10 columns (wider ones ran off the page)."""
    pages = _pages_module()
    for name in ("results", "classification", "speed"):
        tables = _tables(pages.part(name))
        assert tables, name
        for table in tables:
            header, rows = table[0], table[1:]
            assert len(header) <= 10, f"{name}: {len(header)} columns: {header}"
            assert all(cell for row in rows for cell in row), f"{name}: an empty cell in {header}"
            if "model" in header and "encoder" in header and "Span F" not in header:
                keys = [c for c in ("model", "encoder", "variant", "dataset") if c in header]
                labels = [tuple(row[header.index(c)] for c in keys) for row in rows]
                assert len(labels) == len(set(labels)), f"{name}: two rows labelled alike in {header}"
    for name in sorted(_markers() - {"cli-reference", "openapi", "config-reference"}):  # every generated table
        for table in _tables(pages.part(name)):
            assert all(cell for row in table[1:] for cell in row), f"{name}: an empty cell in {table[0]}"
    speed = pages.part("speed")
    assert "| ATSSA | LAC vectors | resume | 120.0 |" in speed and "| ATSSA | e5-small | resume | 8.8 |" in speed
    results = pages.part("results")
    assert "| FLAT | e5-small | — |" in results and "| FLAT | LAC vectors | — |" in results


DOCS_PAGES = sorted((REPO / "docs").rglob("*.md"))


def _markers() -> set[str]:
    """The generated parts the pages ask for."""
    pages = _pages_module()
    return {name for page in DOCS_PAGES for name in pages.MARKER.findall(page.read_text(encoding="utf-8"))}
HISTORY = re.compile(r"\b(?:session|issue|round)s? \d+|\(round \d+\)|earlier sessions|this session|the README's earlier"
                     r"|\bnew default\b|\bold default\b", re.IGNORECASE)


@pytest.mark.parametrize("page", DOCS_PAGES, ids=lambda p: p.relative_to(REPO / "docs").as_posix())
def test_pages_state_findings_not_history(page):
    """History stays in CHANGELOG.md: no page names a work session, an issue or a round, or a default by its age; no
    page links into ../shared/ (not part of the repository), and none links to the removed pages."""
    text = page.read_text(encoding="utf-8")
    found = HISTORY.findall(text)
    assert not found, f"{page.name}: {found}"
    assert not re.search(r"\]\([^)]*shared/", text), f"{page.name} links into shared/, which is not in the repository"
    assert not re.search(r"\]\([^)]*(?:cli-reference|error-handling)\.md", text)


@pytest.mark.parametrize("page", DOCS_PAGES, ids=lambda p: p.relative_to(REPO / "docs").as_posix())
def test_hand_written_tables_have_no_empty_cells(page):
    """An empty cell says nothing: a table says "not run", "base", "—" with a note, or what else it means."""
    for table in _tables(page.read_text(encoding="utf-8")):
        for row in table[1:]:
            assert all(row), f"{page.name}: an empty cell in {row}"


@pytest.mark.parametrize("page", DOCS_PAGES, ids=lambda p: p.relative_to(REPO / "docs").as_posix())
def test_markdown_renders_as_written(page):
    """What Python-Markdown reads otherwise than GitHub does: a list right after a paragraph line is part of the
    paragraph, and a table or fenced block indented into a list item is not one (found by looking at the site)."""
    fence = False
    lines = page.read_text(encoding="utf-8").split("\n")
    for number, (before, line) in enumerate(zip([""] + lines, lines), start=1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        where = f"{page.name}:{number}"
        starts_list = re.match(r"^(?:- |\d+\. )", line)
        after_text = before.strip() and not re.match(r"^(?:\s|- |\d+\. |#|```)", before)
        assert not (starts_list and after_text), f"{where}: a list needs a blank line before it"
        assert not re.match(r"^ +(?:\||```)", line), f"{where}: an indented table or fence does not render in a list"


def test_generated_tables_state_findings_not_history():
    pages = _pages_module()
    for name in ("results", "classification", "speed", "findings:flat_resume", "findings:flat_weibo",
                 "findings:flat_resume_recipes", "findings:flat_weibo_recipes"):
        found = HISTORY.findall(pages.part(name))
        assert not found, f"{name}: {found}"


def test_readme_links_to_pages_that_exist():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file(), f"README.md links to {target}, which does not exist"


def test_config_reference_lists_every_field(site):
    from zhner.config import DataConfig, EmbeddingConfig, TrainConfig
    from zhner.models import MODELS

    page = (site / "config" / "index.html").read_text(encoding="utf-8")
    for section in (DataConfig, EmbeddingConfig, TrainConfig, *(cfg for cfg, _ in MODELS.values())):
        for field in section.model_fields:
            assert f"<code>{field}</code>" in page, f"{section.__name__}.{field} is not on the config page"


def test_cli_reference_and_http_api_come_from_the_code(site):
    import typer.main

    from zhner.cli import app

    reference = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for name in typer.main.get_command(app).commands:
        assert f"zhner {name}" in reference
    assert "zhner data fetch" in reference
    http = (site / "http" / "index.html").read_text(encoding="utf-8")
    assert "/v1/ner" in http and "/v1/labels" in http and '"openapi"' in http.replace("&quot;", '"')


def test_unknown_marker_is_an_error_naming_the_page():
    pages = _pages_module()
    with pytest.raises(ValueError, match="speed.md: unknown generated part 'speeed'"):
        pages.fill("# x\n<!-- zhner:generated speeed -->\n", "speed.md")
    with pytest.raises(ValueError, match="no results file"):
        pages.fill("<!-- zhner:generated findings:no_such_file -->", "p.md")


def test_a_broken_link_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    (docs).mkdir()
    (docs / "index.md").write_text("# x\n\nSee [the results](results.md).\n", encoding="utf-8")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(REPO / h) for h in config["hooks"]]
    config.pop("nav")  # the site's menu names pages this one lacks: the link must be the only fault
    config.pop("extra_css")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "results.md" in done.stderr


def docs_commands() -> list[tuple[str, list[str]]]:
    """(page, arguments) of every `zhner ...` command in the docs' `sh` blocks (continuation lines joined, comments cut)."""
    commands = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                found = re.search(r"(?:^|\|\s*)zhner\s+(.*)$", line.strip())
                if found:
                    commands.append((page.relative_to(REPO).as_posix(), shlex.split(found.group(1), comments=True)))
    return commands


def test_docs_commands_parse_against_the_cli():
    """The docs' commands are too long to run (trainings of hours), so each one is parsed by the CLI itself: a command,
    option or argument that no longer exists, or a value of the wrong type, fails here. (The README's are run:
    tests/test_readme.py.)"""
    import typer.main

    from zhner.cli import app

    root = typer.main.get_command(app)
    click = sys.modules[type(root).__mro__[1].__module__]  # click.core: typer's vendored copy, or click's own
    commands = docs_commands()
    assert len(commands) > 20
    for page, args in commands:
        ctx, command, rest = click.Context(root, info_name="zhner"), root, list(args)
        while getattr(command, "commands", None):  # `zhner data fetch ...`: down the groups
            name, rest = rest[0], rest[1:]
            assert name in command.commands, f"{page}: zhner {' '.join(args)}: no command {name!r}"
            command = command.commands[name]
            ctx = click.Context(command, info_name=name, parent=ctx)
        try:
            command.make_context(ctx.info_name, rest, parent=ctx.parent)
        except Exception as exc:  # click's UsageError / BadParameter: the message says what no longer parses
            raise AssertionError(f"{page}: zhner {' '.join(args)}: {exc}") from None


def test_swagger_ui_is_served_from_local_files():
    """`zhner serve`'s /docs works on a host with no internet: the page names no external URL, and the script, style
    sheet and icon it loads are answered by the service itself (fastapi-swagger's copy of Swagger UI)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("fastapi_swagger")
    from fastapi.testclient import TestClient

    from zhner.serve.app import ServedModel, create_app

    served = ServedModel(kind="tagging", tags=["O"], scheme="bmes", model="flat", corpora=[])
    client = TestClient(create_app(None, served=served))  # the page and its files need no model
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert not re.search(r"https?://|//cdn", page.text), "the Swagger page loads something from another host"
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert {a.rsplit("/", 1)[-1] for a in assets} == {"swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"}
    served = {a: client.get(a) for a in assets}
    assert all(r.status_code == 200 for r in served.values()), {a: r.status_code for a, r in served.items()}
    js = next(r for a, r in served.items() if a.endswith(".js"))
    css = next(r for a, r in served.items() if a.endswith(".css"))
    assert "javascript" in js.headers["content-type"] and "SwaggerUIBundle" in js.text
    assert "text/css" in css.headers["content-type"] and ".swagger-ui" in css.text
    assert "'/openapi.json'" in page.text and client.get("/openapi.json").json()["openapi"].startswith("3.")
    assert client.get("/docs/no-such-file.js").status_code == 404
    assert client.get("/redoc").status_code == 404  # FastAPI's ReDoc page loads its script from a CDN: turned off


def test_the_unseen_pairs_and_window_tables_hold_every_row_of_their_files():
    pages = _pages_module()
    results = REPO / "benchmarks" / "results"
    unseen = pages.part("unseen-pairs")
    rows = [line for line in unseen.splitlines() if re.match(r"\| n?flat \|", line)]
    expected = [r for name in pages.UNSEEN_PAIRS
                for r in json.loads((results / f"unseen_pairs_{name}.json").read_text(encoding="utf-8"))["rows"]]
    assert len(rows) == len(expected) and "| flat | msra | both | 42 |" in unseen
    window = pages.part("window-cost")
    cost = json.loads((results / "window_cost.json").read_text(encoding="utf-8"))["rows"]
    for r in cost:
        assert f"| {r['window']} | {r['ms_per_window']:.1f} |" in window
    assert "| zh-accurate | msra |" in window  # the F1 pairs of the two window sizes follow

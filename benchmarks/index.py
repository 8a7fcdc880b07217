"""The index of benchmarks/results/: every results file with what makes it (a script of benchmarks/ or a zhner
command), what it measures (speed, accuracy, service, resources) and whether it is current or superseded, written to
benchmarks/results/INDEX.md (and shown on the docs site's Benchmarks page).

    python benchmarks/index.py            # rewrite INDEX.md: run it with every results file added or removed
    python benchmarks/index.py --check    # exit 1, saying what differs, when INDEX.md is not what the folder gives

What makes a file, first found wins: its own record (a "script", "command" or "commands" naming
benchmarks/[GROUP/]NAME.py, or a zhner command of ZHNER_COMMANDS), its name (a script's name and a suffix, or a
pattern of NAMES), its shape (a model trained on a corpus: collect_results.py). A file none of these place is an
error, so that a new kind of results file gets a line in NAMES. Companions (a PNG, a Markdown table) share their JSON
file's row.

Superseded: a `NAME_before` file is the measurement of the code before a change, superseded by `NAME`; SUPERSEDED
holds the rest, decided by reading the files and the configs that cite them, each with the file that answers its
question now and why. Everything else is current.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
INDEX = RESULTS / "INDEX.md"
GROUPS = {
    "speed": "how fast a model, or a part of it, tags and trains",
    "accuracy": "what a model finds: scores, paired comparisons, analyses",
    "service": "`zhner serve` and batch tagging under load",
    "resources": "memory and start-up",
    "device": "the run made first whenever a GPU machine is lent: e5 and BERT rows on MSRA",
}
ZHNER_COMMANDS = {"bench": "speed", "compare": "accuracy", "gates": "accuracy", "sweep": "accuracy",
                  "attention": "accuracy"}  # zhner commands that write a results file themselves, and what it measures
NAMES = [  # (pattern matched at the start of a file's name, what makes it) where its record does not name it
    (r"bench_", "zhner bench"),
    (r"(compare|sentence_test)_", "zhner compare"),
    (r"\w+_gates_", "zhner gates"),
    (r"\w+_attention(_\w+)?$", "zhner attention"),
    (r"ablation_", "collect_results"),
    (r"general_model$", "by hand: accuracy"),  # the shipped zh-small's runs, a row each, with each run's command
    (r"acts_english_e5_weibo$", "by hand: accuracy"),  # two run sets and their zhner compare, with the commands
]
SUPERSEDED = {  # file: (the file that answers its question now, why)
    "peers_int8": (
        "peers", "peers.json now times the int8 graphs in the same interleaved run as the rest, with the code after the "
        "graph's key lengths and the 256-character windows"),
    "findings_flat_resume_attention_fast": (
        "findings_flat_resume_attention_fast_annealed", "the constant-rate recipe it measured was replaced by the "
        "annealed one, measured there against the same 50 epochs (its rows are repeated there)"),
    "findings_flat_weibo_attention_fast": (
        "findings_flat_weibo_attention_fast_annealed", "the constant-rate recipe it measured was replaced by the "
        "annealed one, measured there against the same 50 epochs (its rows are repeated there)"),
    "findings_atssa_resume_fast": (
        "findings_atssa_resume_fast_annealed", "the constant-rate recipe it measured was replaced by the annealed one, "
        "measured there against the same 50 epochs (its rows are repeated there)"),
    "findings_nflat_resume_fast_averaged": (
        "findings_nflat_resume_fast_probes", "the recipe it measured (batch 16, lr 5e-3, averaged) was replaced by "
        "batch 8 at lr 4e-3, measured there against the same 50 epochs"),
    "findings_flat_resume_resources": (
        "findings_flat_resume_fast_resources", "the same resource cuts measured again on the current preset "
        "(the release's attention) and its 10-epoch recipe"),
    "findings_flat_weibo_resources": (
        "findings_flat_weibo_fast_resources", "the same resource cuts measured again on the current preset "
        "(the release's attention) and its 10-epoch recipe"),
    "findings_flat_resume_averaging": (
        "findings_flat_resume_attention_averaging", "weight averaging measured again on the current preset "
        "(the release's attention)"),
    "findings_flat_weibo_averaging": (
        "findings_flat_weibo_attention_averaging", "weight averaging measured again on the current preset "
        "(the release's attention)"),
    "findings_flat_resume_fast": (
        "findings_flat_resume_attention_fast_annealed", "one-seed recipe probes of the earlier preset (textbook "
        "attention); the current preset's recipe is measured there"),
    "findings_flat_weibo_fast": (
        "findings_flat_weibo_attention_fast_annealed", "recipe probes of the earlier preset (textbook attention); the "
        "current preset's recipe is measured there"),
}


@dataclass
class Entry:
    name: str  # the JSON file's stem, or a file or folder with no JSON beside it
    files: list[str]  # what the folder holds under that name: NAME.json first, then its companions
    maker: str  # benchmarks/GROUP/NAME.py, "zhner COMMAND" or "by hand"
    group: str
    superseded_by: str | None = None
    why: str = ""


def scripts() -> dict[str, Path]:
    """Every script of benchmarks/GROUP/, by name."""
    return {path.stem: path for path in sorted(BENCHMARKS.glob("*/*.py"))}


def record_commands(record: dict) -> list[str]:
    """The commands a results file says it was made with ("script" first: a file whose command is the training's)."""
    found = []
    for key in ("script", "command", "commands"):
        value = record.get(key)
        found += value if isinstance(value, list) else [value] if isinstance(value, str) else []
    return found


def maker_of_record(record: dict, known: dict[str, Path]) -> str | None:
    """The script or zhner command a results file's record names, if any: in a line of several commands (`zhner sweep
    ... && python benchmarks/plot_sweep.py ...`) the first that writes results."""
    for command in record_commands(record):
        for part in re.split(r"&&|;", command):
            script = re.search(r"benchmarks/(?:\w+/)?(\w+)\.py", part)
            if script and script.group(1) in known:
                return script.group(1)
            words = re.sub(r"^(\w+=\S+\s+)*", "", part.strip()).split()  # without OMP_NUM_THREADS=1 and the like
            if words[:1] == ["zhner"] and len(words) > 1 and words[1] in ZHNER_COMMANDS:
                return f"zhner {words[1]}"
    return None


def maker_of_name(name: str, record: dict, known: dict[str, Path]) -> str | None:
    """What makes a results file, from its name or its shape."""
    prefixes = [s for s in known if name == s or name.startswith(s + "_")]
    if prefixes:
        return max(prefixes, key=len)
    for pattern, maker in NAMES:
        if re.match(pattern, name):
            return maker
    if {"model", "dataset", "status", "test"} <= record.keys():  # a model trained on a corpus, from its runs
        return "collect_results"
    return None


def group_of(maker: str, known: dict[str, Path]) -> str:
    if maker.startswith("zhner "):
        return ZHNER_COMMANDS[maker.split()[1]]
    if maker.startswith("by hand: "):
        return maker.removeprefix("by hand: ")
    return known[maker].parent.name


def entries(results: Path = RESULTS) -> list[Entry]:
    """One entry per results file (its companions with it), sorted by group and name."""
    known = scripts()
    by_name: dict[str, list[Path]] = {}
    for path in sorted(results.iterdir()):
        if path.name != INDEX.name and not path.name.startswith("."):
            by_name.setdefault(path.stem if path.is_file() else path.name, []).append(path)
    out = []
    for name, paths in by_name.items():
        paths.sort(key=lambda p: (p.suffix != ".json", p.name))
        record = json.loads(paths[0].read_text(encoding="utf-8")) if paths[0].suffix == ".json" else {}
        record = record if isinstance(record, dict) else {}
        maker = maker_of_record(record, known) or maker_of_name(name, record, known)
        if maker is None:
            raise ValueError(f"{results / name}: nothing says what makes it; add its pattern to NAMES in {__file__}")
        entry = Entry(name, [p.name + ("/" if p.is_dir() else "") for p in paths], maker, group_of(maker, known))
        entry.superseded_by, entry.why = superseded(name, set(by_name))
        out.append(entry)
    return sorted(out, key=lambda e: (list(GROUPS).index(e.group), e.name))


def superseded(name: str, names: set[str]) -> tuple[str | None, str]:
    """The file that supersedes `name` and why, or (None, "")."""
    if name in SUPERSEDED:
        by, why = SUPERSEDED[name]
    elif name.endswith("_before") and name.removesuffix("_before") in names:
        by, why = name.removesuffix("_before"), "the same measurement of the code before a change, kept to compare"
    else:
        return None, ""
    if by not in names:
        raise ValueError(f"{name} is superseded by {by}, which is not in the results folder")
    return by, why


def maker_text(entry: Entry, known: dict[str, Path]) -> str:
    if entry.maker in known:
        return f"`{known[entry.maker].relative_to(BENCHMARKS.parent).as_posix()}`"
    return "by hand (each row's command inside)" if entry.maker.startswith("by hand") else f"`{entry.maker}`"


def status_text(entry: Entry) -> str:
    return f"superseded by `{entry.superseded_by}`: {entry.why}" if entry.superseded_by else "current"


def table(group: str, rows: list[Entry]) -> str:
    """The Markdown table of one group's results files."""
    known = scripts()
    lines = ["| results file | made by | status |", "|---|---|---|"]
    for e in rows:
        if e.group == group:
            lines.append(f"| {', '.join(f'`{f}`' for f in e.files)} | {maker_text(e, known)} | {status_text(e)} |")
    return "\n".join(lines)


def body(rows: list[Entry], level: str = "##") -> str:
    """A count of the results files, then a table per group under `level` headings."""
    old = sum(e.superseded_by is not None for e in rows)
    parts = [f"Generated by `python benchmarks/index.py` from the files in `benchmarks/results/`: {len(rows)} results "
             f"({len(rows) - old} current, {old} superseded; a PNG or table made with a JSON file shares its row), each "
             "with what makes it. A superseded file stays as the evidence it was; the file named beside it answers its "
             "question now."]
    for group, what in GROUPS.items():
        count = sum(e.group == group for e in rows)
        parts += ["", f"{level} {group.capitalize()}: {what} ({count})", "", table(group, rows)]
    return "\n".join(parts)


def markdown(rows: list[Entry] | None = None) -> str:
    """INDEX.md: a title, then `body`."""
    return "# Results index\n\n" + body(entries() if rows is None else rows) + "\n"


def listed(text: str) -> set[str]:
    """The file names an index's tables list (first column)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    return names


def check(results: Path = RESULTS, index: Path = INDEX) -> list[str]:
    """What is wrong with `index` against the folder: files it misses, names it lists that are gone, stale text."""
    present = {p.name + ("/" if p.is_dir() else "") for p in results.iterdir()
               if p.name != index.name and not p.name.startswith(".")}
    text = index.read_text(encoding="utf-8") if index.is_file() else ""
    problems = [f"not in {index.name}: {name}" for name in sorted(present - listed(text))]
    problems += [f"in {index.name} but not in the folder: {name}" for name in sorted(listed(text) - present)]
    if not problems and text != markdown(entries(results)):
        problems.append(f"{index.name} differs from what `python benchmarks/index.py` writes")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="say what is stale instead of rewriting")
    args = parser.parse_args()
    if args.check:
        problems = check()
        print("\n".join(problems) or f"{INDEX.relative_to(BENCHMARKS.parent)} is up to date")
        sys.exit(1 if problems else 0)
    INDEX.write_text(markdown(), encoding="utf-8")
    print(f"wrote {INDEX.relative_to(BENCHMARKS.parent)}")


if __name__ == "__main__":
    main()

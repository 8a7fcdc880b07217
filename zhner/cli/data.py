"""`zhner data list|check|fetch` (the dataset registry), and what is made from raw text: `zhner vectors` (skip-gram
tables) and `zhner translate` (English translations for ACT-S)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from zhner.cli.common import MAX_SEED, Choice, choice_option, echo_err
from zhner.errors import ZhnerError


class Unit(Choice):
    """vectors --unit: = zhner.lexicon.pretrain.UNITS (not imported here: that module imports torch)."""

    char = "char"
    bigram = "bigram"
    word = "word"


data_app = typer.Typer(no_args_is_help=True, help="Datasets: list, check checksums, fetch from their public sources.")


@data_app.command("list")
def data_list() -> None:
    """Known datasets: task/unit/language, the folder their files are found in, and a description (wrapped at word
    ends to the terminal's width, never cut)."""
    import shutil
    import textwrap

    from zhner.data.catalogue import DATASETS
    from zhner.data.registry import find_file

    rows = []
    for name, info in DATASETS.items():
        try:
            where = str(find_file(name, "train").parent)
        except ZhnerError:
            where = "not found" if info.carried else f"not found (zhner data fetch {name})"
        rows.append((name, f"{info.task}/{info.unit}/{info.language}", where, info.description))
    name_width = max(len("name"), *(len(r[0]) for r in rows))
    kind_width = max(len("task/unit/language"), *(len(r[1]) for r in rows))
    indent = " " * (name_width + 2)
    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    typer.echo(f"{'name':{name_width}}  {'task/unit/language':{kind_width}}  files")
    for name, kind, where, description in rows:
        typer.echo(f"{name:{name_width}}  {kind:{kind_width}}  {where}")
        typer.echo(textwrap.fill(description, width, initial_indent=indent, subsequent_indent=indent, break_long_words=False))


@data_app.command("check")
def data_check(name: str, data_dir: Optional[Path] = typer.Option(None)) -> None:
    """Verify a dataset's files against their sha256; exit 1 if any is missing or differs."""
    from zhner.data.registry import check

    rows = check(name, data_dir)
    bad = False
    for row in rows:
        typer.echo(f"{row['split']:6s} {row['status']:10s} {row.get('sentences') or '':>7} {row.get('path') or row['relpath']}")
        bad |= row["status"] not in ("ok", "unverified")
    raise typer.Exit(1 if bad else 0)


@data_app.command("fetch")
def data_fetch(
    name: str,
    cache_dir: Optional[Path] = typer.Option(None, help="default: $ZHNER_CACHE or ~/.cache/zhner/data"),
    base_url: Optional[str] = typer.Option(None, help="a mirror to download from instead of the public sources"),
) -> None:
    """Download a dataset from its public source and verify its sha256."""
    from zhner.data.download import fetch

    for path in fetch(name, cache_dir, base_url):
        typer.echo(str(path))


def vectors(
    sources: list[str] = typer.Argument(
        ..., help="raw Chinese text: dataset names (their train split only), corpus files, or .txt files (a text a line)"
    ),
    output: Path = typer.Option(..., "-o", "--output", help="the word2vec text file to write (atomically)"),
    unit: Unit = choice_option(Unit.bigram, "--unit", help="char, bigram (the models' forward bigrams) or word (jieba's words)"),
    base: Optional[str] = typer.Option(
        None, "--base", help="vectors written first, e.g. lac: the file then serves as embeddings.char_vectors on its own"
    ),
    dim: int = typer.Option(128, "--dim", min=1, max=4096),
    window: int = typer.Option(5, "--window", min=1, max=100),
    negatives: int = typer.Option(5, "--negatives", min=1, max=100),
    min_count: int = typer.Option(5, "--min-count", min=1, help="rarer tokens get no row (a model composes them)"),
    epochs: int = typer.Option(5, "--epochs", min=1, max=1000),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED),
) -> None:
    """Pretrain character, bigram or word vectors on raw text with skip-gram and negative sampling (the kind of table
    the papers' models start from): use a bigram file with --set embeddings.bigram_vectors=OUTPUT, a word file with
    embeddings.word_vectors, and a file made with --base as embeddings.char_vectors."""
    import time

    from zhner.data.registry import raw_texts
    from zhner.fileio import check_output_file
    from zhner.lexicon.pretrain import SkipGramConfig, merge_vectors, train_skipgram, unit_sequences
    from zhner.lexicon.vectors import load_vectors
    from zhner.lexicon.word2vec import write_word2vec_text

    check_output_file(output)  # found now, not after minutes of training
    start = time.perf_counter()
    texts = [text for source in sources for text in raw_texts(source)]
    if not texts:
        raise ZhnerError(f"no text in {', '.join(sources)}: nothing to train on")
    base_vectors = load_vectors(base) if base else None  # read first: a bad --base fails before the training
    if base_vectors is not None and base_vectors.dim != dim:
        raise ZhnerError(f"the base vectors are {base_vectors.dim}-d but --dim is {dim}: they must match to share a file", base)
    config = SkipGramConfig(dim=dim, window=window, negatives=negatives, min_count=min_count, epochs=epochs, seed=seed)
    sequences = unit_sequences(texts, unit)
    echo_err(f"{len(sequences)} texts, {sum(map(len, sequences))} {unit} tokens")
    trained = train_skipgram(sequences, config, log=echo_err)
    table = merge_vectors(base_vectors, trained)
    write_word2vec_text(table, output)
    typer.echo(
        f"wrote {output}: {len(table)} vectors of {dim} dimensions ({len(trained)} {unit} vectors trained"
        + (f", {len(table) - len(trained)} from {base}" if base else "")
        + f") in {time.perf_counter() - start:.0f} s"
    )


def translate(
    data: str = typer.Argument(
        ..., help="a dataset name (every split), a corpus file, or a .txt file (one Chinese sentence a line)"
    ),
    output: Path = typer.Option(..., "-o", "--output", help="the JSONL file of {text, translation} records to write"),
    translator: str = typer.Option("cedict", "--translator", help="cedict | file:PATH | model:DIR"),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="read and extend the translation cache ($ZHNER_TRANSLATION_CACHE)"),
) -> None:
    """Translate a corpus's sentences into English once, for ACT-S (model.translator: file:OUTPUT). Each distinct text
    gets one record; a text the translator cannot translate gets "" (a missing translation, not an error). Speed
    (sentences/s) and coverage (share of non-empty translations) go to stderr."""
    from zhner.data.example import Example
    from zhner.data.registry import raw_texts
    from zhner.fileio import atomic_open
    from zhner.translate import TranslationCache, fill_translations, make_translator, translation_cache_path, translation_report

    texts = raw_texts(data, all_splits=True)
    if not texts:
        raise ZhnerError("no text to translate", data)
    examples = [Example(list(text)) for text in dict.fromkeys(texts)]
    tr = make_translator(translator)
    store = TranslationCache(translation_cache_path()) if cache else None
    stats = fill_translations(examples, tr, store)
    with atomic_open(output) as f:
        for ex in examples:
            f.write(json.dumps({"text": ex.text, "translation": ex.translation}, ensure_ascii=False) + "\n")
    echo_err(translation_report(stats, tr.name) + f"; wrote {len(examples):,} records to {output}")

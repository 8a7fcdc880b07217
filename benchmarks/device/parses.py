"""MSRA's dependency parses for SLA, made here (udchinese, the CPU) so that the device needs no parser.

The device's training reads them through `model.parser: conllu:PATH` (zhner.syntax.ConlluParser), which matches a
sentence by its text and projects its words' heads onto the characters with the same `project_heads` as the
udchinese parser itself: the heads the device sees are the ones `model.parser: udchinese` would give here.
Only ID, FORM and HEAD are kept (the other CoNLL-U columns are "_"): that is all ConlluParser reads, and it keeps
the carried file small. Sentences are parsed in chunks of CHUNK, each written to its own part file, so that an
interrupted run resumes where it stopped.

    python benchmarks/device/parses.py OUT.conllu.xz CORPUS_FILE [CORPUS_FILE ...] --parts WORK_DIR
"""
from __future__ import annotations

import argparse
import lzma
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # zhner from this checkout

from zhner.data.corpus import read_corpus  # noqa: E402
from zhner.syntax.parsers import UDChineseParser, read_conllu, squeeze  # noqa: E402

CHUNK = 1000


def unique_texts(files: list[Path]) -> list[str]:
    """Every sentence of the files, whitespace removed (ConlluParser's key), each once, in file order."""
    seen: dict[str, None] = {}
    for path in files:
        for example in read_corpus(path):
            seen.setdefault(squeeze(example.text), None)
    return [text for text in seen if text]


def minimal_conllu(forms: list[str], heads: list[int]) -> str:
    """One sentence as CoNLL-U with only ID, FORM and HEAD filled in."""
    rows = [f"{i}\t{form}\t_\t_\t_\t_\t{head}\t_\t_\t_" for i, (form, head) in enumerate(zip(forms, heads), 1)]
    return "\n".join(rows) + "\n\n"


def parse_chunk(parser: UDChineseParser, texts: list[str]) -> str:
    """jieba's words of each text parsed by UDPipe, as UDChineseParser.parse feeds them (one sentence a line)."""
    words = [[w for w in parser.jieba.cut(text) if w.strip()] for text in texts]
    lines = "".join(" ".join(ws) + "\n" for ws in words if ws)
    parsed = read_conllu(parser.pipeline.process(lines), "udpipe output")
    return "".join(minimal_conllu(forms, heads) for forms, heads in parsed)


def parse_all(texts: list[str], parts: Path) -> list[Path]:
    """Parse in chunks into parts/NNNNN.conllu, skipping the chunks a previous run finished."""
    parts.mkdir(parents=True, exist_ok=True)
    parser, done = None, []
    start = time.perf_counter()
    for n, first in enumerate(range(0, len(texts), CHUNK)):
        part = parts / f"{n:05d}.conllu"
        if not part.is_file():
            parser = parser or UDChineseParser()
            partial = part.with_suffix(".partial")
            partial.write_text(parse_chunk(parser, texts[first:first + CHUNK]), encoding="utf-8")
            partial.replace(part)
            print(f"parsed {min(first + CHUNK, len(texts)):,} of {len(texts):,} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
        done.append(part)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("output", type=Path, help="the xz-compressed CoNLL-U file")
    ap.add_argument("corpora", type=Path, nargs="+", help="corpus files whose sentences are parsed")
    ap.add_argument("--parts", type=Path, required=True, help="where the chunks go (outside what travels)")
    args = ap.parse_args()
    texts = unique_texts(args.corpora)
    parts = parse_all(texts, args.parts)
    with lzma.open(args.output.with_suffix(".partial"), "wt", encoding="utf-8", preset=6) as out:
        for part in parts:
            out.write(part.read_text(encoding="utf-8"))
    args.output.with_suffix(".partial").replace(args.output)
    print(f"{len(texts):,} sentences -> {args.output} ({args.output.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()

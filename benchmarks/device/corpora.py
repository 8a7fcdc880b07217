"""Stage the corpora the device run reads (MSRA, Weibo's bmes files, Resume) in the registry's layout, so that
ZHNER_DATA pointed at the folder finds them; with --tiny only the first sentences of each split (the CPU smoke test).

    python benchmarks/device/corpora.py STAGE_DIR [--tiny]
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # zhner from this checkout

from plan import TINY_TEST, TINY_TRAIN  # noqa: E402  (beside this file: the tiny sizes)

from zhner.data.catalogue import get_info  # noqa: E402
from zhner.data.registry import find_file  # noqa: E402

DATASETS = ("msra", "weibo", "resume")
_BLANK = re.compile(r"\n[ \t]*\r?\n")


def first_sentences(text: str, n: int) -> str:
    """The first `n` sentences of a one-token-a-line corpus (sentences end at a blank line), as they are written."""
    blocks = [b for b in _BLANK.split(text) if b.strip()]
    return "\n\n".join(b.strip("\n") for b in blocks[:n]) + "\n\n"


def stage(out: Path, tiny: bool) -> list[Path]:
    written = []
    for name in DATASETS:
        for dfile in get_info(name).files:
            source, target = find_file(name, dfile.split), out / dfile.relpath
            target.parent.mkdir(parents=True, exist_ok=True)
            if tiny:
                n = TINY_TRAIN if dfile.split == "train" else TINY_TEST
                target.write_text(first_sentences(source.read_text(encoding="utf-8"), n), encoding="utf-8")
            else:
                shutil.copyfile(source, target)
            written.append(target)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    for path in stage(args.out, args.tiny):
        print(f"  {path} ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()

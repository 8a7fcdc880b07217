#!/usr/bin/env bash
# Builds, HERE (the CPU machine, with the venv and ../shared/data), everything benchmarks/device/run.sh needs on a
# lent GPU machine that the working tree does not hold, into one folder ignored through .git/info/exclude
# ($DEVICE_CARRY, default .device_carry/), and prints its size. Name that folder in the device call's `carry`.
#
#   bash benchmarks/device/prepare.sh                  # the whole corpora: MSRA's parses take ~7 min the first time
#   DEVICE_TINY=1 bash benchmarks/device/prepare.sh    # tiny corpora into .device_work/tiny_carry (the CPU smoke test)
#
# What it holds:
#   data.tar.xz        MSRA, Weibo (bmes) and Resume in the registry's layout (ZHNER_DATA there); tiny: the first
#                      TINY_TRAIN / TINY_TEST sentences of each split
#   msra.conllu.xz     MSRA's dependency parses (udchinese over jieba's words; benchmarks/device/parses.py)
#   e5_q4/             e5-small's 4-bit blocks cut to the corpora's pieces, lossless (benchmarks/device/encoder.py)
#   jieba.tar.xz       the jieba package without analyse/ and posseg/ (its dictionary and LAC's model; no wheel exists)
#   whl/               wheels the device's Python 3.12 lacks: pydantic, pydantic-core, annotated-types,
#                      typing-inspection, typing-extensions, pyahocorasick (KINDS.md's package list)
#   commit.txt         the commit the tree was at (the device's copy has no .git)
# Intermediate files (parse chunks, staged corpora) go to .device_work/, also ignored, and never travel.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1
WORK=.device_work
if [[ -n "${DEVICE_TINY:-}" ]]; then CARRY=${DEVICE_CARRY:-$WORK/tiny_carry}; KIND=tiny; else CARRY=${DEVICE_CARRY:-.device_carry}; KIND=full; fi
if [[ -d .git && ! -f .git/info/exclude ]] || ! grep -qx '/.device_carry/' .git/info/exclude 2>/dev/null; then
  [[ -d .git ]] && mkdir -p .git/info && printf '/.device_carry/\n/.device_work/\n' >> .git/info/exclude
fi
mkdir -p "$CARRY" "$WORK"
t0=$(date +%s)
step() { echo "prepare: $1 ($(( $(date +%s) - t0 )) s)"; }

# the corpora, in the registry's relative paths (tiny: cut to a few sentences per split)
STAGE=$WORK/stage_$KIND
rm -rf "$STAGE" && mkdir -p "$STAGE"
$PY benchmarks/device/corpora.py "$STAGE" ${DEVICE_TINY:+--tiny}
tar -cJf "$CARRY/data.tar.xz" -C "$STAGE" .
step "corpora -> $CARRY/data.tar.xz"

# MSRA's parses (resumable: chunks in $WORK/parse_parts_$KIND)
if [[ ! -f "$CARRY/msra.conllu.xz" ]]; then
  $PY benchmarks/device/parses.py "$CARRY/msra.conllu.xz" "$STAGE"/msra_ner/*.bmes --parts "$WORK/parse_parts_$KIND"
fi
step "parses -> $CARRY/msra.conllu.xz"

# e5-small, 4-bit, the pieces of every carried corpus
rm -rf "$CARRY/e5_q4"
$PY benchmarks/device/encoder.py pack "$CARRY/e5_q4" $(find "$STAGE" -name '*.bmes' | sort)
step "encoder -> $CARRY/e5_q4"

# jieba (dictionary, LAC's model) and the missing wheels
SITE=$($PY -c 'import jieba, os; print(os.path.dirname(os.path.dirname(jieba.__file__)))')
tar -cJf "$CARRY/jieba.tar.xz" -C "$SITE" --exclude=analyse --exclude=posseg --exclude=__pycache__ jieba
if [[ ! -d "$CARRY/whl" ]]; then
  mkdir -p "$CARRY/whl.partial"
  for pkg in pydantic pydantic-core annotated-types typing-inspection typing-extensions pyahocorasick; do
    version=$($PY -c "import importlib.metadata as m; print(m.version('$pkg'))")
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$CARRY/whl.partial" "$pkg==$version"
  done
  mv "$CARRY/whl.partial" "$CARRY/whl"
fi
step "jieba, wheels"

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] && commit="$commit+dirty"
echo "$commit" > "$CARRY/commit.txt"

du -ab --max-depth=1 "$CARRY" | sort -n
carry=$(du -sb "$CARRY" | cut -f1)
tree=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s}')
echo "prepare: carry $(( carry / 1024 / 1024 )) MiB + working tree $(( tree / 1024 / 1024 )) MiB = $(( (carry + tree) / 1024 / 1024 )) MiB of 64 MiB ($(( $(date +%s) - t0 )) s)"

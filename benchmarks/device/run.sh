#!/usr/bin/env bash
# Issue 50's device run: the first thing to run whenever a GPU machine is lent. Under 10 minutes on one H100 / H200,
# up to eight trainings at once on the one GPU (benchmarks/device/plan.py holds the parts, their estimates and time limits):
#   1. BERT-CRF (3 epochs), FLAT + e5-small and NFLAT + e5-small (2 epochs) on the whole MSRA, and FLAT + e5-small
#      with typed lexicon words and mention replacement, the pair of the FLAT one (same seed);
#   2. SLA Table 3's NER row on MSRA: plain BERT-CRF, + WLA, + SLA on e5-small, one 2-epoch recipe; SLA's parses were
#      made on the CPU beforehand (udchinese) and travel as CoNLL-U, so the device needs no parser;
#   3. zh-accurate's e5 candidate (flat_e5_accurate), 2 epochs at batch 32.
# Only the parts whose results files in the tree do not show them completed are trained (plan.py: done / --all).
# Each part writes benchmarks/results/device_<part>.json (on the device: $OUT/device_<part>.json) with the command,
# seed, every epoch's dev and the best epoch's test figures; a part cut off by its time limit still writes one.
#
# Beforehand, here:   bash benchmarks/device/prepare.sh          (fills .device_carry/, prints its size)
# On the device:      bash benchmarks/device/run.sh   (with .device_carry/ carried beside the tree; it ends within 600 s)
# The CPU smoke test: DEVICE_TINY=1 bash benchmarks/device/prepare.sh && DEVICE_TINY=1 bash benchmarks/device/run.sh
#                     (tiny corpora, one epoch, on the CPU, one part at a time; results into .device_work/tiny_out)
# Environment: DEVICE_CARRY (the carried folder), OUT (the results folder), DEVICE_WORKDIR (unpacked inputs and run
# directories; default /tmp/zhner_device), DEVICE_JOBS (parts at once), DEVICE_ONLY (space-separated part names).
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
PY=${PYTHON:-$(command -v python3 || command -v python)}
[[ -x .venv/bin/python && -n "${DEVICE_TINY:-}" ]] && PY=${PYTHON:-.venv/bin/python}
if [[ -n "${DEVICE_TINY:-}" ]]; then
  CARRY=${DEVICE_CARRY:-.device_work/tiny_carry}; OUT=${DEVICE_OUT:-.device_work/tiny_out}
  WORK=${DEVICE_WORKDIR:-.device_work/tiny_run}; MODE=(--tiny --device cpu --threads 1 --jobs "${DEVICE_JOBS:-1}")
else
  CARRY=${DEVICE_CARRY:-.device_carry}; OUT=${OUT:-benchmarks/results}
  WORK=${DEVICE_WORKDIR:-/tmp/zhner_device}; MODE=(--device cuda --threads 2 --jobs "${DEVICE_JOBS:-8}")
fi
[[ -d $CARRY ]] || { echo "run.sh: no $CARRY: run benchmarks/device/prepare.sh first and carry it" >&2; exit 2; }
mkdir -p "$OUT" "$WORK"
echo "run.sh: $(date -u '+%F %T') UTC, carry $CARRY, results $OUT"

# Python packages the machine lacks: the carried wheels, and jieba (no wheel exists), into one folder on PYTHONPATH
if ! $PY -c 'import pydantic, ahocorasick, jieba' 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" "$CARRY"/whl/*.whl \
    && tar -xJf "$CARRY/jieba.tar.xz" -C "$WORK/site" || { echo "run.sh: installing the wheels failed" >&2; exit 3; }
  export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi
# the corpora, the encoder (4-bit -> float32 BERT directory) and the parses
mkdir -p "$WORK/data" && tar -xJf "$CARRY/data.tar.xz" -C "$WORK/data" || exit 4
export ZHNER_DATA=$PWD/$WORK/data ZHNER_CACHE=$PWD/$WORK/cache ZHNER_PARSE_CACHE=$PWD/$WORK/parse_cache
[[ $WORK = /* ]] && export ZHNER_DATA=$WORK/data ZHNER_CACHE=$WORK/cache ZHNER_PARSE_CACHE=$WORK/parse_cache
rm -rf "$WORK/e5-small" "$WORK/runs"
OMP_NUM_THREADS=4 $PY benchmarks/device/encoder.py unpack "$CARRY/e5_q4" "$WORK/e5-small" || exit 5
xz -dc "$CARRY/msra.conllu.xz" > "$WORK/msra.conllu" || exit 6
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
setup=$(( $(date +%s) - start ))
echo "run.sh: setup took $setup s"

# the parts, all at once; the plan's budget is what is left of the whole less collection (plan.py: TOTAL_S, COLLECT_S)
budget=()
[[ -z "${DEVICE_TINY:-}" ]] && budget=(--budget-s "$(( 600 - 35 - setup ))")
$PY benchmarks/device/plan.py run "${MODE[@]}" "${budget[@]}" --e5 "$WORK/e5-small" --parses "$WORK/msra.conllu" \
  --runs "$WORK/runs" --out "$OUT" --carry "$CARRY" ${DEVICE_ONLY:+--only $DEVICE_ONLY} \
  --note "benchmarks/device/run.sh${DEVICE_TINY:+ (DEVICE_TINY=1)}: setup $setup s, parts at once on one device" \
  2>&1 | tee "$WORK/device_run.log"  # not into $OUT: a device call brings back 8 files, one per part
echo "run.sh: $(( $(date +%s) - start )) s in all" | tee -a "$WORK/device_run.log"

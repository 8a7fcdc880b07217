#!/usr/bin/env bash
# Issue 50's grid on a lent device machine, within 10 minutes: benchmarks/accuracy/unseen_pairs.py (FLAT, NFLAT x none / types /
# replacement / both x Weibo, Resume x seeds 42-44 = 48 trainings), SHORTENED to fit: the configs' `fast` recipes
# (FLAT: 10 epochs; NFLAT: 20 epochs at batch 2) and a training budget of UNSEEN_MINUTES (default 0.75) minutes per run
# (train.max_minutes: a run stops at the end of the epoch that passes it, and keeps its best dev epoch), JOBS (default 14)
# trainings at once, one CPU thread each. These are NOT the CPU measurement's schedules: the results file says so in its
# note, and a row is only comparable with rows of the same file.
# Measured on an H200 (2026-11-28, benchmarks/results/unseen_pairs_device*.json): 15 runs at once on the GPU trained FLAT
# Weibo at 56-91 sentences/s each, 12 runs at once on that machine's 16 CPU cores (CUDA_VISIBLE_DEVICES=) at 50: these
# models are too small for the GPU to help. The CPU cores ran FLAT Weibo's whole fast recipe, 12 runs in 300 s.
#
#   bash scripts/device_unseen.sh                 # on the device machine, from the repository root
#   UNSEEN_PREP=1 bash scripts/device_unseen.sh   # here, beforehand: fill .zhner_cache (LAC's word types of jieba's
#                                                 # 337k words, 59 s here, and the automaton, 21 MB: build it there)
# What travels (64 MiB at most): the corpora in shared/data/ (weibo_ner, resume_ner), .zhner_cache/word_types, and
# jieba (without analyse/ and posseg/) plus wheels of pydantic, pydantic-core, annotated-types, typing-inspection and
# pyahocorasick for that machine's Python 3.12; see the issue-50 closing note for the two commands that ran.
#
# Writes benchmarks/results/unseen_pairs_device.json (and runs/unseen_device/, the run directories). UNSEEN_EXTRA adds
# arguments of unseen_pairs.py (the CPU smoke test: UNSEEN_EXTRA="--corpora mini=resume --seeds 42 ..." OUT=/tmp/x).
set -euo pipefail
PY=${PYTHON:-$(command -v python || command -v python3)}
export ZHNER_CACHE=${ZHNER_CACHE:-$PWD/.zhner_cache}
if [[ -z "${ZHNER_DATA:-}" ]]; then
  for d in shared/data ../shared/data; do [[ -d $d ]] && export ZHNER_DATA=$PWD/$d && break; done
fi
# the lexicon's automaton and word types, once, before the trainings read them (UNSEEN_PREP=1: only this)
OMP_NUM_THREADS=1 $PY -c "from zhner.lexicon.lexicon import Lexicon; from zhner.pretrained.lac import word_types_cached; \
lex = Lexicon.from_jieba(); lex.match('北京'); print(len(word_types_cached(lex.words)), 'words typed into', '$ZHNER_CACHE')"
[[ -n "${UNSEEN_PREP:-}" ]] && exit 0
OUT=${OUT:-$PWD/benchmarks/results}
mkdir -p "$OUT"
start=$(date +%s)
$PY -c "import torch; print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
ARGS=(--recipe fast --jobs "${JOBS:-14}" --set "train.max_minutes=${UNSEEN_MINUTES:-0.75}"
      --root "${UNSEEN_ROOT:-runs/unseen_device}" ${UNSEEN_EXTRA:-} --out "$OUT/unseen_pairs_device.json"
      --note "GPU run (scripts/device_unseen.sh): --recipe fast and train.max_minutes=${UNSEEN_MINUTES:-0.75} per run, ${JOBS:-14} runs at once on one GPU: shortened schedules, not the CPU grid's")
# the trainings get UNSEEN_TIMEOUT seconds (timeout ends the whole process group); then what finished is scored and paired
timeout "${UNSEEN_TIMEOUT:-450}" $PY benchmarks/accuracy/unseen_pairs.py "${ARGS[@]}" \
  || echo "unseen_pairs.py stopped (exit $?): rerun to resume; finished runs are kept"
timeout 100 $PY benchmarks/accuracy/unseen_pairs.py "${ARGS[@]}" --no-train || echo "scoring stopped (exit $?)"
# the run directories' small files (scores, configs, logs; not the weights) beside the results file
tar -czf "$OUT/unseen_device_runs.tgz" --exclude='*.safetensors' --exclude='checkpoint.pt' --exclude='*.npy' --exclude=lexicon.txt --exclude=vocab.json \
  "${UNSEEN_ROOT:-runs/unseen_device}" 2>/dev/null || true
echo "device_unseen.sh: $(( $(date +%s) - start )) s"

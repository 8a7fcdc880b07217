#!/usr/bin/env bash
# Issue 50's grid on a lent GPU, within 10 minutes: benchmarks/unseen_pairs.py (FLAT, NFLAT x none / types /
# replacement / both x Weibo, Resume x seeds 42-44 = 96 trainings), SHORTENED to fit: the configs' `fast` recipes
# (FLAT: 10 epochs; NFLAT: 20 epochs at batch 2) and a training budget of UNSEEN_MINUTES (default 0.75) minutes per run
# (train.max_minutes: a run stops at the end of the epoch that passes it, and keeps its best dev epoch), JOBS (default 14)
# trainings at once on the one GPU, one CPU thread each. These are NOT the CPU measurement's schedules: the results file
# says so in its note, and a row is only comparable with rows of the same file.
#
#   bash scripts/device_unseen.sh            # on the device machine, from the repository root
#   UNSEEN_PREP=1 bash scripts/device_unseen.sh   # here, beforehand: fill .zhner_cache (LAC's word types of jieba's
#                                                 # 337k words, ~2.5 CPU minutes, and the automaton) to carry along
#
# Writes benchmarks/results/unseen_pairs_device.json (and runs/unseen_device/, the run directories). UNSEEN_EXTRA adds
# arguments of unseen_pairs.py (the CPU smoke test: UNSEEN_EXTRA="--corpora mini=resume --seeds 42 ..." OUT=/tmp/x).
set -euo pipefail
PY=${PYTHON:-python}
export ZHNER_CACHE=${ZHNER_CACHE:-$PWD/.zhner_cache}
if [[ -z "${ZHNER_DATA:-}" ]]; then
  for d in shared/data ../shared/data; do [[ -d $d ]] && export ZHNER_DATA=$PWD/$d && break; done
fi
if [[ -n "${UNSEEN_PREP:-}" ]]; then
  OMP_NUM_THREADS=1 $PY -c "from zhner.lexicon.lexicon import Lexicon; from zhner.pretrained.lac import word_types_cached; \
lex = Lexicon.from_jieba(); lex.match('北京'); print(len(word_types_cached(lex.words)), 'words typed into', '$ZHNER_CACHE')"
  exit 0
fi
OUT=${OUT:-$PWD/benchmarks/results}
mkdir -p "$OUT"
start=$(date +%s)
$PY -c "import torch; print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
ARGS=(--recipe fast --jobs "${JOBS:-14}" --set "train.max_minutes=${UNSEEN_MINUTES:-0.75}"
      --root "${UNSEEN_ROOT:-runs/unseen_device}" ${UNSEEN_EXTRA:-} --out "$OUT/unseen_pairs_device.json"
      --note "GPU run (scripts/device_unseen.sh): --recipe fast and train.max_minutes=${UNSEEN_MINUTES:-0.75} per run, ${JOBS:-14} runs at once on one GPU: shortened schedules, not the CPU grid's")
# the trainings get UNSEEN_TIMEOUT seconds (timeout ends the whole process group); then what finished is scored and paired
timeout "${UNSEEN_TIMEOUT:-450}" $PY benchmarks/unseen_pairs.py "${ARGS[@]}" \
  || echo "unseen_pairs.py stopped (exit $?): rerun to resume; finished runs are kept"
timeout 100 $PY benchmarks/unseen_pairs.py "${ARGS[@]}" --no-train || echo "scoring stopped (exit $?)"
echo "device_unseen.sh: $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# One GPU call that does two things: issue 56's stacked-training benchmark (gpu_stacked.sh,
# capped), then a study's missing rows trained as stacks (`study run --stack`), one runner per
# group of rows, each runner with its own MLflow store; whatever finished comes back packed.
#
# Here, from a clean checkout (the records name its commit):
#   bash scripts/gpu_lease.sh prepare STUDY     # gpu_in/: the study's corpora, vocabulary, knn spaces
#                                               # (built here: the GPU copy has no Bible), its
#                                               # editions' exports (data/bible), COMMIT;
#                                               # .whl/: mlflow and the dependencies the GPU image
#                                               # lacks (docs/GPU.md, "Carried to the machine")
# There (carry gpu_in and .whl):
#   OUT=dir bash scripts/gpu_lease.sh run STUDY 'ROWS[@SEEDS]' ...   # one runner each: --rows
#                                                  # ROWS (and --seeds SEEDS), in stacks of STACK
#   A quick-budget study fits a 10-minute call as plain processes (STACK=1, BENCH=0), one model
#   a runner: `... run dufter2020-table1-gpu shift-special@42 shift-special@43 ...` (twelve at
#   once train and evaluate in ≈ 7.4 min on an H200, docs/GPU.md); stacks pay at long budgets.
# Writes $OUT/stacked-gpu.tgz (the benchmark) and $OUT/records.tgz (this call's records and the
# runners' logs, refreshed every 20 s so that a call cut short keeps what finished). Back here:
# `tar -xzf records.tgz` in the project root, `multilab study report --all`, commit results/.
set -u
mode="${1:?prepare or run}" STUDY="${2:?name a study (multilab study list)}"
shift 2

if [ "$mode" = prepare ]; then
  [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "commit first: the records name HEAD"; exit 2; }
  artifacts="${ARTIFACTS:-artifacts}/studies/$STUDY"
  [ -f "$artifacts/corpora/train.txt" ] || { echo "build $artifacts first: multilab study run $STUDY --prepare"; exit 2; }
  rm -rf gpu_in && mkdir -p "gpu_in/$STUDY" gpu_in/bible
  cp -r "$artifacts/corpora" "$artifacts/vocab" "gpu_in/$STUDY/"
  # knn-replace rows read the knn spaces (fastText + VecMap, minutes of CPU): built here too
  [ -d "$artifacts/spaces" ] && cp -r "$artifacts/spaces" "gpu_in/$STUDY/"
  # the study's Bible editions as exports (4-5 MB each): the downstream task and the silver
  # dictionaries read verses, and the GPU image has no Bible database
  codes=$(PYTHONPATH=src "${PYTHON:-.venv/bin/python}" - "$STUDY" <<'PY'
import sys
from pathlib import Path
from multilab.lab.languages import parse_languages
from multilab.studies.claims import load_claims
from multilab.studies.spec import load_studies
from multilab.studies.tables import row_languages
study = load_studies(Path("studies"), load_claims(Path("studies/claims")))[sys.argv[1]]
codes = {language.edition for row in study.rows
         for language in parse_languages(row_languages(study, row)) if not language.from_user_corpus}
print(" ".join(sorted(codes)))
PY
) || exit 1
  for code in $codes; do
    [ -f "data/bible/$code.tsv" ] || PYTHONPATH=src "${PYTHON:-.venv/bin/python}" -m multilab corpus export --edition "$code" || exit 1
    cp "data/bible/$code.tsv" gpu_in/bible/
  done
  git rev-parse HEAD > gpu_in/COMMIT
  grep -qx '/gpu_in/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; printf '/gpu_in/\n/.whl/\n' >> .git/info/exclude; }
  du -sh gpu_in .whl 2>/dev/null
  exit 0
fi

OUT="${OUT:?set OUT to a folder for the results}"
DEADLINE="${DEADLINE:-560}"      # seconds for the whole call: ends inside a 600-s command
BENCH="${BENCH:-110}"            # seconds for the benchmark
STACK="${STACK:-3}"              # models per stack in each runner
LOGS=/tmp/multilab-gpu-lease
mkdir -p "$OUT" "$LOGS"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# the copy's own .git (if any) is not this checkout's (2026-11-28: an older HEAD, "dirty")
export MULTILAB_SOURCE_COMMIT="$(cat gpu_in/COMMIT)"
echo "source commit: $MULTILAB_SOURCE_COMMIT (the copy's git says $(git rev-parse --short HEAD 2>/dev/null || echo none))" | tee "$OUT/lease.txt"

[ "$BENCH" -gt 0 ] && OUT="$OUT" LIMIT="$BENCH" STEPS="${STEPS:-10}" bash scripts/gpu_stacked.sh | tee -a "$OUT/lease.txt"

export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MULTILAB_THREADS=1 TQDM_MININTERVAL=30
export MULTILAB_MIXED_PRECISION="${MULTILAB_MIXED_PRECISION:-no}"   # fp32: faster for BERT-small
[ -d "gpu_in/$STUDY" ] && mkdir -p artifacts/studies && cp -r --update=none "gpu_in/$STUDY" artifacts/studies/
[ -d gpu_in/bible ] && mkdir -p data/bible && cp --update=none gpu_in/bible/*.tsv data/bible/ 2>/dev/null
stamp=$(mktemp) && touch "$stamp"
pack() {
  { find results -type f -name '*.json' -newer "$stamp" -print0
    find "$LOGS" -type f -name '*.log' -print0; } \
    | tar --null -czf "$OUT/records.tmp" -T - 2>/dev/null && mv "$OUT/records.tmp" "$OUT/records.tgz"
}
( while sleep 20; do pack; done ) & packer=$!
left=$(( DEADLINE - SECONDS ))
echo "runners: ${#@} for ${left}s" | tee -a "$OUT/lease.txt"
pids=() i=0
for spec in "$@"; do
  i=$((i + 1)) rows="${spec%@*}" seeds=()
  [ "$spec" != "$rows" ] && seeds=(--seeds "${spec#*@}")
  timeout "$left" python3 -m multilab --set "paths.mlruns=$LOGS/mlruns-$i" study run "$STUDY" \
    --rows "$rows" "${seeds[@]}" --stack "$STACK" > "$LOGS/runner-$i.log" 2>&1 & pids+=($!)
  sleep 1
done
for pid in "${pids[@]}"; do wait "$pid"; echo "runner rc=$?" >> "$OUT/lease.txt"; done
kill "$packer" 2>/dev/null; pack
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/lease.txt" 2>/dev/null
tail -n 3 "$LOGS"/runner-*.log | tee -a "$OUT/lease.txt"

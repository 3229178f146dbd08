#!/usr/bin/env bash
# One GPU call that does two things: the stacked-training benchmark (gpu_stacked.sh,
# capped), then a study's missing rows trained as stacks (`study run --stack`), one runner per
# group of rows, each runner with its own MLflow store; whatever finished comes back packed.
#
# Here, from a clean checkout (the records name its commit):
#   bash scripts/gpu_lease.sh prepare STUDY [ROW ...]   # gpu_in.tar.xz (several studies: one
#                                               # prepare each); ROWs with settings of their own
#                                               # bring their own data (row-ROW/)
#                                               # gpu_in/: the study's corpora, vocabulary, knn spaces
#                                               # (built here: the GPU copy has no Bible), its
#                                               # editions' exports (data/bible), COMMIT;
#   bash scripts/gpu_wheels.sh                  # .whl/: mlflow and the other packages the GPU
#                                               # image lacks
# There (carry gpu_in.tar.xz and .whl):
#   OUT=dir bash scripts/gpu_lease.sh run STUDY '[STUDY2:]ROWS[@SEEDS]' ...   # one runner each:
#                                                  # --rows ROWS (and --seeds SEEDS), in stacks of
#                                                  # STACK; the runners outlive the call (own sessions)
#   OUT=dir bash scripts/gpu_lease.sh collect STUDY  # a next call on the still-warm machine: waits
#                                                  # for them until DEADLINE, packs again
#   A quick-budget study fits a 10-minute call as plain processes (STACK=1, BENCH=0), one model
#   a runner: `... run dufter2020-table1-gpu shift-special@42 shift-special@43 ...` (twelve at
#   once train and evaluate in ≈ 7.4 min on an H200, docs/GPU.md); stacks pay at long budgets.
# Writes $OUT/stacked-gpu.tgz (the benchmark) and $OUT/records.tgz (this call's records and the
# runners' logs, refreshed every 20 s so that a call cut short keeps what finished). Back here:
# `tar -xzf records.tgz` in the project root, `multilab study report --all`, commit results/.
set -u
mode="${1:?prepare, run or collect}" STUDY="${2:?name a study (multilab study list)}"
shift 2

if [ "$mode" = prepare ]; then
  [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "commit first: the records name HEAD"; exit 2; }
  artifacts="${ARTIFACTS:-artifacts}/studies/$STUDY"
  [ -f "$artifacts/corpora/train.txt" ] || { echo "build $artifacts first: multilab study run $STUDY --prepare"; exit 2; }
  # additive: prepare two studies one after the other and one call runs both
  rm -rf "gpu_in/$STUDY" && mkdir -p "gpu_in/$STUDY" gpu_in/bible
  cp -r "$artifacts/corpora" "$artifacts/vocab" "gpu_in/$STUDY/"
  # knn-replace rows read the knn spaces (fastText + VecMap, minutes of CPU): built here too
  # (training reads knn.pt and the mapped space's words; the raw per-language vectors stay here)
  [ -d "$artifacts/spaces" ] && cp -r "$artifacts/spaces" "gpu_in/$STUDY/" \
    && find "gpu_in/$STUDY/spaces" -name '*.vec' ! -name '*mapped.vec' -delete
  # rows with settings of their own have data of their own (row-LABEL/): only the ROWS named
  for row in "$@"; do
    [ -d "$artifacts/row-$row" ] && cp -r "$artifacts/row-$row" "gpu_in/$STUDY/"
  done
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
  grep -qx '/gpu_in.tar.xz' .git/info/exclude 2>/dev/null \
    || { mkdir -p .git/info; printf '/gpu_in/\n/gpu_in.tar.xz\n/.whl/\n' >> .git/info/exclude; }
  # the working tree travels under 64 MiB: corpora compress ~4x, identical row data to nothing
  tar -cJf gpu_in.tar.xz gpu_in
  du -sh gpu_in gpu_in.tar.xz .whl 2>/dev/null
  exit 0
fi

OUT="${OUT:?set OUT to a folder for the results}"
DEADLINE="${DEADLINE:-560}"      # seconds for this call: ends inside a 600-s command
BENCH="${BENCH:-110}"            # seconds for the benchmark
STACK="${STACK:-3}"              # models per stack in each runner
LOGS="${LEASE_DIR:-/tmp/multilab-gpu-lease}"   # the runners' logs, pids and work copy
# the runners work in a copy: they outlive the call (own sessions) for a `collect` call on the
# same warm machine, and that call's re-sent checkout must not land under them
WORK="$LOGS/work"
mkdir -p "$OUT" "$LOGS"
pack() {
  (cd "$WORK" 2>/dev/null || exit 1
   { find results -type f -name '*.json' -newer "$LOGS/stamp" -print0
     find "$LOGS" -maxdepth 1 -type f -name '*.log' -print0; } \
     | tar --null -czf "$OUT/records.tmp" -T - 2>/dev/null) && mv "$OUT/records.tmp" "$OUT/records.tgz"
}
runners_alive() {
  local pid
  for pid in $(cat "$LOGS/pids" 2>/dev/null); do kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}
watch_runners() {   # until every runner ended or the call's DEADLINE: pack every 20 s
  local last=0
  while runners_alive && [ "$SECONDS" -lt "$DEADLINE" ]; do
    sleep 5
    if [ $((SECONDS - last)) -ge 20 ]; then
      last=$SECONDS; pack
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader \
        >> "$LOGS/gpu.log" 2>/dev/null
    fi
  done
  pack
  runners_alive && echo "runners still training at ${SECONDS}s: collect them with a next call" \
    | tee -a "$OUT/lease.txt"
  tail -n 3 "$LOGS"/runner-*.log | tee -a "$OUT/lease.txt"
}

if [ "$mode" = collect ]; then      # a later call on the same warm machine
  [ -f "$LOGS/pids" ] || { echo "no runners on this machine (a fresh one?)"; exit 2; }
  watch_runners
  exit 0
fi

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
[ -f gpu_in.tar.xz ] && { tar -xJf gpu_in.tar.xz || exit 1; }
# the copy's own .git (if any) is not this checkout's (2026-11-28: an older HEAD, "dirty")
export MULTILAB_SOURCE_COMMIT="$(cat gpu_in/COMMIT)"
echo "source commit: $MULTILAB_SOURCE_COMMIT (the copy's git says $(git rev-parse --short HEAD 2>/dev/null || echo none))" | tee "$OUT/lease.txt"

[ "$BENCH" -gt 0 ] && OUT="$OUT" LIMIT="$BENCH" STEPS="${STEPS:-10}" bash scripts/gpu_stacked.sh | tee -a "$OUT/lease.txt"

export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MULTILAB_THREADS=1 TQDM_MININTERVAL=30
export MULTILAB_MIXED_PRECISION="${MULTILAB_MIXED_PRECISION:-no}"   # fp32: faster for BERT-small
rm -rf "$WORK" && mkdir -p "$WORK" && tar --exclude=./.whl --exclude=./gpu_in.tar.xz -cf - . | tar -xf - -C "$WORK"
cd "$WORK" || exit 1
export PYTHONPATH="$WORK/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p artifacts/studies data/bible
for dir in gpu_in/*/; do   # every prepared study's corpora, vocabulary, spaces, row data
  [ "$dir" = gpu_in/bible/ ] || cp -r "$dir" artifacts/studies/
done
cp gpu_in/bible/*.tsv data/bible/ 2>/dev/null
touch "$LOGS/stamp" && : > "$LOGS/pids"
echo "runners: ${#@} for $((DEADLINE - SECONDS))s of this call" | tee -a "$OUT/lease.txt"
i=0
for spec in "$@"; do   # [STUDY:]ROWS[@SEEDS]: one runner each, in its own session
  i=$((i + 1)) study="$STUDY" rows="${spec%@*}" seeds=()
  case "$rows" in *:*) study="${rows%%:*}" rows="${rows#*:}" ;; esac
  [ "$spec" != "${spec%@*}" ] && seeds=(--seeds "${spec##*@}")
  # its exit status ends its log: no call of this script outlives it to wait for it
  setsid bash -c '"$@"; echo "runner exit $?"' runner python3 -m multilab \
    --set "paths.mlruns=$LOGS/mlruns-$i" study run "$study" --rows "$rows" "${seeds[@]}" \
    --stack "$STACK" > "$LOGS/runner-$i.log" 2>&1 < /dev/null &
  echo $! >> "$LOGS/pids"
  sleep 1
done
watch_runners
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/lease.txt" 2>/dev/null || true

#!/usr/bin/env bash
# A study's missing runs on one GPU in one short lease, returned as one file of records.
# N runners of `multilab study run STUDY` start at once; the run ledger (results/ledger.csv)
# hands each (row, seed) to exactly one of them, so they share the study's work without a
# plan of their own. BERT-small is too small for a GPU: one process runs ≈ 10–12 steps/s, twelve
# processes on one H200 ≈ 73 together (docs/GPU.md), hence many runners.
#   OUT=/some/dir bash scripts/gpu_study.sh STUDY [N] [--rows a,b] [--seeds 42,43]
# Writes $OUT/records.tgz (every record the runners wrote under results/, plus each runner's
# log), refreshed every 30 s so that a lease cut short still returns what finished, and
# $OUT/gpu.txt (the machine). Back here: `tar -xzf records.tgz` in the project root, then
# `multilab study report --all`, and commit results/ with the regenerated documents.
set -u
OUT="${OUT:?set OUT to a folder for the results}"
STUDY="${1:?name a study (multilab study list)}"
RUNNERS="${2:-12}"
shift $(( $# < 2 ? $# : 2 ))
EXTRA="${EXTRA:-}"               # more --set overrides for every runner
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MULTILAB_THREADS=1 TQDM_MININTERVAL=30
export MULTILAB_MIXED_PRECISION="${MULTILAB_MIXED_PRECISION:-no}"   # fp32: faster for BERT-small
LOGS="${LOGS:-/tmp/multilab-gpu-study}"   # outside the project: nothing to ignore
mkdir -p "$OUT" "$LOGS"
stamp=$(mktemp) && touch "$stamp"         # records newer than this are this lease's

pack() {  # this lease's records and the logs, in one file ($OUT returns few files)
  { find results -type f -name '*.json' -newer "$stamp" -print0
    find "$LOGS" -type f -name '*.log' -print0; } \
    | tar --null -czf "$OUT/records.tmp" -T - 2>/dev/null && mv "$OUT/records.tmp" "$OUT/records.tgz"
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
  --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m multilab study run "$STUDY" --plan "$@" | tee -a "$OUT/gpu.txt"
( while sleep 30; do pack; done ) & packer=$!
pids=()
for i in $(seq 1 "$RUNNERS"); do
  # each runner its own MLflow store (one SQLite file written by twelve processes stalls);
  # corpora, vocabulary and models are the study's own, built once under a lock
  # shellcheck disable=SC2086
  python3 -m multilab --set "paths.mlruns=$LOGS/mlruns-$i" $EXTRA study run "$STUDY" "$@" \
    > "$LOGS/runner-$i.log" 2>&1 & pids+=($!)
  sleep 2   # the first runner books first; the others find its bookings
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
kill "$packer" 2>/dev/null; pack
python3 -m multilab study list | grep "^$STUDY " | tee -a "$OUT/gpu.txt"
exit "$rc"

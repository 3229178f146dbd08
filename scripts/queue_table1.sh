#!/usr/bin/env bash
# The paper's Table 1 as a DVC experiment queue: one experiment per paper ID, each the
# `variant` stage (train + evaluate that modification over the seeds of params.yaml, MLflow
# runs in the project's store or at MLFLOW_TRACKING_URI). With -j N it also runs N workers,
# waits for the queue, and writes the whole table from MLflow to reports/table1-queue/.
#
#   bash scripts/queue_table1.sh                  # queue only; then `dvc queue start -j N`
#   bash scripts/queue_table1.sh -j 8             # queue, run 8 workers, wait, report
#   bash scripts/queue_table1.sh -j 8 -S train.epochs=50    # -S: for every experiment
#   bash scripts/queue_table1.sh --ids 0,3,18     # some rows only
#
# First commit params.yaml (profile: paper, seeds: [0, 42, 43, 100, 101]) and run `dvc repro`:
# a queued experiment starts from the workspace's pipeline, and every stage that is not up to
# date there (corpus, spaces, the study's models) would run again inside each experiment. The
# script refuses to queue otherwise (--force: queue anyway). On a multi-GPU machine each
# worker's training claims a GPU of its own (src/multilab/devices.py;
# MULTILAB_WORKERS_PER_GPU=k puts k workers on one GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

# Table 1 of Dufter & Schütze (2020), then 21 and 21b (non-parallel corpus): Table 2. The
# report writes both (reports/table1-queue/table1.* and table2.*).
IDS=0,1,2,3,4,5,6,7,8,9,15,16,17,18,19,30,21,21b
JOBS=""
FORCE=0
SETTINGS=()
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -j|--jobs) JOBS=${2:?-j needs a number}; shift 2 ;;
    --ids) IDS=${2:?--ids needs a comma-separated list}; shift 2 ;;
    -S|--set-param) SETTINGS+=("${2:?-S needs key=value}"); shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "queue_table1.sh: unknown argument $1" >&2; usage ;;
  esac
done
for setting in "${SETTINGS[@]}"; do
  case "$setting" in
    modification=*) echo "queue_table1.sh: the modification is what the queue varies" >&2
                    exit 2 ;;
  esac
done

if [ "$FORCE" = 0 ] && ! dvc status --quiet; then
  dvc status >&2 || true
  echo "queue_table1.sh: the pipeline is not up to date: run \`dvc repro\` (and commit" \
       "params.yaml and dvc.lock) first, or every experiment repeats those stages; --force" \
       "queues anyway" >&2
  exit 1
fi

SWEEP=(-S "modification=$IDS")
for setting in "${SETTINGS[@]}"; do SWEEP+=(-S "$setting"); done
dvc exp run --queue "${SWEEP[@]}"
[ -n "$JOBS" ] || { echo "queued; start the workers with: dvc queue start -j N"; exit 0; }

dvc queue start -j "$JOBS"
# The workers are detached: wait here (so a container running this script stays up).
waited=0
while status=$(dvc queue status) && grep -Eq '\b(Queued|Running)\b' <<<"$status"; do
  if [ "$waited" = 1 ] && grep -q 'Worker status: 0 active, 0 idle' <<<"$status"; then
    echo "$status" >&2
    echo "queue_table1.sh: no worker left but tasks are: \`dvc queue start -j $JOBS\`" >&2
    exit 1
  fi
  sleep "${QUEUE_POLL_SECONDS:-60}"
  waited=1
done
echo "$status"

# The table from the MLflow runs of all rows, beside (not over) the study's DVC outputs.
REPORT=(--set "study=[$IDS]" --set paths.reports=reports/table1-queue
        --set paths.metrics=reports/table1-queue)
for setting in "${SETTINGS[@]}"; do REPORT+=(--set "$setting"); done
multilab "${REPORT[@]}" report
if dvc queue status | grep -Eq '\bFailed\b'; then
  echo "queue_table1.sh: some experiments failed: see \`dvc queue logs <name>\`" >&2
  exit 1
fi

#!/usr/bin/env bash
# Issue 24, E3 and E5 on one GPU (docs/notes/paper-setup-diff.md §5): does the training corpus's
# sentence length (E3: split at clauses) or vocabulary (E5: the WEB NT, 6,726 word types against
# Basic English's 3,005) move the original row? `original` × seeds on four corpora, each run at
# 2,300 updates (the quick profile's on Basic English: the epochs are set per corpus), whole
# batches, float32, all at once as separate processes (scripts/gpu_e4.sh once per corpus).
#   base: Basic English NT (E4's);  split-clauses: base split at clauses (E3);
#   web: the WEB NT (E5);           web-split-clauses: both.
# Build the corpora and vocabularies here first (needs the Bible DB; writes $PREBUILT/<corpus>):
#   PREBUILT=gpu_in bash scripts/gpu_corpora.sh build
# then on the GPU machine (carry gpu_in):
#   OUT=dir PREBUILT=gpu_in [CORPORA="web web-split-clauses"] [SEEDS="42 43 44"] bash scripts/gpu_corpora.sh
# Returns ONE file, $OUT/results.tgz (the device returns only a few files per call), refreshed
# every 30 s: per corpus the eval JSONs, logs, train_log.csv and summary.tsv of gpu_e4.sh.
set -u
PREBUILT="${PREBUILT:-gpu_in}"
CORPORA="${CORPORA:-base split-clauses web web-split-clauses}"
SEEDS="${SEEDS:-42 43 44}" DRY="${DRY:-}"   # DRY: more overrides, e.g. --set profile=smoke

overrides() {  # overrides <corpus>: the config of that corpus, 2,300 updates
  case $1 in    # epochs = 2,300 / ceil(2 × sentences / 256)
    base) echo "" ;;                                                   # 11,731 → 92 a epoch
    split-clauses) echo "--set corpus.split_clauses=true --set train.epochs=17.96875" ;;  # 16,384 → 128
    web) echo "--set languages=[4,fake] --set corpus.train_edition=4 --set train.epochs=25.5556" ;;  # 11,441 → 90
    web-split-clauses) echo "--set languages=[4,fake] --set corpus.train_edition=4" \
      "--set corpus.split_clauses=true --set train.epochs=16.31206" ;;  # 17,923 → 141
    *) echo "unknown corpus '$1'; valid: base split-clauses web web-split-clauses" >&2; exit 2 ;;
  esac
}

if [ "${1:-}" = build ]; then  # corpora + vocabularies of every corpus, on the CPU
  data=/tmp/multilab-gpu-data   # a copy: the WEB export must not land in the DVC-tracked data/
  mkdir -p "$data/bible" && cp data/bible/*.tsv "$data/bible/"
  for corpus in $CORPORA; do
    extra=$(overrides "$corpus") || exit 2
    dir="$PREBUILT/$corpus"
    sets="--set paths.data=$data --set paths.artifacts=$dir --set paths.mlruns=/tmp/multilab-gpu-build
      --set paths.metrics=/tmp/multilab-gpu-build --set paths.reports=/tmp/multilab-gpu-build $extra"
    # shellcheck disable=SC2086
    { case $corpus in web*) multilab $sets corpus export --edition 4 ;; esac
      multilab $sets corpus build && multilab $sets vocab; } > "/tmp/multilab-gpu-build-$corpus.log" 2>&1 \
      || { echo "build of $corpus failed: /tmp/multilab-gpu-build-$corpus.log" >&2; exit 1; }
    echo "built $dir"
  done
  exit 0
fi

OUT="${OUT:?set OUT to a folder for the results}"
WORK=/tmp/multilab-gpu-corpora
mkdir -p "$WORK"
pack() { tar -czf "$OUT/results.tmp" -C "$WORK" . 2>/dev/null && mv "$OUT/results.tmp" "$OUT/results.tgz"; }
( while sleep 30; do pack; done ) & packer=$!
pids=()
for corpus in $CORPORA; do
  extra=$(overrides "$corpus") || { kill "$packer"; exit 2; }
  mkdir -p "$WORK/$corpus"
  OUT=$WORK/$corpus RUNS=/tmp/multilab-gpu-runs-$corpus PREBUILT=$PREBUILT/$corpus MODS=original \
    SEEDS="$SEEDS" EXTRA="$extra $DRY" bash scripts/gpu_e4.sh > "$WORK/$corpus/run.log" 2>&1 & pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
kill "$packer" 2>/dev/null; pack
for corpus in $CORPORA; do echo "== $corpus"; cat "$WORK/$corpus/summary.tsv"; done

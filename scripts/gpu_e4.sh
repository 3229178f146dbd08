#!/usr/bin/env bash
# Issue 24, experiment E4 on one GPU (docs/notes/paper-setup-diff.md §5): does the authors'
# attention to padding (`attend-padding`) move μ or lang-pos F1? Four modifications × three
# seeds at the quick profile with whole batches (`train.length_pieces=1`, as on the CPU), all
# trained at once as separate processes on the one GPU in float32, each evaluated when trained.
# Also measures how fast that many BERT-small processes share a GPU.
#   OUT=/some/dir PREBUILT=dir-with-corpora-and-vocab bash scripts/gpu_e4.sh
# Writes $OUT/e4.tgz (eval JSONs, multilab.json, train_log.csv and the log of every run,
# refreshed every 30 s so that a run cut short still returns what finished) and
# $OUT/summary.tsv (per run: training and evaluation seconds) and $OUT/smi.csv (GPU use every 30 s).
set -u
OUT="${OUT:?set OUT to a folder for the results}"
PREBUILT="${PREBUILT:-artifacts}"
MODS="${MODS:-original attend-padding lang-pos lang-pos+attend-padding}"
SEEDS="${SEEDS:-42 43 44}"
EXTRA="${EXTRA:-}"               # more --set overrides (a CPU dry run: --set profile=smoke)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MULTILAB_THREADS=1 TQDM_MININTERVAL=30
export MULTILAB_MIXED_PRECISION="${MULTILAB_MIXED_PRECISION:-no}"   # fp32: 1.24× faster for BERT-small
RUNS="${RUNS:-/tmp/multilab-gpu-e4}"   # outside the project: nothing to ignore
mkdir -p "$OUT" "$RUNS/logs"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

sets() {  # sets <root>: the overrides of one run, each with its own folders
  echo "--set train.length_pieces=1 --set train.eval_points=[] $EXTRA" \
    "--set paths.artifacts=$1/artifacts --set paths.mlruns=$1/mlruns" \
    "--set paths.metrics=$1/metrics --set paths.reports=$1/reports"
}

pack() {  # the small results of every run, in one file ($OUT returns few files)
  (cd "$RUNS" && find . \( -name '*.json' -path '*eval*' -o -name multilab.json \
      -o -name train_log.csv -o -name '*.log' \) -print0 | tar --null -czf "$OUT/e4.tmp" -T - \
    && mv "$OUT/e4.tmp" "$OUT/e4.tgz") 2>/dev/null
}

one_run() {  # one_run <root> <mod> <seed>: train, then evaluate at once (a run cut short keeps what finished)
  local root=$1 mod=$2 seed=$3 t0 t1 t2 rc
  mkdir -p "$root/artifacts" && cp -r "$PREBUILT/corpora" "$PREBUILT/vocab" "$root/artifacts/"
  t0=$(now_ms)
  # shellcheck disable=SC2046
  python3 -m multilab $(sets "$root") train -m "$mod" --seed "$seed" \
    > "$RUNS/logs/train-$mod-s$seed.log" 2>&1; rc=$?
  t1=$(now_ms)
  # shellcheck disable=SC2046
  python3 -m multilab $(sets "$root") evaluate "$root/artifacts/models/$mod/seed$seed" \
    > "$RUNS/logs/evaluate-$mod-s$seed.log" 2>&1 || rc=$?
  t2=$(now_ms)
  printf '%s\t%s\t%s\t%s\t%s\n' "$mod" "$seed" "$(( (t1 - t0) / 1000 ))" "$(( (t2 - t1) / 1000 ))" \
    "$rc" >> "$OUT/summary.tsv"
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
  --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch, transformers, accelerate, mlflow; print("torch", torch.__version__,
  "transformers", transformers.__version__, "accelerate", accelerate.__version__,
  "mlflow", mlflow.__version__, "cuda", torch.cuda.is_available())' | tee -a "$OUT/gpu.txt"
printf 'modification\tseed\ttrain_s\tevaluate_s\trc\n' > "$OUT/summary.tsv"
( while sleep 30; do
    pack; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >> "$OUT/smi.csv" 2>/dev/null
  done ) & packer=$!
start=$(now_ms) pids=()
for mod in $MODS; do for seed in $SEEDS; do
  one_run "$RUNS/$mod-s$seed" "$mod" "$seed" & pids+=($!)
done; done
for pid in "${pids[@]}"; do wait "$pid"; done
printf 'all\t%s\t%s\t-\t-\n' "${#pids[@]}" "$(( ($(now_ms) - start) / 1000 ))" >> "$OUT/summary.tsv"
kill "$packer" 2>/dev/null; pack
cat "$OUT/summary.tsv"

#!/usr/bin/env bash
# Issue 24 item 4: the GPU path of the real trainer (`multilab train` / `multilab evaluate`), short
# runs at the paper profile. Run on a GPU machine from the project root, with the corpus and
# vocabulary already built in artifacts/ (or in $PREBUILT) and multilab importable:
#   OUT=/some/dir bash benchmarks/gpu_probe.sh
# Writes one log per arm and summary.tsv (arm, processes, steps each, wall seconds) into $OUT.
# Arms: BERT-small fp32 vs bf16 (one process), BERT-base bf16 (one process), and K BERT-small
# processes sharing the GPU (K = 4, 8): how many models one GPU trains at once.
set -u
OUT="${OUT:?set OUT to a folder for the logs}"
EPOCHS="${EPOCHS:-3}"            # 92 steps an epoch at batch 256: 276 steps per small model
PREBUILT="${PREBUILT:-artifacts}"
EXTRA="${EXTRA:-}"               # more --set overrides (a CPU dry run: --set train.max_train_sentences=64)
ARMS="${ARMS:-small-fp32 small-bf16 base-bf16 small-bf16-x4 small-bf16-x8}"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
mkdir -p "$OUT"
printf 'arm\tprocesses\tsteps_each\twall_s\trc\n' > "$OUT/summary.tsv"

train() {  # train <arm> <precision> <modification> <seed> <epochs>: one process, own folders
  local arm=$1 precision=$2 mod=$3 seed=$4 epochs=$5 root="runs/$1-s$4"
  mkdir -p "$root/artifacts" && cp -r "$PREBUILT/corpora" "$PREBUILT/vocab" "$root/artifacts/"
  # shellcheck disable=SC2086
  MULTILAB_MIXED_PRECISION=$precision python3 -m multilab $(sets "$root" "$epochs") \
    train -m "$mod" --seed "$seed" > "$OUT/$arm-s$seed.log" 2>&1
}

sets() {  # sets <root> <epochs>: the overrides every command of one arm shares
  echo "--set profile=paper --set train.epochs=$2 --set train.eval_points=[0.5] $EXTRA" \
    "--set paths.artifacts=$1/artifacts --set paths.mlruns=$1/mlruns" \
    "--set paths.metrics=$1/metrics --set paths.reports=$1/reports"
}

arm() {  # arm <name> <processes> <precision> <modification> <epochs>
  local name=$1 k=$2 precision=$3 mod=$4 epochs=$5 start pids=() rc=0
  case " $ARMS " in *" $name "*) ;; *) return 0 ;; esac
  start=$(now_ms)
  for seed in $(seq 1 "$k"); do train "$name" "$precision" "$mod" "$seed" "$epochs" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$k" "$((epochs * 92))" \
    "$(( ($(now_ms) - start) / 1000 ))" "$rc" >> "$OUT/summary.tsv"
  tail -n 1 "$OUT/summary.tsv"
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch, transformers, accelerate, mlflow; print("torch", torch.__version__,
  "transformers", transformers.__version__, "accelerate", accelerate.__version__,
  "mlflow", mlflow.__version__)' | tee -a "$OUT/gpu.txt"
arm small-fp32 1 no original "$EPOCHS"
arm small-bf16 1 bf16 original "$EPOCHS"
arm base-bf16 1 bf16 overparam 1
arm small-bf16-x4 4 bf16 original "$EPOCHS"
arm small-bf16-x8 8 bf16 original "$EPOCHS"
start=$(now_ms)
# shellcheck disable=SC2046
MULTILAB_MIXED_PRECISION=bf16 python3 -m multilab $(sets runs/small-bf16-s1 "$EPOCHS") \
  evaluate runs/small-bf16-s1/artifacts/models/original/seed1 > "$OUT/evaluate.log" 2>&1
printf 'evaluate\t1\t0\t%s\t%s\n' "$(( ($(now_ms) - start) / 1000 ))" "$?" >> "$OUT/summary.tsv"
cat "$OUT/summary.tsv"

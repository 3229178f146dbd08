#!/usr/bin/env bash
# Issue 56 item 7 on one GPU, in one short lease: aggregate model-steps/s of BERT-small trained
# as one stacked model (training/stacked.py) for k = 1, 8, 32, 64 members, against one model
# alone (k = 1, the separate arm), float32, one piece a step, quick-profile batches of 256.
# Data: verse-like synthetic sentences (the lease's machine has no Bible database; the launch
# count and the step's shapes are what matter here). Also the kernel-like aten ops per
# model-step at k = 1 and 8 (the CPU proxy, on the GPU machine).
#   OUT=/some/dir bash scripts/gpu_stacked.sh
# Writes $OUT/stacked-gpu.tgz (stacked-gpu.json, written after every k, so a cut-short run keeps
# what finished; bench.log; gpu.txt). The compare: 72.6 steps/s of 12 processes on one H200,
# 11.8 steps/s of one process (docs/GPU.md).
set -u
OUT="${OUT:?set OUT to a folder for the results}"
KS="${KS:-1 8 32 64}"
STEPS="${STEPS:-20}"             # timed steps per k (after 3 untimed)
LIMIT="${LIMIT:-420}"            # seconds for the benchmark: leaves a rerun inside a 15-min lease
PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}" TQDM_DISABLE=1
HERE="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$OUT"

pack() {
  (cd "$OUT" || exit
   files=()
   for f in stacked-gpu.json stacked-gpu-tf32.json bench.log gpu.txt; do
     [ -f "$f" ] && files+=("$f")
   done
   tar -czf stacked-gpu.tmp "${files[@]}" && mv stacked-gpu.tmp stacked-gpu.tgz)
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
  --format=csv,noheader | tee "$OUT/gpu.txt"
"$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "transformers",
  transformers.__version__, "cuda", torch.cuda.is_available())' | tee -a "$OUT/gpu.txt"
# shellcheck disable=SC2086
(cd "$HERE/benchmarks" && PYTHONPATH="$HERE/src" timeout "$LIMIT" "$PYTHON" bench_stacked.py \
  --device "${DEVICE:-cuda}" --data synthetic --kernel-ks 1 8 --time-ks $KS --separate-ks 1 \
  --steps "$STEPS" --warmup 3 --out "$OUT/stacked-gpu.json") > "$OUT/bench.log" 2>&1
echo "benchmark rc=$?" | tee -a "$OUT/bench.log"
# the same stacks with float32 products on TF32 tensor cores (docs/PERFORMANCE.md: at k >= 32
# the device part is compute-bound, not launch-bound; TF32 is the arithmetic lever there)
TF32_KS="${TF32_KS-32 64}"             # empty: no TF32 arm
if [ -n "$TF32_KS" ]; then
  # shellcheck disable=SC2086
  (cd "$HERE/benchmarks" && PYTHONPATH="$HERE/src" timeout "${TF32_LIMIT:-120}" "$PYTHON" \
    bench_stacked.py --device "${DEVICE:-cuda}" --data synthetic --kernel-ks --time-ks \
    $TF32_KS --separate-ks --steps "$STEPS" --warmup 3 --tf32 \
    --out "$OUT/stacked-gpu-tf32.json") >> "$OUT/bench.log" 2>&1
  echo "tf32 benchmark rc=$?" | tee -a "$OUT/bench.log"
fi
pack
grep -E "^\{'k'" "$OUT/bench.log"

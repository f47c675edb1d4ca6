#!/usr/bin/env bash
# One short GPU check (under ~8 minutes once packages are cached): builds a GPU
# environment and runs the benchmark on one GPU plain, with --use_xla and with
# --use_amp (float16 + dynamic loss scaling), printing each table. With 2+ GPUs it
# then checks that 2 processes pin different GPUs and benchmarks 2 processes.
#
#   bash scripts/gpu_check.sh                 # needs nvidia-smi and a CUDA driver
#   VENV=/path/venv STEPS=40 bash scripts/gpu_check.sh
#
# The GPU environment is a separate venv (.venv-gpu) with tensorflow[and-cuda]
# 2.15.1 (CUDA 12.2 / cuDNN 8.9 wheels) and Horovod built with TensorFlow, MPI and
# Gloo. One GPU needs no NCCL; for multi-GPU jobs build Horovod with
# HOROVOD_GPU_OPERATIONS=NCCL (see README, "GPUs").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv-gpu}"
STEPS="${STEPS:-30}"
OUT="${OUT_DIR:-$ROOT/output/gpu_check}"

command -v nvidia-smi >/dev/null || { echo "gpu_check.sh: error: nvidia-smi not found" >&2; exit 2; }
nvidia-smi -L
mkdir -p "$OUT"
VENV="$VENV" TF_PACKAGE="tensorflow[and-cuda]==2.15.1" bash "$ROOT/scripts/setup.sh"
PY="$VENV/bin/python"
"$PY" -c "import tensorflow as tf; g = tf.config.list_physical_devices('GPU'); print('TF sees', g); assert g"

for mode in plain xla amp; do
  precision=fp32
  case "$mode" in
    plain) extra="" ;;
    xla) extra="--use_xla" ;;
    amp) extra="" precision=fp16 ;;  # --use_amp, MFU against the float16 peak
  esac
  echo "== benchmark on 1 GPU: $mode =="
  "$PY" "$ROOT/scripts/benchmark.py" --gpu --settings 1 --steps "$STEPS" \
    --batch 32 --precision "$precision" --extra_args="$extra" \
    --json_out "$OUT/benchmark_$mode.json" \
    --work_dir "$OUT/work_$mode"
done

# Two processes on two GPUs: each must pin its own GPU (by local rank) before the
# first eager op, or TF >= 2.11 maps GPU:0 to physical GPU 0 in both. Each rank
# pins through distributed.init(), runs an eager op and an object collective,
# and rank 0 checks the two physical GPUs differ; then the 2-process benchmark.
if [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then
  echo "== 2 processes, one GPU each =="
  PATH="$VENV/bin:$PATH" "$VENV/bin/horovodrun" -np 2 --gloo "$PY" -c '
import sys
sys.path.insert(0, sys.argv[1])
import tensorflow as tf
import distributed
from distributed import hvd
runtime = distributed.init()
assert len(tf.config.list_logical_devices("GPU")) == 1, tf.config.list_logical_devices()
tf.reduce_sum(tf.ones([4]))  # an eager op after pinning
pinned = tf.config.get_visible_devices("GPU")[0].name
names = hvd.allgather_object(pinned)  # Horovod: every rank reports its GPU.
if runtime.rank == 0:
  print("ranks pinned to", names)
  assert len(set(names)) == 2, names
' "$ROOT"
  echo "== benchmark on 2 GPUs (2 processes): plain =="
  "$PY" "$ROOT/scripts/benchmark.py" --gpu --settings 2 --steps "$STEPS" \
    --batch 32 --json_out "$OUT/benchmark_2gpu.json" --work_dir "$OUT/work_2gpu"
else
  echo "== one GPU: the 2-process pinning check needs 2+ GPUs (skipped) =="
fi

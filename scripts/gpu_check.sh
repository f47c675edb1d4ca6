#!/usr/bin/env bash
# One short GPU check (under ~8 minutes once packages are cached): builds a GPU
# environment and runs the benchmark on one GPU plain, with --use_xla and with
# --use_amp (float16 + dynamic loss scaling), printing each table.
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
  case "$mode" in
    plain) extra="" ;;
    xla) extra="--use_xla" ;;
    amp) extra="--use_amp" ;;
  esac
  echo "== benchmark on 1 GPU: $mode =="
  "$PY" "$ROOT/scripts/benchmark.py" --gpu --settings 1 --steps "$STEPS" \
    --batch 32 --extra_args="$extra" --json_out "$OUT/benchmark_$mode.json" \
    --work_dir "$OUT/work_$mode"
done

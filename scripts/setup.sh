#!/usr/bin/env bash
# Idempotent set-up: OpenMPI (Debian packages), a venv with TensorFlow 2.15.1 and
# Horovod 0.28.1 built with TensorFlow, Gloo and MPI. Safe to re-run: each step is
# skipped when its result is already there.
#
#   bash scripts/setup.sh            # CPU build (this is what CI and the demo use)
#   HOROVOD_GPU_OPERATIONS=NCCL TF_PACKAGE="tensorflow[and-cuda]==2.15.1" VENV=.venv-gpu bash scripts/setup.sh
#
# Environment: VENV (default .venv at the repository root), TF_PACKAGE
# (default tensorflow-cpu==2.15.1), WITH_DEV=1 to add the test requirements.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
TF_PACKAGE="${TF_PACKAGE:-tensorflow-cpu==2.15.1}"
HOROVOD_VERSION=0.28.1

log() { echo "[setup] $*"; }

install_mpi() {
  if command -v mpirun >/dev/null 2>&1 && [ -e /usr/include/x86_64-linux-gnu/openmpi ] \
      || dpkg -s libopenmpi-dev >/dev/null 2>&1; then
    log "OpenMPI present: $(command -v mpirun)"
    return
  fi
  log "installing OpenMPI from Debian packages"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
}

make_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv $VENV"
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --upgrade "pip<25" "setuptools<70" wheel
}

install_python_packages() {
  if ! "$VENV/bin/python" -c "import tensorflow" >/dev/null 2>&1; then
    log "installing $TF_PACKAGE and requirements"
  fi
  # requirements.txt pins the CPU build; TF_PACKAGE may name another (GPU) build.
  local reqs
  reqs="$(mktemp)"
  grep -v -E '^tensorflow(-cpu)?==' "$ROOT/requirements.txt" > "$reqs"
  "$VENV/bin/python" -m pip install -q "$TF_PACKAGE" -r "$reqs"
  rm -f "$reqs"
  if [ "${WITH_DEV:-0}" = "1" ]; then
    "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-dev.txt"
  fi
}

horovod_ok() {
  "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import horovod.tensorflow as hvd
from horovod.common.util import mpi_built, gloo_built
assert hvd.mpi_built() and hvd.gloo_built()
PY
}

build_horovod() {
  if horovod_ok; then
    log "horovod already built with TensorFlow, Gloo and MPI"
    return
  fi
  log "building horovod==$HOROVOD_VERSION (a few minutes; pip caches the wheel)"
  "$VENV/bin/python" -m pip uninstall -y -q horovod >/dev/null 2>&1 || true
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    "$VENV/bin/python" -m pip install -q --no-build-isolation "horovod==$HOROVOD_VERSION"
}

install_mpi
make_venv
install_python_packages
build_horovod
"$VENV/bin/horovodrun" --check-build
log "done: activate with 'source $VENV/bin/activate'"

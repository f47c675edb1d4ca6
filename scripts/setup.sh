#!/usr/bin/env bash
# Idempotent set-up: OpenMPI (Debian packages), a venv with TensorFlow 2.15.1 and
# Horovod 0.28.1 built with TensorFlow, Gloo and MPI. Safe to re-run: each step is
# skipped when its result is already there.
#
#   bash scripts/setup.sh                  # CPU build (this is what CI and the demo use)
#   bash scripts/setup.sh --check_python   # only say which Python would be used
#   HOROVOD_GPU_OPERATIONS=NCCL TF_PACKAGE="tensorflow[and-cuda]==2.15.1" VENV=.venv-gpu bash scripts/setup.sh
#
# Python 3.9, 3.10 or 3.11 is needed (TensorFlow 2.15.1 has wheels for these only):
# $PYTHON when set, else the first that fits of python3.11, python3.10, python3.9,
# python3 (an existing $VENV keeps its own). Nothing is installed or created when
# none fits; the error says how to get one.
#
# Environment: PYTHON (the interpreter for the venv), VENV (default .venv at the
# repository root), TF_PACKAGE (default tensorflow-cpu==2.15.1), WITH_DEV=1 to add
# the test requirements.
set -euo pipefail
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"
VENV="${VENV:-$ROOT/.venv}"
TF_PACKAGE="${TF_PACKAGE:-tensorflow-cpu==2.15.1}"
HOROVOD_VERSION=0.28.1
PY_VERSIONS="3.9 3.10 3.11"  # what tensorflow-cpu==2.15.1 has wheels for

log() { echo "[setup] $*"; }

# Prints "MAJOR.MINOR VENV" for interpreter $1 (VENV is 1 when it can create a
# venv with pip, 0 when not), or nothing when it does not run.
python_probe() {
  "$1" -c 'import sys
try:
  import ensurepip, venv
  ok = 1
except ImportError:
  ok = 0
print("%d.%d %d" % (sys.version_info[0], sys.version_info[1], ok))' 2>/dev/null || true
}

# Sets PYTHON to the first suitable interpreter, or stops (exit 2) with what to do.
find_python() {
  local candidates=() tried=() cand probe version venv_ok
  if [ -x "$VENV/bin/python" ]; then
    candidates=("$VENV/bin/python")  # an existing venv is kept
  elif [ -n "${PYTHON:-}" ]; then
    candidates=("$PYTHON")
  else
    candidates=(python3.11 python3.10 python3.9 python3)
  fi
  for cand in "${candidates[@]}"; do
    if ! command -v "$cand" >/dev/null 2>&1; then
      tried+=("$cand (not found)")
      continue
    fi
    probe="$(python_probe "$cand")"
    version="${probe% *}"; venv_ok="${probe#* }"
    if [ -z "$probe" ]; then
      tried+=("$cand (does not run)")
    elif [[ " $PY_VERSIONS " != *" $version "* ]]; then
      tried+=("$cand ($version)")
    elif [ "$venv_ok" != 1 ] && [ "$cand" != "$VENV/bin/python" ]; then
      tried+=("$cand ($version without venv/ensurepip: install python$version-venv)")
    else
      PYTHON="$(command -v "$cand")"
      log "Python $version: $PYTHON"
      return
    fi
  done
  {
    echo "$PROG: error: no Python 3.9, 3.10 or 3.11 (TensorFlow 2.15.1 has no wheels for other versions); tried: $(IFS=,; echo "${tried[*]}" | sed 's/,/, /g')"
    if [ -x "$VENV/bin/python" ]; then
      echo "  $VENV was made with another Python: remove it and re-run with PYTHON set."
    fi
    echo "  Get Python 3.11, then re-run as PYTHON=/path/to/python3.11 bash scripts/setup.sh:"
    echo "    Debian/Ubuntu: sudo apt-get install python3.11 python3.11-venv (Ubuntu 24.04: deadsnakes PPA)"
    if command -v uv >/dev/null 2>&1; then
      echo "    uv (found on PATH): uv python install 3.11 && PYTHON=\"\$(uv python find 3.11)\" bash scripts/setup.sh"
    else
      echo "    uv: uv python install 3.11, then PYTHON=\"\$(uv python find 3.11)\""
    fi
    echo "    pyenv: pyenv install 3.11, then PYTHON=\"\$(pyenv root)/versions/3.11.<patch>/bin/python\""
  } >&2
  exit 2
}

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
    log "creating venv $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
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
  # The n-gram baseline the demos print (scikit-learn).
  "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-extra.txt"
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
  # Built when missing or broken, never from pip's cache (a stale wheel).
  log "building horovod==$HOROVOD_VERSION (a few minutes)"
  "$VENV/bin/python" -m pip uninstall -y -q horovod >/dev/null 2>&1 || true
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    "$VENV/bin/python" -m pip install -q --no-cache-dir --no-build-isolation \
      "horovod==$HOROVOD_VERSION"
}

case "${1:-}" in
  "") ;;
  --check_python) find_python; exit 0 ;;
  -h|--help) usage; exit 0 ;;
  *) die "unknown option '$1'" ;;
esac
find_python  # first: nothing is installed without a Python that fits
install_mpi
make_venv
install_python_packages
build_horovod
"$VENV/bin/horovodrun" --check-build
log "done: activate with 'source $VENV/bin/activate'"

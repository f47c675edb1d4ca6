#!/usr/bin/env bash
# Sets up (idempotent, see scripts/setup.sh) and runs the test suite.
#   bash scripts/run_tests.sh            # everything
#   bash scripts/run_tests.sh -k modeling  # extra arguments go to pytest
#   TEST_WORKERS=0 bash scripts/run_tests.sh  # one process, tests in file order
# The tests run in TEST_WORKERS (default 2) pytest-xdist workers, each test where a
# worker is free, except the files that tests/conftest.py groups (module fixtures,
# caches in data/cache): nearly all of a test's time is launched jobs starting up
# (horovodrun, TensorFlow's import), which leave a core idle.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WITH_DEV=1 bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
# The launchers (horovodrun, the venv's python for mpirun) must be found on PATH.
export PATH="${VENV:-$ROOT/.venv}/bin:$PATH"
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest -v -rs --durations=15 \
  -n "${TEST_WORKERS:-2}" --dist loadgroup tests "$@"

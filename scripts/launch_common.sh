# Shell helpers shared by scripts/run_horovodrun.sh and scripts/run_mpirun.sh
# (sourced, not run). Expects ROOT (the repository root) to be set.

# Prints the comment block at the top of the calling script.
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
# One error line, a hint, exit 2 (bad usage).
die() {
  local name
  name="$(basename "$0")"
  echo "$name: error: $*" >&2
  echo "run 'scripts/$name --help' for usage" >&2
  exit 2
}
# Shell-quotes each word only where needed (for --dry_run output).
quote() {
  local out=() a
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then out+=("$a"); else out+=("'${a//\'/\'\\\'\'}'"); fi
  done
  echo "${out[*]}"
}
# `need "$@"` inside the option loop: the option in $1 must have a value in $2.
need() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
# The interpreter: the repository's .venv if present, else python3.
default_python() {
  if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python"; else echo python3; fi
}

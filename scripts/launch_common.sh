# The launcher core, sourced (not run) by every script in scripts/ that starts
# or prepares a job: run_demo.sh, run_pretrain_demo.sh, run_horovodrun.sh,
# run_mpirun.sh, slurm.sbatch, setup.sh. It sets ROOT (the repository root, the
# folder above this file) and PROG (the calling script's name), and gives each
# script the same usage, option, error, quoting, interpreter and dry-run behaviour.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="$(basename "$0")"

# Prints the comment block at the top of the calling script (up to `set -euo
# pipefail`, without #SBATCH directives), without the leading '# '.
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | grep -v '^##*SBATCH' | sed 's/^# \{0,1\}//' \
    | sed '/./,$!d'  # from the first non-empty line
}

# One error line and a hint on stderr, exit 2 (bad usage or bad input).
die() {
  echo "$PROG: error: $*" >&2
  echo "run 'scripts/$PROG --help' for usage" >&2
  exit 2
}

# Prints its arguments as one shell command, quoting each word only where needed.
quote() {
  local out=() a
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      out+=("$a")
    else
      out+=("'${a//\'/\'\\\'\'}'")
    fi
  done
  echo "${out[*]}"
}

# `need "$@"` inside an option loop: the option in $1 must have a value in $2.
# An option's value never starts with --: `--output_dir --dry_run` would otherwise
# name a folder "--dry_run" and run the job for real.
need() {
  [ $# -ge 2 ] && [ -n "$2" ] && [[ "$2" != --* ]] ||
    die "$1 needs a value${2:+ (found the option '$2' in its place)}"
}

# `parse_options "$@"`: the option loop of a script. The script first names its
# options, without the leading --, as NAME or NAME=VARIABLE (the variable is NAME
# in capitals unless given: np sets NP), in
#   VALUE_OPTIONS   options with a value, stored in the variable
#   LIST_OPTIONS    repeatable options with a value, each added to the array
#   SWITCH_OPTIONS  options without a value, setting the variable to 1
# and may define `script_option OPTION`, which handles an option of its own that
# takes no value and returns 0 (1 for an option it does not know). DASHES_FOR,
# when set, names the program the words after `--` are for: they are left in the
# array ARGS. Without it `--` is an unknown option. -h/--help prints the usage.
# An option with a value is written `--NAME VALUE` or `--NAME=VALUE`.
parse_options() {
  local var
  ARGS=()
  while [ $# -gt 0 ]; do
    case "$1" in
      -h|--help) usage; exit 0 ;;
      --) if [ -n "${DASHES_FOR:-}" ]; then shift; ARGS=("$@"); return 0; fi ;;
    esac
    # --NAME=VALUE, as run_classifier.py's flags are written, is --NAME VALUE.
    if [[ "$1" == --*=* ]] && option_variable "${1%%=*}" ${VALUE_OPTIONS:-} \
        ${LIST_OPTIONS:-} >/dev/null; then
      set -- "${1%%=*}" "${1#*=}" "${@:2}"
    fi
    if var="$(option_variable "$1" ${VALUE_OPTIONS:-})"; then
      need "$@"; printf -v "$var" '%s' "$2"; shift 2
    elif var="$(option_variable "$1" ${LIST_OPTIONS:-})"; then
      need "$@"; eval "$var+=(\"\$2\")"; shift 2
    elif var="$(option_variable "$1" ${SWITCH_OPTIONS:-})"; then
      printf -v "$var" '%s' 1; shift
    elif declare -F script_option >/dev/null && script_option "$1"; then
      shift
    else
      die "unknown option '$1'${DASHES_FOR:+ (flags of $DASHES_FOR go after --)}"
    fi
  done
}

# `option_variable OPTION NAME...`: prints the variable of OPTION (--NAME) among
# the NAMEs (NAME or NAME=VARIABLE, as parse_options); fails for any other option.
option_variable() {
  local option="$1" entry
  shift
  for entry in "$@"; do
    [ "$option" = "--${entry%%=*}" ] || continue
    if [[ "$entry" == *=* ]]; then echo "${entry#*=}"; else echo "${entry^^}"; fi
    return 0
  done
  return 1
}

# `positive NAME VALUE`: VALUE must be a whole number of at least 1.
positive() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"; }

# The interpreter: the repository's .venv if present, else python3.
default_python() {
  if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python"; else echo python3; fi
}

# `launch [--group] CMD...`: with DRY_RUN=1 prints the command and exits 0.
# Otherwise replaces this shell with CMD, so that a signal sent to the script
# reaches the launcher itself (mpirun, horovodrun over Gloo: each ends its ranks on
# SIGINT, SIGTERM and SIGKILL). With --group, runs CMD with run_child instead and
# exits with its status: for `horovodrun` over MPI, which replaces itself with
# `/bin/sh -c "mpirun ..."`, so that a signal to its pid alone ends only the shell
# and leaves mpirun and the ranks training.
launch() {
  local group=0 rc=0
  if [ "${1:-}" = --group ]; then group=1; shift; fi
  if [ "${DRY_RUN:-0}" = 1 ]; then
    quote "$@"
    exit 0
  fi
  export PYTHONUNBUFFERED="${PYTHONUNBUFFERED:-1}"
  [ "$group" = 1 ] || exec "$@"
  run_child "$@" || rc=$?
  exit "$rc"
}

# `run_child CMD...`: runs CMD in a process group of its own and passes SIGINT and
# SIGTERM on to that whole group as SIGTERM (bash would otherwise end alone and
# leave the job running); returns CMD's exit status, or 128 + the signal's number
# where a signal stopped a CMD that then exited 0 (a job it stopped is not done).
# SIGKILL cannot be passed on.
run_child() {
  local child="" rc=0 signalled=0
  # Trapped before the job starts: a signal that comes first is passed on as soon
  # as the job's pid is known.
  trap 'signalled=130; [ -z "$child" ] || stop_group "$child"' INT
  trap 'signalled=143; [ -z "$child" ] || stop_group "$child"' TERM
  if command -v setsid >/dev/null 2>&1; then
    setsid -w "$@" &  # not a group leader, so setsid execs CMD: $! leads the group
  else
    "$@" &
  fi
  child=$!
  [ "$signalled" = 0 ] || stop_group "$child"
  # A trapped signal interrupts `wait` (status > 128) while the job may still be
  # ending: wait until it is gone, then read its own status (bash keeps it).
  while kill -0 "$child" 2>/dev/null; do wait "$child" || true; done
  wait "$child" || rc=$?
  trap - INT TERM
  [ "$rc" != 0 ] || rc="$signalled"
  return "$rc"
}

# `stop_group PID`: SIGTERM to the process group PID leads, else to PID alone.
stop_group() {
  kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1" 2>/dev/null || true
}

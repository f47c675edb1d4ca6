#!/usr/bin/env bash
# Starts run_classifier.py on one or more hosts through `horovodrun`.
#
#   scripts/run_horovodrun.sh --np 8 --hosts node1:4,node2:4 -- \
#       --task_name=tsv --do_train --data_dir=... --output_dir=...
#
# Everything after `--` is passed to run_classifier.py unchanged.
#
# Options:
#   --np N                     total number of processes (required)
#   --hosts H                  host list, e.g. node1:4,node2:4 (horovodrun -H)
#   --hostfile F               hostfile, one `host slots=N` a line (horovodrun -hostfile)
#   --network_interface IF     NIC(s) to use, e.g. eth0 or eth0,ib0 (repeatable)
#   --gloo | --mpi             controller; horovodrun picks one when neither is given
#   --timeline FILE            write a Horovod timeline (--timeline-filename)
#   --stall_warning_secs S     warn about ranks stalled for S seconds
#   --stall_shutdown_secs S    abort the job when ranks stall for S seconds
#   --ssh_port P               SSH port of the hosts (horovodrun -p)
#   --start_timeout S          horovodrun's start-up check timeout
#   --output_filename DIR      per-rank stdout/stderr under DIR (horovodrun)
#   --verbose                  horovodrun --verbose
#   --python PATH              interpreter (default: .venv/bin/python of the repo, else python3)
#   --script PATH              training script (default: run_classifier.py at the repo root)
#   --horovodrun PATH          horovodrun executable (default: next to --python, else on
#                              PATH; with --gloo, scripts/gloo_horovodrun.py run by --python)
#   --dry_run                  print the exact command and run nothing
#   -h, --help                 this help
#
# Every host needs the same python, horovod and repository paths, and SSH access
# without a password from this host (not needed for localhost only).
#
# Ctrl-C or `kill` (SIGTERM) of this script ends every rank within seconds; the
# same command again resumes from the last checkpoint. `kill -9` is passed on only
# with --gloo (horovodrun then is this process); over MPI it leaves the job
# running (README, "Stopping a job").
set -euo pipefail
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

NP=""; HOSTS=""; HOSTFILE=""; NICS=(); CONTROLLER=""; TIMELINE=""
STALL_WARN=""; STALL_SHUTDOWN=""; SSH_PORT=""; START_TIMEOUT=""; OUTPUT_FILENAME=""
VERBOSE=0; DRY_RUN=0; PYTHON=""; SCRIPT="$ROOT/run_classifier.py"; HOROVODRUN=""

VALUE_OPTIONS="np hosts hostfile timeline stall_warning_secs=STALL_WARN
  stall_shutdown_secs=STALL_SHUTDOWN ssh_port start_timeout output_filename python
  script horovodrun"
LIST_OPTIONS="network_interface=NICS"; SWITCH_OPTIONS="verbose dry_run"
DASHES_FOR=run_classifier.py
# --gloo or --mpi: Horovod's controller.
script_option() {
  case "$1" in --gloo|--mpi) ;; *) return 1 ;; esac
  [ -z "$CONTROLLER" ] || [ "$CONTROLLER" = "${1#--}" ] \
    || die "--gloo and --mpi exclude each other"
  CONTROLLER="${1#--}"
}
parse_options "$@"
set -- ${ARGS[@]+"${ARGS[@]}"}

[ -n "$NP" ] || die "--np is required"
positive --np "$NP"
[ -z "$HOSTS" ] || [ -z "$HOSTFILE" ] || die "--hosts and --hostfile exclude each other"
for secs in "$STALL_WARN" "$STALL_SHUTDOWN"; do
  [ -z "$secs" ] || [[ "$secs" =~ ^[0-9]+$ ]] || die "stall times are whole seconds, got '$secs'"
done
if [ -n "$STALL_WARN" ] && [ -n "$STALL_SHUTDOWN" ] && [ "$STALL_SHUTDOWN" -ne 0 ] \
    && [ "$STALL_SHUTDOWN" -lt "$STALL_WARN" ]; then
  die "--stall_shutdown_secs ($STALL_SHUTDOWN) must not be below --stall_warning_secs ($STALL_WARN)"
fi

[ -n "$PYTHON" ] || PYTHON="$(default_python)"
if [ -z "$HOROVODRUN" ] && [ "$CONTROLLER" = gloo ]; then
  # Horovod: Horovod's launcher in the chosen python's process, with an exit status
  # that is never 0 after SIGINT/SIGTERM stopped the job (scripts/gloo_horovodrun.py).
  HOROVODRUN=("$PYTHON" "$ROOT/scripts/gloo_horovodrun.py")
elif [ -z "$HOROVODRUN" ]; then
  # The horovodrun installed with the chosen python, else the one on PATH.
  py_bin="$(dirname "$PYTHON")"
  if [ "$py_bin" != "." ] && [ -x "$py_bin/horovodrun" ]; then
    HOROVODRUN="$py_bin/horovodrun"
  else
    HOROVODRUN=horovodrun
  fi
fi

CMD=("${HOROVODRUN[@]}" -np "$NP")
[ -z "$HOSTS" ] || CMD+=(-H "$HOSTS")
[ -z "$HOSTFILE" ] || CMD+=(-hostfile "$HOSTFILE")
for nic in ${NICS[@]+"${NICS[@]}"}; do CMD+=(--network-interface "$nic"); done
[ -z "$CONTROLLER" ] || CMD+=("--$CONTROLLER")
[ -z "$TIMELINE" ] || CMD+=(--timeline-filename "$TIMELINE")
[ -z "$STALL_WARN" ] || CMD+=(--stall-check-warning-time-seconds "$STALL_WARN")
[ -z "$STALL_SHUTDOWN" ] || CMD+=(--stall-check-shutdown-time-seconds "$STALL_SHUTDOWN")
[ -z "$SSH_PORT" ] || CMD+=(-p "$SSH_PORT")
[ -z "$START_TIMEOUT" ] || CMD+=(--start-timeout "$START_TIMEOUT")
[ -z "$OUTPUT_FILENAME" ] || CMD+=(--output-filename "$OUTPUT_FILENAME")
[ "$VERBOSE" = 0 ] || CMD+=(--verbose)
CMD+=("$PYTHON" "$SCRIPT" "$@")

# Horovod: over MPI (--mpi, or horovodrun's own choice where Horovod has MPI)
# horovodrun execs `/bin/sh -c "mpirun ..."`; signals must reach its whole group.
if [ "$CONTROLLER" = gloo ]; then launch "${CMD[@]}"; else launch --group "${CMD[@]}"; fi

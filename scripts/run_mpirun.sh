#!/usr/bin/env bash
# Starts run_classifier.py on one or more hosts through Open MPI's `mpirun`
# (Horovod then uses its MPI controller).
#
#   scripts/run_mpirun.sh --np 8 --hosts node1:4,node2:4 --btl_tcp_if_include eth0 -- \
#       --task_name=tsv --do_train --data_dir=... --output_dir=...
#
# Everything after `--` is passed to run_classifier.py unchanged. The command is
#
#   mpirun -np N [-hostfile F] [-H H] -bind-to none -map-by slot \
#     -x NCCL_DEBUG=${NCCL_DEBUG:-INFO} -x LD_LIBRARY_PATH -x PATH \
#     -mca pml ob1 -mca btl ^openib \
#     [-mca btl_tcp_if_include IF -mca oob_tcp_if_include IF] [-mca plm_rsh_agent PATH] \
#     python run_classifier.py <flags>
#
# plus --allow-run-as-root when run as root (-x LD_LIBRARY_PATH only when it is set).
#
# Options:
#   --np N                     total number of processes (required)
#   --hostfile F               Open MPI hostfile, one `host slots=N` a line
#   --hosts H                  host list, e.g. node1:4,node2:4 (mpirun -H)
#   --btl_tcp_if_include IF    interface(s) or CIDR subnet(s) for MPI and Open MPI's
#                              own traffic, e.g. eth0 or 10.0.0.0/24 (comma-separated)
#   --rsh_agent PATH           command that starts the remote daemons instead of ssh;
#                              it is called as `PATH <host> <command...>`
#   --oversubscribe            allow more processes than slots (e.g. more than cores)
#   --export VAR[=VALUE]       one more `-x` environment variable for every rank (repeatable)
#   --python PATH              interpreter (default: .venv/bin/python of the repo, else python3)
#   --script PATH              training script (default: run_classifier.py at the repo root)
#   --mpirun PATH              mpirun executable (default: mpirun on PATH)
#   --dry_run                  print the exact command and run nothing
#   -h, --help                 this help
#
# Every host needs the same python, horovod and repository paths. Without
# --rsh_agent, Open MPI reaches remote hosts with ssh (without a password); inside
# a Slurm allocation it starts them through Slurm by itself.
#
# Ctrl-C, `kill` or `kill -9` of this script (it becomes mpirun) ends every rank
# within seconds; the same command again resumes from the last checkpoint.
set -euo pipefail
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

NP=""; HOSTFILE=""; HOSTS=""; IF_INCLUDE=""; RSH_AGENT=""; OVERSUBSCRIBE=0
EXPORTS=(); DRY_RUN=0; PYTHON=""; SCRIPT="$ROOT/run_classifier.py"; MPIRUN=mpirun

VALUE_OPTIONS="np hostfile hosts btl_tcp_if_include=IF_INCLUDE rsh_agent python script
  mpirun"
LIST_OPTIONS="export=EXPORTS"; SWITCH_OPTIONS="oversubscribe dry_run"
DASHES_FOR=run_classifier.py
parse_options "$@"
set -- ${ARGS[@]+"${ARGS[@]}"}

[ -n "$NP" ] || die "--np is required"
positive --np "$NP"
[ -z "$HOSTFILE" ] || [ -r "$HOSTFILE" ] || die "hostfile '$HOSTFILE' is not readable"
if [ -n "$RSH_AGENT" ]; then
  if [[ "$RSH_AGENT" == */* ]]; then
    [ -x "$RSH_AGENT" ] || die "rsh agent '$RSH_AGENT' is not an executable file"
    # mpirun may start it from another folder: pass an absolute path.
    RSH_AGENT="$(cd "$(dirname "$RSH_AGENT")" && pwd)/$(basename "$RSH_AGENT")"
  else
    command -v "$RSH_AGENT" >/dev/null 2>&1 || die "rsh agent '$RSH_AGENT' is not on PATH"
  fi
fi

[ -n "$PYTHON" ] || PYTHON="$(default_python)"

CMD=("$MPIRUN" -np "$NP")
[ "$(id -u)" -ne 0 ] || CMD+=(--allow-run-as-root)
[ "$OVERSUBSCRIBE" = 0 ] || CMD+=(--oversubscribe)
[ -z "$HOSTFILE" ] || CMD+=(-hostfile "$HOSTFILE")
[ -z "$HOSTS" ] || CMD+=(-H "$HOSTS")
CMD+=(-bind-to none -map-by slot -x "NCCL_DEBUG=${NCCL_DEBUG:-INFO}")
# Forwarded only when set: Open MPI warns about an unset variable.
[ -z "${LD_LIBRARY_PATH+set}" ] || CMD+=(-x LD_LIBRARY_PATH)
CMD+=(-x PATH)
for var in ${EXPORTS[@]+"${EXPORTS[@]}"}; do CMD+=(-x "$var"); done
CMD+=(-mca pml ob1 -mca btl '^openib')
if [ -n "$IF_INCLUDE" ]; then
  CMD+=(-mca btl_tcp_if_include "$IF_INCLUDE" -mca oob_tcp_if_include "$IF_INCLUDE")
fi
[ -z "$RSH_AGENT" ] || CMD+=(-mca plm_rsh_agent "$RSH_AGENT")
CMD+=("$PYTHON" "$SCRIPT" "$@")

launch "${CMD[@]}"

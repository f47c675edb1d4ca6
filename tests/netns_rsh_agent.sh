#!/usr/bin/env bash
# An Open MPI rsh agent (`-mca plm_rsh_agent`) that "logs in" to a host by entering
# the network namespace that owns the host's address, so that two namespaces on
# one machine act as two cluster nodes (used by tests/test_launchers.py).
#
#   NETNS_RSH_MAP="10.213.7.1=bhA123,10.213.7.2=bhB123" netns_rsh_agent.sh 10.213.7.2 <command...>
#
# Open MPI calls it as `agent [options] <host> <command...>` like ssh: the words of
# the command are joined with spaces and run by `sh -c` inside the namespace, with
# this process's environment (PATH with the venv, LD_LIBRARY_PATH, ...) and with
# the namespace's name as hostname (in a new UTS namespace). When
# NETNS_RSH_TMPBASE is set, each namespace gets TMPDIR=$NETNS_RSH_TMPBASE/<netns>,
# so the daemons of the two "nodes" keep separate Open MPI session folders.
set -euo pipefail

while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options: ignored
[ $# -ge 2 ] || { echo "netns_rsh_agent.sh: usage: $0 <host> <command...>" >&2; exit 255; }
host="$1"; shift

ns=""
IFS=',' read -r -a pairs <<< "${NETNS_RSH_MAP:-}"
for pair in ${pairs[@]+"${pairs[@]}"}; do
  if [ "${pair%%=*}" = "$host" ]; then ns="${pair#*=}"; fi
done
[ -n "$ns" ] || { echo "netns_rsh_agent.sh: host '$host' is not in NETNS_RSH_MAP='${NETNS_RSH_MAP:-}'" >&2; exit 255; }

if [ -n "${NETNS_RSH_TMPBASE:-}" ]; then
  export TMPDIR="$NETNS_RSH_TMPBASE/$ns"
  mkdir -p "$TMPDIR"
fi
# A UTS namespace too, with the netns name as hostname: Open MPI tells nodes apart
# by hostname (shared-memory segment names, process locality).
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"

#!/usr/bin/env bash
# scale.sh - gorun's head at scale, on the cluster simulator (package simcluster):
# gorun's real head in a process of its own, every host's real agent code in a
# second process with simulated ranks, over links with a one-way latency and a
# bandwidth. One job: every rank starts, puts one key, enters one fence and gets
# another rank's key over PMI-1; then one rank fails, gorun stops the others, and
# the job ends. Prints one JSON line:
#
#   hosts, ranks, ranks_per_host, fanout, mode (flat or tree), latency_us,
#   launch_s     head start -> every rank started
#   fence_s      the last rank entering the fence -> the last through it and its get
#                (fence_span_s: from the first rank entering; fence_up_s: to the first
#                rank let out, the way up the tree and the head's store)
#   fail_stop_s  the failing rank's exit -> every other rank stopped
#   teardown_s   every rank stopped -> the head's Run returned
#   head_rss_mb  the head's peak RSS; head_cpu_s its CPU time (user+sys), whole run
#   cluster_cpu_s the simulated cluster's CPU time (every agent's, on this machine)
#   code, summary (gorun's first line), error (set when the run went wrong)
#
# Usage: bench/scale.sh --sim --hosts N --ranks-per-host R [--fanout K|auto|0]
#                       [--latency 50us] [--bandwidth 1.25e9]
# (--sim is the only mode: the real-host counterpart is bench/realscale.sh.)
# make bench-scale sweeps N and draws the curves (bench/scale_sweep.sh).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
args=()
sim=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sim) sim=1 ;;
    --hosts | --ranks-per-host | --fanout | --latency | --bandwidth | --beat-timeout)
      [ $# -ge 2 ] || { echo "scale.sh: $1 needs a value" >&2; exit 2; }
      args+=("$1" "$2"); shift ;;
    *) echo "scale.sh: unknown argument $1 (usage: scale.sh --sim --hosts N --ranks-per-host R [--fanout K])" >&2; exit 2 ;;
  esac
  shift
done
[ "$sim" = 1 ] || { echo "scale.sh: only --sim is implemented here; real hosts: bench/realscale.sh" >&2; exit 2; }
mkdir -p "$BENCH/.bin"
(cd "$ROOT" && go build -o "$BENCH/.bin/gorun-sim" ./simcluster/cmd/gorun-sim)
# The simulator holds a connection per agent the head starts, and a socket per
# simulated rank's PMI pipe is in memory: raise the descriptor limit anyway.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec "$BENCH/.bin/gorun-sim" "${args[@]}"

#!/usr/bin/env bash
# stacks.sh - the time from `gorun stacks` to the printed verdict, for each language
# (Python, C, MPICH, Go, torch gloo), with 16 ranks on 4 SSH hosts (network namespaces
# with a real sshd each, from the testhosts fixture) and with 16 ranks on this machine,
# side by side with what users do by hand today: eu-stack on every rank's pid, over ssh
# on each host, all in parallel (native frames only: no Python, no goroutines, no
# grouping). Rank 6 of each job is stuck somewhere else than the others, as in the tests
# (cmd/gorun/testdata/hang); each verdict is kept in OUT.
#
# Usage: bench/stacks.sh           (as root: network namespaces; from anywhere)
# Env:   RUNS        timed runs per command (default 10), after WARMUP (default 1)
#        LANGS       which programs (default "python c mpich go torch")
#        WHERE       "hosts", "local" or both (default "hosts local")
#        TIMEOUT     per-run limit in seconds (default 30)
#        KEEP_HOSTS  1: leave the hosts up at the end (and reuse hosts already up in STATE)
#        STATE       the fixture's state folder (default bench/.state/stacks, gitignored)
#        OUT         results folder (default bench/results/stacks-DATE)
# Output: a markdown table on stdout and in OUT/table.md (gorun's median against the
# by-hand loop's, per case); raw per-run JSON and each case's verdict in OUT.
#
# Network: only loopback and the fixture's own subnet (10.213.X.0/24). Every command
# runs under `testhosts head` (a private /etc/hosts that lists h1..h4), so that no host
# name reaches DNS.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-10}
WARMUP=${WARMUP:-1}
LANGS=${LANGS:-"python c mpich go torch"}
WHERE=${WHERE:-"hosts local"}
TIMEOUT=${TIMEOUT:-30}
STATE=${STATE:-$BENCH/.state/stacks}
OUT=${OUT:-$BENCH/results/stacks-$(date +%Y%m%d-%H%M%S)}
TH=$BENCH/.bin/testhosts
die() { echo "stacks.sh: $*" >&2; exit 1; }
# shellcheck source=bench/fixture.sh
source "$BENCH/fixture.sh"

PY=$(command -v python3 || true)
[ -n "$PY" ] || die "needs python3"
[ "$(id -u)" = 0 ] || die "needs root (the hosts are network namespaces)"
command -v eu-stack >/dev/null || die "needs eu-stack: apt-get install elfutils"
command -v mpicc.mpich >/dev/null || die "needs MPICH: apt-get install mpich libmpich-dev"
command -v gcc >/dev/null || die "needs gcc"

# Built where every host sees it (the hosts share the file system but /tmp, /run, /dev/shm).
BIN=$(mktemp -d /var/tmp/gorun-bench-stacks.XXXXXX)
chmod 755 "$BIN"
echo "building in $BIN..." >&2
(cd "$ROOT" && go build -o "$BIN/gorun" ./cmd/gorun && go build -o "$TH" ./testhosts/cmd/testhosts &&
  go build -o "$BIN/gohang" ./cmd/gorun/testdata/hang/gohang)
gcc -g -O1 -o "$BIN/blockread" "$ROOT/cmd/gorun/testdata/hang/blockread.c"
mpicc.mpich -g -O1 -o "$BIN/barrier" "$ROOT/cmd/gorun/testdata/hang/barrier.c"
cp "$ROOT/cmd/gorun/testdata/hang/hang.py" "$ROOT/cmd/gorun/testdata/hang/ddp_hang.py" "$BIN/"
GORUN=$BIN/gorun
JOBS=$BIN/jobs

started=0
JOBPID=""
cleanup() {
  if [ -n "$JOBPID" ]; then kill "$JOBPID" 2>/dev/null || true; fi
  if [ "$started" = 1 ] && [ "${KEEP_HOSTS:-0}" != 1 ]; then "$TH" --state "$STATE" down >&2 || true; fi
  rm -rf "$BIN"
}
trap cleanup EXIT
fixture_up 4
mkdir -p "$OUT"
{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "gorun: $("$GORUN" --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "eu-stack: $(eu-stack --version 2>&1 | head -1); py-spy: $(command -v py-spy || echo 'not installed (Python ranks: gorun'"'"'s faulthandler hook)')"
  echo "fixture: 4 hosts x 4 slots, subnet $TESTHOSTS_SUBNET"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP LANGS='$LANGS' WHERE='$WHERE'"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt"

argv_of() {
  case $1 in
  python) echo "/usr/bin/python3 $BIN/hang.py" ;;
  c) echo "$BIN/blockread" ;;
  mpich) echo "$BIN/barrier" ;;
  go) echo "$BIN/gohang" ;;
  torch) echo "/usr/bin/python3 $BIN/ddp_hang.py" ;;
  esac
}

for where in $WHERE; do
  hosts=()
  [ "$where" = local ] || hosts=(--ssh-config "$TESTHOSTS_SSH_CONFIG" --hostfile "$TESTHOSTS_HOSTFILE")
  for lang in $LANGS; do
    case=$where-$lang
    echo "$case..." >&2
    rm -rf "$JOBS" "$BIN/release" "$BIN/fifo"
    mkfifo "$BIN/fifo"
    # shellcheck disable=SC2046
    (cd "$BIN" && exec "${HEAD[@]}" env HANG_RANK=6 HANG_RELEASE="$BIN/release" HANG_FIFO="$BIN/fifo" \
      "$GORUN" --jobs-dir "$JOBS" "${hosts[@]}" --oversubscribe -np 16 -x HANG_RANK -x HANG_RELEASE -x HANG_FIFO \
      $(argv_of "$lang") >"$OUT/$case.out" 2>"$OUT/$case.err") &
    JOBPID=$!
    for ((i = 0; i < 1200; i++)); do
      [ "$(grep -c '^up ' "$OUT/$case.out" || true)" -ge 16 ] && break
      kill -0 "$JOBPID" 2>/dev/null || die "$case: the job ended early: $(tail -5 "$OUT/$case.err")"
      sleep 0.1
    done
    [ "$(grep -c '^up ' "$OUT/$case.out" || true)" -ge 16 ] || die "$case: not every rank started"
    sleep 0.5
    # The by-hand loop: eu-stack on every rank's pid, on its host, in parallel.
    "${HEAD[@]}" "$GORUN" status --jobs-dir "$JOBS" --json |
      "$PY" -c 'import json,sys; [print(r["host"], r["pid"]) for r in json.load(sys.stdin)["ranks"]]' >"$BIN/pids"
    {
      echo '#!/bin/sh'
      while read -r h pid; do
        if [ "$where" = local ]; then echo "eu-stack -p $pid >/dev/null 2>&1 &"; else
          echo "ssh -F $TESTHOSTS_SSH_CONFIG $h eu-stack -p $pid >/dev/null 2>&1 &"; fi
      done <"$BIN/pids"
      echo wait
    } >"$BIN/byhand.sh"
    "${HEAD[@]}" "$GORUN" stacks --jobs-dir "$JOBS" >"$OUT/$case.verdict.txt" 2>&1 || true
    "${HEAD[@]}" "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
      --json "$OUT/$case.json" --tag "$case" \
      "gorun=$GORUN stacks --jobs-dir $JOBS" "by-hand=/bin/sh $BIN/byhand.sh" >>"$OUT/summary.tsv" || true
    touch "$BIN/release"
    "$PY" -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDWR|os.O_NONBLOCK); os.write(fd, b"x")' "$BIN/fifo"
    wait "$JOBPID" || echo "WARNING: $case: the job exited $? after its release" | tee -a "$OUT/checks.txt" >&2
    JOBPID=""
    grep -q "verdict: rank 6 on" "$OUT/$case.verdict.txt" ||
      echo "WARNING: $case: the verdict does not name rank 6" | tee -a "$OUT/checks.txt" >&2
  done
done

echo
echo "## gorun stacks against eu-stack by hand (ms: median (min-max) of $RUNS runs)"
"$PY" "$BENCH/table.py" --pair "$OUT"/*-*.json | tee "$OUT/table.md"
echo
for f in "$OUT"/*.verdict.txt; do echo "### $(basename "$f" .verdict.txt)"; cat "$f"; done | tee "$OUT/verdicts.md"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw results: $OUT"

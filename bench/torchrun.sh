#!/usr/bin/env bash
# torchrun.sh - a torch no-op job (torch_noop.py: join the gloo group, one barrier,
# leave), whole command from start to exit, under gorun and under torchrun, side by
# side in one run (interleaved, as timecmp.py runs them):
#
#   1x2  one node, 2 ranks:
#        gorun -np 2 python3 torch_noop.py
#        gorun --nnodes 1 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:PORT ...  (per-node launch)
#        torchrun --standalone --nproc_per_node 2 torch_noop.py                   (its defaults)
#        torchrun --standalone --monitor_interval 0.1 --nproc_per_node 2 ...      (polls 50x as often)
#        direct: the same python processes started by a shell, env set by hand (no
#        launcher at all): the floor, which includes torch's own costs (import, and
#        TCPStore's 1 s retry when a rank connects before rank 0's store listens)
#   2x2  two "nodes" on this machine, 2 ranks each: two launcher processes that meet at
#        127.0.0.1:PORT (torch_nodes.sh), torchrun with --rdzv_backend c10d (defaults, and
#        --monitor_interval 0.1) against two gorun in per-node launch
#
# torchrun is Debian's (torch 1.13), run through torchrun_fix.py, which mends its
# crash under Python 3.11 and changes nothing else (see that file). gorun's per-node
# launch is timed only where this gorun has it: a one-node probe must see WORLD_SIZE 1
# with --nproc-per-node 1; otherwise those rows say why they are missing.
#
# Before timing, every command runs once with BENCH_CHECK=1 and must print
# "noop WORLD_SIZE" (2 or 4); a mismatch is printed as a WARNING and the case is timed
# anyway.
#
# Usage: bench/torchrun.sh          (from anywhere)
# Env:   RUNS     timed runs per command (default 10), after WARMUP (default 1)
#        TIMEOUT  per-run limit in seconds (default 60: torchrun's default monitor
#                 interval alone costs about 5 s); a run over it is killed with its
#                 process tree and counted as a hang
#        PARTS    which cases (default "1x2 2x2")
#        OUT      results folder (default bench/results/torchrun-DATE)
# Output: a markdown table on stdout and in OUT/table.md (medians; gorun/torchrun is
# gorun's median over torchrun's); raw per-run JSON in OUT.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-10}
WARMUP=${WARMUP:-1}
TIMEOUT=${TIMEOUT:-60}
PARTS=${PARTS:-"1x2 2x2"}
OUT=${OUT:-$BENCH/results/torchrun-$(date +%Y%m%d-%H%M%S)}
PY=/usr/bin/python3 # Debian's, the one with python3-torch
if ! "$PY" -c 'import torch.distributed' 2>/dev/null; then
  echo "torchrun.sh: $PY cannot import torch.distributed: apt-get install python3-torch" >&2
  exit 1
fi

echo "building gorun..." >&2
(cd "$ROOT" && CGO_ENABLED=0 go build -o bench/.bin/gorun ./cmd/gorun) # as make build does
GORUN=$BENCH/.bin/gorun
export GORUN PY
NOOP=$BENCH/torch_noop.py
TR="$PY $BENCH/torchrun_fix.py"
NODES=$BENCH/torch_nodes.sh

mkdir -p "$OUT"
{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "gorun: $($GORUN --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "torch: $("$PY" -c 'import sys, torch; print(torch.__version__, "on Python", sys.version.split()[0])')"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP TIMEOUT=$TIMEOUT PARTS='$PARTS'"
} > "$OUT/env.txt"
cat "$OUT/env.txt"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# Run from a scratch folder: gorun reads ./gorun.toml, and torchrun writes nothing here.
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH"

# Does this gorun have per-node launch? One node of one rank must be a world of 1:
# a gorun that does not know the flags' meaning runs its default, a rank per slot.
PERNODE=""
probe=$(GORUN_RDZV_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') timeout 30 "$GORUN" --jobs-dir off --nnodes 1 --nproc-per-node 1 \
  --rdzv-endpoint 127.0.0.1:29499 --rdzv-id probe sh -c 'echo "$WORLD_SIZE"' 2>"$OUT/pernode-probe.err") || true
if [ "$probe" = 1 ]; then
  PERNODE=1
else
  why="its ranks printed WORLD_SIZE '$(printf '%s' "$probe" | paste -sd' ')', want '1' ($OUT/pernode-probe.err)"
  echo "note: gorun's per-node launch is left out: $why" | tee "$OUT/pernode-skipped.txt"
fi

# check LABEL WANT CMD...: one run with BENCH_CHECK=1 that must print "noop WANT".
check() {
  local label=$1 want=$2
  shift 2
  local got
  got=$(BENCH_CHECK=1 timeout "$TIMEOUT" "$@" 2>"$OUT/check-$label.err" | grep '^noop ' || true)
  if [ "$got" != "noop $want" ]; then
    echo "WARNING: $label printed '$got', want 'noop $want' (stderr: $OUT/check-$label.err)" | tee -a "$OUT/checks.txt"
  fi
}

for part in $PARTS; do
  cmds=()
  case $part in
  1x2)
    cmds+=("direct=$NODES direct 1 2 $NOOP")
    cmds+=("gorun=$GORUN --jobs-dir off -np 2 $PY $NOOP")
    [ -n "$PERNODE" ] && cmds+=("gorun-pernode=$NODES gorun 1 2 $PY $NOOP")
    cmds+=("torchrun=$TR --standalone --nnodes 1 --nproc_per_node 2 $NOOP")
    cmds+=("torchrun-mon0.1=$TR --standalone --nnodes 1 --monitor_interval 0.1 --nproc_per_node 2 $NOOP")
    want=2
    ;;
  2x2)
    cmds+=("direct=$NODES direct 2 2 $NOOP")
    [ -n "$PERNODE" ] && cmds+=("gorun-pernode=$NODES gorun 2 2 $PY $NOOP")
    cmds+=("torchrun=$NODES torchrun 2 2 $NOOP")
    cmds+=("torchrun-mon0.1=$NODES torchrun 2 2 --monitor_interval 0.1 $NOOP")
    want=4
    ;;
  *)
    echo "torchrun.sh: no case $part (1x2, 2x2)" >&2
    exit 2
    ;;
  esac
  echo "case $part: checking..." >&2
  for c in "${cmds[@]}"; do
    # shellcheck disable=SC2086 # the commands are split on blanks, as timecmp.py splits them
    check "$part-${c%%=*}" "$want" ${c#*=}
  done
  echo "case $part: timing..." >&2
  "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
    --json "$OUT/torch-$part.json" --tag "$part" "${cmds[@]}" >> "$OUT/summary.tsv" || true
done

echo
echo "## A torch no-op job (gloo init, barrier): gorun against torchrun"
echo
"$PY" "$BENCH/torchrun_table.py" "$OUT"/torch-*.json | tee "$OUT/table.md"
[ -n "$PERNODE" ] || sed 's/^note: \(.*\)/(\1)/' "$OUT/pernode-skipped.txt" | tee -a "$OUT/table.md"
echo
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw results: $OUT"

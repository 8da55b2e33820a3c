#!/usr/bin/env bash
# startcost.sh - what starting one process costs on gorun's launch path, side by
# side in one run: /bin/true (the fork+exec floor), the smallest Go program, the same
# with hashicorp/go-plugin linked (gRPC, protobuf, net/rpc: package initialisation
# that every gorun process pays, head and agent alike, used or not), `gorun
# --version`, `gorun -np 1 /bin/true` and `mpiexec.hydra -n 1 /bin/true`.
#
# A local job starts two gorun processes (the head and the agent, one after the
# other), so each millisecond of a gorun process's start is about two of
# `gorun -np 1`'s wall time; GODEBUG=inittrace=1 gorun --version names the packages.
#
# Usage: bench/startcost.sh     (from anywhere; `make bench-startcost` calls it)
# Env:   RUNS (default 40), WARMUP (default 3), OUT (results folder, default
#        bench/results/startcost-DATE)
# Output: a markdown table on stdout; raw per-run JSON in OUT.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-40}
WARMUP=${WARMUP:-3}
OUT=${OUT:-$BENCH/results/startcost-$(date +%Y%m%d-%H%M%S)}
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "startcost.sh: needs python3" >&2; exit 1; }
HYDRA=$(command -v mpiexec.hydra || true)
[ -n "$HYDRA" ] || { echo "startcost.sh: MPICH's mpiexec.hydra not found (apt-get install mpich)" >&2; exit 1; }

mkdir -p "$OUT" "$BENCH/.bin"
echo "building..." >&2
(
  cd "$ROOT"
  CGO_ENABLED=0 go build -o bench/.bin/gorun ./cmd/gorun # as make build does (without cgo)
  CGO_ENABLED=0 go build -o bench/.bin/hello bench/startcost/hello.go
  CGO_ENABLED=0 go build -o bench/.bin/hello-goplugin bench/startcost/goplugin.go
)
B=$BENCH/.bin
{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "go: $(go version)"
  echo "gorun: $($B/gorun --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "binaries (bytes): hello $(stat -c %s $B/hello), hello-goplugin $(stat -c %s $B/hello-goplugin), gorun $(stat -c %s $B/gorun)"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP"
} > "$OUT/env.txt"
cat "$OUT/env.txt"

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH" # no gorun.toml of ours is found here

"$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout 10 --json "$OUT/startcost.json" \
  "true=/bin/true" \
  "go-hello=$B/hello" \
  "go-hello+go-plugin=$B/hello-goplugin" \
  "gorun-version=$B/gorun --version" \
  "gorun-np1=$B/gorun --jobs-dir $SCRATCH/jobs -np 1 /bin/true" \
  "hydra-np1=$HYDRA -n 1 /bin/true" > "$OUT/summary.tsv"

echo
echo "## Process start (ms: median (min-max) of $RUNS interleaved runs; the 'over true' column subtracts /bin/true's median)"
echo "| command | ms | over /bin/true |"
echo "|---|---|---|"
awk -F'\t' 'NR==1 {t=$2} {printf "| %s | %.2f (%.2f-%.2f) | %+.2f |\n", $1, $2*1000, $3*1000, $4*1000, ($2-t)*1000}' "$OUT/summary.tsv"
echo
echo "raw results: $OUT"

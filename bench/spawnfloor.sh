#!/usr/bin/env bash
# spawnfloor.sh - the floor of starting N processes on this machine: N /bin/true
# started from C (spawnfloor/spawnfloor.c: posix_spawn, posix_spawn with
# POSIX_SPAWN_USEVFORK, vfork+execve, fork+execve; from 1 thread and from T threads
# splitting N) and from Go (spawnfloor/gospawn: exec.Cmd.Start, os.StartProcess,
# syscall.ForkExec; from 1 goroutine and from G goroutines), then all reaped.
#
# Each program times itself (CLOCK_MONOTONIC, Go's monotonic clock): from the start
# of its spawn loop to the last child started ("spawn") and to the last child reaped
# ("+reap"), and its own CPU and its children's over that time (getrusage). This is
# what gorun's agent's fork loop could reach with each method, without the rest of a
# launch (pipes, environment, PMI, the head); the CPU table says how much of it is the
# machine's CPUs being full.
#
# Usage: bench/spawnfloor.sh     (from anywhere)
# Env:   RUNS     timed rounds (default 30), after WARMUP rounds (default 2); each
#                 round runs every variant once per N, in an order rotated by round
#        N_LIST   process counts (default "1 8 32 64")
#        T_LIST   threads of the C variants beside 1 (default "2")
#        G_LIST   goroutines of the Go variants beside 1 (default "2 8")
#        OUT      results folder (default bench/results/spawnfloor-DATE)
# Output: markdown tables on stdout and in OUT/table.md; every run in OUT/raw.tsv.
# Needs:  gcc, Go, python3.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-30}
WARMUP=${WARMUP:-2}
N_LIST=${N_LIST:-"1 8 32 64"}
T_LIST=${T_LIST:-"2"}
G_LIST=${G_LIST:-"2 8"}
OUT=${OUT:-$BENCH/results/spawnfloor-$(date +%Y%m%d-%H%M%S)}
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "spawnfloor.sh: needs python3" >&2; exit 1; }
CC=${CC:-gcc}
command -v "$CC" >/dev/null || { echo "spawnfloor.sh: needs a C compiler ($CC)" >&2; exit 1; }

mkdir -p "$OUT" "$BENCH/.bin"
echo "building..." >&2
B=$BENCH/.bin
"$CC" -O2 -Wall -Wextra -pthread -o "$B/spawnfloor-c" "$BENCH/spawnfloor/spawnfloor.c"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$B/spawnfloor-go" ./bench/spawnfloor/gospawn)

# The variants, one command each (N is appended as the programs expect it).
VARIANTS=("c spawn 1" "c usevfork 1" "c vfork 1" "c fork 1")
for t in $T_LIST; do VARIANTS+=("c spawn $t" "c vfork $t" "c fork $t"); done
VARIANTS+=("go cmd 1" "go startprocess 1" "go forkexec 1")
for g in $G_LIST; do VARIANTS+=("go cmd $g" "go forkexec $g"); done

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "go: $(go version)"
  echo "libc: $(ldd --version 2>&1 | head -1)"
  echo "cc: $("$CC" --version | head -1)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP N_LIST='$N_LIST' T_LIST='$T_LIST' G_LIST='$G_LIST'"
  echo "variants: ${#VARIANTS[@]}"
} > "$OUT/env.txt"
cat "$OUT/env.txt"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

# one VARIANT N: run it once, print its TSV line.
one() {
  local lang meth par
  read -r lang meth par <<<"$1"
  if [ "$lang" = c ]; then
    "$B/spawnfloor-c" "$meth" "$2" "$par"
  else
    "$B/spawnfloor-go" -method "$meth" -n "$2" -g "$par"
  fi
}

: > "$OUT/raw.tsv"
fails=0
nv=${#VARIANTS[@]}
for ((r = 0; r < WARMUP + RUNS; r++)); do
  [ $((r % 10)) = 0 ] && echo "round $r of $((WARMUP + RUNS))..." >&2
  for n in $N_LIST; do
    for ((i = 0; i < nv; i++)); do
      v=${VARIANTS[$(((i + r) % nv))]}
      if ! line=$(one "$v" "$n" </dev/null 2>>"$OUT/errors.txt"); then
        fails=$((fails + 1))
        continue
      fi
      [ "$r" -ge "$WARMUP" ] && printf '%d\t%s\n' "$((r - WARMUP))" "$line" >> "$OUT/raw.tsv"
    done
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

echo
echo "## Spawn floor, /bin/true (ms, median of $RUNS interleaved rounds after $WARMUP warm-ups)"
echo
"$PY" "$BENCH/spawnfloor/table.py" "$OUT/raw.tsv" | tee "$OUT/table.md"
if [ "$fails" -gt 0 ]; then
  echo
  echo "$fails runs failed (left out; OUT/errors.txt says why)"
fi
echo
echo "raw results: $OUT"

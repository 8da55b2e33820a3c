#!/usr/bin/env bash
# launch.sh - launch time of `gorun -np K /bin/true` against Open MPI's mpirun and
# MPICH's mpiexec.hydra, side by side in one run, plus gorun's peak RSS at K=64.
#
# gorun runs as users run it (publishing the job for gorun ps, status and stacks: a job
# file and a TLS socket), and a second table puts it against --jobs-dir off, to show what
# publishing costs.
#
# Usage: bench/launch.sh            (from anywhere; `make bench` calls it)
# Env:   RUNS     timed runs per tool and K (default 20), after WARMUP (default 2)
#        KS       rank counts (default "1 8 32 64")
#        TIMEOUT  per-run limit in seconds; a run over it is killed and counted as
#                 a hang (default 10: Open MPI's mpirun hangs in some runs at K>=32)
#        RSS_NP   ranks for the memory/phase probe (default 64), RSS_RUNS (default 10)
#        OUT      results folder (default bench/results/launch-DATE)
#        BEFORE   another gorun binary (an earlier build) to run in the same rounds, as
#                 "before"; its gorun-tools must sit next to it
# Output: a markdown table on stdout; raw per-run JSON in OUT.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-20}
WARMUP=${WARMUP:-2}
KS=${KS:-"1 8 32 64"}
TIMEOUT=${TIMEOUT:-10}
RSS_NP=${RSS_NP:-64}
RSS_RUNS=${RSS_RUNS:-10}
OUT=${OUT:-$BENCH/results/launch-$(date +%Y%m%d-%H%M%S)}
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "launch.sh: needs python3" >&2; exit 1; }

# Peers. Debian: openmpi-bin gives mpirun.openmpi (and the mpirun alternative),
# mpich gives mpiexec.hydra.
OMPI=$(command -v mpirun.openmpi || true)
if [ -z "$OMPI" ] && command -v mpirun >/dev/null && mpirun --version 2>&1 | grep -q "Open MPI"; then
  OMPI=$(command -v mpirun)
fi
HYDRA=$(command -v mpiexec.hydra || true)
if [ -z "$OMPI" ] || [ -z "$HYDRA" ]; then
  [ -n "$OMPI" ] || echo "launch.sh: Open MPI's mpirun (mpirun.openmpi) not found" >&2
  [ -n "$HYDRA" ] || echo "launch.sh: MPICH's mpiexec.hydra not found" >&2
  echo "launch.sh: install the peers with: apt-get install openmpi-bin mpich" >&2
  exit 1
fi
# Open MPI refuses to run as root without this flag; harmless otherwise.
OMPI_ARGS="--oversubscribe"
[ "$(id -u)" = 0 ] && OMPI_ARGS="$OMPI_ARGS --allow-run-as-root"

echo "building gorun..." >&2
# As make build and go install build it: with cgo (for NVML) where Go finds a C compiler.
(cd "$ROOT" && go build -o bench/.bin/gorun ./cmd/gorun)
GORUN=$BENCH/.bin/gorun
if [ -n "${BEFORE:-}" ] && [ ! -x "$BEFORE" ]; then
  echo "launch.sh: BEFORE=$BEFORE: not an executable" >&2
  exit 1
fi

mkdir -p "$OUT"
{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "go: $(go version)"
  dirty=$(git -C "$ROOT" --no-optional-locks status --porcelain -uno -- . ":(exclude)bench" 2>/dev/null | wc -l)
  echo "gorun: $($GORUN --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?) ($dirty files changed since)"
  [ -z "${BEFORE:-}" ] || echo "before: $BEFORE: $("$BEFORE" --version 2>&1 | head -1)"
  echo "openmpi: $OMPI: $("$OMPI" --version 2>&1 | head -1)"
  echo "mpich: $HYDRA: $("$HYDRA" --version 2>&1 | grep -m1 -i 'version')"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP KS='$KS' TIMEOUT=$TIMEOUT"
} > "$OUT/env.txt"
cat "$OUT/env.txt"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# Run from a scratch folder: gorun reads ./gorun.toml, and no launcher should find
# anything of ours in its working directory. (timecmp.py drops GORUN_* variables.)
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH"

echo
echo "## Launch time, /bin/true (ms: median (min-max) of $RUNS runs, interleaved, after $WARMUP warm-ups; per-run timeout ${TIMEOUT}s)"
for k in $KS; do
  echo "K=$k..." >&2
  "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
    --json "$OUT/launch-np$k.json" --tag "np$k" \
    "gorun=$GORUN --jobs-dir $SCRATCH/jobs -np $k /bin/true" \
    ${BEFORE:+"before=$BEFORE --jobs-dir $SCRATCH/jobs -np $k /bin/true"} \
    "openmpi=$OMPI $OMPI_ARGS -np $k /bin/true" \
    "mpich=$HYDRA -n $k /bin/true" >> "$OUT/summary.tsv" || true
done
echo
"$PY" "$BENCH/table.py" "$OUT"/launch-np*.json | tee "$OUT/table.md"

# The job socket's cost, in rounds of their own: whichever command follows the peers in
# a round runs about 2 ms slower here (measured), which would be charged to one of them.
echo
echo "## The job socket: gorun against gorun --jobs-dir off (ms: median (min-max) of $RUNS runs)"
for k in $KS; do
  "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
    --json "$OUT/jobs-np$k.json" --tag "jobs-np$k" \
    "gorun=$GORUN --jobs-dir $SCRATCH/jobs -np $k /bin/true" \
    "gorun-nojobs=$GORUN --jobs-dir off -np $k /bin/true" >> "$OUT/summary.tsv" || true
done
"$PY" "$BENCH/table.py" --jobs "$OUT"/jobs-np*.json | tee -a "$OUT/table.md"

echo
echo "## gorun memory and phases, -np $RSS_NP ($RSS_RUNS runs)"
GNUTIME=""
if [ -x /usr/bin/time ] && /usr/bin/time -f %M true >/dev/null 2>&1; then GNUTIME=/usr/bin/time; fi
[ -n "$GNUTIME" ] || echo "(GNU time not installed: no whole-process %M; apt-get install time)"
"$PY" "$BENCH/rss.py" --gorun "$GORUN" --np "$RSS_NP" --runs "$RSS_RUNS" --timeout "$TIMEOUT" \
  --time "$GNUTIME" --json "$OUT/rss-np$RSS_NP.json" | tee "$OUT/rss.md" || true

echo
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw results: $OUT"

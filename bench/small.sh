#!/usr/bin/env bash
# small.sh - the time of one small allreduce (default 4 KiB, float32 sum) on this host,
# Open MPI against one or more gorun builds side by side, in interleaved rounds: the
# small-message check of issue 20 (point 3) and of any change to the collectives' fixed
# cost, where coll.sh's sweep is too coarse to tell builds apart.
#
#   per round, for each rank count in NPS, two measures:
#     blocks    the median block's slowest-rank mean time per call: Open MPI's
#               allreduce.c with its defaults (warm-up, probe, blocks of 0.25 s), gorun
#               bench --min-time 0.25s --blocks 7 -w 3
#     mean      the mean time per call over 5,000 calls after 500 warm-up ones
#               (allreduce.c -w 500 -r 1 -m 5000; gorun bench --iters 5000 -w 500)
#   of:
#     openmpi   bench/coll/allreduce.c built with mpicc.openmpi, under mpirun.openmpi
#     LABEL     for each LABEL=BINARY in GORUNS: BINARY bench allreduce -np N, its ranks
#               with the Go runtime's default GOMAXPROCS (the host's CPUs: what a
#               user's rank that sets nothing gets), and LABEL-tuned: the same without
#               it, where gorun bench's ranks take the CPUs per local rank
#
# Usage: bench/small.sh                         (gorun built from this checkout as "gorun")
#        GORUNS="before=/var/tmp/old/gorun after=/var/tmp/new/gorun" bench/small.sh
#                                               (each gorun with its gorun-tools beside it)
# Env:   NPS      rank counts (default "2 4"; 4 ranks on this 2-vCPU box is oversubscribed)
#        ROUNDS   rounds (default 7)
#        SIZE     message size (default 4K)
#        OUT      results folder (default bench/results/small-DATE)
# Output: one line per run on stderr as it goes; a markdown table (median over rounds,
#        all rounds sorted, ratio to Open MPI in the same measure) on stdout and in
#        OUT/table.md; every figure in OUT/runs.tsv (np, peer, round, time_us).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
NPS=${NPS:-"2 4"}
ROUNDS=${ROUNDS:-7}
SIZE=${SIZE:-4K}
OUT=${OUT:-$BENCH/results/small-$(date +%Y%m%d-%H%M%S)}
BIN=$BENCH/.bin/small
die() { echo "small.sh: $*" >&2; exit 1; }

OMPI=$(command -v mpirun.openmpi || true)
MPICC=$(command -v mpicc.openmpi || true)
{ [ -n "$OMPI" ] && [ -n "$MPICC" ]; } || die "needs Open MPI: apt-get install openmpi-bin libopenmpi-dev"
command -v go >/dev/null || die "needs go"
mkdir -p "$BIN" "$OUT"
"$MPICC" -O2 -o "$BIN/allreduce.openmpi" "$BENCH/coll/allreduce.c"
if [ -z "${GORUNS:-}" ]; then
  # As make build: gorun with cgo where Go finds a C compiler, and gorun-tools (the
  # ranks of gorun bench) next to it, from the same tree.
  (cd "$ROOT" && go build -o "$BIN/gorun" ./cmd/gorun && CGO_ENABLED=0 go build -o "$BIN/gorun-tools" ./cmd/gorun-tools)
  GORUNS="gorun=$BIN/gorun"
fi
for g in $GORUNS; do [ -x "${g#*=}" ] || die "$g: not an executable"; done
ROOTFLAG=""
[ "$(id -u)" != 0 ] || ROOTFLAG="--allow-run-as-root"
SCRATCH=$(mktemp -d) # gorun reads ./gorun.toml: run where there is none
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH"

: > "$OUT/runs.tsv"
{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "openmpi: $("$OMPI" --version 2>&1 | head -1)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "settings: NPS='$NPS' ROUNDS=$ROUNDS SIZE=$SIZE GORUNS='$GORUNS'"
} > "$OUT/env.txt"

# time_us of the first data row of allreduce.c's CSV, or of gorun bench's --csv.
ompi_time() { grep -E '^[0-9]+,' | head -1 | cut -d, -f4; }
gorun_time() { awk -F, 'NR == 2 { print $7 }'; }

CPUS=$(nproc)
for r in $(seq "$ROUNDS"); do
  for np in $NPS; do
    for m in blocks mean; do
      if [ "$m" = blocks ]; then ompt=""; gopt="--min-time 0.25s --blocks 7 -w 3"
      else ompt="-w 500 -r 1 -m 5000 -s 1G -t 1000"; gopt="--iters 5000 -w 500 --blocks 1"; fi
      t=$("$OMPI" $ROOTFLAG --oversubscribe -np "$np" "$BIN/allreduce.openmpi" -b "$SIZE" -e "$SIZE" $ompt 2>/dev/null | ompi_time || true)
      printf '%s\topenmpi/%s\t%s\t%s\n' "$np" "$m" "$r" "${t:-fail}" | tee -a "$OUT/runs.tsv" >&2
      for g in $GORUNS; do
        for tuned in "" -tuned; do
          x="-x GOMAXPROCS=$CPUS"
          [ -z "$tuned" ] || x=""
          t=$("${g#*=}" bench allreduce -np "$np" $x -b "$SIZE" -e "$SIZE" $gopt --csv - 2>/dev/null | gorun_time || true)
          printf '%s\t%s%s/%s\t%s\t%s\n' "$np" "${g%%=*}" "$tuned" "$m" "$r" "${t:-fail}" | tee -a "$OUT/runs.tsv" >&2
        done
      done
    done
  done
done

python3 - "$OUT/runs.tsv" "$SIZE" <<'EOF' | tee "$OUT/table.md"
import collections, statistics, sys
runs = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    np, peer, _, t = line.rstrip("\n").split("\t")
    if (np, peer) not in runs:
        order.append((np, peer))
    if t != "fail":
        runs[(np, peer)].append(float(t))
print(f"{sys.argv[2]} allreduce, float32 sum, time per call in us (median over rounds; all rounds sorted); peer/blocks: median block; peer/mean: mean of 5,000 calls\n")
print("| ranks | peer | median | ratio to Open MPI | rounds |")
print("|---|---|---|---|---|")
for np, peer in order:
    ts = sorted(runs[(np, peer)])
    if not ts:
        print(f"| {np} | {peer} | failed | - | - |")
        continue
    med = statistics.median(ts)
    measure = peer.rsplit("/", 1)[-1]
    base = runs.get((np, "openmpi/" + measure))
    ratio = f"{med / statistics.median(base):.2f}x" if base and not peer.startswith("openmpi") else "-"
    print(f"| {np} | {peer} | {med:.2f} | {ratio} | {' '.join(f'{t:.2f}' for t in ts)} |")
EOF

#!/usr/bin/env bash
# slurm.sh - start-up time of a job inside a Slurm allocation: `gorun -N 1
# true` across 2 nodes of a real Slurm cluster on this machine (package
# slurmtest: slurmctld, one slurmd per node), which starts the other node's
# agent through one srun step that connects back to the head (TLS 1.3,
# pinned head certificate, agent proof bound to the session). With OLD set
# to another gorun binary (for example one built from an earlier commit),
# both run interleaved in the same allocation and the table gives the
# ratio.
#
# Usage: bench/slurm.sh                 (as root; builds ./gorun with make build)
# Env:   RUNS     timed runs per binary (default 20), after 2 warm-up runs each
#        OLD      another gorun binary to compare with (default: none)
#        STATE    the cluster's state folder (default bench/.state/slurm, gitignored)
#        OUT      results folder (default bench/results/slurm-DATE)
# Output: a markdown table on stdout and in OUT/table.md; raw times in OUT/times.txt.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-20}
OLD=${OLD:-}
STATE=${STATE:-$BENCH/.state/slurm}
OUT=${OUT:-$BENCH/results/slurm-$(date +%Y%m%d-%H%M%S)}
[ "$(id -u)" = 0 ] || { echo "slurm.sh: needs root (slurmctld, slurmd, munged)" >&2; exit 1; }
mkdir -p "$OUT" "$STATE"
(cd "$ROOT" && make -s build >/dev/null)
NEW=$ROOT/gorun
go build -o "$STATE/slurmtest" "$ROOT/slurmtest/cmd/slurmtest"
"$STATE/slurmtest" --state "$STATE/cluster" up --gpus 0 2 >/dev/null
trap '"$STATE/slurmtest" --state "$STATE/cluster" down >/dev/null 2>&1 || true' EXIT
eval "$("$STATE/slurmtest" --state "$STATE/cluster" env)"

script=$OUT/job.sbatch
cat >"$script" <<EOF
#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --output=$OUT/job.out
set -u
bins="$NEW${OLD:+ $OLD}"
for b in \$bins; do for w in 1 2; do \$b -N 1 true >/dev/null || exit 1; done; done
for i in \$(seq $RUNS); do
  for b in \$bins; do
    s=\$(date +%s%N); \$b -N 1 true >/dev/null || { echo "FAIL \$b"; exit 1; }; e=\$(date +%s%N)
    echo "\$b \$(( (e - s) / 1000 ))"
  done
done
EOF
sbatch --wait "$script" >/dev/null
grep -v '^FAIL' "$OUT/job.out" >"$OUT/times.txt" || true
python3 - "$OUT/times.txt" "$NEW" "$OLD" <<'EOF' | tee "$OUT/table.md"
import statistics, sys
path, new, old = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {}
for line in open(path):
    f = line.split()
    if len(f) == 2:
        runs.setdefault(f[0], []).append(int(f[1]) / 1000)
print("| binary | runs | min ms | median ms | max ms |")
print("|---|---|---|---|---|")
for b, label in ((new, "gorun (this tree)"), (old, "OLD")):
    if b and b in runs:
        v = runs[b]
        print(f"| {label} | {len(v)} | {min(v):.1f} | {statistics.median(v):.1f} | {max(v):.1f} |")
if old and old in runs and new in runs:
    print(f"\nratio of medians (this tree / OLD): {statistics.median(runs[new]) / statistics.median(runs[old]):.3f}")
EOF

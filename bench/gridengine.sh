#!/usr/bin/env bash
# gridengine.sh - start-up time of a 2-host job inside a Grid Engine job:
# `gorun -np 2 true` against MPICH's `mpiexec.hydra -launcher sge -n 2 true`,
# in one `qsub -pe gorun 2` job of a real Grid Engine cluster on this machine
# (package gridenginetest: sge_qmaster and two sge_execd, node01 and node02,
# one slot each). Both read the hosts from $PE_HOSTFILE and start the other
# host's side (gorun's agent, Hydra's proxy) through `qrsh -inherit HOST`,
# Grid Engine's tight integration; they run in turn, in the same rounds, in
# the same job script.
#
# Usage: bench/gridengine.sh            (as root; builds ./gorun with make build)
# Env:   RUNS     timed runs per launcher (default 20), after 2 warm-up runs each
#        STATE    the cluster's state folder (default bench/.state/gridengine, gitignored)
#        OUT      results folder (default bench/results/gridengine-DATE)
# Output: a markdown table on stdout and in OUT/table.md; raw times (microseconds)
#        in OUT/times.txt, the job script in OUT/job.sh, its output in OUT/job.out,
#        the machine and the load in OUT/machine.txt.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-20}
STATE=${STATE:-$BENCH/.state/gridengine}
OUT=${OUT:-$BENCH/results/gridengine-$(date +%Y%m%d-%H%M%S)}
[ "$(id -u)" = 0 ] || { echo "gridengine.sh: needs root (namespaces, sge_execd)" >&2; exit 1; }
command -v mpiexec.hydra >/dev/null || { echo "gridengine.sh: needs mpiexec.hydra (apt-get install mpich)" >&2; exit 1; }
mkdir -p "$OUT" "$STATE"
(cd "$ROOT" && make -s build >/dev/null)
GORUN=$ROOT/gorun
HYDRA=$(command -v mpiexec.hydra)
go build -o "$STATE/gridenginetest" "$ROOT/gridenginetest/cmd/gridenginetest"
"$STATE/gridenginetest" --state "$STATE/cluster" up --slots 1 2 >/dev/null
trap '"$STATE/gridenginetest" --state "$STATE/cluster" down >/dev/null 2>&1 || true' EXIT
eval "$("$STATE/gridenginetest" --state "$STATE/cluster" env)"
{
	echo "date: $(date -u +%FT%TZ)"
	echo "kernel: $(uname -r), $(nproc) CPUs"
	echo "gorun: $GORUN ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown))"
	echo "hydra: $HYDRA ($("$HYDRA" -info 2>/dev/null | awk -F: '/Version:/ {gsub(/ /, "", $2); print $2; exit}'))"
	echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/machine.txt"

script=$OUT/job.sh
cat >"$script" <<EOF
#!/bin/bash
# One slot on each of node01 and node02 (qsub -pe gorun 2).
set -u
cd "$OUT"
gorun() { "$GORUN" -np 2 "\$@"; }
hydra() { "$HYDRA" -launcher sge -n 2 "\$@"; }
# Both start one process on each host.
for l in gorun hydra; do
  echo "hosts \$l \$(\$l hostname </dev/null | sort | tr '\n' ' ')"
done
for l in gorun hydra; do for w in 1 2; do \$l true </dev/null >/dev/null || exit 1; done; done
for i in \$(seq $RUNS); do
  for l in gorun hydra; do
    s=\$(date +%s%N); \$l true </dev/null >/dev/null || { echo "FAIL \$l"; exit 1; }; e=\$(date +%s%N)
    echo "\$l \$(( (e - s) / 1000 ))"
  done
done
EOF
chmod +x "$script"
qsub -sync y -pe gorun 2 -wd "$OUT" -o "$OUT/job.out" -j y "$script" >"$OUT/qsub.out"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
for l in gorun hydra; do
	grep -qx "hosts $l node01 node02 " "$OUT/job.out" || { echo "gridengine.sh: $l did not run on node01 and node02:" >&2; cat "$OUT/job.out" >&2; exit 1; }
done
grep -E '^(gorun|hydra) [0-9]+$' "$OUT/job.out" >"$OUT/times.txt" || true
python3 - "$OUT/times.txt" "$RUNS" <<'EOF' | tee "$OUT/table.md"
import statistics, sys
path, want = sys.argv[1], int(sys.argv[2])
runs = {}
for line in open(path):
    f = line.split()
    runs.setdefault(f[0], []).append(int(f[1]) / 1000)
if any(len(runs.get(l, [])) != want for l in ("gorun", "hydra")):
    sys.exit(f"gridengine.sh: want {want} runs of each, got { {l: len(v) for l, v in runs.items()} }")
print("| launcher (2 hosts, qrsh -inherit) | runs | min ms | median ms | max ms |")
print("|---|---|---|---|---|")
for l, label in (("gorun", "`gorun -np 2 true`"), ("hydra", "`mpiexec.hydra -launcher sge -n 2 true`")):
    v = runs[l]
    print(f"| {label} | {len(v)} | {min(v):.1f} | {statistics.median(v):.1f} | {max(v):.1f} |")
print(f"\nratio of medians (hydra / gorun): {statistics.median(runs['hydra']) / statistics.median(runs['gorun']):.2f}")
EOF
cat "$OUT/machine.txt"

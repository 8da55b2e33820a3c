#!/usr/bin/env bash
# connectback.sh - the head's cost of N srun-started agents connecting back
# at once (TLS 1.3, pinned head certificate, agent proof bound to the
# session), N = 16 to 4096, over loopback (127.0.0.1). It runs the Go
# benchmark BenchmarkConnectBackAgents (launcher/connectback_bench_test.go):
# the real SlurmStarter listens on lo and runs "srun", which is the test
# binary standing in for all N agents in one child process; N StartAgent
# calls wait as the head's do, the agents all dial at one signal, and the
# clock stops when the last StartAgent returns. The agents run in another
# process, so the head process's getrusage delta is the head's CPU alone.
# Any refusal or failed agent fails that N (the row says FAIL, with how
# many agents failed); the script then exits non-zero after the table.
#
# Usage: bench/connectback.sh            (from anywhere; needs Go and python3)
# Env:   ITERS   iterations (jobs) per N, after one warm-up (default 3)
#        NS      agent counts (default "16 64 256 1024 2048 4096"); each
#                needs N+64 descriptors (ulimit -n) on each side
#        OUT     results folder (default bench/results/connectback-DATE)
# Output: a markdown table on stdout and in OUT/table.md; one JSON line per
#         N in OUT/results.jsonl; go test's output in OUT/bench.txt; the
#         machine (CPUs, go version, ulimit -n, somaxconn, load) in OUT/machine.txt.
set -uo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
ITERS=${ITERS:-3}
NS=${NS:-"16 64 256 1024 2048 4096"}
OUT=${OUT:-$BENCH/results/connectback-$(date +%Y%m%d-%H%M%S)}
command -v python3 >/dev/null || { echo "connectback.sh: needs python3" >&2; exit 1; }
mkdir -p "$OUT"
{
  echo "date: $(date -Is)"
  echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
  echo "go: $(go version)"
  echo "ulimit -n: $(ulimit -n)"
  echo "somaxconn: $(cat /proc/sys/net/core/somaxconn 2>/dev/null)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/machine.txt"
(cd "$ROOT" && CONNECTBACK_NS="$NS" go test -count=1 -run '^$' -bench '^BenchmarkConnectBackAgents$' \
  -benchtime "${ITERS}x" -timeout 30m ./launcher/) >"$OUT/bench.txt" 2>&1
rc=$?
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
python3 - "$OUT" "$NS" <<'EOF' | tee "$OUT/table.md"
import json, re, sys
out, ns = sys.argv[1], [int(n) for n in sys.argv[2].split()]
rows, fails = {}, {}
lines = open(f"{out}/bench.txt").read().splitlines()
for i, line in enumerate(lines):
    m = re.match(r"BenchmarkConnectBackAgents/agents=(\d+)(?:-\d+)?\s+(\d+)\s+(.*)", line)
    if m:
        n, f = int(m.group(1)), m.group(3).split()
        rows[n] = dict(iters=int(m.group(2)), **{u: float(v) for v, u in zip(f[0::2], f[1::2])})
    m = re.search(r"n=(\d+): (FAILED \d+ of \d+ agents.*?)(:?)$", line)
    if m:
        fails[int(m.group(1))] = m.group(2)
    m = re.search(r"n=(\d+): (the agents' process did not sum up.*)", line)
    if m:
        fails.setdefault(int(m.group(1)), m.group(2))
with open(f"{out}/results.jsonl", "w") as j:
    print("| N | wall ms for all | head CPU µs per agent (usr + sys) | wall ms per agent | one agent's connect p50 / max ms | agents' CPU µs per agent | jobs |")
    print("|---|---|---|---|---|---|---|")
    for n in ns:
        if n in rows:
            r = rows[n]
            rec = {"n": n, "jobs": r["iters"], "ms_all": r["ms/all"], "head_cpu_us_per_agent": r["head-cpu-us/agent"],
                   "head_usr_us_per_agent": r["head-usr-us/agent"], "head_sys_us_per_agent": r["head-sys-us/agent"],
                   "ms_per_agent": r["ms/all"] / n, "agent_p50_ms": r["agent-p50-ms"], "agent_max_ms": r["agent-max-ms"],
                   "agents_cpu_us_per_agent": r["agents-cpu-us/agent"], "ok": True}
            print(f"| {n} | {rec['ms_all']:.1f} | {rec['head_cpu_us_per_agent']:.0f} ({rec['head_usr_us_per_agent']:.0f} + {rec['head_sys_us_per_agent']:.0f}) "
                  f"| {rec['ms_per_agent']:.3f} | {rec['agent_p50_ms']:.1f} / {rec['agent_max_ms']:.1f} | {rec['agents_cpu_us_per_agent']:.0f} | {r['iters']} |")
        else:
            why = fails.get(n, "no result (see bench.txt)")
            rec = {"n": n, "ok": False, "error": why}
            print(f"| {n} | FAIL: {why} | | | | | |")
        j.write(json.dumps(rec) + "\n")
print(f"\nwall = from the agents' start to the last StartAgent returning; head CPU = the head process's getrusage over that window / N; agents' CPU = the agents' process's whole life / N. Raw: {out}")
EOF
exit $rc

#!/usr/bin/env bash
# scale_sweep.sh - gorun's launch at cluster scale, flat against tree: runs the cluster
# simulator (`bench/scale.sh --sim`) for each host count N, once with the flat launch
# (--fanout 0) and once with the tree (--fanout TREE_FANOUT), RUNS times each,
# interleaved (per N and round: flat, then tree), then tabulates and plots the medians
# with bench/scale_plot.py.
#
# Usage: bench/scale_sweep.sh
#        NS="16 256 2048" RUNS=3 bench/scale_sweep.sh
# Env:   NS           host counts (default "16 64 256 1024 2048 4096")
#        R            ranks per host (default 8)
#        TREE_FANOUT  the tree's fanout (default 32, gorun's DefaultFanout, at every N: with
#                     "auto" gorun itself picks flat up to 64 hosts)
#        RUNS         runs per N and mode (default 1); the plot and table take the median
#        TIMEOUT      per-run limit in seconds (default 600); a run over it is killed
#                     (with everything it started) and recorded as an error
#        SCALE        the benchmark to run (default bench/scale.sh)
#        SCALE_ARGS   extra arguments for every run of SCALE (default none), split on blanks
#        OUT          results folder (default bench/results/scale-DATE); an existing
#                     OUT/scale.jsonl is appended to
# Output: OUT/scale.jsonl (one JSON line per run: SCALE's last JSON line, with "run"
#         added; a run that failed, timed out or printed no JSON line becomes
#         {"hosts":N,...,"error":"..."}), OUT/logs/MODE-nN-rI.{out,err} (each run's
#         output), OUT/env.txt, OUT/table.md and OUT/scale.svg (scale_plot.py); the
#         table on stdout. A failed run does not stop the sweep.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
NS=${NS:-"16 64 256 1024 2048 4096"}
R=${R:-8}
TREE_FANOUT=${TREE_FANOUT:-32}
RUNS=${RUNS:-1}
TIMEOUT=${TIMEOUT:-600}
SCALE=${SCALE:-$BENCH/scale.sh}
SCALE_ARGS=${SCALE_ARGS:-}
OUT=${OUT:-$BENCH/results/scale-$(date +%F-%H%M)}
die() { echo "scale_sweep.sh: $*" >&2; exit 1; }

PY=$(command -v python3 || true)
[ -n "$PY" ] || die "needs python3"
command -v timeout >/dev/null || die "needs timeout (coreutils)"
[ -x "$SCALE" ] || die "$SCALE: not an executable file (SCALE= to run another)"
[[ "$R" =~ ^[1-9][0-9]*$ ]] || die "R=$R: not a positive integer"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS=$RUNS: not a positive integer"
[[ "$TIMEOUT" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "TIMEOUT=$TIMEOUT: not a number of seconds"
for n in $NS; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "NS: '$n' is not a positive integer"; done
read -r -a EXTRA <<< "$SCALE_ARGS"

mkdir -p "$OUT/logs"
JSONL=$OUT/scale.jsonl
{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  dirty=$(git -C "$ROOT" --no-optional-locks status --porcelain -uno -- . ":(exclude)bench" 2>/dev/null | wc -l)
  echo "gorun: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?) ($dirty files changed since)"
  echo "scale: $SCALE --sim --hosts N --ranks-per-host $R --fanout {0,$TREE_FANOUT} ${SCALE_ARGS}"
  echo "settings: NS='$NS' R=$R TREE_FANOUT=$TREE_FANOUT RUNS=$RUNS TIMEOUT=$TIMEOUT"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >> "$OUT/env.txt"
cat "$OUT/env.txt" >&2

# record MODE N RUN FANOUT RC OUTFILE ERRFILE WALL: append one line to $JSONL: the last
# line of OUTFILE that is a JSON object (with "run" added, "mode" where missing), or,
# when the run failed, timed out or printed none, an error line (with that line's
# fields); and finish the progress line on stderr.
record() {
  "$PY" - "$@" "$TIMEOUT" >> "$JSONL" <<'EOF'
import json, sys
mode, n, run, fanout, rc, outf, errf, wall, timeout = sys.argv[1:]
n, run, rc = int(n), int(run), int(rc)
obj = None
for line in open(outf, errors="replace"):
    line = line.strip()
    if line.startswith("{"):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if isinstance(o, dict):
            obj = o
def last_err():
    lines = [l.strip() for l in open(errf, errors="replace") if l.strip()]
    return (": " + lines[-1][:300]) if lines else ""
err = None
if rc in (124, 137):
    err = f"timeout: killed after {timeout} s"
elif rc != 0:
    err = f"exit status {rc}" + last_err()
elif obj is None:
    err = "no JSON line in the output" + last_err()
rec = dict(obj or {})
rec.setdefault("hosts", n)
rec.setdefault("mode", mode)
rec.setdefault("fanout", int(fanout) if fanout.isdigit() else fanout)
rec["run"] = run
if err and not rec.get("error"):
    rec["error"] = err
print(json.dumps(rec, separators=(",", ":")))
if rec.get("error"):
    msg = "ERROR: " + str(rec["error"])
else:
    f = lambda k: "-" if not isinstance(rec.get(k), (int, float)) else "%.3g" % rec[k]
    msg = "launch %s s, fence %s s, fail-stop %s s, head %s MB" % tuple(
        f(k) for k in ("launch_s", "fence_s", "fail_stop_s", "head_rss_mb"))
print(msg + " (%s s)" % wall, file=sys.stderr)
EOF
}

running=
trap '[ -z "$running" ] || kill -TERM "$running" 2>/dev/null; echo "scale_sweep.sh: interrupted; results so far in $OUT" >&2; exit 130' INT TERM
for n in $NS; do
  for ((i = 1; i <= RUNS; i++)); do
    for mode in flat tree; do
      if [ "$mode" = flat ]; then k=0; else k=$TREE_FANOUT; fi
      log=$OUT/logs/$mode-n$n-r$i
      cmd=("$SCALE" --sim --hosts "$n" --ranks-per-host "$R" --fanout "$k" "${EXTRA[@]}")
      echo "${cmd[*]}" > "$log.cmd"
      printf '%s N=%s run %s/%s... ' "$mode" "$n" "$i" "$RUNS" >&2
      start=$(date +%s.%N)
      rc=0
      # timeout runs SCALE in a process group of its own and kills that whole group on
      # expiry (-k: SIGKILL 10 s after the SIGTERM); in the background, so that a ^C
      # here reaches it through the trap below.
      timeout -k 10 "$TIMEOUT" "${cmd[@]}" < /dev/null > "$log.out" 2> "$log.err" &
      running=$!
      wait "$running" || rc=$?
      running=
      wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
      record "$mode" "$n" "$i" "$k" "$rc" "$log.out" "$log.err" "$wall"
    done
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt" >&2

echo
"$PY" "$BENCH/scale_plot.py" "$JSONL" "$OUT"
echo "raw results: $OUT"

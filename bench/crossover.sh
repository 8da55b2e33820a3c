#!/usr/bin/env bash
# crossover.sh - measure the crossover sizes of gorun's collective algorithms: for each
# configuration, collective and algorithm, `gorun bench` with that algorithm forced
# (--thresholds COLL=ALGO), every size from MIN to MAX (doubling), then per size which
# algorithm was fastest and the sizes where the fastest one changes. Those are the
# numbers that go into collectives.DefaultThresholds (the intra rows from the shm
# configurations, the inter rows from the tcp ones).
#
#   configurations  shm-2, shm-4   1 host x 2 (4) ranks, shared memory
#                   tcp-2x1, tcp-4x1   2 (4) netns hosts x 1 rank (testhosts), TCP over veth
#   collectives     allreduce (recursive-doubling, rabenseifner, ring), allgather
#                   (recursive-doubling, bruck, ring), reducescatter (recursive-halving,
#                   ring), broadcast (binomial, binary-tree, scatter-allgather, chain)
#
# Usage: bench/crossover.sh          (root for the tcp configurations; CONFIGS="shm-2 shm-4"
#                                     runs without)
# Env:   CONFIGS  (default "shm-2 shm-4 tcp-2x1 tcp-4x1"), COLLS (default all four above),
#        MIN, MAX (default 1K, 16M), REPS (blocks per size, default 5), MINTIME (per block,
#        default 30ms), OUT (default bench/results/crossover-DATE)
# Output: OUT/CONFIG-COLL-ALGO.csv (gorun bench --csv), OUT/crossover.md (per configuration
#         and collective: time per size and algorithm, the fastest, the crossovers).
# Network: loopback and the fixture's own subnet only, as bench/coll.sh.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
CONFIGS=${CONFIGS:-"shm-2 shm-4 tcp-2x1 tcp-4x1"}
COLLS=${COLLS:-"allreduce allgather reducescatter broadcast"}
MIN=${MIN:-1K}
MAX=${MAX:-16M}
REPS=${REPS:-5}
MINTIME=${MINTIME:-30ms}
OUT=${OUT:-$BENCH/results/crossover-$(date +%Y%m%d-%H%M%S)}
STATE=${STATE:-$BENCH/.state/crossover}
BIN=$BENCH/.bin/crossover
die() { echo "crossover.sh: $*" >&2; exit 1; }

algos() {
  case $1 in
  allreduce) echo "recursive-doubling rabenseifner ring" ;;
  allgather) echo "recursive-doubling bruck ring" ;;
  reducescatter) echo "recursive-halving ring" ;;
  broadcast) echo "binomial binary-tree scatter-allgather chain" ;;
  *) die "unknown collective $1" ;;
  esac
}

mkdir -p "$BIN" "$OUT"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$BIN/gorun" ./cmd/gorun && go build -o "$BIN/testhosts" ./testhosts/cmd/testhosts)
GORUN=$BIN/gorun
TH=$BIN/testhosts
RUN=()
if [[ "$CONFIGS" == *tcp* ]]; then
  [ "$(id -u)" = 0 ] || die "the tcp configurations need root (netns hosts); CONFIGS=\"shm-2 shm-4\" runs without"
  "$TH" --state "$STATE" up 4 >&2
  trap '"$TH" --state "$STATE" down >&2 || true' EXIT
  eval "$("$TH" --state "$STATE" env)"
  RUN=("$TH" --state "$STATE" head) # a private /etc/hosts: h1..h4 never reach DNS
fi
SCRATCH=$(mktemp -d /var/tmp/gorun-crossover.XXXXXX)
trap 'rm -rf "$SCRATCH"; [ -z "${TESTHOSTS_SSH_CONFIG:-}" ] || "$TH" --state "$STATE" down >&2 || true' EXIT
cd "$SCRATCH"

for cfg in $CONFIGS; do
  case $cfg in
  shm-2) launch=(-np 2) ;;
  shm-4) launch=(-np 4) ;;
  tcp-2x1) launch=(--ssh-config "$TESTHOSTS_SSH_CONFIG" -H h1:1,h2:1 --iface eth0) ;;
  tcp-4x1) launch=(--ssh-config "$TESTHOSTS_SSH_CONFIG" -H h1:1,h2:1,h3:1,h4:1 --iface eth0) ;;
  *) die "unknown configuration $cfg" ;;
  esac
  for coll in $COLLS; do
    for algo in $(algos "$coll"); do
      echo "$cfg $coll $algo..." >&2
      "${RUN[@]}" "$GORUN" bench "$coll" "${launch[@]}" --thresholds "$coll=$algo" -b "$MIN" -e "$MAX" -f 2 \
        --min-time "$MINTIME" --blocks "$REPS" -w 3 --csv - > "$OUT/$cfg-$coll-$algo.csv" ||
        echo "WARNING: $cfg $coll $algo failed" >&2
    done
  done
done
python3 - "$OUT" $CONFIGS -- $COLLS <<'EOF' | tee "$OUT/crossover.md"
import csv, os, sys
out = sys.argv[1]
i = sys.argv.index("--")
configs, colls = sys.argv[2:i], sys.argv[i + 1:]
def fmt(b):
    for u, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n}{u}"
    return f"{b}B"
for cfg in configs:
    for coll in colls:
        times = {}
        for f in sorted(os.listdir(out)):
            if f.startswith(f"{cfg}-{coll}-") and f.endswith(".csv"):
                algo = f[len(f"{cfg}-{coll}-"):-4]
                with open(os.path.join(out, f)) as fh:
                    for row in csv.DictReader(fh):
                        times.setdefault(int(row["bytes"]), {})[algo] = float(row["time_us"])
        if not times:
            continue
        algos = sorted({a for t in times.values() for a in t})
        print(f"\n### {cfg} {coll} (us per call; * fastest)\n")
        print("| size | " + " | ".join(algos) + " |")
        print("|---" * (len(algos) + 1) + "|")
        best = []
        for size in sorted(times):
            t = times[size]
            b = min(t, key=t.get)
            best.append((size, b))
            print(f"| {fmt(size)} | " + " | ".join(("*" if a == b else "") + (f"{t[a]:.1f}" if a in t else "-") for a in algos) + " |")
        tiers, prev = [], None
        for size, b in best:
            if b != prev:
                tiers.append([b, size, size])
                prev = b
            else:
                tiers[-1][2] = size
        spec = ",".join(f"{a}<={fmt(hi)}" for a, lo, hi in tiers[:-1]) + ("," if len(tiers) > 1 else "") + tiers[-1][0]
        print(f"\nfastest: {spec}")
EOF

#!/usr/bin/env bash
# netcheck.sh - `gorun check --net` against the by-hand bisect its users do today, on the
# same fake hosts (network namespaces with a real sshd each, from the testhosts fixture):
#
#   1. time to the verdict for 4, 8 and 16 hosts, unshaped: gorun check --net (one run
#      measures every pair both ways, in rounds of disjoint pairs) against the peer, an
#      iperf-like loop over ssh that measures each ordered pair in turn (a python3 sink on
#      one host, a python3 source on the other: what users script when they bisect a slow
#      cluster by hand, nccl#349's advice); the ratio of the two
#   2. false alarms: RUNS_CLEAN runs of gorun check --net on the unshaped 4 hosts (default
#      20): how many flag a link (want 0)
#   3. one host's link shaped with the kernel's traffic control (tbf, 200 Mbit/s, on both
#      ends of its veth pair, so both directions): does the verdict name it, at 4, 8 and
#      16 hosts, and does the peer's table show it
#
# Usage: bench/netcheck.sh     (as root: network namespaces; from anywhere)
# Env:   RUNS        timed runs per case (default 3)
#        RUNS_CLEAN  runs of part 2 (default 20)
#        SIZES       host counts (default "4 8 16")
#        PEER_MB     MiB the peer sends per ordered pair (default 64)
#        SHAPE       the shaped host (default h3)
#        KEEP_HOSTS  1: leave the hosts up at the end
#        STATE       the fixture's state folder (default bench/.state/netcheck, gitignored)
#        OUT         results folder (default bench/results/netcheck-DATE)
# Output: a markdown table on stdout and in OUT/table.md; gorun's JSON and the peer's
# pair lines in OUT.
#
# Network: only loopback and the fixture's own subnet (10.213.X.0/24, on a bridge that
# exists only on this machine). Every measured command runs under `testhosts head`, whose
# private /etc/hosts lists h1..hN, so that no host name reaches DNS.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-3}
RUNS_CLEAN=${RUNS_CLEAN:-20}
SIZES=${SIZES:-"4 8 16"}
PEER_MB=${PEER_MB:-64}
SHAPE=${SHAPE:-h3}
STATE=${STATE:-$BENCH/.state/netcheck}
TH=$BENCH/.bin/testhosts
GORUN=$BENCH/.bin/gorun
BIG=0
for n in $SIZES; do [ "$n" -gt "$BIG" ] && BIG=$n; done

# ---------------------------------------------------------------------------------------
# Inside `testhosts head`: one measurement. $2 = gorun|peer, $3 = host count, $4 = tag.
if [ "${1:-}" = --in-head ]; then
  : "${OUT:?}" "${TESTHOSTS_SSH_CONFIG:?}" "${TESTHOSTS_SUBNET:?}"
  net=${TESTHOSTS_SUBNET%.0/24}
  ip=$(getent hosts h1 | awk '{print $1; exit}')
  [[ "$ip" == "$net".* ]] || { echo "netcheck.sh: h1 resolves to '$ip', not into $TESTHOSTS_SUBNET" >&2; exit 1; }
  what=$2 n=$3 tag=$4
  hosts=$(for ((i = 1; i <= n; i++)); do printf 'h%d ' "$i"; done)
  case $what in
  gorun)
    s=$(date +%s%N)
    rc=0
    "$GORUN" --ssh-config "$TESTHOSTS_SSH_CONFIG" -H "$(echo $hosts | tr ' ' ,)" check --net --json >"$OUT/$tag.json" 2>"$OUT/$tag.err" || rc=$?
    e=$(date +%s%N)
    echo "$(((e - s) / 1000000)) $rc"
    ;;
  peer)
    # The by-hand bisect: every ordered pair in turn, a sink on the receiver (ssh, in
    # the background), then the source on the sender; the sink prints Gbit/s.
    s=$(date +%s%N)
    : >"$OUT/$tag.pairs"
    port=5201
    for a in $hosts; do
      for b in $hosts; do
        [ "$a" = "$b" ] && continue
        port=$((port + 1))
        ssh -F "$TESTHOSTS_SSH_CONFIG" "$b" "python3 $OUT/sink.py $port" >"$OUT/sink.out" &
        sp=$!
        bip=$(getent hosts "$b" | awk '{print $1; exit}')
        ssh -F "$TESTHOSTS_SSH_CONFIG" "$a" "python3 $OUT/source.py $bip $port $PEER_MB"
        wait "$sp"
        echo "$a $b $(cat "$OUT/sink.out")" >>"$OUT/$tag.pairs"
      done
    done
    e=$(date +%s%N)
    echo "$(((e - s) / 1000000)) 0"
    ;;
  esac
  exit 0
fi

# ---------------------------------------------------------------------------------------
# Outside: checks, build, the fixture, then the measurements under `testhosts head`.
[ "$(id -u)" = 0 ] || { echo "netcheck.sh: needs root (network namespaces)" >&2; exit 1; }
for t in python3 ssh tc; do command -v $t >/dev/null || { echo "netcheck.sh: needs $t" >&2; exit 1; }; done

echo "building gorun, gorun-tools and testhosts..." >&2
# Both under bench/.bin, which the hosts see (they share the file system except /tmp,
# /run and /dev/shm); gorun-tools next to gorun runs the check's ranks.
(cd "$ROOT" && CGO_ENABLED=0 go build -o bench/.bin/gorun ./cmd/gorun &&
  CGO_ENABLED=0 go build -o bench/.bin/gorun-tools ./cmd/gorun-tools &&
  go build -o bench/.bin/testhosts ./testhosts/cmd/testhosts)

OUT=${OUT:-$BENCH/results/netcheck-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" "$(dirname "$STATE")"
export OUT GORUN PEER_MB

cat >"$OUT/sink.py" <<'EOF'
# sink.py PORT: accept one connection, read to its end, print Gbit/s from first byte to last.
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1)
c, _ = s.accept()
n, t0 = 0, None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(b)
dt = time.monotonic() - (t0 or time.monotonic())
print("%.3f" % (n * 8 / dt / 1e9 if dt > 0 else 0))
EOF
cat >"$OUT/source.py" <<'EOF'
# source.py IP PORT MIB: connect (retrying while the sink starts) and send MIB MiB of zeros.
import socket, sys, time
ip, port, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(200):
    try:
        c = socket.create_connection((ip, port))
        break
    except OSError:
        time.sleep(0.01)
buf = bytes(1 << 20)
for _ in range(mib):
    c.sendall(buf)
c.close()
EOF

started=0
cleanup() {
  if [ "$started" = 1 ] && [ "${KEEP_HOSTS:-0}" != 1 ]; then "$TH" --state "$STATE" down >&2 || true; fi
}
trap cleanup EXIT
started=1
"$TH" --state "$STATE" up "$BIG" >&2
eval "$("$TH" --state "$STATE" env)"
export GORUN_TESTHOSTS_STATE TESTHOSTS_SSH_CONFIG TESTHOSTS_SUBNET
[[ "$TESTHOSTS_SUBNET" =~ ^10\.213\.[0-9]+\.0/24$ ]] || { echo "netcheck.sh: unexpected subnet $TESTHOSTS_SUBNET" >&2; exit 1; }
inhead() { "$TH" --state "$STATE" head "$BENCH/netcheck.sh" --in-head "$@"; }
flagged() { # tag: the number of slow links in gorun's JSON, and the verdict
  python3 - "$OUT/$1.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("? (no JSON: %s)" % e); sys.exit()
print("%d|%s" % (len(r.get("slow") or []), r.get("verdict", "").replace("|", "/")))
EOF
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "gorun: $($GORUN --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "runs: $RUNS per case, peer: $PEER_MB MiB per ordered pair"
  echo
  echo "## 1. Time to the verdict, unshaped (ms, median of $RUNS)"
  echo
  echo "| hosts | gorun check --net | by-hand loop over ssh | ratio | gorun's verdict |"
  echo "|---|---|---|---|---|"
} | tee "$OUT/table.md"

for n in $SIZES; do
  g="" p=""
  for ((r = 1; r <= RUNS; r++)); do
    read -r ms rc < <(inhead gorun "$n" "clean-$n-$r")
    g+="$ms "
    read -r pm _ < <(inhead peer "$n" "peer-$n-$r")
    p+="$pm "
  done
  gm=$(echo $g | tr ' ' '\n' | median) pm=$(echo $p | tr ' ' '\n' | median)
  v=$(flagged "clean-$n-$RUNS")
  echo "| $n | $gm | $pm | $(awk -v a="$gm" -v b="$pm" 'BEGIN {printf "%.3f", a/b}') | ${v#*|} |" | tee -a "$OUT/table.md"
done

{
  echo
  echo "## 2. False alarms: $RUNS_CLEAN runs on 4 unshaped hosts"
  echo
} | tee -a "$OUT/table.md"
bad=0
for ((r = 1; r <= RUNS_CLEAN; r++)); do
  inhead gorun 4 "alarm-$r" >/dev/null
  v=$(flagged "alarm-$r")
  [ "${v%%|*}" = 0 ] || { bad=$((bad + 1)); echo "run $r: $v" | tee -a "$OUT/table.md"; }
done
echo "$bad of $RUNS_CLEAN runs flagged a link" | tee -a "$OUT/table.md"

# Part 3: shape SHAPE's link in both directions (its eth0, and its veth's head end).
num=${SHAPE#h}
veth=$(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^gtv.*_${num}\$" | head -1)
[ -n "$veth" ] || { echo "netcheck.sh: no veth for $SHAPE" >&2; exit 1; }
"$TH" --state "$STATE" exec "$SHAPE" tc qdisc add dev eth0 root tbf rate 200mbit burst 32kbit latency 50ms
tc qdisc add dev "$veth" root tbf rate 200mbit burst 32kbit latency 50ms
{
  echo
  echo "## 3. $SHAPE's link shaped to 200 Mbit/s both ways (tbf)"
  echo
  echo "| hosts | gorun ms | slow links flagged | names $SHAPE | verdict | peer ms | peer's slowest pair |"
  echo "|---|---|---|---|---|---|---|"
} | tee -a "$OUT/table.md"
for n in $SIZES; do
  read -r ms rc < <(inhead gorun "$n" "shaped-$n")
  v=$(flagged "shaped-$n")
  names=no
  [[ "${v#*|}" == *"$SHAPE"* ]] && names=yes
  read -r pm _ < <(inhead peer "$n" "peer-shaped-$n")
  worst=$(sort -k3 -n "$OUT/peer-shaped-$n.pairs" | head -1)
  echo "| $n | $ms (exit $rc) | ${v%%|*} | $names | ${v#*|} | $pm | $worst Gbit/s |" | tee -a "$OUT/table.md"
done
tc qdisc del dev "$veth" root || true
echo "results in $OUT" >&2

#!/usr/bin/env bash
# plugins.sh - allreduce through gorun's transport plugins against its built-in TCP
# transport: float32 sum, busbw from 4 KiB to 64 MiB (x4) and the time per call at 4 KiB,
# 2 netns hosts x 1 rank (testhosts fixture: TCP over veth + bridge), `gorun bench`
# with the method of bench/coll.sh (3 warm-up calls, a probe, 7 blocks of ~0.25 s, the
# median block), one P per rank (-x GOMAXPROCS=1).
#
#   variants   builtin     no --plugin: the collectives' own TCP transport
#              tcpexample  --plugin tcpexample (examples/plugins/tcpexample, pure Go): it hands
#                          its connections' sockets to the rank (sdk.Handoff), whose built-in
#                          TCP protocol moves the data
#              tcpexample-own  the same with -x GORUN_PLUGIN_HANDOFF=0: the plugin moves the
#                          data itself, through the shared rings
#              fabric      --plugin fabric --fabric-provider 'tcp;ofi_rxm' -x FI_TCP_IFACE=eth0
#                          (plugins/fabric, libfabric through cgo; left out, with a note,
#                          when it does not build, e.g. without libfabric-dev)
#
# Every round (REPS of them) runs every variant once, in turn; round r starts with the
# r-th variant (rotated) so that no variant always runs first or last. Per size the
# table gives the median over the rounds of each run's busbw and the ratio of each
# plugin's median to builtin's; target: a plugin within 10% of builtin (ratio >= 0.90)
# at every size from 1 MiB.
#
# Usage: bench/plugins.sh            (`make bench-plugins`; as root: the hosts are netns)
# Env:   REPS        rounds (default 3)
#        VARIANTS    which variants (default "builtin tcpexample tcpexample-own fabric")
#        SIZES       gorun bench's size options (default "-b 4K -e 64M -f 4")
#        TIMEOUT     seconds per run before it is killed (default 240)
#        EXTRA       more gorun options for every run (e.g. "-x GORUN_PLUGIN_LOG=info")
#        KEEP_HOSTS  1: leave the fake hosts up at the end (and reuse hosts already up)
#        STATE       the fixture's state folder (default bench/.state/plugins, gitignored)
#        OUT         results folder (default bench/results/plugins-DATE)
# Output: markdown tables on stdout and in OUT/table.md; each run's output in
# OUT/raw/VARIANT-rROUND.{out,err,csv,json} (.out: gorun bench's table, a line per size as
# it is measured, which shows where a hung run stopped; .csv and .json: written at the end,
# the .json's header names the transport that carried the traffic), outcomes in OUT/runs.tsv, the
# exact commands in OUT/commands.txt, the machine in OUT/env.txt, failed checks in
# OUT/checks.txt, the fabric plugin's build log in OUT/raw/fabric-build.log.
#
# Network: only loopback and the fixture's own subnet (10.213.X.0/24 on a bridge that
# exists only on this machine); runs go through `testhosts head` (a private /etc/hosts
# listing h1, h2: no name reaches DNS).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
REPS=${REPS:-3}
VARIANTS=${VARIANTS:-"builtin tcpexample tcpexample-own fabric"}
SIZES=${SIZES:-"-b 4K -e 64M -f 4"}
TIMEOUT=${TIMEOUT:-240}
STATE=${STATE:-$BENCH/.state/plugins}
OUT=${OUT:-$BENCH/results/plugins-$(date +%Y%m%d-%H%M%S)}
BIN=$BENCH/.bin/plugins # gorun, testhosts and the plugins: the --plugin-dir
GORUN=$BIN/gorun
TH=$BIN/testhosts
# shellcheck source=bench/fixture.sh
. "$BENCH/fixture.sh"
die() { echo "plugins.sh: $*" >&2; exit 1; }

[[ "$BENCH" != *[[:space:]]* ]] || die "the checkout's path has blanks"
[ "$(id -u)" = 0 ] || die "needs root (the hosts are network namespaces)"
PY=$(command -v python3 || true)
[ -n "$PY" ] || die "needs python3"
command -v go >/dev/null || die "needs go"
{ { command -v sshd >/dev/null || [ -x /usr/sbin/sshd ]; } && command -v ssh >/dev/null; } ||
  die "the fake hosts need OpenSSH: apt-get install openssh-server openssh-client"
mkdir -p "$OUT/raw" "$BIN"
OUT=$(cd "$OUT" && pwd) # the runs start in a scratch folder
: > "$OUT/runs.tsv"
: > "$OUT/commands.txt"
: > "$OUT/checks.txt"
note() { echo "$*" | tee -a "$OUT/checks.txt" >&2; }

# ---------------------------------------------------------------------------------------
# Build, in bench/.bin/plugins (the fake hosts share this file system but /tmp).
echo "building in $BIN..." >&2
(
  cd "$ROOT"
  CGO_ENABLED=0 go build -o "$GORUN" ./cmd/gorun
  go build -o "$TH" ./testhosts/cmd/testhosts
  if [[ " $VARIANTS " == *" tcpexample"* ]]; then
    CGO_ENABLED=0 go build -o "$BIN/gorun-plugin-tcpexample" ./examples/plugins/tcpexample
  fi
)
if [[ " $VARIANTS " == *" fabric "* ]]; then
  rm -f "$BIN/gorun-plugin-fabric"
  if ! (cd "$ROOT" && CGO_ENABLED=1 go build -o "$BIN/gorun-plugin-fabric" ./plugins/fabric) > "$OUT/raw/fabric-build.log" 2>&1; then
    note "NOTE: fabric left out: the fabric plugin did not build (libfabric-dev missing?): $(tail -3 "$OUT/raw/fabric-build.log" | tr '\n' ' ')"
    VARIANTS=$(echo " $VARIANTS " | sed 's/ fabric / /; s/^ *//; s/ *$//')
  fi
fi
[ -n "$VARIANTS" ] || die "no variant left to run"
SCRATCH=$(mktemp -d /var/tmp/gorun-bench-plugins.XXXXXX) # empty (gorun reads ./gorun.toml), seen by the hosts

# ---------------------------------------------------------------------------------------
# The fixture: 2 hosts, up unless KEEP_HOSTS=1 finds them up already.
started=0
cleanup() {
  if [ "$started" = 1 ] && [ "${KEEP_HOSTS:-0}" != 1 ]; then "$TH" --state "$STATE" down >&2 || true; fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
fixture_up 2
[ ${#NETNS[@]} -ge 2 ] || die "cannot list the hosts' network namespaces"

# reap_hosts WHAT: kill what a run left on the hosts (ranks and plugin processes are not
# descendants of the launcher there): any process running a binary of $BIN.
reap_hosts() {
  local ns p exe left=()
  for ns in "${NETNS[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
      if [[ "$exe" == "$BIN"/* ]]; then
        left+=("$p")
        note "WARNING: after $1: pid $p ($(cat "/proc/$p/comm" 2>/dev/null)) still running in $ns: killed"
      fi
    done
  done
  [ ${#left[@]} = 0 ] || kill -KILL "${left[@]}" 2>/dev/null || true
}

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "go: $(go version)"
  echo "gorun: $("$GORUN" --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "libfabric: $(pkg-config --modversion libfabric 2>/dev/null || echo 'no pkg-config entry')"
  echo "fixture: 2 hosts, subnet $TESTHOSTS_SUBNET, state $STATE"
  echo "settings: REPS=$REPS VARIANTS='$VARIANTS' SIZES='$SIZES' TIMEOUT=$TIMEOUT"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt"

# ---------------------------------------------------------------------------------------
# The rounds. args_for VARIANT: the variant's own gorun options.
args_for() {
  case $1 in
  builtin) ;;
  tcpexample) echo "--plugin tcpexample" ;;
  tcpexample-own) echo "--plugin tcpexample -x GORUN_PLUGIN_HANDOFF=0" ;;
  fabric) echo "--plugin fabric --fabric-provider tcp;ofi_rxm -x FI_TCP_IFACE=eth0" ;;
  *) die "unknown variant $1" ;;
  esac
}
read -ra VS <<< "$VARIANTS"
read -ra SIZE_ARGS <<< "$SIZES"
read -ra EXTRA_ARGS <<< "${EXTRA:-}"
cd "$SCRATCH"
for ((r = 1; r <= REPS; r++)); do
  for ((i = 0; i < ${#VS[@]}; i++)); do
    v=${VS[$(((r - 1 + i) % ${#VS[@]}))]}
    read -ra vargs <<< "$(args_for "$v")"
    cmd=("$GORUN" bench allreduce --ssh-config "$TESTHOSTS_SSH_CONFIG" -H "h1:1,h2:1" -np 2
      --iface eth0 -x GOMAXPROCS=1 --plugin-dir "$BIN" "${vargs[@]}" "${EXTRA_ARGS[@]}"
      "${SIZE_ARGS[@]}" --min-time 0.25s --blocks 7 -w 3 --csv "$OUT/raw/$v-r$r.csv" --json "$OUT/raw/$v-r$r.json")
    printf '%q ' "${HEAD[@]}" "${cmd[@]}" | sed 's/ $//' >> "$OUT/commands.txt"
    echo >> "$OUT/commands.txt"
    echo "round $r: $v..." >&2
    "$PY" "$BENCH/coll/runone.py" --timeout "$TIMEOUT" \
      --out "$OUT/raw/$v-r$r.out" --err "$OUT/raw/$v-r$r.err" \
      --tsv "$OUT/runs.tsv" --key "$v/r$r" -- "${HEAD[@]}" "${cmd[@]}" >&2
    reap_hosts "$v round $r"
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

# ---------------------------------------------------------------------------------------
# Tables, and the end of the error output of every run that did not exit 0.
{
  "$PY" "$BENCH/plugins_table.py" "$OUT" "$REPS" "${VS[@]}"
  if [ -s "$OUT/checks.txt" ]; then
    echo
    echo "Notes and failed checks ($OUT/checks.txt):"
    echo
    sed 's/^/    /' "$OUT/checks.txt"
  fi
  awk -F'\t' '$2 != "ok" {print $1}' "$OUT/runs.tsv" | while read -r key; do
    f="$OUT/raw/${key%/*}-${key#*/}"
    echo
    echo "$key: $(awk -F'\t' -v k="$key" '$1 == k {print $2}' "$OUT/runs.tsv"); the last lines of its table ($f.out), then of its errors ($f.err):"
    echo
    { grep -v '^# [A-Z]' "$f.out" | tail -10 || true; echo "    --"; tail -15 "$f.err" || true; } 2>/dev/null | sed 's/^/    /'
  done
} | tee "$OUT/table.md"
echo
echo "raw results: $OUT"

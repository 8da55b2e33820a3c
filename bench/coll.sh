#!/usr/bin/env bash
# coll.sh - allreduce bandwidth of gorun's collectives (`gorun bench allreduce`) against
# Open MPI, MPICH and torch's gloo, for 4 KiB to 64 MiB, float32 sum, with this machine's
# limits measured in the same rounds:
#
#   configurations  shm-2    1 host x 2 ranks        (MPI: shared memory; gloo: TCP loopback)
#                   shm-4    1 host x 4 ranks        (oversubscribed on this 2-vCPU box)
#                   tcp-2x1  2 netns hosts x 1 rank  (testhosts fixture: TCP over veth + bridge)
#                   tcp-4x1  4 netns hosts x 1 rank
#   peers           openmpi  coll/allreduce.c built with mpicc.openmpi, under mpirun.openmpi
#                            (over hosts: TCP BTL with mpi_yield_when_idle 1, see below)
#                   openmpi-noyield  the same over hosts without mpi_yield_when_idle (what
#                            users get by default), in the first NOYIELD_REPS rounds only
#                   mpich    coll/allreduce.c built with mpicc.mpich, under mpiexec.hydra
#                            (over hosts: UCX_TLS=tcp,self on eth0)
#                   gloo     coll/gloo_allreduce.py (torch.distributed, gloo), launched by
#                            gorun (env:// rendezvous: MASTER_ADDR/PORT, RANK, WORLD_SIZE)
#                   gorun    `gorun bench allreduce` with the peers' method (per size: 3
#                            warm-up calls, a probe that sets the call count, 7 blocks of
#                            ~0.25 s, the median block); $GORUN_BENCH_CMD (below) replaces it
#   limits          coll/membw.c: memcpy GB/s per buffer size, 1 thread and 2
#                   coll/tcpbw.c: TCP exchange per size (both ends send and receive SIZE
#                   at once: a 2-rank ring allreduce's traffic; the better of one socket
#                   and one socket per direction) and streaming throughput (1 and 2
#                   connections), over loopback and between h1 and h2 (veth)
#
# Every round (REPS of them) measures the limits, then runs every configuration with
# every peer in turn (openmpi, openmpi-noyield, mpich, gloo, gorun), so that changes
# in the machine's load hit all of them alike. Per size the tables give the median over
# the rounds of each run's own figure (itself the median of its timed blocks).
#
# GORUN_BENCH_CMD: gorun's allreduce benchmark (default: the `gorun bench allreduce` line
# below; empty: no gorun column), one command line (split on blanks) run once per
# configuration and round, with these words replaced:
#   {LAUNCH}     the gorun launch for the configuration: "GORUN -np N" on this host,
#                "GORUN --ssh-config CFG -H h1:1,...,hN:1 -np N" over the fake hosts
#   {GORUN}      the gorun binary this script built      {NP}    the number of ranks
#   {HOSTFLAGS}  "" or "--ssh-config CFG -H h1:1,...,hN:1"  {HOSTS} "" or h1:1,...,hN:1
#   {SSH_CONFIG} "" or the fixture's ssh config          {IFACE} lo or eth0
# e.g.   GORUN_BENCH_CMD='{LAUNCH} {GORUN} bench allreduce -b 4K -e 64M' bench/coll.sh
#   or   GORUN_BENCH_CMD='{GORUN} bench allreduce {HOSTFLAGS} -np {NP}' bench/coll.sh
# Its output (stdout of rank 0, or of the command) must be allreduce.c's CSV (a header
# line naming bytes and busbw_GBs; time_us and wrong are read when present), gorun
# bench's --csv (busbw_gbps), or
# nccl-tests rows (size count type redop root time algbw busbw #wrong); a final
# "# done" line is optional (it lets a hang at exit be told from a hang).
#
# Usage: bench/coll.sh              (`make bench-coll`; as root: the hosts are network
#                                    namespaces; CONFIGS="shm-2 shm-4" LIMITS=lo runs without)
# Env:   REPS          rounds (default 3)
#        CONFIGS       which configurations (default "shm-2 shm-4 tcp-2x1 tcp-4x1")
#        PEERS         which peers (default "openmpi openmpi-noyield mpich gloo gorun")
#        NOYIELD_REPS  rounds that include openmpi-noyield (default 1)
#        BENCH_ARGS    extra options for allreduce.c and gloo_allreduce.py (e.g. "-e 1M";
#                      see their headers: -b -e -r -w -s -m -t)
#        LIMITS        "all" (default), "lo" (no veth, no fixture needed) or "none"
#        TIMEOUT       seconds per run before it is killed (default 240; what it printed
#                      still counts); DONE_GRACE: seconds a run may take to exit after
#                      its "# done" line before it is killed (default 10)
#        KEEP_HOSTS    1: leave the fake hosts up at the end (and reuse hosts already up)
#        STATE         the fixture's state folder (default bench/.state/coll, gitignored)
#        OUT           results folder (default bench/results/coll-DATE)
# Output: markdown tables on stdout and in OUT/table.md (also table-ranges.md with
# (min-max) over rounds and table-times.md, time per call); every run's output in
# OUT/raw/CONFIG/PEER-rROUND.{out,err}, the limits in OUT/limits/, every outcome in
# OUT/runs.tsv, the exact commands in OUT/commands.txt, the machine in OUT/env.txt.
#
# Network: only loopback and the fixture's own subnet (10.213.X.0/24 on a bridge that
# exists only on this machine). Runs over hosts go through `testhosts head` (a private
# /etc/hosts listing h1..hN, so that no name reaches DNS).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
REPS=${REPS:-3}
CONFIGS=${CONFIGS:-"shm-2 shm-4 tcp-2x1 tcp-4x1"}
PEERS=${PEERS:-"openmpi openmpi-noyield mpich gloo gorun"}
NOYIELD_REPS=${NOYIELD_REPS:-1}
BENCH_ARGS=${BENCH_ARGS:-}
LIMITS=${LIMITS:-all}
TIMEOUT=${TIMEOUT:-240}
DONE_GRACE=${DONE_GRACE:-10}
STATE=${STATE:-$BENCH/.state/coll}
OUT=${OUT:-$BENCH/results/coll-$(date +%Y%m%d-%H%M%S)}
# One P per rank (-x GOMAXPROCS=1): the peers' ranks run one thread each, and the netns
# hosts share this machine's CPUs, which gorun bench's own rule (CPUs / ranks on the
# host) cannot see.
GORUN_BENCH_CMD=${GORUN_BENCH_CMD:-"{GORUN} bench allreduce {HOSTFLAGS} -np {NP} --iface {IFACE} -x GOMAXPROCS=1 -b 4K -e 64M -f 4 --min-time 0.25s --blocks 7 -w 3 --csv -"}
BIN=$BENCH/.bin/coll
GORUN=$BIN/gorun
TH=$BENCH/.bin/testhosts
TORCH_PY=/usr/bin/python3 # Debian's python3-torch; `python3` on PATH may be another one
# shellcheck source=bench/fixture.sh
. "$BENCH/fixture.sh"
die() { echo "coll.sh: $*" >&2; exit 1; }
has() { [[ " $1 " == *" $2 "* ]]; }
needs_hosts() { [[ "$CONFIGS" == *tcp* ]] || [ "$LIMITS" = all ]; }

# ---------------------------------------------------------------------------------------
# Tools.
[[ "$BENCH" != *[[:space:]]* ]] || die "the checkout's path has blanks; commands are split on blanks"
PY=$(command -v python3 || true)
[ -n "$PY" ] || die "needs python3"
command -v go >/dev/null || die "needs go"
command -v cc >/dev/null || die "needs a C compiler: apt-get install gcc"
OMPI=$(command -v mpirun.openmpi || true)
HYDRA=$(command -v mpiexec.hydra || true)
MPICC_OMPI=$(command -v mpicc.openmpi || true)
MPICC_MPICH=$(command -v mpicc.mpich || true)
if has "$PEERS" openmpi || has "$PEERS" openmpi-noyield; then
  { [ -n "$OMPI" ] && [ -n "$MPICC_OMPI" ]; } || die "needs Open MPI: apt-get install openmpi-bin libopenmpi-dev (or leave openmpi out of PEERS)"
fi
if has "$PEERS" mpich; then
  { [ -n "$HYDRA" ] && [ -n "$MPICC_MPICH" ]; } || die "needs MPICH: apt-get install mpich libmpich-dev (or leave mpich out of PEERS)"
fi
if has "$PEERS" gloo; then
  "$TORCH_PY" -c 'import torch.distributed' 2>/dev/null || die "needs torch in $TORCH_PY: apt-get install python3-torch (or leave gloo out of PEERS)"
fi
if needs_hosts; then
  [ "$(id -u)" = 0 ] || die "the tcp configurations and the veth limits need root (the hosts are network namespaces); CONFIGS=\"shm-2 shm-4\" LIMITS=lo runs without"
  { { command -v sshd >/dev/null || [ -x /usr/sbin/sshd ]; } && command -v ssh >/dev/null; } ||
    die "the fake hosts need OpenSSH: apt-get install openssh-server openssh-client"
fi
OMPI_ROOT=""
[ "$(id -u)" != 0 ] || OMPI_ROOT="--allow-run-as-root"

# ---------------------------------------------------------------------------------------
# Build: the benchmarks and gorun (static) in bench/.bin/coll, which the fake hosts see
# (they share this machine's file system except /tmp, /run and /dev/shm).
echo "building in $BIN..." >&2
mkdir -p "$BIN"
(
  cd "$ROOT"
  CGO_ENABLED=0 go build -o "$GORUN" ./cmd/gorun
  if needs_hosts; then go build -o "$TH" ./testhosts/cmd/testhosts; fi
)
[ -z "$MPICC_OMPI" ] || "$MPICC_OMPI" -O2 -o "$BIN/allreduce.openmpi" "$BENCH/coll/allreduce.c"
[ -z "$MPICC_MPICH" ] || "$MPICC_MPICH" -O2 -o "$BIN/allreduce.mpich" "$BENCH/coll/allreduce.c"
cc -O3 -pthread -o "$BIN/membw" "$BENCH/coll/membw.c"
cc -O2 -pthread -o "$BIN/tcpbw" "$BENCH/coll/tcpbw.c"

mkdir -p "$OUT/raw" "$OUT/limits"
# Every run starts in an empty folder (gorun reads ./gorun.toml) that the fake hosts see
# too (the launchers start the remote ranks in the same directory; /tmp is per host).
SCRATCH=$(mktemp -d /var/tmp/gorun-bench-coll.XXXXXX)
: > "$OUT/runs.tsv"
: > "$OUT/commands.txt"
: > "$OUT/checks.txt"

# ---------------------------------------------------------------------------------------
# The fixture: 4 hosts, up unless KEEP_HOSTS=1 finds them up already.
started=0
LO_SERVER=""
cleanup() {
  if [ -n "$LO_SERVER" ]; then kill "$LO_SERVER" 2>/dev/null || true; fi
  if [ "$started" = 1 ] && [ "${KEEP_HOSTS:-0}" != 1 ]; then "$TH" --state "$STATE" down >&2 || true; fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
HEAD=()
if needs_hosts; then
  fixture_up 4
fi

# reap_hosts WHAT: kill what a run left on the fake hosts (not descendants of the
# launcher, so runone.py cannot see them): our binaries, MPI daemons, gloo ranks.
reap_hosts() {
  local ns p exe comm left=()
  [ ${#HEAD[@]} -gt 0 ] || return 0
  for ns in "${NETNS[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
      comm=$(cat "/proc/$p/comm" 2>/dev/null || true)
      if [[ "$exe" == "$BIN"/* || "$comm" == hydra_pmi_prox* || "$comm" == orted ]] ||
        { tr '\0' ' ' < "/proc/$p/cmdline"; } 2>/dev/null | grep -q "$BENCH/coll/gloo_allreduce.py"; then
        left+=("$p")
        [ "$1" = quiet ] || echo "WARNING: after $1: pid $p ($comm) still running in $ns: killed" | tee -a "$OUT/checks.txt" >&2
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
  echo "cc: $(cc --version | head -1)"
  echo "gorun: $("$GORUN" --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  [ -z "$OMPI" ] || echo "openmpi: $OMPI: $("$OMPI" --version 2>&1 | head -1)"
  [ -z "$HYDRA" ] || echo "mpich: $HYDRA: $("$HYDRA" --version 2>&1 | grep -m1 -i 'version')"
  has "$PEERS" gloo && echo "torch: $("$TORCH_PY" -c 'import torch, sys; print(torch.__version__, "python", sys.version.split()[0])' 2>&1)"
  [ ${#HEAD[@]} = 0 ] || echo "fixture: 4 hosts, subnet $TESTHOSTS_SUBNET, state $STATE"
  echo "settings: REPS=$REPS CONFIGS='$CONFIGS' PEERS='$PEERS' NOYIELD_REPS=$NOYIELD_REPS BENCH_ARGS='$BENCH_ARGS' LIMITS=$LIMITS TIMEOUT=$TIMEOUT DONE_GRACE=$DONE_GRACE"
  echo "GORUN_BENCH_CMD: ${GORUN_BENCH_CMD:-(unset: no gorun column)}"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt"

# ---------------------------------------------------------------------------------------
# Commands. cmd_for CONFIG PEER prints the command line (blank-separated words), or
# nothing when that peer has no run in that configuration.
hostlist() { # hostlist N SUFFIX: h1SUFFIX,...,hNSUFFIX
  local i s=""
  for ((i = 1; i <= $1; i++)); do s+="${s:+,}h$i$2"; done
  echo "$s"
}
cmd_for() {
  local cfg=$1 peer=$2 np hosts="" hostflags="" iface=lo
  case $cfg in
  shm-2) np=2 ;; shm-4) np=4 ;;
  tcp-2x1) np=2 hosts=$(hostlist 2 "") ;; tcp-4x1) np=4 hosts=$(hostlist 4 "") ;;
  *) die "unknown configuration $cfg" ;;
  esac
  if [ -n "$hosts" ]; then
    iface=eth0
    hostflags="--ssh-config $TESTHOSTS_SSH_CONFIG -H $(hostlist "$np" :1)"
  fi
  case $peer in
  openmpi)
    if [ -z "$hosts" ]; then
      echo "$OMPI $OMPI_ROOT --oversubscribe -np $np $BIN/allreduce.openmpi $BENCH_ARGS"
    else
      # TCP BTL on the fixture's subnet only. Ranks yield when idle: without it each
      # small allreduce between the namespaces takes 4-8 ms here (see README).
      echo "$OMPI $OMPI_ROOT --mca plm_rsh_args -F$TESTHOSTS_SSH_CONFIG --mca oob_tcp_if_include $TESTHOSTS_SUBNET --mca btl tcp,self --mca btl_tcp_if_include $TESTHOSTS_SUBNET --mca mpi_yield_when_idle 1 --host $hosts -np $np $BIN/allreduce.openmpi $BENCH_ARGS"
    fi ;;
  openmpi-noyield)
    [ -z "$hosts" ] || echo "$OMPI $OMPI_ROOT --mca plm_rsh_args -F$TESTHOSTS_SSH_CONFIG --mca oob_tcp_if_include $TESTHOSTS_SUBNET --mca btl tcp,self --mca btl_tcp_if_include $TESTHOSTS_SUBNET --host $hosts -np $np $BIN/allreduce.openmpi $BENCH_ARGS" ;;
  mpich)
    if [ -z "$hosts" ]; then
      echo "$HYDRA -n $np $BIN/allreduce.mpich $BENCH_ARGS"
    else
      # UCX sees through network namespaces (same kernel, pid and IPC namespaces) and
      # would use shared memory between the "hosts": force TCP on eth0.
      echo "$HYDRA -launcher ssh -launcher-exec $TESTHOSTS_SSH -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0 -hosts $hosts -n $np $BIN/allreduce.mpich $BENCH_ARGS"
    fi ;;
  gloo)
    if [ -z "$hosts" ]; then
      echo "$GORUN -np $np $TORCH_PY $BENCH/coll/gloo_allreduce.py $BENCH_ARGS"
    else
      echo "$GORUN $hostflags -np $np -x GLOO_SOCKET_IFNAME=eth0 $TORCH_PY $BENCH/coll/gloo_allreduce.py $BENCH_ARGS"
    fi ;;
  gorun)
    [ -n "$GORUN_BENCH_CMD" ] || return 0
    local c=$GORUN_BENCH_CMD
    c=${c//\{LAUNCH\}/$GORUN $hostflags -np $np}
    c=${c//\{GORUN\}/$GORUN}
    c=${c//\{HOSTFLAGS\}/$hostflags}
    c=${c//\{HOSTS\}/${hosts:+$(hostlist "$np" :1)}}
    c=${c//\{SSH_CONFIG\}/${hosts:+$TESTHOSTS_SSH_CONFIG}}
    c=${c//\{NP\}/$np}
    c=${c//\{IFACE\}/$iface}
    echo "$c" ;;
  *) die "unknown peer $peer" ;;
  esac
}
for cfg in $CONFIGS; do
  for peer in $PEERS; do
    c=$(cmd_for "$cfg" "$peer")
    [ -z "$c" ] || echo "$cfg $peer: $c" >> "$OUT/commands.txt"
  done
done

# ---------------------------------------------------------------------------------------
# Limits of one round.
PORT=$((20000 + RANDOM % 20000))
limits() {
  local r=$1 L=$OUT/limits
  [ "$LIMITS" != none ] || return 0
  echo "round $r: limits..." >&2
  "$BIN/membw" > "$L/membw-r$r.csv" 2> "$L/membw-r$r.err" || echo "WARNING: membw failed, see $L/membw-r$r.err" | tee -a "$OUT/checks.txt" >&2
  # Loopback: a server in this namespace.
  "$BIN/tcpbw" serve 127.0.0.1 "$PORT" 2> "$L/lo-server-r$r.err" &
  LO_SERVER=$!
  # The exchange on one connection (both directions on one socket), then on two (one
  # per direction, as UCX does): the tables take the better of the two per size.
  timeout 120 "$BIN/tcpbw" exchange 127.0.0.1 "$PORT" -b 8 > "$L/lo-exchange-r$r.csv" 2> "$L/lo-exchange-r$r.err" || echo "WARNING: tcpbw exchange over loopback failed" | tee -a "$OUT/checks.txt" >&2
  timeout 120 "$BIN/tcpbw" exchange 127.0.0.1 "$PORT" -b 8 -2 > "$L/lo-exchange2-r$r.csv" 2> "$L/lo-exchange2-r$r.err" || echo "WARNING: tcpbw exchange -2 over loopback failed" | tee -a "$OUT/checks.txt" >&2
  for n in 1 2; do
    timeout 60 "$BIN/tcpbw" stream 127.0.0.1 "$PORT" 2 "$n" > "$L/lo-stream-P$n-r$r.csv" 2> "$L/lo-stream-P$n-r$r.err" || echo "WARNING: tcpbw stream over loopback failed" | tee -a "$OUT/checks.txt" >&2
  done
  kill "$LO_SERVER" 2>/dev/null || true
  wait "$LO_SERVER" 2>/dev/null || true
  LO_SERVER=""
  [ "$LIMITS" = all ] || return 0
  # Between two hosts: server on h2, client on h1, over their veths and the bridge.
  "$TH" --state "$STATE" exec h2 "$BIN/tcpbw" serve "$NET.2" "$PORT" 2> "$L/veth-server-r$r.err" &
  local srv=$!
  timeout 120 "$TH" --state "$STATE" exec h1 "$BIN/tcpbw" exchange "$NET.2" "$PORT" -b 8 > "$L/veth-exchange-r$r.csv" 2> "$L/veth-exchange-r$r.err" || echo "WARNING: tcpbw exchange h1 -> h2 failed" | tee -a "$OUT/checks.txt" >&2
  timeout 120 "$TH" --state "$STATE" exec h1 "$BIN/tcpbw" exchange "$NET.2" "$PORT" -b 8 -2 > "$L/veth-exchange2-r$r.csv" 2> "$L/veth-exchange2-r$r.err" || echo "WARNING: tcpbw exchange -2 h1 -> h2 failed" | tee -a "$OUT/checks.txt" >&2
  for n in 1 2; do
    timeout 60 "$TH" --state "$STATE" exec h1 "$BIN/tcpbw" stream "$NET.2" "$PORT" 2 "$n" > "$L/veth-stream-P$n-r$r.csv" 2> "$L/veth-stream-P$n-r$r.err" || echo "WARNING: tcpbw stream h1 -> h2 failed" | tee -a "$OUT/checks.txt" >&2
  done
  reap_hosts quiet # the server (testhosts exec replaced itself with it: $srv is the server)
  wait "$srv" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------
# The rounds.
cd "$SCRATCH"
if [ -z "$GORUN_BENCH_CMD" ] && has "$PEERS" gorun; then
  echo "note: GORUN_BENCH_CMD is not set: no gorun column (see the header of bench/coll.sh)" | tee -a "$OUT/checks.txt" >&2
fi
for ((r = 1; r <= REPS; r++)); do
  limits "$r"
  for cfg in $CONFIGS; do
    mkdir -p "$OUT/raw/$cfg"
    for peer in $PEERS; do
      [ "$peer" != openmpi-noyield ] || [ "$r" -le "$NOYIELD_REPS" ] || continue
      c=$(cmd_for "$cfg" "$peer")
      [ -n "$c" ] || continue
      pre=()
      [[ "$cfg" != tcp-* ]] || pre=("${HEAD[@]}")
      echo "round $r: $cfg $peer..." >&2
      # shellcheck disable=SC2086 # $c is a blank-separated word list
      "$PY" "$BENCH/coll/runone.py" --timeout "$TIMEOUT" --done-grace "$DONE_GRACE" \
        --out "$OUT/raw/$cfg/$peer-r$r.out" --err "$OUT/raw/$cfg/$peer-r$r.err" \
        --tsv "$OUT/runs.tsv" --key "$cfg/$peer/r$r" -- "${pre[@]}" $c >&2
      [[ "$cfg" != tcp-* ]] || reap_hosts "$cfg $peer round $r"
    done
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

# ---------------------------------------------------------------------------------------
# Tables.
"$PY" "$BENCH/coll/tables.py" --ranges "$OUT" > "$OUT/table-ranges.md"
"$PY" "$BENCH/coll/tables.py" --times --ranges "$OUT" > "$OUT/table-times.md"
{
  "$PY" "$BENCH/coll/tables.py" "$OUT"
  if [ -z "$GORUN_BENCH_CMD" ] && has "$PEERS" gorun; then
    echo
    echo "gorun: not measured (GORUN_BENCH_CMD unset)."
  fi
  if grep -q WARNING "$OUT/checks.txt"; then
    echo
    echo "Checks that failed (see $OUT/checks.txt):"
    echo
    grep WARNING "$OUT/checks.txt" | sed 's/^/    /'
  fi
} | tee "$OUT/table.md"
echo
echo "raw results: $OUT"

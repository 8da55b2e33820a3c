#!/usr/bin/env bash
# ssh.sh - launch time over SSH: gorun against Open MPI's mpirun (rsh/ssh launcher) and
# MPICH's mpiexec.hydra (ssh bootstrap), on the same fake hosts (network namespaces with
# a real sshd each, from the project's testhosts fixture), interleaved, in one run:
#
#   1. 4 hosts x 4 ranks of /bin/true, and of hostname: gorun, Open MPI, MPICH
#   2. 16 hosts x 1 rank of /bin/true: the same three
#   3. gorun alone on 32 hosts x 1 and x 4 ranks, flat and with --launch-fanout 4 and 8:
#      wall time, the phases of --summary-json and the head's peak RSS
#   4. where gorun's time goes: gorun with and without its staging check (--no-stage) on
#      4x4, 16x1 and BIGx1, and one OpenSSH round trip with each key exchange
#   5. a staged gorun against a shared one: the same binary at a path the hosts share
#      (bench/.bin) and at a path only the head has (its /tmp), so that each host runs
#      the copy that the warm-up runs staged in its ~/.cache/gorun/bin (the fixture's
#      hosts share root's home): 4x4 and 16x1 of /bin/true, with phases
#
# Parts 1 and 2 also time plain `ssh -F CONFIG hN true` to every host of the case in
# parallel (label "ssh"): the floor of any ssh-based launcher here. gorun (Go's x/crypto)
# negotiates curve25519-sha256 with this sshd, while OpenSSH's client (which both peers
# run) picks sntrup761x25519-sha512 by default, a slower exchange; so parts 1 and 2 also
# run both peers and the floor with KexAlgorithms PEER_KEX (labels "*-kex").
#
# Usage: bench/ssh.sh             (as root: network namespaces; from anywhere)
# Env:   RUNS        timed runs per command (default 10), after WARMUP (default 2)
#        TIMEOUT     per-run limit in seconds; a run over it is killed, counted as a hang
#                    and left out of the statistics (default 20)
#        BIG         hosts for part 3 (default 32); the fixture is stood up with BIG hosts
#        PARTS       which parts to run (default "1 2 3 4 5")
#        PEER_KEX    key exchange of the peers' second run in parts 1 and 2 (default
#                    curve25519-sha256, gorun's; "" leaves that run out)
#        KEEP_HOSTS  1: leave the hosts up at the end (and reuse hosts already up in STATE)
#        BEFORE      another gorun binary (an earlier build, static as this one) to run
#                    beside gorun in parts 1 and 2, as "before"; it is copied to
#                    bench/.bin/gorun-before, where the hosts see it
#        STATE       the fixture's state folder (default bench/.state/ssh, gitignored)
#        OUT         results folder (default bench/results/ssh-DATE), where the hosts see
#                    it: not under /tmp, /run or /dev/shm
# Output: markdown tables on stdout and in OUT/table.md; raw per-run JSON in OUT.
#
# Network: only loopback and the fixture's own subnet (10.213.X.0/24, on a bridge that
# exists only on this machine). Every measured command runs under `testhosts head`: a
# private mount namespace whose /etc/hosts lists h1..hN, so that no host name reaches
# DNS (Open MPI resolves the names itself; the ssh config maps each name to its IP).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-10}
WARMUP=${WARMUP:-2}
TIMEOUT=${TIMEOUT:-20}
BIG=${BIG:-32}
PARTS=${PARTS:-"1 2 3 4 5"}
PEER_KEX=${PEER_KEX-curve25519-sha256}
STATE=${STATE:-$BENCH/.state/ssh}
PY=$(command -v python3 || true)
TH=$BENCH/.bin/testhosts
GORUN=$BENCH/.bin/gorun
want() { [[ " $PARTS " == *" $1 "* ]]; }
hostlist() { # hostlist N SUFFIX: h1SUFFIX,h2SUFFIX,...,hNSUFFIX
  local i s=""
  for ((i = 1; i <= $1; i++)); do s+="${s:+,}h$i$2"; done
  echo "$s"
}

# ---------------------------------------------------------------------------------------
# Inside `testhosts head` (private /etc/hosts): the measurements.
if [ "${1:-}" = --in-head ]; then
  : "${OUT:?}" "${TESTHOSTS_SSH_CONFIG:?}" "${TESTHOSTS_SSH:?}" "${TESTHOSTS_SUBNET:?}" "${OMPI:?}" "${HYDRA:?}"
  # Never launch unless the names resolve, from the private hosts file, into our subnet.
  net=${TESTHOSTS_SUBNET%.0/24}
  for h in h1 "h$BIG"; do
    ip=$(getent hosts "$h" | awk '{print $1; exit}')
    [[ "$ip" == "$net".* ]] || { echo "ssh.sh: $h resolves to '$ip', not into $TESTHOSTS_SUBNET: not under testhosts head?" >&2; exit 1; }
  done
  CFG=$TESTHOSTS_SSH_CONFIG
  OMPI_X="$OMPI --allow-run-as-root --mca plm_rsh_args -F$CFG --mca oob_tcp_if_include $TESTHOSTS_SUBNET"
  HYDRA_X="$HYDRA -launcher ssh -launcher-exec $TESTHOSTS_SSH"
  GORUN_X="$GORUN --ssh-config $CFG"
  BEFORE_X=""
  [ -z "$BEFORE" ] || BEFORE_X="$BEFORE --ssh-config $CFG"
  # The peers again with PEER_KEX: a copy of the config (its last Host block matches
  # every host; the line lands there) and an ssh wrapper for hydra.
  CFG_K=$OUT/ssh_config-kex
  OMPI_K="$OMPI --allow-run-as-root --mca plm_rsh_args -F$CFG_K --mca oob_tcp_if_include $TESTHOSTS_SUBNET"
  HYDRA_K="$HYDRA -launcher ssh -launcher-exec $OUT/ssh-kex"
  # A scratch working folder the hosts also see (the head's /tmp is not theirs).
  SCRATCH=$OUT/scratch
  mkdir -p "$SCRATCH"
  cd "$SCRATCH"

  # placement CMD WANT: run CMD hostname once, compare "hN:count ..." with WANT.
  placement() {
    local label=$1 want=$2 got
    shift 2
    got=$(timeout "$TIMEOUT" "$@" hostname 2>"$OUT/placement.err" | sort -V | uniq -c | awk '{printf "%s:%s ", $2, $1}') || {
      echo "ssh.sh: $label failed: $*" >&2
      tail -5 "$OUT/placement.err" >&2
      exit 1
    }
    echo "placement $label: ${got:-nothing}" | tee -a "$OUT/env.txt"
    [ "$got" = "$want " ] || echo "WARNING: $label placed ranks as '$got', want '$want'" | tee -a "$OUT/env.txt" >&2
  }
  # compare FILE TAG NHOSTS HOSTFILE HOSTS NP CMD: the three launchers and the ssh floor.
  compare() {
    local file=$1 tag=$2 n=$3 hf=$4 hosts=$5 np=$6 cmd=$7
    echo "$tag..." >&2
    {
      echo "$tag:"
      echo "  gorun:   $GORUN_X --hostfile $hf -np $np $cmd"
      echo "  gorun-no-stage: $GORUN_X --no-stage --hostfile $hf -np $np $cmd"
      [ -z "$BEFORE_X" ] || echo "  before:  $BEFORE_X --hostfile $hf -np $np $cmd"
      echo "  openmpi: $OMPI_X --host $hosts -np $np $cmd"
      echo "  mpich:   $HYDRA_X -hosts $hosts -n $np $cmd"
      echo "  ssh:     $OUT/sshpar.sh $CFG $(hostlist "$n" "" | tr , ' ')"
      if [ -n "$PEER_KEX" ]; then
        echo "  openmpi-kex: $OMPI_K --host $hosts -np $np $cmd"
        echo "  mpich-kex:   $HYDRA_K -hosts $hosts -n $np $cmd"
        echo "  ssh-kex:     $OUT/sshpar.sh $CFG_K $(hostlist "$n" "" | tr , ' ')"
      fi
    } >> "$OUT/commands.txt"
    "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
      --json "$OUT/$file.json" --tag "$tag" \
      "gorun=$GORUN_X --hostfile $hf -np $np $cmd" \
      "gorun-no-stage=$GORUN_X --no-stage --hostfile $hf -np $np $cmd" \
      ${BEFORE_X:+"before=$BEFORE_X --hostfile $hf -np $np $cmd"} \
      "openmpi=$OMPI_X --host $hosts -np $np $cmd" \
      "mpich=$HYDRA_X -hosts $hosts -n $np $cmd" \
      "ssh=$OUT/sshpar.sh $CFG $(hostlist "$n" "" | tr , ' ')" \
      ${PEER_KEX:+"openmpi-kex=$OMPI_K --host $hosts -np $np $cmd"} \
      ${PEER_KEX:+"mpich-kex=$HYDRA_K -hosts $hosts -n $np $cmd"} \
      ${PEER_KEX:+"ssh-kex=$OUT/sshpar.sh $CFG_K $(hostlist "$n" "" | tr , ' ')"} \
      >> "$OUT/summary.tsv" || true
  }

  if want 1; then
    H44=$(hostlist 4 :4)
    placement "gorun 4x4" "h1:4 h2:4 h3:4 h4:4" $GORUN_X --hostfile "$OUT/hosts-4x4" -np 16
    placement "openmpi 4x4" "h1:4 h2:4 h3:4 h4:4" $OMPI_X --host "$H44" -np 16
    placement "mpich 4x4" "h1:4 h2:4 h3:4 h4:4" $HYDRA_X -hosts "$H44" -n 16
    compare p1-4x4-true "4 hosts x 4 ranks, /bin/true" 4 "$OUT/hosts-4x4" "$H44" 16 /bin/true
    compare p1-4x4-hostname "4 hosts x 4 ranks, hostname" 4 "$OUT/hosts-4x4" "$H44" 16 hostname
  fi
  if want 2; then
    H16=$(hostlist 16 "")
    want16=$(for ((i = 1; i <= 16; i++)); do printf 'h%d:1 ' "$i"; done)
    placement "gorun 16x1" "${want16% }" $GORUN_X --hostfile "$OUT/hosts-16x1" -np 16
    placement "openmpi 16x1" "${want16% }" $OMPI_X --host "$H16" -np 16
    placement "mpich 16x1" "${want16% }" $HYDRA_X -hosts "$H16" -n 16
    compare p2-16x1-true "16 hosts x 1 rank, /bin/true" 16 "$OUT/hosts-16x1" "$H16" 16 /bin/true
  fi
  if want 3; then
    echo "gorun alone, $BIG hosts..." >&2
    specs=()
    for r in 1 4; do
      for f in 0 4 8; do
        name="${BIG}x$r-flat"
        [ "$f" = 0 ] || name="${BIG}x$r-fanout$f"
        specs+=("$name=$GORUN_X --hostfile $OUT/hosts-${BIG}x$r -np $((BIG * r)) --launch-fanout $f --summary-json @SUMMARY@ /bin/true")
      done
    done
    { echo "gorun, $BIG hosts:"; printf '  %s\n' "${specs[@]}"; } >> "$OUT/commands.txt"
    "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
      --json "$OUT/p3-gorun-$BIG.json" --tag "gorun, $BIG hosts" --summary-dir "$OUT/summaries" \
      "${specs[@]}" >> "$OUT/summary.tsv" || true
  fi
  if want 4; then
    echo "where gorun's time goes..." >&2
    specs=()
    for c in 4x4:16 16x1:16 "${BIG}x1:$BIG"; do
      hf=${c%%:*} np=${c##*:}
      specs+=("$hf=$GORUN_X --hostfile $OUT/hosts-$hf -np $np --summary-json @SUMMARY@ /bin/true")
      specs+=("$hf-no-stage=$GORUN_X --no-stage --hostfile $OUT/hosts-$hf -np $np --summary-json @SUMMARY@ /bin/true")
    done
    specs+=("ssh-h1-default-kex=ssh -F $CFG h1 true")
    [ -z "$PEER_KEX" ] || specs+=("ssh-h1-$PEER_KEX=ssh -F $CFG_K h1 true")
    { echo "where gorun's time goes:"; printf '  %s\n' "${specs[@]}"; } >> "$OUT/commands.txt"
    "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
      --json "$OUT/p4-stage.json" --tag "gorun staging check" --summary-dir "$OUT/summaries" \
      "${specs[@]}" >> "$OUT/summary.tsv" || true
  fi
  if want 5; then
    echo "staged against shared..." >&2
    : "${STAGED:?}"
    specs=()
    for c in 4x4:16 16x1:16; do
      hf=${c%%:*} np=${c##*:}
      specs+=("$hf-shared=$GORUN_X --hostfile $OUT/hosts-$hf -np $np --summary-json @SUMMARY@ /bin/true")
      specs+=("$hf-staged=$STAGED --ssh-config $CFG --hostfile $OUT/hosts-$hf -np $np --summary-json @SUMMARY@ /bin/true")
    done
    { echo "staged against shared (warm-ups stage the copy):"; printf '  %s\n' "${specs[@]}"; } >> "$OUT/commands.txt"
    "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
      --json "$OUT/p5-staged.json" --tag "gorun staged against shared" --summary-dir "$OUT/summaries" \
      "${specs[@]}" >> "$OUT/summary.tsv" || true
  fi
  exit 0
fi

# ---------------------------------------------------------------------------------------
# Outside: checks, build, the fixture, then the measurements under `testhosts head`.
[ "$(id -u)" = 0 ] || { echo "ssh.sh: needs root (the fake hosts are network namespaces)" >&2; exit 1; }
[ -n "$PY" ] || { echo "ssh.sh: needs python3" >&2; exit 1; }
command -v go >/dev/null || { echo "ssh.sh: needs go" >&2; exit 1; }
OMPI=$(command -v mpirun.openmpi || true)
if [ -z "$OMPI" ] && command -v mpirun >/dev/null && mpirun --version 2>&1 | grep -q "Open MPI"; then
  OMPI=$(command -v mpirun)
fi
HYDRA=$(command -v mpiexec.hydra || true)
SSHD=$(command -v sshd || { [ -x /usr/sbin/sshd ] && echo /usr/sbin/sshd; } || true)
if [ -z "$OMPI" ] || [ -z "$HYDRA" ] || [ -z "$SSHD" ] || ! command -v ssh >/dev/null; then
  echo "ssh.sh: needs Open MPI's mpirun.openmpi, MPICH's mpiexec.hydra and OpenSSH's sshd:" \
    "apt-get install openmpi-bin mpich openssh-server openssh-client" >&2
  exit 1
fi
[ "$BIG" -ge 16 ] || { echo "ssh.sh: BIG must be at least 16 (part 2 uses 16 hosts)" >&2; exit 1; }

echo "building gorun and testhosts..." >&2
# Static gorun (no ld.so in every agent); both under bench/.bin, which the hosts see
# (they share the file system except /tmp, /run and /dev/shm).
(cd "$ROOT" && CGO_ENABLED=0 go build -o bench/.bin/gorun ./cmd/gorun && go build -o bench/.bin/testhosts ./testhosts/cmd/testhosts)

OUT=${OUT:-$BENCH/results/ssh-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" "$(dirname "$STATE")"
OUT=$(cd "$OUT" && pwd -P)
# The ranks start in OUT/scratch on the hosts, whose /tmp, /run and /dev/shm are their own.
case "$OUT/" in
  /tmp/* | /run/* | /dev/shm/*)
    echo "ssh.sh: OUT=$OUT: the fake hosts do not see it (their /tmp, /run and /dev/shm are their own); give a folder elsewhere" >&2
    exit 1
    ;;
esac

# The fixture: BIG hosts h1..hBIG (parts 1 and 2 use the first 4 and 16).
started=0
STAGED_DIR=""
cleanup() {
  if [ -n "$STAGED_DIR" ]; then rm -rf "$STAGED_DIR"; fi
  if [ "$started" = 1 ] && [ "${KEEP_HOSTS:-0}" != 1 ]; then "$TH" --state "$STATE" down >&2 || true; fi
}
trap cleanup EXIT
if [ "${KEEP_HOSTS:-0}" = 1 ] && "$TH" --state "$STATE" status >/dev/null 2>&1 &&
  [ "$(eval "$("$TH" --state "$STATE" env)"; echo "$TESTHOSTS_N")" -ge "$BIG" ]; then
  echo "reusing the hosts up in $STATE" >&2
else
  started=1 # also when up fails halfway: down removes what it left
  "$TH" --state "$STATE" up "$BIG" >&2
fi
eval "$("$TH" --state "$STATE" env)"
[[ "$TESTHOSTS_SUBNET" =~ ^10\.213\.[0-9]+\.0/24$ ]] || { echo "ssh.sh: unexpected subnet $TESTHOSTS_SUBNET" >&2; exit 1; }

# Host files (gorun) and the parallel-ssh floor helper.
hostfile() { for ((i = 1; i <= $1; i++)); do echo "h$i slots=$2"; done > "$OUT/hosts-$1x$2"; }
hostfile 4 4
hostfile 16 1
hostfile "$BIG" 1
hostfile "$BIG" 4
cat > "$OUT/sshpar.sh" <<'EOF'
#!/bin/sh
# sshpar.sh CONFIG HOST...: `ssh -F CONFIG HOST true` to every HOST at once; fails if one fails.
cfg=$1; shift
pids=""
for h in "$@"; do ssh -F "$cfg" "$h" true & pids="$pids $!"; done
rc=0
for p in $pids; do wait "$p" || rc=1; done
exit $rc
EOF
chmod 755 "$OUT/sshpar.sh"
if [ -n "$PEER_KEX" ]; then
  [[ "$PEER_KEX" =~ ^[a-z0-9@.,+-]+$ ]] || { echo "ssh.sh: bad PEER_KEX '$PEER_KEX'" >&2; exit 1; }
  { cat "$TESTHOSTS_SSH_CONFIG"; echo "  KexAlgorithms $PEER_KEX"; } > "$OUT/ssh_config-kex"
  chmod 600 "$OUT/ssh_config-kex"
  printf '#!/bin/sh\nexec ssh -F %s "$@"\n' "$OUT/ssh_config-kex" > "$OUT/ssh-kex"
  chmod 755 "$OUT/ssh-kex"
fi

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "go: $(go version)"
  dirty=$(git -C "$ROOT" --no-optional-locks status --porcelain -uno -- . ":(exclude)bench" 2>/dev/null | wc -l)
  echo "gorun: $($GORUN --version 2>&1 | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?) ($dirty files changed since)"
  echo "openmpi: $OMPI: $("$OMPI" --version 2>&1 | head -1)"
  echo "mpich: $HYDRA: $("$HYDRA" --version 2>&1 | grep -m1 -i 'version')"
  echo "openssh: $(ssh -V 2>&1) (client); sshd: $("$SSHD" -V 2>&1 | head -1 || true)"
  echo "ssh kex (OpenSSH client -> h1): $("$TH" --state "$STATE" head ssh -v -F "$TESTHOSTS_SSH_CONFIG" h1 true 2>&1 | sed -n 's/.*kex: algorithm: //p' | head -1)"
  echo "fixture: $BIG hosts, subnet $TESTHOSTS_SUBNET, state $STATE"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP TIMEOUT=$TIMEOUT BIG=$BIG PARTS='$PARTS' PEER_KEX='$PEER_KEX'"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/env.txt"
cat "$OUT/env.txt"

BEFORE_SRC=${BEFORE:-}
BEFORE=""
if [ -n "$BEFORE_SRC" ]; then
  [ -x "$BEFORE_SRC" ] || { echo "ssh.sh: BEFORE=$BEFORE_SRC: not an executable" >&2; exit 1; }
  cp "$BEFORE_SRC" "$BENCH/.bin/gorun-before"
  BEFORE=$BENCH/.bin/gorun-before
  echo "before: $BEFORE_SRC: $("$BEFORE" --version 2>&1 | head -1)" | tee -a "$OUT/env.txt"
fi

# Part 5's gorun at a path that only the head has: its /tmp (the hosts' /tmp is theirs).
STAGED=""
if want 5; then
  STAGED_DIR=$(mktemp -d /tmp/gorun-bench-staged.XXXXXX)
  cp "$GORUN" "$STAGED_DIR/gorun"
  STAGED=$STAGED_DIR/gorun
fi

export OUT RUNS WARMUP TIMEOUT BIG PARTS PEER_KEX PY GORUN OMPI HYDRA STAGED BEFORE
export TESTHOSTS_SSH_CONFIG TESTHOSTS_SSH TESTHOSTS_SUBNET
"$TH" --state "$STATE" head "$BENCH/ssh.sh" --in-head
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

{
  echo
  echo "## Launch over SSH (ms: median (min-max) of $RUNS runs, interleaved, after $WARMUP warm-ups; per-run timeout ${TIMEOUT}s)"
  echo
  files=()
  for f in p1-4x4-true p1-4x4-hostname p2-16x1-true; do
    if [ -f "$OUT/$f.json" ]; then files+=("$OUT/$f.json"); fi
  done
  if [ ${#files[@]} != 0 ]; then
    "$PY" "$BENCH/table.py" --by-tag "${files[@]}"
    if [ -n "$PEER_KEX" ]; then
      echo
      echo "The same runs: gorun against the peers with KexAlgorithms $PEER_KEX (gorun's key exchange) in their ssh config"
      echo
      "$PY" "$BENCH/table.py" --by-tag-kex "${files[@]}"
    fi
  fi
  if [ -f "$OUT/p3-gorun-$BIG.json" ]; then
    echo
    echo "## gorun alone, $BIG hosts (phases: medians from --summary-json, ms from gorun's start)"
    echo
    "$PY" "$BENCH/table.py" --phases "$OUT/p3-gorun-$BIG.json"
  fi
  if [ -f "$OUT/p4-stage.json" ]; then
    echo
    echo "## Where gorun's time goes: the staging check (--no-stage skips it), and OpenSSH's key exchanges"
    echo
    "$PY" "$BENCH/table.py" --phases "$OUT/p4-stage.json"
  fi
  if [ -f "$OUT/p5-staged.json" ]; then
    echo
    echo "## A staged gorun (a copy in each host's cache, from the warm-ups) against a shared one"
    echo
    "$PY" "$BENCH/table.py" --phases "$OUT/p5-staged.json"
  fi
} | tee "$OUT/table.md"
echo
echo "raw results: $OUT"

#!/usr/bin/env bash
# realscale.sh - launch over SSH at 16 to 128 real sshd hosts (the testhosts fixture:
# network namespaces, one OpenSSH sshd each, all on this machine's CPUs): gorun against
# MPICH's mpiexec.hydra (ssh bootstrap) and Open MPI's mpirun (rsh/ssh launcher),
# interleaved in rounds (gorun, hydra, Open MPI, gorun, ...), with where the CPU goes:
#
#   1. for H in HOSTS: H hosts x 1 rank of /bin/true: gorun flat (--launch-fanout 0) and
#      with --launch-fanout 8, hydra (-ppn 1), Open MPI; wall time, the launcher's own CPU
#      (gorun: user+sys of the head, which starts no process: Go's SSH library; the peers:
#      theirs plus their ssh clients'), the CPU of everything on the hosts, gorun's
#      --summary-json phases and head RSS
#   2. MAXH hosts x 4 ranks of hostname (-np 4*MAXH): gorun, hydra, Open MPI
#   3. MAXH hosts x 1 rank of examples/mpi/hello.c: gorun and hydra run the MPICH build
#      (mpicc.mpich), Open MPI's mpirun the Open MPI build (mpicc.openmpi)
#   4. where the time goes at MAXH hosts: gorun with and without --no-stage, and plain
#      `ssh hN true` to every host at once with gorun's key exchange (the floor of the
#      host side: sshd's fork, re-exec and key exchange, a shell, true); one gorun run
#      under strace (does the head start any process?); one gorun run and one hydra run
#      under `perf record -a -g` (CPU by process and by what it did - exec, fork, page
#      faults, the dynamic loader, crypto, Go's start-up and GC - and the head's functions),
#      when perf is installed
#
# Every command first runs once as a check (placement: hostname counts per host; hello:
# "hello from N ranks"); that run is also its warm-up. A mismatch is a WARNING in
# OUT/checks.txt and the case is timed anyway.
#
# Usage: bench/realscale.sh       (as root: network namespaces, a cpuacct cgroup, perf)
# Env:   RUNS        timed runs per command (default 5), after WARMUP more (default 0)
#        TIMEOUT     per-run limit in seconds; a run over it is killed with what it
#                    started, counted as a hang and left out (default 60)
#        HOSTS       host counts of part 1 (default "16 32 64 128"); the fixture is
#                    stood up once with the largest (MAXH), parts 2-4 use MAXH
#        PARTS       which parts to run (default "1 2 3 4")
#        QUIET_WAIT  before each run, wait up to this many seconds for the machine to be
#                    nearly idle (other users' jobs; default 2; 0: never wait)
#        FANOUT      gorun's --launch-fanout in parts 2-4 (default 0: flat, every agent from the
#                    head, whatever the build's default; "auto" or K to measure another)
#        SRC         the source tree to build gorun from with `make build` (default: this
#                    checkout; e.g. an export of a commit while the checkout is mid-edit:
#                    git archive HEAD | tar -x -C DIR)
#        PERF_FREQ   perf record's sampling rate in part 4 (default 2999 Hz; 0: no perf)
#        KEEP_HOSTS  1: leave the hosts up at the end (and reuse hosts already up in STATE)
#        STATE       the fixture's state folder (default bench/.state/realscale, gitignored)
#        OUT         results folder (default bench/results/realscale-DATE)
# Output: markdown tables on stdout and in OUT/table.md; raw per-run JSON in OUT
# (realscale_run.py's records), the exact commands in OUT/commands.txt, every perf sample
# with its stack in OUT/perf-WHO.script.gz and their sums in OUT/perf-WHO.json.
#
# gorun is built with `make build` (./gorun, cgo) and copied with gorun-static into a
# work folder under /var/tmp (so that an edit or rebuild of the checkout during the run
# does not change what is measured), which the hosts see (they share this machine's file
# system except /tmp, /run and /dev/shm) and which is every run's working directory.
#
# CPU accounting: every fake host's sshd is moved into a cgroup-v1 cpuacct group of its
# own (gorun-realscale-PID) that its children inherit, so cpuacct.usage gives, in
# nanoseconds, the CPU of everything a run started on the hosts; the launcher's own CPU
# comes from wait4's rusage (see realscale_run.py). The group is removed at the end.
#
# Network: only loopback and the fixture's own subnet (10.213.X.0/24, on a bridge that
# exists only on this machine). Every measured command runs under `testhosts head`: a
# private mount namespace whose /etc/hosts lists h1..hN; in it this script also
# bind-mounts an nsswitch.conf with "hosts: files" and a resolv.conf naming only
# 127.0.0.1, so that no name (a test host's or a typo's) can reach a DNS server.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
SRC=$(cd "${SRC:-$ROOT}" && pwd)
FANOUT=${FANOUT:-0}
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-0}
TIMEOUT=${TIMEOUT:-60}
HOSTS=${HOSTS:-"16 32 64 128"}
PARTS=${PARTS:-"1 2 3 4"}
PERF_FREQ=${PERF_FREQ:-2999}
QUIET_WAIT=${QUIET_WAIT:-2}
STATE=${STATE:-$BENCH/.state/realscale}
PY=$(command -v python3 || true)
TH=$BENCH/.bin/testhosts
want() { [[ " $PARTS " == *" $1 "* ]]; }
die() { echo "realscale.sh: $*" >&2; exit 1; }
hostlist() { # hostlist N SUFFIX: h1SUFFIX,h2SUFFIX,...,hNSUFFIX
  local i s=""
  for ((i = 1; i <= $1; i++)); do s+="${s:+,}h$i$2"; done
  echo "$s"
}

# ---------------------------------------------------------------------------------------
# Inside `testhosts head` (private /etc/hosts): the measurements.
if [ "${1:-}" = --in-head ]; then
  : "${OUT:?}" "${WORK:?}" "${CG:?}" "${MAXH:?}" "${TESTHOSTS_SSH_CONFIG:?}" "${TESTHOSTS_SSH:?}" "${TESTHOSTS_SUBNET:?}"
  # No DNS in here: names come from the private /etc/hosts or nowhere.
  mount --bind "$OUT/nsswitch.conf" /etc/nsswitch.conf
  mount --bind "$OUT/resolv.conf" /etc/resolv.conf
  grep -q '^hosts:[[:space:]]*files[[:space:]]*$' /etc/nsswitch.conf || die "the private nsswitch.conf is not in place"
  net=${TESTHOSTS_SUBNET%.0/24}
  for h in h1 "h$MAXH"; do
    ip=$(getent hosts "$h" | awk '{print $1; exit}')
    [[ "$ip" == "$net".* ]] || die "$h resolves to '$ip', not into $TESTHOSTS_SUBNET: not under testhosts head?"
  done
  CFG=$TESTHOSTS_SSH_CONFIG
  G="$WORK/gorun --ssh-config $CFG"
  GF="$G --launch-fanout $FANOUT" # parts 2-4
  HY="$HYDRA -launcher ssh -launcher-exec $TESTHOSTS_SSH"
  OM="$OMPI --allow-run-as-root --mca plm_rsh_args -F$CFG --mca oob_tcp_if_include $TESTHOSTS_SUBNET"
  cd "$WORK"
  RUN=("$PY" "$BENCH/realscale_run.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT"
    --hosts-cgroup "$CG" --quiet-wait "$QUIET_WAIT")

  # placement LABEL WANT CMD...: run CMD once; "hN:count ..." of its output must be WANT.
  placement() {
    local label=$1 want=$2 got rc=0
    shift 2
    got=$(timeout -k 10 "$TIMEOUT" "$@" 2>"$OUT/check-${label// /_}.err" | sort -V | uniq -c | awk '{printf "%s:%s ", $2, $1}') || rc=$?
    echo "placement $label: rc=$rc ${got:-nothing}" >> "$OUT/checks.txt"
    [ "$got" = "$want " ] || echo "WARNING: $label: rc=$rc, placed ranks as '${got:0:200}', want '${want:0:60}...' (stderr: $OUT/check-${label// /_}.err)" | tee -a "$OUT/checks.txt" >&2
  }
  # check LABEL WANT CMD...: run CMD once; its stdout must be WANT.
  check() {
    local label=$1 want=$2 got rc=0
    shift 2
    got=$(timeout -k 10 "$TIMEOUT" "$@" 2>"$OUT/check-${label// /_}.err") || rc=$?
    got=$(printf '%s' "$got" | tr '\n' ' ' | sed 's/ $//')
    echo "check $label: rc=$rc, printed '${got:0:200}'" >> "$OUT/checks.txt"
    [ "$rc" = 0 ] && [ "$got" = "$want" ] || echo "WARNING: $label: rc=$rc, printed '${got:0:200}', want '$want' (stderr: $OUT/check-${label// /_}.err)" | tee -a "$OUT/checks.txt" >&2
  }
  # measure FILE TAG LABEL=CMD...: the commands in rounds, into OUT/FILE.json.
  measure() {
    local file=$1 tag=$2
    shift 2
    echo "$tag... ($(date +%T))" >&2
    { echo "$tag:"; printf '  %s\n' "$@"; } >> "$OUT/commands.txt"
    "${RUN[@]}" --json "$OUT/$file.json" --tag "$tag" --summary-dir "$OUT/summaries/$file" "$@" >> "$OUT/summary.tsv" || true
  }
  want_n() { # want_n N R: "h1:R h2:R ... hN:R"
    local i s=""
    for ((i = 1; i <= $1; i++)); do s+="${s:+ }h$i:$2"; done
    echo "$s"
  }

  if want 1; then
    for h in $HOSTS; do
      w=$(want_n "$h" 1)
      placement "gorun flat ${h}x1" "$w" $G --hostfile "$OUT/hosts-$MAXH" -N 1 -np "$h" --launch-fanout 0 hostname
      placement "gorun fanout8 ${h}x1" "$w" $G --hostfile "$OUT/hosts-$MAXH" -N 1 -np "$h" --launch-fanout 8 hostname
      placement "mpich ${h}x1" "$w" $HY -f "$OUT/hosts-$MAXH.mpich" -ppn 1 -n "$h" hostname
      placement "openmpi ${h}x1" "$w" $OM --host "$(hostlist "$h" "")" -np "$h" hostname
      measure "p1-${h}x1" "$h hosts x 1 rank, /bin/true" \
        "gorun-flat=$G --hostfile $OUT/hosts-$MAXH -N 1 -np $h --launch-fanout 0 --summary-json @SUMMARY@ /bin/true" \
        "gorun-fanout8=$G --hostfile $OUT/hosts-$MAXH -N 1 -np $h --launch-fanout 8 --summary-json @SUMMARY@ /bin/true" \
        "mpich=$HY -f $OUT/hosts-$MAXH.mpich -ppn 1 -n $h /bin/true" \
        "openmpi=$OM --host $(hostlist "$h" "") -np $h /bin/true"
    done
  fi
  if want 2; then
    np=$((4 * MAXH))
    w=$(want_n "$MAXH" 4)
    placement "gorun ${MAXH}x4" "$w" $GF --hostfile "$OUT/hosts-$MAXH" -np "$np" hostname
    placement "mpich ${MAXH}x4" "$w" $HY -f "$OUT/hosts-$MAXH.mpich" -n "$np" hostname
    placement "openmpi ${MAXH}x4" "$w" $OM --host "$(hostlist "$MAXH" :4)" -np "$np" hostname
    measure "p2-${MAXH}x4" "$MAXH hosts x 4 ranks, hostname" \
      "gorun=$GF --hostfile $OUT/hosts-$MAXH -np $np --summary-json @SUMMARY@ hostname" \
      "mpich=$HY -f $OUT/hosts-$MAXH.mpich -n $np hostname" \
      "openmpi=$OM --host $(hostlist "$MAXH" :4) -np $np hostname"
  fi
  if want 3; then
    check "gorun hello ${MAXH}x1" "hello from $MAXH ranks" $GF --hostfile "$OUT/hosts-$MAXH" -N 1 -np "$MAXH" ./hello
    check "mpich hello ${MAXH}x1" "hello from $MAXH ranks" $HY -f "$OUT/hosts-$MAXH.mpich" -ppn 1 -n "$MAXH" ./hello
    check "openmpi hello ${MAXH}x1" "hello from $MAXH ranks" $OM --host "$(hostlist "$MAXH" "")" -np "$MAXH" ./hello_ompi
    measure "p3-hello-${MAXH}x1" "MPI hello, $MAXH hosts x 1 rank" \
      "gorun=$GF --hostfile $OUT/hosts-$MAXH -N 1 -np $MAXH --summary-json @SUMMARY@ ./hello" \
      "mpich=$HY -f $OUT/hosts-$MAXH.mpich -ppn 1 -n $MAXH ./hello" \
      "openmpi=$OM --host $(hostlist "$MAXH" "") -np $MAXH ./hello_ompi"
  fi
  if want 4; then
    g1="$GF --hostfile $OUT/hosts-$MAXH -N 1 -np $MAXH"
    placement "gorun no-stage ${MAXH}x1" "$(want_n "$MAXH" 1)" $g1 --no-stage hostname
    check "ssh floor $MAXH" "" "$OUT/sshpar.sh" "$OUT/ssh_config-kex" $(hostlist "$MAXH" "" | tr , ' ')
    measure "p4-where-$MAXH" "where the time goes, $MAXH hosts" \
      "gorun=$g1 --summary-json @SUMMARY@ /bin/true" \
      "gorun-no-stage=$g1 --no-stage --summary-json @SUMMARY@ /bin/true" \
      "ssh-true-curve25519=$OUT/sshpar.sh $OUT/ssh_config-kex $(hostlist "$MAXH" "" | tr , ' ')"
    # Does the head start any process? Every execve, fork and non-thread clone of one run.
    if command -v strace >/dev/null; then
      echo "strace of one gorun run... ($(date +%T))" >&2
      # shellcheck disable=SC2086 # g1 is a word list
      timeout -k 10 "$TIMEOUT" strace -f -qq -e trace=execve,fork,vfork,clone,clone3 -o "$OUT/strace-gorun.txt" \
        $g1 /bin/true > /dev/null 2>&1 || echo "WARNING: gorun under strace failed" | tee -a "$OUT/checks.txt" >&2
      {
        echo "strace of gorun ${MAXH}x1 /bin/true: execve calls: $(grep -c 'execve(' "$OUT/strace-gorun.txt" || true)," \
          "clone/clone3 without CLONE_THREAD: $(grep -E 'clone3?\(' "$OUT/strace-gorun.txt" | grep -vc CLONE_THREAD || true)," \
          "fork/vfork: $(grep -cE '\b(v?fork)\(' "$OUT/strace-gorun.txt" || true)," \
          "threads made: $(grep -E 'clone3?\(' "$OUT/strace-gorun.txt" | grep -c CLONE_THREAD || true)"
      } | tee -a "$OUT/checks.txt" >&2
    fi
    if [ "$PERF_FREQ" != 0 ] && command -v perf >/dev/null; then
      for who in gorun mpich; do
        echo "perf record -a of one $who run... ($(date +%T))" >&2
        if [ $who = gorun ]; then cmd="$g1 /bin/true"; else cmd="$HY -f $OUT/hosts-$MAXH.mpich -ppn 1 -n $MAXH /bin/true"; fi
        echo "perf $who: perf record -a -g -F $PERF_FREQ -- $cmd" >> "$OUT/commands.txt"
        # shellcheck disable=SC2086,SC2016 # cmd is a word list; $$ is sh's
        timeout -k 10 "$TIMEOUT" perf record -q -a -g -F "$PERF_FREQ" -o "$OUT/perf-$who.data" -- \
          /bin/sh -c 'echo $$ > "$0"; exec "$@"' "$OUT/perf-$who.pid" $cmd > /dev/null 2> "$OUT/perf-$who.err" ||
          echo "WARNING: perf record of $who failed (see $OUT/perf-$who.err)" | tee -a "$OUT/checks.txt" >&2
        # Every sample with its call stack (perf report's --pid and pid sort key are per
        # thread or follow the children; realscale_table.py sums by process itself).
        perf script -i "$OUT/perf-$who.data" -F comm,pid,tid,ip,sym,dso 2>/dev/null | gzip -1 > "$OUT/perf-$who.script.gz" || true
        cp "$OUT/perf-$who.pid" "$OUT/perf-$who.headpid"
      done
      rm -f "$OUT"/perf-*.data
    else
      echo "perf: not installed or PERF_FREQ=0: no profile" | tee -a "$OUT/checks.txt" >&2
    fi
  fi
  exit 0
fi

# ---------------------------------------------------------------------------------------
# Outside: checks, build, the fixture, the cgroup, then the measurements under `testhosts head`.
t_start=$(date +%s)
[ "$(id -u)" = 0 ] || die "needs root (the fake hosts are network namespaces)"
[ -n "$PY" ] || die "needs python3"
command -v go >/dev/null || die "needs go"
command -v make >/dev/null || die "needs make"
OMPI=$(command -v mpirun.openmpi || true)
HYDRA=$(command -v mpiexec.hydra || true)
MPICC_MPICH=$(command -v mpicc.mpich || true)
MPICC_OMPI=$(command -v mpicc.openmpi || true)
SSHD=$(command -v sshd || { [ -x /usr/sbin/sshd ] && echo /usr/sbin/sshd; } || true)
if [ -z "$OMPI" ] || [ -z "$HYDRA" ] || [ -z "$SSHD" ] || ! command -v ssh >/dev/null; then
  die "needs Open MPI's mpirun.openmpi, MPICH's mpiexec.hydra and OpenSSH: apt-get install openmpi-bin mpich openssh-server openssh-client"
fi
if want 3 && { [ -z "$MPICC_MPICH" ] || [ -z "$MPICC_OMPI" ]; }; then
  die "part 3 needs mpicc.mpich and mpicc.openmpi: apt-get install libmpich-dev libopenmpi-dev"
fi
MAXH=0
for h in $HOSTS; do
  [[ "$h" =~ ^[0-9]+$ ]] && [ "$h" -ge 1 ] && [ "$h" -le 200 ] || die "bad host count '$h' in HOSTS (1 to 200)"
  [ "$h" -le "$MAXH" ] || MAXH=$h
done
CGROOT=/sys/fs/cgroup/cpuacct
[ -w "$CGROOT/cgroup.procs" ] || die "needs a writable cgroup-v1 cpuacct hierarchy at $CGROOT"

# Limits for MAXH hosts on this machine: the peers hold about 3 descriptors per host
# (an ssh client's pipes), the head one socket per host; each host's sshd, shell and
# agent take some 10-20 MiB while a run is going, and part 2 starts 4 ranks per host.
need_fd=$((8 * MAXH + 256))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need_fd" ]; then
  ulimit -n "$need_fd" 2>/dev/null || die "ulimit -n is $(ulimit -n); $MAXH hosts need about $need_fd"
fi
avail_mib=$(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo)
[ "$avail_mib" -ge $((MAXH * 40 + 512)) ] || die "only $avail_mib MiB available; $MAXH hosts need about $((MAXH * 40 + 512))"
[ "$(cat /proc/sys/kernel/pid_max)" -ge $((MAXH * 64)) ] || die "kernel.pid_max is below $((MAXH * 64))"

OUT=${OUT:-$BENCH/results/realscale-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" "$(dirname "$STATE")"
WORK=$(mktemp -d /var/tmp/gorun-bench-realscale.XXXXXX)
CG=$CGROOT/gorun-realscale-$$
started=0
cleanup() {
  if [ "$started" = 1 ] && [ "${KEEP_HOSTS:-0}" != 1 ]; then "$TH" --state "$STATE" down >&2 || true; fi
  if [ -d "$CG" ]; then
    # Whatever is left in the group (hosts kept up) goes back to the root group.
    for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do echo "$p" > "$CGROOT/cgroup.procs" 2>/dev/null || true; done
    rmdir "$CG" 2>/dev/null || echo "realscale.sh: could not remove $CG" >&2
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "building gorun (make build in $SRC), testhosts and hello in $WORK... ($(date +%T))" >&2
(
  cd "$SRC"
  make build > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log" >&2; exit 1; }
  cp gorun gorun-static "$WORK/"
  go build -o "$TH" ./testhosts/cmd/testhosts
  if want 3; then
    "$MPICC_MPICH" -O1 -o "$WORK/hello" examples/mpi/hello.c
    "$MPICC_OMPI" -O1 -o "$WORK/hello_ompi" examples/mpi/hello.c
  fi
)

# The fixture: MAXH hosts h1..hMAXH; the smaller cases use the first H.
if [ "${KEEP_HOSTS:-0}" = 1 ] && "$TH" --state "$STATE" status >/dev/null 2>&1 &&
  [ "$(eval "$("$TH" --state "$STATE" env)"; echo "$TESTHOSTS_N")" -ge "$MAXH" ]; then
  echo "reusing the hosts up in $STATE" >&2
else
  started=1 # also when up fails halfway: down removes what it left
  t0=$(date +%s%N)
  "$TH" --state "$STATE" up "$MAXH" >&2
  echo "fixture: up $MAXH took $((($(date +%s%N) - t0) / 1000000)) ms" >> "$OUT/env.txt"
fi
eval "$("$TH" --state "$STATE" env)"
[[ "$TESTHOSTS_SUBNET" =~ ^10\.213\.[0-9]+\.0/24$ ]] || die "unexpected subnet $TESTHOSTS_SUBNET"

# The hosts' sshd daemons into a cpuacct group of their own (their children inherit it).
mkdir "$CG"
for p in $("$PY" -c 'import json, sys; print(" ".join(str(h["SSHDPid"]) for h in json.load(open(sys.argv[1]))["Hosts"]))' "$STATE/cluster.json"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sshd ] || die "pid $p of $STATE/cluster.json is not an sshd"
  echo "$p" > "$CG/cgroup.procs"
done
[ "$(wc -l < "$CG/cgroup.procs")" = "$TESTHOSTS_N" ] || die "the cgroup holds $(wc -l < "$CG/cgroup.procs") processes, want the $TESTHOSTS_N sshd"

# Host files: gorun reads Open MPI's syntax, hydra MPICH's (it rejects slots=).
for ((i = 1; i <= MAXH; i++)); do echo "h$i slots=4"; done > "$OUT/hosts-$MAXH"
for ((i = 1; i <= MAXH; i++)); do echo "h$i:4"; done > "$OUT/hosts-$MAXH.mpich"
# No DNS under testhosts head (bind-mounted there by --in-head).
sed 's/^hosts:.*/hosts:          files/' /etc/nsswitch.conf > "$OUT/nsswitch.conf"
grep -q '^hosts:' "$OUT/nsswitch.conf" || echo 'hosts:          files' >> "$OUT/nsswitch.conf"
echo 'nameserver 127.0.0.1' > "$OUT/resolv.conf"
# Part 4's floor: OpenSSH with gorun's key exchange, to every host at once.
{ cat "$TESTHOSTS_SSH_CONFIG"; echo "  KexAlgorithms curve25519-sha256"; } > "$OUT/ssh_config-kex"
chmod 600 "$OUT/ssh_config-kex"
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

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo); ulimit -n $(ulimit -n)"
  echo "go: $(go version)"
  dirty=$({ git -C "$SRC" --no-optional-locks status --porcelain -uno -- . ":(exclude)bench" 2>/dev/null || true; } | wc -l)
  echo "gorun: $("$WORK/gorun" --version 2>&1 | head -1) (make build, cgo) from $SRC, commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo "? (not a git checkout)") ($dirty files changed since); this checkout is at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "gorun's default: $(cd "$WORK" && ./gorun config 2>/dev/null | grep -m1 launch-fanout || echo ?); parts 2-4 run --launch-fanout $FANOUT"
  echo "openmpi: $OMPI: $("$OMPI" --version 2>&1 | head -1)"
  echo "mpich: $HYDRA: $("$HYDRA" --version 2>&1 | grep -m1 -i 'version')"
  echo "openssh: $(ssh -V 2>&1) (client); sshd $("$SSHD" -V 2>&1 | head -1 || true)"
  echo "perf: $(perf --version 2>/dev/null || echo none); strace: $(strace -V 2>/dev/null | head -1 || echo none)"
  echo "fixture: $MAXH hosts, subnet $TESTHOSTS_SUBNET, state $STATE; cpuacct group $CG"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP TIMEOUT=$TIMEOUT HOSTS='$HOSTS' PARTS='$PARTS' FANOUT=$FANOUT PERF_FREQ=$PERF_FREQ QUIET_WAIT=$QUIET_WAIT"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >> "$OUT/env.txt"
cat "$OUT/env.txt"

export OUT WORK CG MAXH HOSTS FANOUT RUNS WARMUP TIMEOUT PARTS PERF_FREQ QUIET_WAIT PY OMPI HYDRA
export TESTHOSTS_SSH_CONFIG TESTHOSTS_SSH TESTHOSTS_SUBNET
"$TH" --state "$STATE" head "$BENCH/realscale.sh" --in-head
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

{
  echo
  echo "## gorun, MPICH hydra and Open MPI on H real sshd hosts ($(nproc) CPUs; median (min-max) of $RUNS runs, interleaved; per-run timeout ${TIMEOUT}s)"
  files=()
  for h in $HOSTS; do [ ! -f "$OUT/p1-${h}x1.json" ] || files+=("$OUT/p1-${h}x1.json"); done
  [ ! -f "$OUT/p2-${MAXH}x4.json" ] || files+=("$OUT/p2-${MAXH}x4.json")
  [ ! -f "$OUT/p3-hello-${MAXH}x1.json" ] || files+=("$OUT/p3-hello-${MAXH}x1.json")
  [ ${#files[@]} = 0 ] || "$PY" "$BENCH/realscale_table.py" --scale "${files[@]}"
  if [ -f "$OUT/p4-where-$MAXH.json" ]; then
    echo
    echo "## Where the time goes, $MAXH hosts"
    "$PY" "$BENCH/realscale_table.py" --where "$OUT/p4-where-$MAXH.json"
  fi
  for who in gorun mpich; do
    [ -s "$OUT/perf-$who.script.gz" ] || continue
    echo
    "$PY" "$BENCH/realscale_table.py" --perf "$OUT" "$who" "$PERF_FREQ"
  done
  if grep -q -e WARNING -e strace "$OUT/checks.txt" 2>/dev/null; then
    echo
    echo "Checks (see $OUT/checks.txt):"
    echo
    grep -e WARNING -e strace "$OUT/checks.txt" | sed 's/^/    /'
  fi
} | tee "$OUT/table.md"
echo
echo "took $(($(date +%s) - t_start)) s in all; raw results: $OUT"

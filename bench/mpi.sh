#!/usr/bin/env bash
# mpi.sh - an MPI hello job (examples/mpi/hello.c: MPI_Init, rank, size, MPI_Finalize),
# whole command from start to exit, under gorun and under each MPI's own launcher, side
# by side in one run (interleaved: gorun, peer, gorun, peer, ...):
#
#   local  MPICH build:     gorun -np N ./hello       vs  mpiexec.hydra -n N ./hello
#                           for N in NPS (default 4 16 64), on this host (oversubscribed)
#   ssh    MPICH build, 4 fake SSH hosts (testhosts) x 4 ranks, one hostfile for both:
#                           gorun --ssh-config C --hostfile H -np 16 ./hello
#                           vs  mpiexec.hydra -f H -launcher ssh -launcher-exec S -n 16 ./hello
#   ompi   Open MPI build:  gorun -np N ./hello_ompi  (PMIx through gorun-pmix, beside gorun)
#                           vs  mpirun.openmpi [--allow-run-as-root] --oversubscribe -np N ./hello_ompi
#                           for N in OMPI_NPS (default 4 16)
#   phases gorun alone on every case above with --summary-json: when the ranks were
#          started and when the last one exited (where gorun's time goes)
#   contend (not in the default PARTS) the local MPICH case at CONTEND_NP ranks while
#          HOGS busy loops run, each in a session of its own (as other users' jobs do):
#          gorun, gorun with every rank in a session of its own (`setsid -w ./hello`),
#          and mpiexec.hydra (which puts every rank in a session of its own)
#
# Before timing a case, every launcher runs it once and must print exactly
# "hello from N ranks" (and, over SSH, place `hostname` 4 per host); a mismatch is
# printed as a WARNING and kept in OUT/checks.txt, and the case is timed anyway.
#
# Usage: bench/mpi.sh             (from anywhere; `make bench-mpi`; root for the ssh part)
# Env:   RUNS      timed runs per command (default 20), after WARMUP (default 2)
#        TIMEOUT   per-run limit in seconds; a run over it is killed with its whole local
#                  process tree, counted as a hang and left out of the statistics
#                  (default 20)
#        NPS       ranks for the local MPICH case (default "4 16 64")
#        OMPI_NPS  ranks for the Open MPI case (default "4 16")
#        PARTS     which parts (default "local ssh ompi phases"; also "contend")
#        CONTEND_NP ranks (default 16) and HOGS busy loops (default 2) for the contend part
#        KEEP_HOSTS 1: leave the fake hosts up at the end (and reuse hosts already up)
#        SRC       the source tree to build gorun, gorun-pmix, testhosts and hello from
#                  (default: this checkout; e.g. a clean clone while the checkout is mid-edit)
#        STATE     the fixture's state folder (default bench/.state/mpi, gitignored)
#        OUT       results folder (default bench/results/mpi-DATE)
# Output: markdown tables on stdout and in OUT/table.md; raw per-run JSON in OUT.
#
# Binaries (gorun, gorun-pmix, hello, hello_ompi) are built into a fresh folder under
# /var/tmp, which is also every run's working directory: the fake hosts share this
# machine's file system except /tmp, /run and /dev/shm, so ranks find ./hello there on
# every host. The folder is removed at the end.
#
# Network: only loopback and the fixture's own subnet (10.213.X.0/24, on a bridge that
# exists only on this machine). The ssh part runs under `testhosts head`: a private mount
# namespace whose /etc/hosts lists h1..h4, so that no host name reaches DNS.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
SRC=$(cd "${SRC:-$ROOT}" && pwd)
RUNS=${RUNS:-20}
WARMUP=${WARMUP:-2}
TIMEOUT=${TIMEOUT:-20}
NPS=${NPS:-"4 16 64"}
OMPI_NPS=${OMPI_NPS:-"4 16"}
CONTEND_NP=${CONTEND_NP:-16}
HOGS=${HOGS:-2}
PARTS=${PARTS:-"local ssh ompi phases"}
STATE=${STATE:-$BENCH/.state/mpi}
OUT=${OUT:-$BENCH/results/mpi-$(date +%Y%m%d-%H%M%S)}
PY=$(command -v python3 || true)
TH=$BENCH/.bin/testhosts
want() { [[ " $PARTS " == *" $1 "* ]]; }
die() { echo "mpi.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# Tools.
[ -n "$PY" ] || die "needs python3"
command -v go >/dev/null || die "needs go"
HYDRA=$(command -v mpiexec.hydra || true)
MPICC_MPICH=$(command -v mpicc.mpich || true)
OMPI=$(command -v mpirun.openmpi || true)
MPICC_OMPI=$(command -v mpicc.openmpi || true)
if want local || want ssh || want contend; then
  [ -n "$HYDRA" ] || die "needs MPICH's mpiexec.hydra: apt-get install mpich"
  [ -n "$MPICC_MPICH" ] || die "needs MPICH's mpicc.mpich: apt-get install libmpich-dev"
fi
if want ompi; then
  [ -n "$OMPI" ] || die "needs Open MPI's mpirun.openmpi: apt-get install openmpi-bin"
  [ -n "$MPICC_OMPI" ] || die "needs Open MPI's mpicc.openmpi: apt-get install libopenmpi-dev"
  pkg-config --exists pmix 2>/dev/null || die "needs libpmix-dev to build gorun-pmix (gorun's Open MPI support): apt-get install libpmix-dev"
fi
if want ssh; then
  [ "$(id -u)" = 0 ] || die "the ssh part needs root (the fake hosts are network namespaces); PARTS=\"local ompi phases\" runs without"
  if ! { command -v sshd >/dev/null || [ -x /usr/sbin/sshd ]; } || ! command -v ssh >/dev/null; then
    die "the ssh part needs OpenSSH: apt-get install openssh-server openssh-client"
  fi
fi
# Open MPI refuses to run as root without this flag; harmless otherwise.
OMPI_ARGS="--oversubscribe"
[ "$(id -u)" = 0 ] && OMPI_ARGS="--allow-run-as-root $OMPI_ARGS"

# ---------------------------------------------------------------------------------------
# Build: gorun (static) and gorun-pmix side by side, and both hello programs, in WORK.
WORK=$(mktemp -d /var/tmp/gorun-bench-mpi.XXXXXX)
started=0
HOG_PIDS=()
cleanup() {
  if [ ${#HOG_PIDS[@]} != 0 ]; then kill "${HOG_PIDS[@]}" 2>/dev/null || true; fi
  if [ "$started" = 1 ] && [ "${KEEP_HOSTS:-0}" != 1 ]; then "$TH" --state "$STATE" down >&2 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
echo "building gorun, gorun-pmix, testhosts and hello in $WORK..." >&2
(
  cd "$SRC"
  CGO_ENABLED=0 go build -o "$WORK/gorun" ./cmd/gorun # as make build makes it
  if want ompi; then CGO_ENABLED=1 go build -o "$WORK/gorun-pmix" ./plugins/pmix; fi
  if want ssh; then go build -o "$TH" ./testhosts/cmd/testhosts; fi
  if [ -n "$MPICC_MPICH" ]; then "$MPICC_MPICH" -O1 -o "$WORK/hello" examples/mpi/hello.c; fi
  if [ -n "$MPICC_OMPI" ] && want ompi; then "$MPICC_OMPI" -O1 -o "$WORK/hello_ompi" examples/mpi/hello.c; fi
)
GORUN=$WORK/gorun
mkdir -p "$OUT"

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "go: $(go version)"
  dirty=$(git -C "$SRC" --no-optional-locks status --porcelain -uno -- . ":(exclude)bench" 2>/dev/null | wc -l || true)
  echo "gorun: $($GORUN --version 2>&1 | head -1), built from $SRC, commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo ?) ($dirty files changed since)"
  [ -z "$HYDRA" ] || echo "mpich: $HYDRA: $("$HYDRA" --version 2>&1 | grep -m1 -i 'version'); $("$MPICC_MPICH" -v 2>&1 | grep -m1 -i 'mpich version' || true)"
  [ -z "$OMPI" ] || echo "openmpi: $OMPI: $("$OMPI" --version 2>&1 | head -1); pmix $(pkg-config --modversion pmix 2>/dev/null || echo ?)"
  echo "work folder: $WORK"
  echo "settings: RUNS=$RUNS WARMUP=$WARMUP TIMEOUT=$TIMEOUT NPS='$NPS' OMPI_NPS='$OMPI_NPS' PARTS='$PARTS'"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/env.txt"
cat "$OUT/env.txt"

# Every run starts in WORK: the ranks' ./hello, and gorun reads ./gorun.toml (none here).
cd "$WORK"

# check LABEL WANT CMD...: run CMD once; its stdout must be WANT.
check() {
  local label=$1 want=$2 got rc=0
  shift 2
  got=$(timeout "$TIMEOUT" "$@" 2>"$OUT/check-${label// /_}.err") || rc=$?
  got=$(printf '%s' "$got" | tr '\n' ' ' | sed 's/ $//')
  echo "check $label: rc=$rc, printed '${got}'" >> "$OUT/checks.txt"
  if [ "$rc" != 0 ] || [ "$got" != "$want" ]; then
    echo "WARNING: $label: rc=$rc, printed '$got', want '$want' (stderr: $OUT/check-${label// /_}.err)" | tee -a "$OUT/checks.txt" >&2
  fi
}
# leftovers TAG: processes still running a binary of WORK after a case (a hung run's
# ranks that were not descendants of the launcher); listed, then killed by pid.
leftovers() {
  local p pids=()
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/exe" 2>/dev/null)" == "$WORK"/* ]] && pids+=("${p#/proc/}")
  done
  [ ${#pids[@]} = 0 ] && return 0
  echo "WARNING: after $1: ${#pids[@]} processes of $WORK still running (pids ${pids[*]}); killed" | tee -a "$OUT/checks.txt" >&2
  kill -KILL "${pids[@]}" 2>/dev/null || true
}
# compare FILE TAG GORUN_CMD PEER_LABEL PEER_CMD: gorun and one peer, interleaved.
compare() {
  local file=$1 tag=$2 g=$3 pl=$4 p=$5
  shift 5
  echo "$tag..." >&2
  printf '%s:\n  gorun: %s\n  %s: %s\n' "$tag" "$g" "$pl" "$p" >> "$OUT/commands.txt"
  "$@" "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
    --json "$OUT/$file.json" --tag "$tag" "gorun=$g" "$pl=$p" >> "$OUT/summary.tsv" || true
  leftovers "$tag"
}
PHASES=() # LABEL=CMD specs for the phases part, and the prefix they run under
PHASES_SSH=()

if want local; then
  for n in $NPS; do
    check "gorun local np$n" "hello from $n ranks" "$GORUN" -np "$n" ./hello
    check "mpich local np$n" "hello from $n ranks" "$HYDRA" -n "$n" ./hello
    compare "local-np$n" "MPICH hello, 1 host, np $n" \
      "$GORUN -np $n ./hello" mpich "$HYDRA -n $n ./hello"
    PHASES+=("local-np$n=$GORUN -np $n --summary-json @SUMMARY@ ./hello")
  done
fi

if want ompi; then
  for n in $OMPI_NPS; do
    check "gorun ompi np$n" "hello from $n ranks" "$GORUN" -np "$n" ./hello_ompi
    # shellcheck disable=SC2086 # OMPI_ARGS is a list of flags
    check "openmpi np$n" "hello from $n ranks" "$OMPI" $OMPI_ARGS -np "$n" ./hello_ompi
    compare "ompi-np$n" "Open MPI hello, 1 host, np $n" \
      "$GORUN -np $n ./hello_ompi" openmpi "$OMPI $OMPI_ARGS -np $n ./hello_ompi"
    PHASES+=("ompi-np$n=$GORUN -np $n --summary-json @SUMMARY@ ./hello_ompi")
  done
fi

if want ssh; then
  # The fixture: 4 hosts h1..h4 with a real sshd each.
  if [ "${KEEP_HOSTS:-0}" = 1 ] && "$TH" --state "$STATE" status >/dev/null 2>&1 &&
    [ "$(eval "$("$TH" --state "$STATE" env)"; echo "$TESTHOSTS_N")" -ge 4 ]; then
    echo "reusing the hosts up in $STATE" >&2
  else
    mkdir -p "$(dirname "$STATE")"
    started=1 # also when up fails halfway: down removes what it left
    "$TH" --state "$STATE" up 4 >&2
  fi
  eval "$("$TH" --state "$STATE" env)"
  [[ "$TESTHOSTS_SUBNET" =~ ^10\.213\.[0-9]+\.0/24$ ]] || die "unexpected subnet $TESTHOSTS_SUBNET"
  HEAD=("$TH" --state "$STATE" head)
  # Never launch unless the names resolve, from the private hosts file, into our subnet.
  for h in h1 h4; do
    ip=$("${HEAD[@]}" getent hosts "$h" | awk '{print $1; exit}')
    [[ "$ip" == "${TESTHOSTS_SUBNET%.0/24}".* ]] || die "$h resolves to '$ip' under testhosts head, not into $TESTHOSTS_SUBNET"
  done
  # One hostfile in MPICH's syntax for both (gorun reads it too; hydra rejects slots=).
  HF=$WORK/hosts
  printf 'h1:4\nh2:4\nh3:4\nh4:4\n' > "$HF"
  cp "$HF" "$OUT/hostfile"
  # Exactly as bench/ssh.sh: hydra takes the ssh config through testhosts' ssh wrapper.
  G_SSH="$GORUN --ssh-config $TESTHOSTS_SSH_CONFIG --hostfile $HF -np 16"
  H_SSH="$HYDRA -f $HF -launcher ssh -launcher-exec $TESTHOSTS_SSH -n 16"
  placement() {
    local label=$1 got
    shift
    got=$(timeout "$TIMEOUT" "${HEAD[@]}" "$@" hostname 2>/dev/null | sort -V | uniq -c | awk '{printf "%s:%s ", $2, $1}')
    echo "placement $label: ${got:-nothing}" >> "$OUT/checks.txt"
    [ "$got" = "h1:4 h2:4 h3:4 h4:4 " ] || echo "WARNING: $label placed ranks as '$got', want 'h1:4 h2:4 h3:4 h4:4'" | tee -a "$OUT/checks.txt" >&2
  }
  # shellcheck disable=SC2086 # G_SSH and H_SSH are word lists, as timecmp.py splits them
  {
    placement "gorun 4x4" $G_SSH
    placement "mpich 4x4" $H_SSH
    check "gorun ssh 4x4" "hello from 16 ranks" "${HEAD[@]}" $G_SSH ./hello
    check "mpich ssh 4x4" "hello from 16 ranks" "${HEAD[@]}" $H_SSH ./hello
  }
  compare "ssh-4x4" "MPICH hello, 4 hosts x 4 ranks (ssh)" \
    "$G_SSH ./hello" mpich "$H_SSH ./hello" "${HEAD[@]}"
  PHASES_SSH+=("ssh-4x4=$G_SSH --summary-json @SUMMARY@ ./hello")
  # What a hung or killed run may have left on the hosts (not descendants of the launcher).
  for ns in $("$TH" --state "$STATE" status 2>/dev/null | sed -n 's/.* netns=\([^ ]*\) .*/\1/p'); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == "$WORK"/* || "$(cat "/proc/$p/comm" 2>/dev/null)" == hydra_pmi_prox* ]] &&
        echo "WARNING: after the ssh part: pid $p ($(cat "/proc/$p/comm" 2>/dev/null)) still running in $ns" | tee -a "$OUT/checks.txt" >&2
    done
  done
fi

if want phases && [ $((${#PHASES[@]} + ${#PHASES_SSH[@]})) -gt 0 ]; then
  echo "gorun phases..." >&2
  { echo "gorun phases:"; printf '  %s\n' "${PHASES[@]}" "${PHASES_SSH[@]}"; } >> "$OUT/commands.txt"
  if [ ${#PHASES[@]} -gt 0 ]; then
    "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
      --json "$OUT/phases-local.json" --tag "gorun phases, 1 host" --summary-dir "$OUT/summaries" \
      "${PHASES[@]}" >> "$OUT/summary.tsv" || true
    leftovers "the phases part"
  fi
  if [ ${#PHASES_SSH[@]} -gt 0 ]; then
    "${HEAD[@]}" "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
      --json "$OUT/phases-ssh.json" --tag "gorun phases, ssh" --summary-dir "$OUT/summaries" \
      "${PHASES_SSH[@]}" >> "$OUT/summary.tsv" || true
    leftovers "the phases part (ssh)"
  fi
fi
if want contend; then
  n=$CONTEND_NP
  check "gorun setsid np$n" "hello from $n ranks" "$GORUN" -np "$n" setsid -w ./hello
  echo "contend: $HOGS busy loops, np $n..." >&2
  echo "load before the busy loops: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
  for ((i = 0; i < HOGS; i++)); do
    # Not a process group leader (no job control here): setsid makes this very
    # process a session leader, so $! is the loop itself.
    setsid sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
    HOG_PIDS+=("$!")
  done
  tag="MPICH hello, 1 host, np $n, $HOGS busy loops beside"
  printf '%s:\n  gorun: %s\n  gorun-setsid: %s\n  mpich: %s\n' "$tag" "$GORUN -np $n ./hello" \
    "$GORUN -np $n setsid -w ./hello" "$HYDRA -n $n ./hello" >> "$OUT/commands.txt"
  "$PY" "$BENCH/timecmp.py" --runs "$RUNS" --warmup "$WARMUP" --timeout "$TIMEOUT" \
    --json "$OUT/contend-np$n.json" --tag "$tag" "gorun=$GORUN -np $n ./hello" \
    "gorun-setsid=$GORUN -np $n setsid -w ./hello" "mpich=$HYDRA -n $n ./hello" >> "$OUT/summary.tsv" || true
  kill "${HOG_PIDS[@]}" 2>/dev/null || true
  HOG_PIDS=()
  leftovers "$tag"
fi
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

{
  echo
  echo "## MPI hello, MPI_Init to MPI_Finalize (ms: median (min-max) of $RUNS runs, interleaved, after $WARMUP warm-ups; per-run timeout ${TIMEOUT}s)"
  echo
  files=()
  for n in $NPS; do [ ! -f "$OUT/local-np$n.json" ] || files+=("$OUT/local-np$n.json"); done
  [ ! -f "$OUT/ssh-4x4.json" ] || files+=("$OUT/ssh-4x4.json")
  for n in $OMPI_NPS; do [ ! -f "$OUT/ompi-np$n.json" ] || files+=("$OUT/ompi-np$n.json"); done
  [ ! -f "$OUT/contend-np$CONTEND_NP.json" ] || files+=("$OUT/contend-np$CONTEND_NP.json")
  [ ${#files[@]} = 0 ] || "$PY" "$BENCH/table.py" --pair "${files[@]}"
  files=()
  for f in phases-local phases-ssh; do [ ! -f "$OUT/$f.json" ] || files+=("$OUT/$f.json"); done
  if [ ${#files[@]} != 0 ]; then
    echo
    echo "## gorun alone, with --summary-json (phases: medians, ms from gorun's start)"
    echo
    "$PY" "$BENCH/table.py" --phases "${files[@]}"
  fi
  if grep -q WARNING "$OUT/checks.txt" 2>/dev/null; then
    echo
    echo "Checks that failed (see $OUT/checks.txt):"
    echo
    grep WARNING "$OUT/checks.txt" | sed 's/^/    /'
  fi
} | tee "$OUT/table.md"
echo
echo "raw results: $OUT"

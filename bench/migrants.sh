#!/usr/bin/env bash
# migrants.sh - the migrant review, repeatable: the command lines of bench/migrants/lines.tsv
# (57 from the peers' own documentation, as the review of 2026-12-01 took them, and others like
# them), each run with the peer and with gorun (its personality, and plain gorun), one at a time
# under `timeout`, printed side by side with their exit codes, and a summary by class.
#
# Usage: bench/migrants.sh [ID...]        (root; all lines without IDs; e.g. bench/migrants.sh 14 37 E9)
# Env:   TIMEOUT  per-command limit in seconds (default 60)
#        COLS     which commands to run (default "peer personality plain")
#        CLASSES  the human classes (default bench/migrants/classes.tsv; see below)
#        SRC      the source tree to build gorun from (default: this checkout)
#        OUT      results folder (default bench/results/migrants-DATE, gitignored)
#        KEEP     1: leave the work folder (/var/tmp/gorun-migrants.*) and the fixtures up
#
# What runs where (the ctx column of lines.tsv):
#   local      in the work folder, on this machine
#   hosts      the same, on the head of 4 fake SSH hosts h1..h4 (testhosts: network namespaces,
#              each with a real sshd; they share this file system except /tmp, /run, /dev/shm)
#   nodes:H,.. the same command on each of the hosts H (over ssh), at once, $NODE_RANK set to
#              0, 1, ... in that order: torchrun's multi-node lines
#   slurm:OPTS the batch script (#SBATCH OPTS, then the command) of a job of a 2-node Slurm
#              cluster (slurmtest), with sbatch --wait
# Every command runs with a private /etc/hosts (this machine's, plus h1..h4, node01..node02),
# /etc/resolv.conf naming 127.0.0.1 and nsswitch.conf "hosts: files", so that no name is ever
# looked up in DNS: no traffic leaves loopback and the namespaces this script creates (a mistyped
# host fails locally).
#
# The peers: mpirun is Open MPI's mpirun.openmpi, mpiexec and mpiexec.hydra MPICH's Hydra,
# torchrun (and python -m torch.distributed.run or .launch) Debian's torch 1.13 through
# bench/migrants/peer_torch.py (1.13 spells its flags with '_' and fails on Python 3.11 without
# torchrun_fix.py's patch), python is /usr/bin/python3 (it has torch and mpi4py). horovodrun
# and deepspeed are not installed: Horovod's lines run, as the peer, the mpirun command that its
# page gives as the equivalent; DeepSpeed's run gorun's side only, for a human to classify by
# what DeepSpeed's docs say it does (a stand-in deepspeed on PATH, which runs nothing, names
# /usr/bin/python3 in its #! line, as an installed one names the Python that has torch). Open MPI runs as root (OMPI_ALLOW_RUN_AS_ROOT), reaches the
# fake hosts through testhosts' ssh wrapper (plm_rsh_agent) and their subnet
# (oob/btl_tcp_if_include), and, in local lines only, may oversubscribe (as with the review's
# --oversubscribe: this machine has 2 cores where the docs' examples assume more); Hydra reaches
# them through HYDRA_LAUNCHER_EXEC. gorun is given the fixture's ssh config (GORUN_SSH_CONFIG).
# $TOKEN is a fresh 256-bit token, which only the E-lines that say so pass to gorun.
#
# Classes (as the review defines them; for the personality column, the plain column, and the
# best path: the personality where there is one, else plain gorun):
#   S   same result as the peer;  V  works, with a visible difference;  R  refused in one line
#   that names the gorun way;  R-  refused in one clear line that names no way;  B  broken
#   (wrong result, hang, crash, cryptic).
# The script classifies S by itself where it can: the same exit code and the same standard
# output (its lines sorted, "rank N" records split apart where a launcher ran them together; in
# the plain column an "omp 1" that gorun's OMP_NUM_THREADS note announced counts as the peer's
# "omp -": that note is plain gorun's documented default). Everything else is for a human, whose
# verdicts live in CLASSES (id, personality class, plain class, reason; tab-separated); the
# summary uses them, and says CHECK where a verdict no longer matches what ran (a human S whose
# outputs now differ, or an automatic S that a human classed otherwise).
#
# Output: every line's commands, exit codes and outputs side by side on stdout; the same, with
# the raw files, in OUT (OUT/ID/{peer,personality,plain}.{cmd,out,err,rc,secs}); the summary in
# OUT/summary.md.
set -uo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
SRC=$(cd "${SRC:-$ROOT}" && pwd)
TIMEOUT=${TIMEOUT:-60}
COLS=${COLS:-"peer personality plain"}
LINES=$BENCH/migrants/lines.tsv
CLASSES=${CLASSES:-$BENCH/migrants/classes.tsv}
OUT=${OUT:-$BENCH/results/migrants-$(date +%Y%m%d-%H%M%S)}
WIDTH=${WIDTH:-200}
die() { echo "migrants.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (the fake hosts and the Slurm cluster are namespaces)"
for t in go mpirun.openmpi mpiexec.hydra mpicc.openmpi mpicc.mpich unshare ssh sbatch slurmd; do
  command -v "$t" >/dev/null || die "needs $t (scripts/test-deps.sh installs the tools)"
done
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch, mpi4py' 2>/dev/null ||
  die "needs /usr/bin/python3 with torch and mpi4py (apt-get install python3-torch python3-mpi4py)"

# The lines to run.
declare -a IDS=()
while IFS=$'\t' read -r id _; do
  case $id in '#'* | id | '') continue ;; esac
  if [ $# = 0 ] || [[ " $* " == *" $id "* ]]; then IDS+=("$id"); fi
done <"$LINES"
[ ${#IDS[@]} -gt 0 ] || die "no line of $LINES is named $*"
field() { awk -F'\t' -v id="$1" -v k="$2" '$1 == id { print $k; exit }' "$LINES"; }
needs_ctx() { # needs_ctx hosts|slurm: whether a chosen line runs there
  local id c
  for id in "${IDS[@]}"; do
    c=$(field "$id" 3)
    case $1:$c in hosts:hosts | hosts:nodes:* | slurm:slurm:*) return 0 ;; esac
  done
  return 1
}

# ---------------------------------------------------------------------------------------
# The work folder: gorun, the programs, the data files, the peers' names.
W=$(mktemp -d /var/tmp/gorun-migrants.XXXXXX)
chmod 755 "$W"
TH_STATE=$W/testhosts
SL_STATE=$W/slurm
th_up=0 sl_up=0
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W (fixtures up: testhosts --state $TH_STATE, slurmtest --state $SL_STATE)" >&2; return; fi
  [ $th_up = 1 ] && "$W/bin/testhosts" --state "$TH_STATE" down >&2
  [ $sl_up = 1 ] && "$W/bin/slurmtest" --state "$SL_STATE" down >&2
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$W/bin" "$W/peer" "$OUT"
echo "building gorun, gorun-pmix, testhosts, slurmtest and the MPI hellos in $W..." >&2
(
  cd "$SRC" || exit 1
  CGO_ENABLED=0 go build -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)" -o "$W/bin/gorun" ./cmd/gorun &&
    CGO_ENABLED=1 go build -o "$W/bin/gorun-pmix" ./plugins/pmix &&
    go build -o "$W/bin/testhosts" ./testhosts/cmd/testhosts &&
    go build -o "$W/bin/slurmtest" ./slurmtest/cmd/slurmtest &&
    mpicc.mpich -O1 -o "$W/hello_mpich" "$BENCH/migrants/hello.c" &&
    mpicc.openmpi -O1 -o "$W/hello_ompi" "$BENCH/migrants/hello.c"
) || die "build failed"
cp "$BENCH"/migrants/*.py "$W/"
ln -s /usr/bin/mpirun.openmpi "$W/peer/mpirun"
ln -s /usr/bin/mpiexec.hydra "$W/peer/mpiexec"
ln -s /usr/bin/mpiexec.hydra "$W/peer/mpiexec.hydra"
ln -s /usr/bin/hydra_pmi_proxy "$W/peer/hydra_pmi_proxy" # Hydra runs the proxy beside its own name
ln -s "$W/peer_torch.py" "$W/peer/torchrun"
cat >"$W/peer/python" <<EOF
#!/bin/sh
# python: /usr/bin/python3; its -m torch.distributed.run and .launch are torch's, through peer_torch.py
case "\$1 \${2:-}" in
"-m torch.distributed.run" | "-m torch.distributed.launch") m=\$2; shift 2; exec /usr/bin/python3 "$W/peer_torch.py" "\$m" "\$@" ;;
esac
exec /usr/bin/python3 "\$@"
EOF
chmod +x "$W/peer/python"
# deepspeed is not installed; where it is, its #! line names the Python that has torch, which
# gorun deepspeed runs the script under (as DeepSpeed's launcher does): this stand-in says so,
# and runs nothing.
printf '#!/usr/bin/python3\nimport sys\nsys.exit("deepspeed is not installed: a stand-in of bench/migrants.sh")\n' >"$W/peer/deepspeed"
chmod +x "$W/peer/deepspeed"
cd "$W" || die "no $W"
# The data files the lines name (hosts as the docs' examples have them, renamed h1..h4).
printf 'h1 slots=2\nh2 slots=2\nh3 slots=2\n' >hf          # mpirun(1): aa, bb, cc slots=2
printf 'h1 slots=4\nh2 slots=4\nh3 slots=4\n' >hf4         # mpirun(1): slots=4
printf 'h1\nh2\nh3\nh4\n' >hosts                           # the Hydra wiki's donner, foo, shakey, terra
printf '# This is a sample host file\nh1:2     # The first 2 procs are scheduled to run here\nh2:3     # The next 3 procs run on this host\nh3:2     # The last 2 procs run on this host\n' >hosts3
printf 'rank 0=h1 slot=0:0\nrank 1=h2 slot=0:1\nrank 2=h3 slot=0:0-1\n' >rankfile # mpirun(1)'s, for 1 socket of 2 cores
printf -- '-n 1 -host h1 ./hello_mpich A\n-n 2 -host h2 ./hello_mpich B\n' >cfg_intel
printf -- '-n 1 ./hello_mpich A\n-n 1 ./hello_mpich B\n' >cfg_local
printf 'h1 slots=2\nh2 slots=2\n' >hf_ds                   # DeepSpeed's worker-1, worker-2 slots=4
printf 'h1 slots=2\nh2 slots=2\nh3 slots=2\n' >hf_ds3
echo '{"train_batch_size": 8}' >ds_config.json
seq 1 1000 >input.txt
TOKEN=$(/usr/bin/python3 -c 'import secrets; print(secrets.token_hex(32))')
# No name lookup leaves the machine: a hosts file, no DNS (resolv.conf 127.0.0.1), files only.
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >resolv.conf
printf 'hosts: files\n' >nsswitch.conf
{
  cat /etc/hosts
  echo "127.0.0.1 $(hostname)"
  for i in 01 02 03 04; do echo "127.0.0.1 node$i"; done
} >hosts.etc
cd "$OUT" || die "no $OUT" # so that anything left in the work folder after a line is the line's
private() { # private HOSTS CMD...: CMD with HOSTS as /etc/hosts and no DNS
  local h=$1
  shift
  unshare --mount --propagation private -- sh -c 'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && mount --bind "$3" /etc/nsswitch.conf && shift 3 && exec "$@"' \
    sh "$h" "$W/resolv.conf" "$W/nsswitch.conf" "$@"
}

# ---------------------------------------------------------------------------------------
# The fixtures.
BASEPATH=$W/bin:$W/peer:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TOKEN
if needs_ctx hosts; then
  th_up=1
  "$W/bin/testhosts" --state "$TH_STATE" up 4 >&2 || die "testhosts up failed"
  eval "$("$W/bin/testhosts" --state "$TH_STATE" env)"
  [[ "$TESTHOSTS_SUBNET" =~ ^10\.213\.[0-9]+\.0/24$ ]] || die "unexpected subnet $TESTHOSTS_SUBNET"
  { cat "$W/hosts.etc"; grep -E '^10\.213\.' "$TESTHOSTS_HEAD_HOSTS"; } >"$W/hosts.head"
  ip=$(private "$W/hosts.head" getent hosts h4 | awk '{print $1}')
  [[ "$ip" == "${TESTHOSTS_SUBNET%.0/24}".* ]] || die "h4 resolves to '$ip', not into $TESTHOSTS_SUBNET"
  export GORUN_SSH_CONFIG=$TESTHOSTS_SSH_CONFIG HYDRA_LAUNCHER_EXEC=$TESTHOSTS_SSH
  export OMPI_MCA_plm_rsh_agent=$TESTHOSTS_SSH OMPI_MCA_oob_tcp_if_include=$TESTHOSTS_SUBNET OMPI_MCA_btl_tcp_if_include=$TESTHOSTS_SUBNET
else
  cp "$W/hosts.etc" "$W/hosts.head"
fi
if needs_ctx slurm; then
  sl_up=1
  # The daemons start in a mount namespace of their own with the private files, so that jobs
  # resolve node01.. (to 127.0.0.1: the nodes share this machine's network) and nothing else.
  private "$W/hosts.etc" "$W/bin/slurmtest" --state "$SL_STATE" up --gpus 0 2 >&2 || die "slurmtest up failed"
  SLURM_ENV=$("$W/bin/slurmtest" --state "$SL_STATE" env)
fi

# ---------------------------------------------------------------------------------------
# Running one command: run ID COL CTX CMD, into OUT/ID/COL.{cmd,out,err,rc,secs}.
run() {
  local id=$1 col=$2 ctx=$3 cmd=$4 d=$OUT/$1 f t0 rc
  f=$d/$col
  mkdir -p "$d"
  printf '%s\n' "$cmd" >"$f.cmd"
  rm -rf "$W/out" "$W"/out.* "$W/logs"
  local env="export PATH='$BASEPATH'"
  if [ "$ctx" = local ] && [ "$col" = peer ]; then env+="; export OMPI_MCA_rmaps_base_oversubscribe=1"; fi
  t0=$(date +%s.%N)
  case $ctx in
  local | hosts)
    printf '%s\ncd %q\n%s\n' "$env" "$W" "$cmd" >"$W/cmd.sh"
    private "$W/hosts.head" timeout -k 5 "$TIMEOUT" bash "$W/cmd.sh" >"$f.out" 2>"$f.err" </dev/null
    rc=$?
    ;;
  nodes:*)
    local hosts k=0 pids=() h
    IFS=, read -ra hosts <<<"${ctx#nodes:}"
    for h in "${hosts[@]}"; do
      printf 'export NODE_RANK=%s TOKEN=%s; %s\ncd %q\n%s\n' "$k" "$TOKEN" "$env" "$W" "$cmd" >"$W/cmd.$h.sh"
      private "$W/hosts.head" timeout -k 5 "$TIMEOUT" "$TESTHOSTS_SSH" "$h" bash "$W/cmd.$h.sh" </dev/null >"$f.$h.out" 2>"$f.$h.err" &
      pids+=($!)
      k=$((k + 1))
    done
    rc=0
    for k in "${!pids[@]}"; do
      wait "${pids[$k]}"
      local r=$?
      [ $r -gt $rc ] && rc=$r
    done
    for h in "${hosts[@]}"; do
      cat "$f.$h.out" >>"$f.out"
      sed "s/^/[$h] /" "$f.$h.err" >>"$f.err"
    done
    ;;
  slurm:*)
    {
      echo '#!/bin/bash'
      echo "#SBATCH ${ctx#slurm:}"
      echo "#SBATCH -o $f.out"
      echo "#SBATCH -e $f.err"
      echo "$env; cd $W"
      echo "$cmd"
    } >"$W/job.sbatch"
    (eval "$SLURM_ENV" && PATH=$BASEPATH timeout -k 5 "$TIMEOUT" sbatch --wait -Q "$W/job.sbatch" </dev/null >/dev/null 2>"$f.sbatch")
    rc=$?
    touch "$f.out" "$f.err"
    cat "$f.sbatch" >>"$f.err"
    ;;
  esac
  echo "$rc" >"$f.rc"
  awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f\n", a - b }' >"$f.secs"
  # What a hung or killed command may have left behind, on this machine or a fake host (they
  # share its pids): every process whose working directory is the work folder (this script
  # works elsewhere), killed by pid.
  local left="" p c
  for p in /proc/[0-9]*; do
    c=$(readlink "$p/cwd" 2>/dev/null) || continue
    case $c in "$SL_STATE" | "$SL_STATE"/* | "$TH_STATE" | "$TH_STATE"/*) ;; "$W" | "$W"/*) left+=" ${p#/proc/}" ;; esac
  done
  if [ -n "$left" ]; then
    echo "migrants.sh: after $id $col: left running, killed: $(echo $left)" | tee -a "$f.err" >&2
    kill -9 $left 2>/dev/null
  fi
}

# norm FILE COL ERRFILE: the standard output as it is compared.
norm() {
  local s
  s=$(sed -E 's/(.)(rank [0-9]+[/ ])/\1\n\2/g' "$1" | sed -E 's/[[:space:]]+$//' | grep -v '^$')
  if [ "$2" = plain ] && grep -q 'OMP_NUM_THREADS=1 for the' "$3"; then
    s=$(sed -E 's/ omp 1( |$)/ omp -\1/' <<<"$s")
  fi
  sort <<<"$s"
}

# auto ID COL: S, or ? for a human.
auto() {
  local d=$OUT/$1
  [ -f "$d/peer.rc" ] && [ -f "$d/$2.rc" ] || { echo "?"; return; }
  if [ "$(cat "$d/peer.rc")" = "$(cat "$d/$2.rc")" ] &&
    [ "$(norm "$d/peer.out" peer "$d/peer.err")" = "$(norm "$d/$2.out" "$2" "$d/$2.err")" ]; then
    echo S
  else
    echo "?"
  fi
}

# show ID: the line's commands and outputs side by side.
show() {
  local id=$1 d=$OUT/$1 col w
  w=$(((WIDTH - 4) / 3))
  echo
  echo "=== #$id  $(field "$id" 2)   [$(field "$id" 3)]"
  for col in peer personality plain; do
    [ -f "$d/$col.cmd" ] || continue
    printf '  %-12s rc %-4s %5.1fs  %s\n' "$col" "$(cat "$d/$col.rc")" "$(cat "$d/$col.secs")" "$(cat "$d/$col.cmd")"
  done
  local files=()
  for col in peer personality plain; do
    if [ -f "$d/$col.cmd" ]; then
      {
        echo "--- $col stdout"
        head -n 30 "$d/$col.out"
        echo "--- $col stderr"
        head -n 30 "$d/$col.err" | cut -c1-400
      } | fold -w "$w" >"$d/$col.show"
    else
      echo "--- $col: not run" >"$d/$col.show"
    fi
    files+=("$d/$col.show")
  done
  pr -m -t -w "$WIDTH" "${files[@]}"
}

# ---------------------------------------------------------------------------------------
echo "gorun $("$W/bin/gorun" --version 2>&1 | head -1) from $SRC ($(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo ?), $(git -C "$SRC" status --porcelain 2>/dev/null | wc -l) files changed); $(mpirun.openmpi --version 2>&1 | head -1); $(mpiexec.hydra -info 2>&1 | sed -n 's/^ *Version: *//p' | head -1 | sed 's/^/MPICH /'); torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'); $(date -Is); load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/setup.txt"
for id in "${IDS[@]}"; do
  ctx=$(field "$id" 3)
  for col in $COLS; do
    case $col in peer) k=4 ;; personality) k=5 ;; plain) k=6 ;; *) die "COLS: unknown $col" ;; esac
    cmd=$(field "$id" $k)
    [ "$cmd" = - ] && continue
    if [ $col = peer ]; then
      case $cmd in deepspeed* | horovodrun*)
        mkdir -p "$OUT/$id"
        echo "${cmd%% *} is not installed: classified by its docs" >"$OUT/$id/peer.note"
        continue
        ;;
      esac
    fi
    run "$id" "$col" "$ctx" "$cmd"
  done
  show "$id" | tee -a "$OUT/sides.txt"
done

# ---------------------------------------------------------------------------------------
# The summary: each line's classes (the human's where there is one, else the automatic S),
# and the totals by class.
human() { # human ID K: the human class (K=2 personality, 3 plain) and the reason
  [ -f "$CLASSES" ] || return
  awk -F'\t' -v id="$1" -v k="$2" '$1 == id { print $k "\t" $4; exit }' "$CLASSES"
}
{
  echo "| # | peer rc | personality rc | class | plain rc | class | best | reason |"
  echo "|---|---|---|---|---|---|---|---|"
  declare -A tot
  for id in "${IDS[@]}"; do
    d=$OUT/$id
    row="| $id | $(cat "$d/peer.rc" 2>/dev/null || echo '—') "
    best=""
    reason=""
    for col in personality plain; do
      k=2
      [ $col = plain ] && k=3
      if [ ! -f "$d/$col.rc" ]; then
        row+="| — | — "
        continue
      fi
      a=$(auto "$id" $col)
      IFS=$'\t' read -r h r <<<"$(human "$id" $k)"
      c=${h:-$a}
      [ -n "$r" ] && reason=$r
      if [ "$a" = S ] && [ -n "$h" ] && [ "$h" != S ]; then c="$h CHECK(auto S)"; fi
      row+="| $(cat "$d/$col.rc") | $c "
      [ -z "$best" ] && best=${c%% *}
      if [[ $id != E* ]]; then tot[$col:${c%% *}]=$((${tot[$col:${c%% *}]:-0} + 1)); fi
    done
    [[ $id != E* ]] && tot[best:$best]=$((${tot[best:$best]:-0} + 1))
    echo "$row| $best | $reason |"
  done
  echo
  echo "| column | S | V | R | R- | B | ? |"
  echo "|---|---|---|---|---|---|---|"
  for col in personality plain best; do
    printf '| %s ' "$col"
    for c in S V R R- B "?"; do printf '| %s ' "${tot[$col:$c]:-0}"; done
    echo "|"
  done
} >"$OUT/summary.md"
echo
cat "$OUT/summary.md"
echo
echo "results in $OUT" >&2

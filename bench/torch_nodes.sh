#!/usr/bin/env bash
# torch_nodes.sh - NODES "nodes" on this machine as NODES launcher processes that
# meet at 127.0.0.1 on a port of their own (free now, picked afresh each call),
# started together; exits 0 when all exit 0. For bench/torchrun.sh, whose timing
# tool runs one command per measurement.
#
# Usage: torch_nodes.sh torchrun NODES PER_NODE PROGRAM...
#        torch_nodes.sh gorun NODES PER_NODE PROGRAM...
#        torch_nodes.sh direct NODES PER_NODE PROGRAM...   (no launcher: NODES x PER_NODE
#                       python processes started by this shell with RANK, WORLD_SIZE,
#                       LOCAL_RANK, MASTER_ADDR and MASTER_PORT set: the floor)
# Env:   PY (default /usr/bin/python3), GORUN (the gorun binary), TORCHRUN_FIX
#        (default: torchrun_fix.py next to this script)
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PY:-/usr/bin/python3}
TORCHRUN_FIX=${TORCHRUN_FIX:-$HERE/torchrun_fix.py}
kind=$1 nodes=$2 per=$3
shift 3
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# gorun's nodes share a token (gorun refuses one of less than 128 bits), fresh each call.
token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
pids=()
if [ "$kind" = direct ]; then
  world=$((nodes * per))
  for ((r = 0; r < world; r++)); do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$((r % per)) LOCAL_WORLD_SIZE=$per MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port OMP_NUM_THREADS=1 "$PY" "$@" &
    pids+=($!)
  done
  nodes=0
fi
for ((i = 0; i < nodes; i++)); do
  case $kind in
  torchrun)
    # is_host: the first serves the c10d store; both would match 127.0.0.1.
    host=0
    [ "$i" = 0 ] && host=1
    "$PY" "$TORCHRUN_FIX" --nnodes "$nodes" --nproc_per_node "$per" --rdzv_backend c10d \
      --rdzv_endpoint "127.0.0.1:$port" --rdzv_id bench --rdzv_conf "is_host=$host" "$@" &
    ;;
  gorun)
    GORUN_RDZV_TOKEN=$token "$GORUN" --jobs-dir off --nnodes "$nodes" --nproc-per-node "$per" \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id bench "$@" &
    ;;
  *)
    echo "torch_nodes.sh: torchrun or gorun, not $kind" >&2
    exit 2
    ;;
  esac
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || rc=$?
done
exit "$rc"

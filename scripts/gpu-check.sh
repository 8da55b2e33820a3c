#!/usr/bin/env bash
# gpu-check.sh: gorun's GPU paths against a real GPU machine, in one short
# run. The GPU machine may have no Go and no network, so the binaries are
# built here first and carried there:
#
#   scripts/gpu-check.sh build   # here: gorun (cgo, NVML built in), gorun-static
#                                # and topology's test binary into .gpu-check/
#   scripts/gpu-check.sh run     # there, from the repository's root
#
# GPU_CHECK_BIN names another directory for the binaries (absolute).
# (with the device tool: run "scripts/gpu-check.sh run" with carry
# [".gpu-check"]). It writes into $OUT (else ./gpu-check-out):
# gpu-check.log, everything below, and fixture.tar.gz, the machine
# recorded as a topology fixture (gorun topo --record) for
# topology/testdata/. It checks, printing PASS or FAIL for each:
#   1. nvidia-smi topo -m beside gorun topo (NVML must be used: UUIDs,
#      NVLinks, P2P), and gorun topo --json;
#   2. gorun -np <GPUs> --report-bindings, each rank probing from inside
#      (scripts/gpu_probe.py: CUDA's devices through the driver, device
#      LOCAL_RANK is GPU LOCAL_RANK in PCI bus order, CPUs and memory policy
#      on that GPU's NUMA node, no NCCL variable of gorun's); then the same
#      with --gpu-bind single; with one GPU, also two ranks sharing it;
#   3. torch.cuda.set_device(LOCAL_RANK) and an NCCL all-reduce
#      (examples/torch/nccl_check.py), where torch with CUDA is installed;
#   4. topology's Go tests that use the real NVML;
#   5. the recording read back (gorun topo --machine) matches gorun topo;
#   6. the cost of NVML: gorun topo's time, and gorun -np <GPUs> true with
#      and without NVML on the launch path, and with the static build;
#   7. the CUDA plugin (plugins/cuda) on the real driver: package cu's
#      tests (the PTX reductions against the CPU, CUDA IPC between two
#      processes), gorun plugins test cuda (the device memory contract in
#      two plugin processes), a 2-rank gorun bench allreduce --device cuda
#      (two processes on one GPU where there is one), and device-to-device
#      copies of 256 MiB through the plugin beside cuMemcpyDtoD;
#   8. gorun check --net's measurement inside the node (netcheck/nodecheck,
#      a few seconds): copies between every two GPUs, with the link class
#      from NVML, and between the host and each GPU, through the CUDA
#      plugin, and the RDMA ports; the report in nodecheck.txt and .json.
# On a machine without GPUs it runs what it can and says so. Exit status:
# 0 when every check passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${GPU_CHECK_BIN:-$PWD/.gpu-check} # the built binaries (an absolute path)

build() {
  set -e
  rm -rf "$BIN"
  mkdir -p "$BIN/bin"
  local ld="-s -w" # stripped: what travels is at most 64 MiB
  CGO_ENABLED=1 go build -ldflags "$ld" -o "$BIN/bin/gorun" ./cmd/gorun
  CGO_ENABLED=0 go build -ldflags "$ld" -o "$BIN/bin/gorun-static" ./cmd/gorun
  CGO_ENABLED=0 go build -ldflags "$ld" -o "$BIN/bin/gorun-tools" ./cmd/gorun-tools # gorun bench's ranks, gorun plugins' host
  CGO_ENABLED=1 go test -c -ldflags "$ld" -o "$BIN/bin/topology.test" ./topology
  CGO_ENABLED=1 go build -ldflags "$ld" -o "$BIN/bin/gorun-plugin-cuda" ./plugins/cuda
  CGO_ENABLED=1 go test -c -ldflags "$ld" -o "$BIN/bin/cu.test" ./plugins/cuda/cu
  CGO_ENABLED=1 go test -c -ldflags "$ld" -o "$BIN/bin/cuda.test" ./plugins/cuda
  CGO_ENABLED=1 go test -c -ldflags "$ld" -o "$BIN/bin/nodecheck.test" ./netcheck/nodecheck
  # One compressed archive: the binaries are about 75 MB, the archive a
  # third of that; run unpacks it.
  tar -C "$BIN" -czf "$BIN/bin.tar.gz" bin
  rm -rf "$BIN/bin"
  echo "built $(tar -tzf "$BIN/bin.tar.gz" | grep -v '/$' | sed 's|^bin/||' | tr '\n' ' ')into $BIN/bin.tar.gz ($(du -h "$BIN/bin.tar.gz" | cut -f1)): now run scripts/gpu-check.sh run there, carrying $BIN"
}

case "${1:-run}" in
build) build; exit ;;
run) ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac

if [ -f "$BIN/bin.tar.gz" ] && [ ! -d "$BIN/bin" ]; then
  tar -C "$BIN" -xzf "$BIN/bin.tar.gz"
fi
BIN=$BIN/bin
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
step() { printf '\n==== %s\n' "$*"; }

step "machine"
date -u; uname -a; grep -m1 'model name' /proc/cpuinfo; nproc
ldd --version 2>&1 | head -1
GORUN=$BIN/gorun
if ! "$GORUN" --version >/dev/null 2>&1; then
  echo "the cgo gorun does not start here ($("$GORUN" --version 2>&1 | head -1)); using gorun-static, without NVML"
  fail "cgo gorun runs here"
  GORUN=$BIN/gorun-static
fi
"$GORUN" --version
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L
  nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version,persistence_mode,mig.mode.current --format=csv
else
  echo "no nvidia-smi here"
fi
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
echo "GPUs: $GPUS"

step "1. nvidia-smi topo -m beside gorun topo"
if [ "$GPUS" -gt 0 ]; then
  nvidia-smi topo -m
  echo "--- nvidia-smi topo -p2p r"
  nvidia-smi topo -p2p r
fi
echo "--- gorun topo"
"$GORUN" topo | tee "$OUT/topo.txt"
"$GORUN" topo --json >"$OUT/topo.json"
if [ "$GPUS" -gt 0 ]; then
  if grep -q '"gpu_source": "nvml"' "$OUT/topo.json"; then pass "gorun topo uses NVML"; else fail "gorun topo uses NVML ($(grep nvml_status "$OUT/topo.json"))"; fi
  got=$(grep -c '"uuid": "GPU-' "$OUT/topo.json")
  if [ "$got" -eq "$GPUS" ]; then pass "gorun topo has $GPUS UUIDs"; else fail "gorun topo has $got UUIDs, nvidia-smi $GPUS GPUs"; fi
  for u in $(nvidia-smi --query-gpu=uuid --format=csv,noheader); do
    grep -q "$u" "$OUT/topo.json" || fail "gorun topo lacks $u"
  done
fi

# The head's own NCCL variables, which the probe compares with each rank's.
GPU_CHECK_NCCL=$(env | grep '^NCCL_' | sort | sed 's/$/;/' | tr -d '\n')
export GPU_CHECK_NCCL
probe() { # probe MODE GORUN-ARGS...: each rank checks itself
  local mode=$1; shift
  echo "--- gorun $* --report-bindings python3 scripts/gpu_probe.py $mode"
  if "$GORUN" "$@" --report-bindings --tag-output python3 scripts/gpu_probe.py "$mode"; then
    pass "gorun $* ($mode): every rank checked itself"
  else
    fail "gorun $* ($mode): exit $?"
  fi
}

step "2. bindings, from inside each rank"
if [ "$GPUS" -gt 0 ] && command -v python3 >/dev/null; then
  probe all -np "$GPUS"
  probe single -np "$GPUS" --gpu-bind single
  if [ "$GPUS" -eq 1 ]; then
    # One GPU: two ranks share it (oversubscribed); rank 1's device 1
    # does not exist, as under torchrun, so only the binding is shown.
    "$GORUN" -np 2 --oversubscribe --bind-to gpu --report-bindings --tag-output \
      sh -c 'echo "local $LOCAL_RANK CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} $(grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status | tr "\t\n" "  ")"' ||
      fail "two ranks on one GPU"
  fi
  echo "--- --print-env 0"
  "$GORUN" -np "$GPUS" --print-env 0 true | grep -E '^(CUDA|NCCL|UCX|OMP|LOCAL_RANK|ROCR|ZE_)' || true
else
  echo "no GPU (or no python3): bindings as this machine makes them"
  "$GORUN" -np 2 --report-bindings --tag-output sh -c 'echo "local $LOCAL_RANK $(grep Cpus_allowed_list /proc/self/status)"' ||
    fail "gorun -np 2"
fi

step "3. torch: set_device(LOCAL_RANK), NCCL all-reduce"
PY=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null && PY=/usr/bin/python3
if [ "$GPUS" -gt 0 ] && $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() and torch.distributed.is_nccl_available() else 1)' 2>/dev/null; then
  $PY -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", torch.cuda.nccl.version())'
  if "$GORUN" -np "$GPUS" --tag-output $PY examples/torch/nccl_check.py; then
    pass "torch NCCL all-reduce on $GPUS ranks, device LOCAL_RANK each"
  else
    fail "torch NCCL all-reduce on $GPUS ranks"
  fi
  if [ "$GPUS" -gt 1 ]; then
    echo "--- the same with --gpu-bind single: LOCAL_RANK scripts fail on ranks > 0, as expected"
    "$GORUN" -np "$GPUS" --gpu-bind single --tag-output $PY examples/torch/nccl_check.py && fail "--gpu-bind single with a LOCAL_RANK script did not fail"
  fi
else
  echo "no torch with CUDA and NCCL here: skipped"
fi

step "4. topology's Go tests with the real NVML"
if (cd topology && "$BIN/topology.test" -test.v -test.run 'TestRealNVMLFallback|TestNVMLBuild|TestRecord' 2>&1 | tail -20); then
  pass "topology tests"
else
  fail "topology tests"
fi

step "5. the machine recorded, and read back"
host=$(hostname -s 2>/dev/null || echo gpu)
fixture=gpu-$(echo "$host" | tr -c 'a-zA-Z0-9-\n' '-')
tmp=$(mktemp -d)
if "$GORUN" topo --record "$tmp/$fixture"; then
  "$GORUN" topo --machine "$tmp/$fixture" >"$tmp/back.txt"
  if cmp -s "$tmp/back.txt" "$OUT/topo.txt"; then pass "the recording reads back as gorun topo"; else
    fail "the recording reads back differently"; diff "$OUT/topo.txt" "$tmp/back.txt" | head -20
  fi
  "$GORUN" topo --machine "$tmp/$fixture" --plan "$((GPUS > 0 ? GPUS : 2))" --env
  tar -C "$tmp" -czf "$OUT/fixture.tar.gz" "$fixture" && echo "fixture: $OUT/fixture.tar.gz ($fixture)"
else
  fail "gorun topo --record"
fi
rm -rf "$tmp"

step "6. the cost of NVML"
N=$((GPUS > 0 ? GPUS : 2))
timed() { # timed LABEL COMMAND...: three runs, seconds each
  local TIMEFORMAT="$1: %R s"; shift
  for _ in 1 2 3; do time "$@" >/dev/null; done
}
timed "gorun topo" "$GORUN" topo
# A launch reads sysfs only, unless it needs NVML (--report-bindings,
# --gpu-bind single, UUIDs in CUDA_VISIBLE_DEVICES).
timed "gorun -np $N true" "$GORUN" -np "$N" true
timed "gorun -np $N --gpu-bind single true (NVML)" "$GORUN" -np "$N" --gpu-bind single true
timed "gorun-static -np $N true" "$BIN/gorun-static" -np "$N" true

step "7. the CUDA plugin on the real driver"
# GPU_CHECK_CUDA_DRIVER (a fake driver, plugins/cuda/fakecuda) runs this
# step on a machine without a GPU, so that it does not rot between the
# sessions that have one.
if [ -n "${GPU_CHECK_CUDA_DRIVER:-}" ]; then export GORUN_CUDA_DRIVER=$GPU_CHECK_CUDA_DRIVER; fi
if [ "$GPUS" -gt 0 ] || [ -n "${GPU_CHECK_CUDA_DRIVER:-}" ]; then
  if CU_TEST_REAL=1 "$BIN/cu.test" -test.v -test.run 'TestDevices|TestMemory|TestIpc|TestReduce|TestPTX|TestOpenErrors' 2>&1 | tail -20; then
    pass "package cu on the real driver (PTX reductions, IPC)"
  else fail "package cu on the real driver"; fi
  if CU_TEST_REAL=1 GORUN_CUDA_TEST_PLUGIN="$BIN/gorun-plugin-cuda" "$BIN/cuda.test" -test.v 2>&1 | tail -20; then
    pass "the plugin's tests on the real driver"
  else fail "the plugin's tests on the real driver"; fi
  if "$GORUN" plugins test --plugin-dir "$BIN" cuda; then pass "gorun plugins test cuda"; else fail "gorun plugins test cuda"; fi
  if "$GORUN" bench allreduce --device cuda --plugin-dir "$BIN" -np 2 -b 1M -e "${GPU_CHECK_BENCH_MAX:-256M}" -f 4 -x GORUN_CUDA_DRIVER | tee "$OUT/bench-device.txt"; then
    pass "gorun bench allreduce --device cuda -np 2"
  else fail "gorun bench allreduce --device cuda -np 2"; fi
  CU_TEST_REAL=1 "$BIN/cu.test" -test.run '^$' -test.bench Copy -test.benchtime 20x | grep Benchmark | sed 's/^/cuMemcpyDtoD: /'
  CU_TEST_REAL=1 GORUN_CUDA_TEST_PLUGIN="$BIN/gorun-plugin-cuda" "$BIN/cuda.test" -test.run '^$' -test.bench Copy -test.benchtime 20x | grep Benchmark | sed 's/^/through the plugin: /'
else
  echo "no GPU: the CUDA plugin's checks need one (CI runs them on the fake driver)"
fi

step "8. inside the node, as gorun check --net measures it"
if [ "$GPUS" -gt 0 ] || [ -n "${GPU_CHECK_CUDA_DRIVER:-}" ]; then
  tmp=$(mktemp -d)
  if NODECHECK_REAL=1 NODECHECK_OUT=$tmp GORUN_CUDA_TEST_PLUGIN="$BIN/gorun-plugin-cuda" \
    timeout 120 "$BIN/nodecheck.test" -test.v -test.run '^TestRealGPUs$' 2>&1 | tail -40; then
    pass "the in-node measurement through the CUDA plugin"
  else fail "the in-node measurement through the CUDA plugin"; fi
  cp "$tmp/report.txt" "$OUT/nodecheck.txt" 2>/dev/null; cp "$tmp/report.json" "$OUT/nodecheck.json" 2>/dev/null
  rm -rf "$tmp"
else
  echo "no GPU: the in-node GPU copies need one (CI runs them on the fake driver)"
fi

step "summary"
if [ "$fails" -eq 0 ]; then echo "every check passed"; else echo "$fails check(s) FAILED"; fi
[ "$fails" -eq 0 ]

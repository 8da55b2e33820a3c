#!/usr/bin/env python3
"""What one rank sees of its GPU and binding, checked against gorun's rules.

Run by scripts/gpu-check.sh inside each rank of a gorun job (standard
library only; the CUDA driver through ctypes, so no torch is needed):

    gorun -np N python3 scripts/gpu_probe.py all|single

It prints one line per rank: the rank's LOCAL_RANK, CUDA_VISIBLE_DEVICES
and CUDA_DEVICE_ORDER, how many devices CUDA shows it, the PCI bus ID of
the device the rank should use (device LOCAL_RANK with every GPU visible,
device 0 with --gpu-bind single), that GPU's NUMA node, the rank's CPUs
and memory policy, then PASS or FAIL with the reasons:
  - the device is the LOCAL_RANK-th NVIDIA GPU of the node in PCI bus order;
  - every GPU is visible (all), or exactly one (single);
  - the rank's CPUs lie on its GPU's NUMA node, and its memory policy binds
    to that node (where the node has CPUs);
  - its NCCL_* variables are gorun's own (GPU_CHECK_NCCL): gorun sets none.
It exits 1 on FAIL, 0 on PASS, 2 where there is no CUDA driver.
"""
import ctypes
import os
import sys


def node_gpus():
    """NVIDIA GPUs' bus IDs in PCI bus order, from sysfs."""
    base = "/sys/bus/pci/devices"
    out = []
    for bdf in sorted(os.listdir(base)):
        try:
            with open(f"{base}/{bdf}/vendor") as f:
                vendor = f.read().strip()
            with open(f"{base}/{bdf}/class") as f:
                cls = f.read().strip()
        except OSError:
            continue
        if vendor == "0x10de" and cls[:6] in ("0x0300", "0x0302"):
            out.append(bdf.lower())
    return out


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def cpulist(s):
    cpus = set()
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        else:
            cpus.add(int(part))
    return cpus


def status(field):
    for line in read("/proc/self/status").splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def mem_policy():
    """The process's memory policy as numa_maps shows it on its first
    anonymous or heap mapping ("bind:0", "default", ...)."""
    for line in read("/proc/self/numa_maps").splitlines():
        f = line.split()
        if len(f) > 1:
            return f[1]
    return "?"


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "all"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    rank = os.environ.get("RANK", "?")
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(f"rank {rank}: no CUDA driver ({e})")
        return 2
    fails = []
    if cuda.cuInit(0) != 0:
        print(f"rank {rank}: cuInit failed")
        return 1
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    gpus = node_gpus()
    want_dev = local if mode == "all" else 0
    bus = "none"
    if want_dev < count.value:
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), want_dev)
        buf = ctypes.create_string_buffer(64)
        cuda.cuDeviceGetPCIBusId(buf, 64, dev)
        bus = buf.value.decode().lower()
        # CUDA writes 0000:1b:00.0 (or 00000000:...); sysfs 0000:1b:00.0.
        dom, rest = bus.split(":", 1)
        bus = dom[-4:].rjust(4, "0") + ":" + rest
    else:
        fails.append(f"device {want_dev} does not exist ({count.value} visible)")
    if mode == "all" and count.value != len(gpus):
        fails.append(f"{count.value} devices visible, the node has {len(gpus)}")
    if mode == "single" and count.value != 1:
        fails.append(f"{count.value} devices visible, want 1")
    if local < len(gpus) and bus != gpus[local]:
        fails.append(f"its device is {bus}, want GPU {local} in bus order, {gpus[local]}")
    numa = read(f"/sys/bus/pci/devices/{bus}/numa_node", "-1")
    cpus = status("Cpus_allowed_list")
    policy = mem_policy()
    if numa not in ("-1", ""):
        near = cpulist(read(f"/sys/devices/system/node/node{numa}/cpulist"))
        if near and not cpulist(cpus) <= near:
            fails.append(f"CPUs {cpus} are not all on NUMA node {numa}")
        if near and policy != f"bind:{numa}":
            fails.append(f"memory policy {policy}, want bind:{numa}")
    # gpu-check.sh passes the head's own NCCL_* as GPU_CHECK_NCCL.
    mine = "".join(f"{k}={v};" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_"))
    if mine != os.environ.get("GPU_CHECK_NCCL", mine):
        fails.append(f"NCCL variables {mine!r}, gorun's own {os.environ.get('GPU_CHECK_NCCL')!r}")
    verdict = "PASS" if not fails else "FAIL: " + "; ".join(fails)
    print(f"rank {rank} local {local} mode {mode}: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')} "
          f"CUDA_DEVICE_ORDER={os.environ.get('CUDA_DEVICE_ORDER', 'unset')} devices={count.value} device{want_dev}={bus} "
          f"numa={numa} cpus={cpus} mems={status('Mems_allowed_list')} policy={policy} {verdict}")
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())

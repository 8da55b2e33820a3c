#!/usr/bin/env python3
"""The canonical multi-GPU pattern under gorun: one rank per GPU, each
picking its GPU by LOCAL_RANK, then an NCCL all-reduce.

Run:  gorun -np <GPUs> python3 examples/torch/nccl_check.py

It does what DDP and Horovod scripts do first:

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")   # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT

then all-reduces a tensor of (rank + 1) and checks every element is
1 + 2 + ... + WORLD_SIZE. Each rank prints one line: its rank, LOCAL_RANK,
how many GPUs it sees, its device's name and PCI bus ID, and PASS or FAIL.
Under gorun's defaults every rank sees every GPU, so device LOCAL_RANK is
its own; with --gpu-bind single each rank sees one GPU and this script
fails on every rank but local rank 0, as it would under Slurm's
--gpus-per-task. It needs torch built with CUDA and NCCL.
"""

import os
import sys

import torch
import torch.distributed as dist


def main():
    local = int(os.environ["LOCAL_RANK"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not torch.cuda.is_available():
        print(f"rank {rank}: torch has no CUDA", flush=True)
        return 2
    seen = torch.cuda.device_count()
    try:
        torch.cuda.set_device(local)
    except Exception as e:  # what a LOCAL_RANK script hits when isolated
        print(f"rank {rank} local {local}: set_device({local}) with {seen} visible GPUs: FAIL: {e}", flush=True)
        return 1
    dist.init_process_group("nccl")
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    ok = bool((x == want).all().item())
    props = torch.cuda.get_device_properties(local)
    bus = getattr(props, "pci_bus_id", None)
    print(f"rank {rank} local {local}: sees {seen} GPUs, device {local} is {props.name}"
          f"{' bus %02x' % bus if bus is not None else ''}; all_reduce of 1M floats = {x[0].item()} "
          f"(want {want}): {'PASS' if ok else 'FAIL'}", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""gloo_allreduce.py - torch.distributed all_reduce bandwidth (gloo backend, CPU tensors,
float32 sum) for bench/coll.sh, measured and printed exactly like allreduce.c.

Rendezvous is env://: MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, which gorun sets
for every rank, e.g.

    gorun -np 2 /usr/bin/python3 bench/coll/gloo_allreduce.py
    gorun --ssh-config C -H h1,h2 -x GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 .../gloo_allreduce.py

(Debian's python3-torch lives in /usr/bin/python3.)

Per size: warm-up calls, a probe (up to 3 calls) that sets the calls per block (SCALE / bytes, at
most -m, at most what fits in -t seconds), -r blocks after a barrier, a block's time is
the slowest rank's mean per call, the size's time is the median block. gloo's all_reduce
is in place (the tensor is the output), so the timed calls reduce zeros (the values
would otherwise grow by n every call); the check is one more call afterwards on
(rank+1) * (i%7 + 1), whose sums are exact in float32, and the wrong elements of all
ranks are summed.

Output (rank 0): '#' comments, CSV with a header, one line per size, "# done":
    bytes,count,iters,time_us,min_us,max_us,algbw_GBs,busbw_GBs,wrong
algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests), GB = 1e9 bytes.
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1].lower(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def block(t, iters):
    """The slowest rank's mean seconds per call over iters calls (the same on every rank)."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    mine = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return mine.item()


def main():
    ap = argparse.ArgumentParser(description="gloo all_reduce bandwidth, CSV like allreduce.c")
    ap.add_argument("-b", default="4K", help="smallest size in bytes (K/M/G suffix)")
    ap.add_argument("-e", default="64M", help="largest size in bytes")
    ap.add_argument("-f", type=int, default=2, help="size factor")
    ap.add_argument("-r", type=int, default=5, help="timed blocks per size")
    ap.add_argument("-w", type=int, default=3, help="warm-up calls (fewer for large sizes)")
    ap.add_argument("-s", default="128M", help="calls per block = SCALE / bytes ...")
    ap.add_argument("-m", type=int, default=1000, help="... at most this many ...")
    ap.add_argument("-t", type=float, default=0.05, help="... and at most this many seconds by the probe")
    a = ap.parse_args()
    minb, maxb, scale = parse_size(a.b), parse_size(a.e), parse_size(a.s)

    torch.set_num_threads(1)  # one core per rank at most; the box has 2
    dist.init_process_group("gloo", init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    names = [None] * n
    dist.all_gather_object(names, socket.gethostname())
    if rank == 0:
        print("# gloo_allreduce.py: torch.distributed all_reduce (gloo) float32 sum, in place")
        print(f"# lib: torch {torch.__version__} gloo, python {sys.version.split()[0]},"
              f" GLOO_SOCKET_IFNAME={os.environ.get('GLOO_SOCKET_IFNAME', '')}")
        print(f"# ranks: {n} hosts: {len(set(names))} (rank 0 on {names[0]})")
        print(f"# blocks: {a.r} warmup: {a.w} scale: {scale} maxiters: {a.m} block_s: {a.t}")
        print("bytes,count,iters,time_us,min_us,max_us,algbw_GBs,busbw_GBs,wrong", flush=True)

    total_wrong = 0
    size = minb
    while size <= maxb:
        count = size // 4
        t = torch.zeros(count, dtype=torch.float32)
        iters = max(1, min(a.m, scale // size))
        for _ in range(min(a.w, max(1, iters // 4)) if a.w > 0 else 0):
            dist.all_reduce(t)
        probe = block(t, min(iters, 3))
        if probe > 0 and probe * iters > a.t:
            iters = max(1, int(a.t / probe))
        times = sorted(block(t, iters) for _ in range(a.r))

        pattern = (torch.arange(count, dtype=torch.int64) % 7 + 1).to(torch.float32)
        t = pattern * (rank + 1)
        dist.all_reduce(t)
        wrong = torch.tensor([int((t != pattern * (n * (n + 1) // 2)).sum().item())], dtype=torch.int64)
        dist.all_reduce(wrong)
        total_wrong += int(wrong.item())

        if rank == 0:
            med = statistics.median(times)
            algbw = size / med / 1e9
            busbw = algbw * 2 * (n - 1) / n
            print(f"{size},{count},{iters},{med * 1e6:.2f},{times[0] * 1e6:.2f},{times[-1] * 1e6:.2f},"
                  f"{algbw:.4f},{busbw:.4f},{int(wrong.item())}", flush=True)
        size *= a.f
    if rank == 0:
        print("# done", flush=True)
    dist.destroy_process_group()
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())

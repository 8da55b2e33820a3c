# A torch gloo job that hangs on purpose: rank $HANG_RANK sleeps in
# slow_batch until the file $HANG_RELEASE appears, while the others wait
# in all_reduce (called from sync_grads).
import os
import time

import torch
import torch.distributed as dist

RELEASE = os.environ["HANG_RELEASE"]


def slow_batch():
    while not os.path.exists(RELEASE):
        time.sleep(0.05)


def sync_grads(t):
    dist.all_reduce(t)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"up {rank}", flush=True)
    if rank == int(os.environ["HANG_RANK"]):
        slow_batch()
    t = torch.ones(4)
    sync_grads(t)
    print(f"done {rank} {t[0].item():.0f}", flush=True)
    dist.destroy_process_group()


main()

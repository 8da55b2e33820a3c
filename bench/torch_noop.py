"""torch_noop.py - the smallest torch.distributed job: join the gloo group, one
barrier, leave. Its rank, world size and rendezvous come from the environment
that the launcher sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as torchrun
and gorun both set them. With BENCH_CHECK=1 rank 0 prints "noop WORLD_SIZE".
"""
import os

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
if os.environ.get("BENCH_CHECK") == "1" and dist.get_rank() == 0:
    print(f"noop {dist.get_world_size()}", flush=True)
dist.destroy_process_group()

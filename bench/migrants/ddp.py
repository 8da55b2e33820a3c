"""ddp.py - bench/migrants.sh's torch program: a gloo all_reduce, as a
training script starts (init_process_group from the environment torchrun
gives: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).

    rank R/W local L sum S

S is the all_reduce of rank+1 over the job. Run it with /usr/bin/python3
(Debian's python3-torch). An argument --local_rank=N (DeepSpeed's, and
torch.distributed.launch's without --use-env) is taken and printed as
arg L.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

arg = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--local_rank=") or a.startswith("--local-rank=")), None)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
line = f"rank {rank}/{world} local {os.environ.get('LOCAL_RANK', '-')} sum {int(t.item())}"
if arg is not None:
    line += f" arg {arg}"
print(line, flush=True)
dist.destroy_process_group()

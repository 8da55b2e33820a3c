"""port1.py - what Megatron-LM's in-process restart does with MASTER_PORT:
a second TCPStore at MASTER_PORT+1 that every rank opens (rank 0 serves
it), so it holds only if every rank sees the same MASTER_ADDR and
MASTER_PORT, as torchrun gives them. Each rank sets a key and waits for
every other's.

    rank R/W store MASTER_PORT+1 ok
"""
import datetime
import os

from torch.distributed import TCPStore

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
port = int(os.environ["MASTER_PORT"]) + 1
store = TCPStore(os.environ["MASTER_ADDR"], port, world, rank == 0, datetime.timedelta(seconds=10))
store.set(f"k{rank}", "1")
store.wait([f"k{r}" for r in range(world)])
print(f"rank {rank}/{world} store MASTER_PORT+1 ok", flush=True)
store.add("done", 1)
if rank == 0:  # the server goes last
    while int(store.add("done", 0)) < world:
        pass

"""port1.py - the migrant review's P7, as Megatron-LM's in-process restart
does: besides the job's store at MASTER_PORT (init_process_group), each
rank opens a second TCPStore at MASTER_PORT+1, served by rank 0, sets a
key and waits for every other rank's. A rank given another MASTER_PORT
than rank 0's waits for nothing there and times out."""
import datetime
import os

import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
store = dist.TCPStore(addr, port + 1, world, rank == 0, datetime.timedelta(seconds=30))
store.set("rank%d" % rank, str(port))
store.wait(["rank%d" % r for r in range(world)])
ports = sorted({store.get("rank%d" % r).decode() for r in range(world)})
print("rank %d saw MASTER_PORT %s" % (rank, ",".join(ports)), flush=True)
dist.barrier()
dist.destroy_process_group()

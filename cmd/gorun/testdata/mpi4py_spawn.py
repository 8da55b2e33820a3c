# Dynamic processes through mpi4py, after mpi4py's own test_spawn.py:
# MPI_Comm_spawn from COMM_SELF and COMM_WORLD, one child and as many as
# ranks, the errcodes, arguments given at the root only, and
# MPI_Comm_spawn_multiple; then name publishing between the ranks. Each
# rank prints one line per case that passed; rank 0 prints "PASS".
import sys
from mpi4py import MPI

CHILD = ["-c", "; ".join([
    "from mpi4py import MPI",
    "parent = MPI.Comm.Get_parent()",
    "assert parent != MPI.COMM_NULL",
    "parent.Barrier()",
    "parent.Disconnect()",
    "assert MPI.Comm.Get_parent() == MPI.COMM_NULL",
])]

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()


def spawn(comm, maxprocs, root=0):
    errcodes = []
    if comm.Get_rank() == root:
        child = comm.Spawn(sys.executable, CHILD, maxprocs, root=root, errcodes=errcodes)
    else:
        child = comm.Spawn("", None, -1, root=root)
    assert child.Get_size() == comm.Get_size()
    assert child.Get_remote_size() == maxprocs, child.Get_remote_size()
    if comm.Get_rank() == root:
        assert errcodes == [MPI.SUCCESS] * maxprocs, errcodes
    child.Barrier()
    child.Disconnect()


for name, comm in (("self", MPI.COMM_SELF), ("world", world)):
    for maxprocs in (1, size):
        spawn(comm, maxprocs)
        print(f"rank {rank}: spawn {name} {maxprocs} ok", flush=True)

# MPI_Comm_spawn_multiple: two programs, one process each.
if rank == 0:
    child = world.Spawn_multiple([sys.executable, sys.executable], [CHILD, CHILD], [1, 1], root=0)
else:
    child = world.Spawn_multiple(None, None, None, root=0)
assert child.Get_remote_size() == 2
child.Barrier()
child.Disconnect()
print(f"rank {rank}: spawn_multiple ok", flush=True)

# Name publishing: rank 0 opens a port and publishes it; the last rank
# looks it up and connects.
if size > 1:
    service = "gorun-test-service"
    if rank == 0:
        port = MPI.Open_port()
        MPI.Publish_name(service, port)
        world.Barrier()
        inter = MPI.COMM_SELF.Accept(port)
        got = inter.recv(source=0)
        inter.Disconnect()
        MPI.Unpublish_name(service, port)
        MPI.Close_port(port)
        assert got == "hello", got
    else:
        world.Barrier()
        if rank == size - 1:
            port = MPI.Lookup_name(service)
            inter = MPI.COMM_SELF.Connect(port)
            inter.send("hello", dest=0)
            inter.Disconnect()
    print(f"rank {rank}: names ok", flush=True)

world.Barrier()
if rank == 0:
    print("PASS", flush=True)

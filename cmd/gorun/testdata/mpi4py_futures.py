# mpi4py.futures: an MPIPoolExecutor maps a function over a few items in
# its workers. Run as a script (python3 mpi4py_futures.py), the executor
# spawns its workers (MPI_Comm_spawn; as many as MPI_UNIVERSE_SIZE less
# the job's ranks, at least one); under python3 -m mpi4py.futures, the
# job's other ranks are the workers.
from mpi4py import MPI
from mpi4py.futures import MPIPoolExecutor


def where(x):
    return x * x, MPI.COMM_WORLD.Get_size()


if __name__ == "__main__":
    with MPIPoolExecutor() as ex:
        got = list(ex.map(where, range(8)))
    print("squares", [sq for sq, _ in got], flush=True)
    print("workers' world", sorted({n for _, n in got}), flush=True)

"""futures.py - mpi4py.futures' MPIPoolExecutor, as its docs show it: one
process started by the launcher spawns its workers (MPI_Comm_spawn) and
farms out calls to them.

    pool [1, 2, 4, 8]
"""
from mpi4py.futures import MPIPoolExecutor

if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=2) as pool:
        print("pool", list(pool.map(pow, [2] * 4, range(4))), flush=True)

# An mpi4py job for gorun's tests: every rank prints the sum of rank+1.
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print(f"rank {comm.Get_rank()} of {comm.Get_size()} sum {total}", flush=True)

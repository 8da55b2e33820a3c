"""train.py - the stand-in of Horovod's train.py in bench/migrants.sh:
Horovod is not installed, and in its MPI mode a Horovod job is an MPI job
(hvd.init() initializes MPI through mpi4py's library); this does what the
ranks of such a job do first, an allreduce over MPI_COMM_WORLD.

    rank R/N host H sum S

Run it with /usr/bin/python3 (Debian's python3-mpi4py, on Open MPI).
"""
import os
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1)
print(f"rank {rank}/{size} host {socket.gethostname()} sum {total} cwd {os.getcwd()}", flush=True)

/* The smallest MPI job: MPI_Init, rank and size, MPI_Finalize. It is what
 * bench/mpi.sh times under gorun, mpiexec.hydra and mpirun. Builds against
 * MPICH (mpicc.mpich) and Open MPI (mpicc.openmpi) alike. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
	int rank, size;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (rank == 0) printf("hello from %d ranks\n", size);
	MPI_Finalize();
	return 0;
}

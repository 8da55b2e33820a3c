/* An MPI program for gorun's tests: MPI_Init, a barrier, an allreduce of
 * the ranks, MPI_Finalize. Arguments choose a failure:
 *   abort R      rank R calls MPI_Abort(MPI_COMM_WORLD, 7) after MPI_Init
 *   early R      rank R returns 0 after MPI_Init without MPI_Finalize
 * Build: mpicc.mpich -o hello hello.c; run: gorun -np 4 ./hello */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
	int rank, size, sum = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc > 2 && rank == atoi(argv[2])) {
		if (strcmp(argv[1], "abort") == 0)
			MPI_Abort(MPI_COMM_WORLD, 7);
		if (strcmp(argv[1], "early") == 0)
			return 0;
	}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d of %d sum %d\n", rank, size, sum);
	MPI_Finalize();
	return 0;
}

/* Which program am I? Prints each rank's rank, the world's size, its
 * application number (MPI_APPNUM: its place in an MPMD command line,
 * prog1 : -np 2 prog2) and argv[0], then checks with an allreduce that
 * every rank is in one MPI_COMM_WORLD. Builds against MPICH (mpicc.mpich)
 * and Open MPI (mpicc.openmpi) alike:
 *
 *	gorun -np 1 ./apps : -np 2 ./apps-copy
 *	gorun mpiexec -n 1 ./apps : -n 2 ./apps-copy
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
	int rank, size, flag, sum = 0, *appnum;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d of %d appnum %d argv0 %s sum %d\n", rank, size, flag ? *appnum : -1, argv[0], sum);
	MPI_Finalize();
	return sum == size * (size - 1) / 2 ? 0 : 1;
}

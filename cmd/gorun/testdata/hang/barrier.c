/* An MPI job that hangs on purpose: rank $HANG_RANK sleeps in slow_step
 * until the file $HANG_RELEASE appears, while the others wait in
 * MPI_Barrier (called from sync_ranks). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) static void slow_step(void) {
	while (access(getenv("HANG_RELEASE"), F_OK) != 0)
		usleep(50000);
}

__attribute__((noinline)) static void sync_ranks(void) { MPI_Barrier(MPI_COMM_WORLD); }

int main(int argc, char **argv) {
	int rank;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	printf("up %d\n", rank);
	fflush(stdout);
	if (rank == atoi(getenv("HANG_RANK")))
		slow_step();
	sync_ranks();
	printf("done %d\n", rank);
	MPI_Finalize();
	return 0;
}

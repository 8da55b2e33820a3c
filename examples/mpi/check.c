/* An MPI program that checks the job it runs in, for gorun's tests. It
 * builds against MPICH and Open MPI alike:
 *   mpicc.mpich -O1 -o check check.c      gorun -np 4 ./check
 *   mpicc.openmpi -O1 -o check check.c    gorun -np 4 ./check
 * It runs a barrier, an allreduce of rank+1 (must be n(n+1)/2), a ring
 * MPI_Sendrecv, a 4 MiB MPI_Isend/MPI_Irecv ring (the large-message path),
 * and an allreduce of everyone's verdict; rank 0 prints PASS or FAIL, and
 * every rank prints one line with its rank, the size and its node's size
 * (MPI_COMM_TYPE_SHARED). Arguments choose a failure instead:
 *   abort R      rank R calls MPI_Abort(MPI_COMM_WORLD, 7) after MPI_Init
 *   early R      rank R returns 0 after MPI_Init and a barrier, without
 *                MPI_Finalize
 *   crash R      rank R dies of SIGSEGV as MPI_Init starts, the others
 *                being inside MPI_Init (R is read from GORUN_RANK)
 *   late R       rank R sleeps a minute before MPI_Init (a rank that never
 *                reaches the launcher's fence in time)
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (4 << 20)

int main(int argc, char **argv) {
	const char *mode = argc > 2 ? argv[1] : "";
	int victim = argc > 2 ? atoi(argv[2]) : -1;
	const char *me = getenv("GORUN_RANK");
	if (strcmp(mode, "crash") == 0 && me != NULL && atoi(me) == victim)
		raise(SIGSEGV);
	if (strcmp(mode, "late") == 0 && me != NULL && atoi(me) == victim)
		sleep(60);

	int rank, size, ok = 1;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (rank == victim && strcmp(mode, "abort") == 0)
		MPI_Abort(MPI_COMM_WORLD, 7);
	if (rank == victim && strcmp(mode, "early") == 0) {
		/* Past a barrier every rank is out of MPI_Init, whose wire-up
		 * (UCX connects to every peer) would otherwise fail on the
		 * victim's exit and race it as the first failure. */
		MPI_Barrier(MPI_COMM_WORLD);
		return 0;
	}

	MPI_Barrier(MPI_COMM_WORLD);

	int one = rank + 1, sum = 0;
	MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (sum != size * (size + 1) / 2) {
		fprintf(stderr, "rank %d: allreduce gave %d, want %d\n", rank, sum, size * (size + 1) / 2);
		ok = 0;
	}

	int right = (rank + 1) % size, left = (rank + size - 1) % size, got = -1;
	MPI_Sendrecv(&rank, 1, MPI_INT, right, 1, &got, 1, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	if (got != left) {
		fprintf(stderr, "rank %d: ring got %d, want %d\n", rank, got, left);
		ok = 0;
	}

	unsigned char *out = malloc(BIG), *in = malloc(BIG);
	for (int i = 0; i < BIG; i++) out[i] = (unsigned char)(rank * 31 + i);
	MPI_Request req[2];
	MPI_Irecv(in, BIG, MPI_BYTE, left, 2, MPI_COMM_WORLD, &req[0]);
	MPI_Isend(out, BIG, MPI_BYTE, right, 2, MPI_COMM_WORLD, &req[1]);
	MPI_Status st[2];
	MPI_Waitall(2, req, st);
	for (int i = 0; i < BIG; i++) {
		if (in[i] != (unsigned char)(left * 31 + i)) {
			fprintf(stderr, "rank %d: large message from %d differs at byte %d\n", rank, left, i);
			ok = 0;
			break;
		}
	}
	free(out);
	free(in);

	MPI_Comm node;
	int nodesize = 0;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
	MPI_Comm_size(node, &nodesize);
	MPI_Comm_free(&node);

	int all = 0;
	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	printf("rank %d of %d node %d\n", rank, size, nodesize);
	fflush(stdout);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) printf("%s\n", all ? "PASS" : "FAIL");
	MPI_Finalize();
	return all ? 0 : 1;
}

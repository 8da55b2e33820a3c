/* hello.c - the MPI program of bench/migrants.sh, built with mpicc.mpich
 * (hello_mpich) and mpicc.openmpi (hello_ompi). Each rank prints one line
 * that does not depend on the launcher's own variables, so that two
 * launchers' outputs compare once sorted:
 *
 *   rank R/N host H sum S cwd D omp T [ENV=VALUE ...]
 *
 * S is an MPI_Allreduce of rank+1 (N(N+1)/2 when the job is wired up), T
 * is $OMP_NUM_THREADS (- when unset), and each argument NAME prints
 * NAME=$NAME (- when unset). Arguments: "exit=K:R" makes rank R exit with
 * K after MPI_Finalize; "hang=R" makes rank R sleep for ever before the
 * allreduce (a hung job for --timeout); "stdin" makes rank 0 read its
 * standard input and print its byte count. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
	int rank, size, len, sum = 0, one, exitcode = 0, exitrank = -1, hang = -1, readin = 0;
	char host[MPI_MAX_PROCESSOR_NAME], cwd[4096], line[8192];
	const char *omp = getenv("OMP_NUM_THREADS");
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &len);
	for (int i = 1; i < argc; i++) {
		if (sscanf(argv[i], "exit=%d:%d", &exitcode, &exitrank) == 2) continue;
		if (sscanf(argv[i], "hang=%d", &hang) == 1) continue;
		if (strcmp(argv[i], "stdin") == 0) readin = 1;
	}
	if (rank == hang) for (;;) sleep(1);
	one = rank + 1;
	MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "?");
	int n = snprintf(line, sizeof line, "rank %d/%d host %s sum %d cwd %s omp %s", rank, size, host, sum, cwd, omp ? omp : "-");
	for (int i = 1; i < argc; i++) {
		if (strchr(argv[i], '=') || strcmp(argv[i], "stdin") == 0) continue;
		const char *v = getenv(argv[i]);
		n += snprintf(line + n, sizeof line - n, " %s=%s", argv[i], v ? v : "-");
	}
	if (rank == 0 && readin) {
		long bytes = 0;
		char buf[4096];
		size_t k;
		while ((k = fread(buf, 1, sizeof buf, stdin)) > 0) bytes += k;
		n += snprintf(line + n, sizeof line - n, " stdin %ld bytes", bytes);
	}
	printf("%s\n", line);
	fflush(stdout);
	MPI_Finalize();
	return rank == exitrank ? exitcode : 0;
}

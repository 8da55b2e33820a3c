/* Dynamic processes: MPI_Comm_spawn, MPI_Comm_spawn_multiple and name
 * publishing, and how their failures end a job. Builds against Open MPI
 * (mpicc.openmpi) and MPICH (mpicc.mpich) alike:
 *
 *	gorun -np 1 ./spawn            spawn 2 children, which reply through the intercommunicator
 *	gorun -np 1 ./spawn multiple   MPI_Comm_spawn_multiple: 2 programs, 1 process each
 *	gorun -np 2 ./spawn publish    rank 0 publishes a port, the last rank looks it up and connects
 *	gorun -np 2 ./spawn names      publish, look up and unpublish a name, with no port (MPICH 4.0's
 *	                               ch4:ucx has no MPI_Open_port, and no MPI_Comm_spawn)
 *	gorun -np 1 ./spawn child-abort   child rank 1 calls MPI_Abort(MPI_COMM_WORLD, 5)
 *	gorun -np 1 ./spawn child-exit    child rank 0 exits with code 3 inside MPI
 *	gorun -np 1 ./spawn parent-dies   the parent kills itself while its children wait for it
 *	gorun -np 1 ./spawn info KEY VALUE  spawn with an info key; say whether the spawn worked
 *	gorun -np 1 ./spawn non-mpi    spawn /bin/true, which never connects: gorun fails the spawn
 *	                               once it ended (mpirun waits for Open MPI's 10-minute timeout)
 *
 * The parent prints "PASS" when its case passed. The children are this
 * program again, run as "spawn child MODE".
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int child(const char *mode, MPI_Comm parent) {
	int rank, size, flag, *appnum, v;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
	printf("child %d of %d appnum %d mode %s\n", rank, size, flag ? *appnum : -1, mode);
	fflush(stdout);
	if (strcmp(mode, "child-abort") == 0 && rank == 1)
		MPI_Abort(MPI_COMM_WORLD, 5);
	if (strcmp(mode, "child-exit") == 0 && rank == 0)
		_exit(3);
	if (strcmp(mode, "child-abort") == 0 || strcmp(mode, "child-exit") == 0 || strcmp(mode, "parent-dies") == 0) {
		/* Wait for the parent, which never sends. */
		MPI_Recv(&v, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
	}
	v = 100 * (flag ? *appnum + 1 : 1) + rank;
	MPI_Send(&v, 1, MPI_INT, 0, 0, parent);
	MPI_Comm_disconnect(&parent);
	MPI_Finalize();
	return 0;
}

/* collect receives one int from each remote rank of kids and checks them. */
static int collect(MPI_Comm kids, const int *want) {
	int n, ok = 1;
	MPI_Comm_remote_size(kids, &n);
	for (int i = 0; i < n; i++) {
		int v;
		MPI_Recv(&v, 1, MPI_INT, i, 0, kids, MPI_STATUS_IGNORE);
		printf("parent got %d from child %d of %d\n", v, i, n);
		ok &= v == want[i];
	}
	return ok;
}

int main(int argc, char **argv) {
	int rank, size, ok = 1;
	MPI_Comm parent, kids;
	MPI_Init(&argc, &argv);
	MPI_Comm_get_parent(&parent);
	if (parent != MPI_COMM_NULL)
		return child(argc > 2 ? argv[2] : "", parent);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char *mode = argc > 1 ? argv[1] : "reply";
	char *cargs[] = {"child", (char *)mode, NULL};
	if (strcmp(mode, "publish") == 0) {
		char port[MPI_MAX_PORT_NAME];
		MPI_Comm inter;
		int v = 42;
		if (rank == 0) {
			MPI_Open_port(MPI_INFO_NULL, port);
			MPI_Publish_name("gorun-spawn-example", MPI_INFO_NULL, port);
			MPI_Barrier(MPI_COMM_WORLD);
			MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
			MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
			printf("rank 0 got %d through the published port\n", v);
			ok = v == 7;
			MPI_Comm_disconnect(&inter);
			MPI_Unpublish_name("gorun-spawn-example", MPI_INFO_NULL, port);
			MPI_Close_port(port);
		} else {
			MPI_Barrier(MPI_COMM_WORLD);
			if (rank == size - 1) {
				MPI_Lookup_name("gorun-spawn-example", MPI_INFO_NULL, port);
				MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
				v = 7;
				MPI_Send(&v, 1, MPI_INT, 0, 0, inter);
				MPI_Comm_disconnect(&inter);
			}
		}
	} else if (strcmp(mode, "names") == 0) {
		char port[MPI_MAX_PORT_NAME];
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		if (rank == 0) {
			snprintf(port, sizeof port, "port-of-rank-%d", rank);
			ok = MPI_Publish_name("gorun-names-example", MPI_INFO_NULL, port) == MPI_SUCCESS;
		}
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == size - 1) {
			ok = MPI_Lookup_name("gorun-names-example", MPI_INFO_NULL, port) == MPI_SUCCESS;
			printf("rank %d looked up %s\n", rank, ok ? port : "nothing");
			ok = ok && strcmp(port, "port-of-rank-0") == 0;
		}
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0)
			ok = ok && MPI_Unpublish_name("gorun-names-example", MPI_INFO_NULL, port) == MPI_SUCCESS;
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == size - 1 && MPI_Lookup_name("gorun-names-example", MPI_INFO_NULL, port) == MPI_SUCCESS) {
			printf("rank %d still found the name after it was unpublished\n", rank);
			ok = 0;
		}
	} else if (strcmp(mode, "multiple") == 0) {
		char *cmds[2] = {argv[0], argv[0]};
		char **args[2] = {cargs, cargs};
		int np[2] = {1, 1}, want[2] = {100, 201};
		MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
		MPI_Comm_spawn_multiple(2, cmds, args, np, infos, 0, MPI_COMM_WORLD, &kids, MPI_ERRCODES_IGNORE);
		if (rank == 0)
			ok = collect(kids, want);
		MPI_Comm_disconnect(&kids);
	} else if (strcmp(mode, "non-mpi") == 0) {
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		int rc = MPI_Comm_spawn("/bin/true", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &kids, MPI_ERRCODES_IGNORE);
		printf("spawn of /bin/true %s\n", rc == MPI_SUCCESS ? "worked" : "failed");
		if (rc == MPI_SUCCESS)
			MPI_Comm_disconnect(&kids);
	} else if (strcmp(mode, "info") == 0 && argc > 3) {
		MPI_Info info;
		MPI_Info_create(&info);
		MPI_Info_set(info, argv[2], argv[3]);
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		cargs[1] = "reply";
		int rc = MPI_Comm_spawn(argv[0], cargs, 1, info, 0, MPI_COMM_WORLD, &kids, MPI_ERRCODES_IGNORE);
		if (rc != MPI_SUCCESS) {
			char s[MPI_MAX_ERROR_STRING];
			int n;
			MPI_Error_string(rc, s, &n);
			printf("spawn with %s=%s failed: %s\n", argv[2], argv[3], s);
		} else {
			int want[1] = {100};
			printf("spawn with %s=%s worked\n", argv[2], argv[3]);
			if (rank == 0)
				ok = collect(kids, want);
			MPI_Comm_disconnect(&kids);
		}
	} else {
		int n = strcmp(mode, "reply") == 0 ? 2 : 3, want[3] = {100, 101, 102};
		MPI_Comm_spawn(argv[0], cargs, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &kids, MPI_ERRCODES_IGNORE);
		if (strcmp(mode, "parent-dies") == 0) {
			printf("parent: children started; dying\n");
			fflush(stdout);
			raise(SIGKILL);
		}
		if (rank == 0)
			ok = collect(kids, want);
		MPI_Comm_disconnect(&kids);
	}
	MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s\n", ok ? "PASS" : "FAIL");
	MPI_Finalize();
	return ok ? 0 : 1;
}

/* A job that hangs on purpose: rank $HANG_RANK blocks in read(2) on the
 * FIFO $HANG_FIFO (in read_input) until a byte arrives; the others wait
 * in wait_for_peers until the file $HANG_RELEASE appears. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int released(void) { return access(getenv("HANG_RELEASE"), F_OK) == 0; }

__attribute__((noinline)) static int read_input(int fd) {
	char b;
	return (int)read(fd, &b, 1);
}

__attribute__((noinline)) static void wait_for_peers(void) {
	struct timespec ts = {0, 200 * 1000 * 1000}; /* rarely caught in access() */
	while (!released())
		nanosleep(&ts, NULL);
}

int main(void) {
	int rank = atoi(getenv("RANK"));
	printf("up %d\n", rank);
	fflush(stdout);
	if (rank == atoi(getenv("HANG_RANK"))) {
		int fd = open(getenv("HANG_FIFO"), O_RDWR);
		if (fd < 0 || read_input(fd) != 1)
			return 3;
	} else {
		wait_for_peers();
	}
	printf("done %d\n", rank);
	return 0;
}

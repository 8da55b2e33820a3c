/* spawnfloor.c - the floor of starting N processes from C: N /bin/true
 * spawned from T threads (splitting N), then all reaped, timed with
 * CLOCK_MONOTONIC. bench/spawnfloor.sh builds and runs it, interleaved with
 * the Go side (gospawn/main.go).
 *
 * Usage: spawnfloor-c METHOD N [T]
 *   METHOD  spawn     posix_spawn (glibc: clone(CLONE_VM|CLONE_VFORK), so the
 *                     calling thread waits for each child's exec)
 *           usevfork  posix_spawn with POSIX_SPAWN_USEVFORK set (accepted and
 *                     ignored by glibc since 2.24: the same path as spawn)
 *           vfork     vfork() + execve(), what Go's syscall.ForkExec does
 *           fork      fork() + execve(): the parent goes on while the child
 *                     execs, as Hydra's proxy forks
 *   N       processes to start; T threads (default 1), thread i starting
 *           N*i/T to N*(i+1)/T, all released at once by a barrier.
 *
 * Output: one TSV line, "c-METHOD[-tT] N spawn_ms total_ms self_cpu_ms
 * children_cpu_ms", where spawn_ms runs from the release of the threads to
 * the last spawn returned (every thread done), total_ms from the same start
 * to the last child reaped, self_cpu_ms is this process's CPU (user+system,
 * every thread) over that time and children_cpu_ms the reaped children's.
 * The children inherit stdin, stdout, stderr and the environment. Exits 1
 * when a spawn fails or a child does not exit 0.
 *
 * Build: gcc -O2 -Wall -Wextra -pthread -o spawnfloor-c spawnfloor.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *prog = "/bin/true";
static char *child_argv[] = {"true", NULL};

enum method { M_SPAWN, M_USEVFORK, M_VFORK, M_FORK };

struct job {
	enum method method;
	int n, threads;
	pid_t *pids;
	pthread_barrier_t start, done;
};

struct worker {
	struct job *job;
	int lo, hi;
	int err; /* errno of the first failed start, 0 if none */
};

static double tv_ms(struct timeval tv)
{
	return tv.tv_sec * 1e3 + tv.tv_usec / 1e3;
}

/* cpu_ms is the user+system CPU of this process (all its threads) or of its
 * reaped children, in ms. */
static double cpu_ms(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return tv_ms(ru.ru_utime) + tv_ms(ru.ru_stime);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* start1 starts one /bin/true by the job's method; it returns 0 and sets
 * *pid, or an errno. */
static int start1(enum method m, pid_t *pid)
{
	posix_spawnattr_t attr;
	pid_t p;
	int err;

	switch (m) {
	case M_SPAWN:
		return posix_spawn(pid, prog, NULL, NULL, child_argv, environ);
	case M_USEVFORK:
		posix_spawnattr_init(&attr);
		posix_spawnattr_setflags(&attr, POSIX_SPAWN_USEVFORK);
		err = posix_spawn(pid, prog, NULL, &attr, child_argv, environ);
		posix_spawnattr_destroy(&attr);
		return err;
	case M_VFORK:
		p = vfork();
		if (p == 0) {
			execve(prog, child_argv, environ);
			_exit(127);
		}
		break;
	case M_FORK:
		p = fork();
		if (p == 0) {
			execve(prog, child_argv, environ);
			_exit(127);
		}
		break;
	default:
		return EINVAL;
	}
	if (p < 0)
		return errno;
	*pid = p;
	return 0;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct job *j = w->job;

	pthread_barrier_wait(&j->start);
	for (int i = w->lo; i < w->hi && !w->err; i++)
		if ((w->err = start1(j->method, &j->pids[i])) != 0)
			j->pids[i] = 0; /* posix_spawn leaves it unspecified */
	pthread_barrier_wait(&j->done);
	return NULL;
}

static int parse_method(const char *s, enum method *m)
{
	static const char *names[] = {"spawn", "usevfork", "vfork", "fork"};
	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0) {
			*m = (enum method)i;
			return 0;
		}
	return -1;
}

/* reap_all waits for n children; it returns how many did not exit 0. */
static int reap_all(int n)
{
	int bad = 0, st;
	for (int i = 0; i < n; i++) {
		if (waitpid(-1, &st, 0) < 0) {
			perror("spawnfloor-c: waitpid");
			return n - i;
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad++;
	}
	return bad;
}

int main(int argc, char **argv)
{
	struct job j = {0};
	if (argc < 3 || parse_method(argv[1], &j.method) != 0) {
		fprintf(stderr, "usage: spawnfloor-c spawn|usevfork|vfork|fork N [THREADS]\n");
		return 2;
	}
	j.n = atoi(argv[2]);
	j.threads = argc > 3 ? atoi(argv[3]) : 1;
	if (j.n < 1 || j.threads < 1) {
		fprintf(stderr, "spawnfloor-c: N and THREADS must be at least 1\n");
		return 2;
	}
	j.pids = calloc(j.n, sizeof *j.pids);
	pthread_t *tids = calloc(j.threads, sizeof *tids);
	struct worker *ws = calloc(j.threads, sizeof *ws);
	if (!j.pids || !tids || !ws) {
		perror("spawnfloor-c: calloc");
		return 1;
	}
	pthread_barrier_init(&j.start, NULL, j.threads + 1);
	pthread_barrier_init(&j.done, NULL, j.threads + 1);
	for (int i = 0; i < j.threads; i++) {
		ws[i] = (struct worker){.job = &j, .lo = (int)((long)j.n * i / j.threads),
					.hi = (int)((long)j.n * (i + 1) / j.threads)};
		int err = pthread_create(&tids[i], NULL, work, &ws[i]);
		if (err) {
			fprintf(stderr, "spawnfloor-c: pthread_create: %s\n", strerror(err));
			return 1;
		}
	}

	double self0 = cpu_ms(RUSAGE_SELF);
	double t0 = now_ms();
	pthread_barrier_wait(&j.start);
	pthread_barrier_wait(&j.done);
	double t1 = now_ms();
	int started = 0, err = 0;
	for (int i = 0; i < j.threads; i++) {
		if (ws[i].err && !err)
			err = ws[i].err;
	}
	for (int k = 0; k < j.n; k++)
		if (j.pids[k] > 0)
			started++;
	int bad = reap_all(started);
	double t2 = now_ms();
	double self = cpu_ms(RUSAGE_SELF) - self0, kids = cpu_ms(RUSAGE_CHILDREN);
	for (int i = 0; i < j.threads; i++)
		pthread_join(tids[i], NULL);

	if (err) {
		fprintf(stderr, "spawnfloor-c: %s %s: %s\n", argv[1], prog, strerror(err));
		return 1;
	}
	if (bad) {
		fprintf(stderr, "spawnfloor-c: %d of %d children did not exit 0\n", bad, j.n);
		return 1;
	}
	char name[64];
	if (j.threads > 1)
		snprintf(name, sizeof name, "c-%s-t%d", argv[1], j.threads);
	else
		snprintf(name, sizeof name, "c-%s", argv[1]);
	printf("%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\n", name, j.n, t1 - t0, t2 - t0, self, kids);
	return 0;
}

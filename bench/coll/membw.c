/*
 * membw.c - memory bandwidth on this host, the shared-memory limit for bench/coll.sh.
 *
 * For each buffer size from -b to -e bytes (doubling), and for 1 thread and for -T
 * threads (default 2), each thread with its own buffers:
 *   memcpy   dst = src                        GB/s = bytes copied / s
 *   add      dst[i] = a[i] + b[i] (float32)   GB/s = bytes of dst written / s
 *              (the arithmetic of a sum allreduce, reading two buffers)
 * A block is PASSES passes over the buffers by every thread at once, between two
 * barriers; its rate is all threads' bytes over the block's wall time. PASSES is
 * SCALE / bytes (-s), at most what fits in -t seconds by a probe pass. The cell is the
 * median of -r blocks. Small sizes stay in the caches: that is the point (an allreduce
 * of 1 MiB is cache-resident too); 64 MiB is memory.
 *
 * Output: '#' comments, then CSV with a header:
 *   bytes,threads,memcpy_GBs,add_GBs
 *
 * Build: cc -O2 -pthread -o membw membw.c
 * Usage: membw [-b 4K] [-e 64M] [-T 2] [-r 5] [-s 1G] [-t 0.02]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Shared between the threads of one measurement. */
static pthread_barrier_t bar;
static size_t g_bytes;
static int g_kernel, g_passes, g_quit;
static double g_t0, g_t1;

struct buf {
    float *a, *b, *d;
};

static void kernel(int which, struct buf *x, size_t bytes) {
    size_t n = bytes / sizeof(float);
    if (which == 0) {
        memcpy(x->d, x->a, bytes);
    } else {
        float *restrict d = x->d;
        const float *restrict a = x->a, *restrict b = x->b;
        for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    }
    __asm__ __volatile__("" ::: "memory"); /* the pass is not optimised away */
}

/* Worker: waits at the barrier for a job (g_kernel, g_bytes, g_passes), runs it, waits again. */
static void *worker(void *arg) {
    struct buf *x = arg;
    for (;;) {
        pthread_barrier_wait(&bar);
        if (g_quit) return NULL;
        for (int p = 0; p < g_passes; p++) kernel(g_kernel, x, g_bytes);
        pthread_barrier_wait(&bar);
    }
}

/* Runs one block on threads 0..nt-1 (thread 0 is the caller); returns seconds. */
static double run_block(struct buf *bufs, int which, size_t bytes, int passes) {
    g_kernel = which;
    g_bytes = bytes;
    g_passes = passes;
    pthread_barrier_wait(&bar);
    g_t0 = now();
    for (int p = 0; p < passes; p++) kernel(which, &bufs[0], bytes);
    pthread_barrier_wait(&bar);
    g_t1 = now();
    return g_t1 - g_t0;
}

int main(int argc, char **argv) {
    size_t minb = 4 << 10, maxb = 64 << 20, scale = (size_t)1 << 30;
    int threads = 2, repeats = 5;
    double block_s = 0.02;
    int opt;
    while ((opt = getopt(argc, argv, "b:e:T:r:s:t:")) != -1) {
        switch (opt) {
        case 'b': minb = parse_size(optarg); break;
        case 'e': maxb = parse_size(optarg); break;
        case 'T': threads = atoi(optarg); break;
        case 'r': repeats = atoi(optarg); break;
        case 's': scale = parse_size(optarg); break;
        case 't': block_s = atof(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-T THREADS] [-r REPEATS] [-s SCALE] [-t BLOCK_SECONDS]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || repeats < 1 || minb < 64 || maxb < minb) {
        fprintf(stderr, "membw: bad arguments\n");
        return 2;
    }
    struct buf *bufs = calloc((size_t)threads, sizeof *bufs);
    for (int i = 0; i < threads; i++) {
        if (posix_memalign((void **)&bufs[i].a, 4096, maxb) || posix_memalign((void **)&bufs[i].b, 4096, maxb) ||
            posix_memalign((void **)&bufs[i].d, 4096, maxb)) {
            fprintf(stderr, "membw: out of memory\n");
            return 1;
        }
        for (size_t j = 0; j < maxb / sizeof(float); j++) {
            bufs[i].a[j] = (float)(j & 1023);
            bufs[i].b[j] = 1.0f;
            bufs[i].d[j] = 0.0f;
        }
    }
    printf("# membw.c: memcpy and float32 add, per buffer size, each thread its own buffers\n");
    printf("# cpus online: %ld, repeats: %d, scale: %zu, block_s: %g\n", sysconf(_SC_NPROCESSORS_ONLN), repeats, scale, block_s);
    printf("bytes,threads,memcpy_GBs,add_GBs\n");
    fflush(stdout);
    double *blk = malloc(sizeof(double) * (size_t)repeats);
    int counts[2] = {1, threads};
    for (int c = 0; c < (threads > 1 ? 2 : 1); c++) {
        int nt = counts[c];
        pthread_barrier_init(&bar, NULL, (unsigned)nt);
        pthread_t *th = calloc((size_t)nt, sizeof(pthread_t));
        g_quit = 0;
        for (int i = 1; i < nt; i++) pthread_create(&th[i], NULL, worker, &bufs[i]);
        for (size_t bytes = minb; bytes <= maxb; bytes *= 2) {
            double gbs[2];
            for (int which = 0; which < 2; which++) {
                run_block(bufs, which, bytes, 1); /* warm-up, and the probe */
                double one = run_block(bufs, which, bytes, 1);
                size_t want = scale / bytes;
                int passes = want < 1 ? 1 : want > 1000000 ? 1000000 : (int)want;
                if (one > 0 && one * passes > block_s) passes = (int)(block_s / one);
                if (passes < 1) passes = 1;
                for (int r = 0; r < repeats; r++)
                    blk[r] = (double)bytes * passes * nt / run_block(bufs, which, bytes, passes) / 1e9;
                qsort(blk, (size_t)repeats, sizeof(double), cmp_double);
                gbs[which] = repeats % 2 ? blk[repeats / 2] : 0.5 * (blk[repeats / 2 - 1] + blk[repeats / 2]);
            }
            printf("%zu,%d,%.3f,%.3f\n", bytes, nt, gbs[0], gbs[1]);
            fflush(stdout);
        }
        g_quit = 1;
        pthread_barrier_wait(&bar);
        for (int i = 1; i < nt; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        free(th);
    }
    printf("# done\n");
    return 0;
}

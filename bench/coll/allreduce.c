/*
 * allreduce.c - MPI_Allreduce bandwidth, float32 sum, out-of-place, for bench/coll.sh.
 *
 * For each size from -b to -e bytes (doubling by default):
 *   - warm-up: a few calls (-w, fewer for large sizes);
 *   - a probe (up to 3 calls) sets how many calls a timed block makes: ITERS = SCALE / bytes
 *     (-s, "iterations scaled by size"), within [1, -m], and at most what fits in
 *     -t seconds at the probe's speed (so that slow configurations stay bounded);
 *   - -r timed blocks of ITERS calls, each started after a barrier; a block's time
 *     is the slowest rank's mean time per call; the size's time is the median block;
 *   - check: every rank sends (rank+1) * (i%7 + 1) for element i, so every sum is
 *     an exact small integer in float32; after the blocks each rank counts the wrong
 *     elements of its result and the counts are summed (column "wrong").
 *
 * Output (stdout, rank 0): '#' comment lines, then CSV with a header, one line per
 * size, then the line "# done" just before MPI_Finalize (so a harness can tell a
 * finished benchmark from a hang in MPI_Finalize):
 *
 *   bytes,count,iters,time_us,min_us,max_us,algbw_GBs,busbw_GBs,wrong
 *
 * algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests); GB = 1e9 bytes.
 * Exit status 1 when any element was wrong.
 *
 * Build: mpicc.mpich -O2 -o allreduce.mpich allreduce.c   (or mpicc.openmpi)
 * Usage: allreduce [-b 4K] [-e 64M] [-f 2] [-r 5] [-w 3] [-s 128M] [-m 1000] [-t 0.05]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The slowest rank's mean seconds per call over iters calls (the same on every rank). */
static double block(const float *sbuf, float *rbuf, int count, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mine = (MPI_Wtime() - t0) / iters, worst;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-r BLOCKS] [-w WARMUP] [-s SCALE] [-m MAXITERS] [-t BLOCK_SECONDS]\n", argv0);
}

int main(int argc, char **argv) {
    size_t minb = 4 << 10, maxb = 64 << 20, scale = 128 << 20;
    int factor = 2, blocks = 5, warmup = 3, maxiters = 1000;
    double block_s = 0.05;
    int opt;
    while ((opt = getopt(argc, argv, "b:e:f:r:w:s:m:t:")) != -1) {
        switch (opt) {
        case 'b': minb = parse_size(optarg); break;
        case 'e': maxb = parse_size(optarg); break;
        case 'f': factor = atoi(optarg); break;
        case 'r': blocks = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 's': scale = parse_size(optarg); break;
        case 'm': maxiters = atoi(optarg); break;
        case 't': block_s = atof(optarg); break;
        default: usage(argv[0]); return 2;
        }
    }
    if (factor < 2 || blocks < 1 || warmup < 0 || maxiters < 1 || minb < sizeof(float) || maxb < minb) {
        usage(argv[0]);
        return 2;
    }

    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    /* How many distinct hosts (by MPI_Get_processor_name). */
    char name[MPI_MAX_PROCESSOR_NAME + 1];
    memset(name, 0, sizeof name);
    int len;
    MPI_Get_processor_name(name, &len);
    char *names = malloc((size_t)n * sizeof name);
    MPI_Allgather(name, (int)sizeof name, MPI_CHAR, names, (int)sizeof name, MPI_CHAR, MPI_COMM_WORLD);
    int hosts = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(names + (size_t)i * sizeof name, names + (size_t)j * sizeof name) == 0;
        hosts += !seen;
    }
    if (rank == 0) {
        char ver[MPI_MAX_LIBRARY_VERSION_STRING];
        int vlen;
        MPI_Get_library_version(ver, &vlen);
        char *nl = strchr(ver, '\n');
        if (nl) *nl = 0;
        printf("# allreduce.c: MPI_Allreduce float32 sum, out-of-place\n");
        printf("# lib: %s\n", ver);
        printf("# ranks: %d hosts: %d (rank 0 on %s)\n", n, hosts, name);
        printf("# blocks: %d warmup: %d scale: %zu maxiters: %d block_s: %g\n", blocks, warmup, scale, maxiters, block_s);
        printf("bytes,count,iters,time_us,min_us,max_us,algbw_GBs,busbw_GBs,wrong\n");
        fflush(stdout);
    }
    free(names);

    size_t maxcount = maxb / sizeof(float);
    float *sbuf = malloc(maxcount * sizeof(float)), *rbuf = malloc(maxcount * sizeof(float));
    double *t = malloc(sizeof(double) * (size_t)blocks);
    if (!sbuf || !rbuf || !t) {
        fprintf(stderr, "allreduce: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < maxcount; i++) sbuf[i] = (float)((rank + 1) * (int)(i % 7 + 1));
    memset(rbuf, 0, maxcount * sizeof(float));
    long long total_wrong = 0;

    for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
        int count = (int)(bytes / sizeof(float));
        size_t want = scale / bytes;
        int iters = want < 1 ? 1 : want > (size_t)maxiters ? maxiters : (int)want;
        int w = iters / 4 < warmup ? iters / 4 : warmup;
        if (w < 1 && warmup > 0) w = 1;
        for (int i = 0; i < w; i++)
            MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double probe = block(sbuf, rbuf, count, iters < 3 ? iters : 3);
        if (probe > 0 && probe * iters > block_s) {
            iters = (int)(block_s / probe);
            if (iters < 1) iters = 1;
        }
        for (int r = 0; r < blocks; r++) t[r] = block(sbuf, rbuf, count, iters);

        long long wrong = 0, all_wrong;
        float tri = (float)(n * (n + 1) / 2);
        memset(rbuf, 0, bytes);
        MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < count; i++) wrong += rbuf[i] != tri * (float)(i % 7 + 1);
        MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        total_wrong += all_wrong;

        if (rank == 0) {
            qsort(t, (size_t)blocks, sizeof(double), cmp_double);
            double med = blocks % 2 ? t[blocks / 2] : 0.5 * (t[blocks / 2 - 1] + t[blocks / 2]);
            double algbw = (double)bytes / med / 1e9;
            double busbw = algbw * 2.0 * (n - 1) / n;
            printf("%zu,%d,%d,%.2f,%.2f,%.2f,%.4f,%.4f,%lld\n", bytes, count, iters, med * 1e6, t[0] * 1e6,
                   t[blocks - 1] * 1e6, algbw, busbw, all_wrong);
            fflush(stdout);
        }
    }
    if (rank == 0) {
        printf("# done\n");
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
    free(t);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}

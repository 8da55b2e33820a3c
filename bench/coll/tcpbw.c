/*
 * tcpbw.c - TCP limits between two endpoints, for bench/coll.sh (iperf3 is not needed).
 *
 *   tcpbw serve ADDR PORT
 *       Listens on ADDR:PORT; every connection gets a thread that obeys the client.
 *       Runs until killed.
 *   tcpbw stream ADDR PORT SECONDS STREAMS
 *       STREAMS connections each send 1 MiB writes for SECONDS; the server counts what
 *       it read and returns the count. Prints CSV: streams,seconds,GBs (bytes the server
 *       received over the client's time from first write to the server's count).
 *   tcpbw exchange ADDR PORT [-b 8] [-e 64M] [-r 5] [-s 128M] [-m 1000] [-t 0.05]
 *       One connection (TCP_NODELAY). Per size, both ends send SIZE bytes and receive
 *       SIZE bytes at the same time (a sendrecv, as one step of a 2-rank ring
 *       allreduce), round after round in lock step. Calls per block: SCALE / size, at
 *       most -m, at most -t seconds by a 3-round probe; the median of -r blocks.
 *       Prints CSV: bytes,iters,time_us,GBs with GBs = SIZE / time per round, the
 *       bandwidth each direction sustains. For 2 ranks a ring allreduce sends and
 *       receives SIZE bytes per rank in all (reduce-scatter + allgather), so this
 *       rate is the busbw a 2-rank TCP allreduce could reach, before the additions.
 *
 * Protocol (client -> server, little-endian uint64s): mode (1 stream, 2 exchange);
 * stream: data until shutdown, then the server writes the count; exchange: per block
 * {size, rounds}, the server answers one byte (ready), then the rounds; size 0 ends.
 *
 * Build: cc -O2 -pthread -o tcpbw tcpbw.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static void die(const char *what) {
    perror(what);
    exit(1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

static void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) die("write");
        c += k;
        n -= (size_t)k;
    }
}

static int read_all(int fd, void *p, size_t n) { /* 0 on EOF before anything, 1 when read */
    char *c = p;
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, c + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) die("read");
        if (k == 0) {
            if (got == 0) return 0;
            fprintf(stderr, "tcpbw: short read\n");
            exit(1);
        }
        got += (size_t)k;
    }
    return 1;
}

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Sends sbuf[0..n) on sfd and receives rbuf[0..n) on rfd at the same time (sfd and rfd
 * may be the same socket). */
static void exchange(int sfd, int rfd, const char *sbuf, char *rbuf, size_t n) {
    size_t sent = 0, got = 0;
    while (sent < n || got < n) {
        /* Try first, poll only when neither direction can move. */
        int moved = 0;
        if (sent < n) {
            ssize_t k = send(sfd, sbuf + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) { sent += (size_t)k; moved = 1; }
            else if (k < 0 && errno != EAGAIN && errno != EINTR) die("send");
        }
        if (got < n) {
            ssize_t k = recv(rfd, rbuf + got, n - got, MSG_DONTWAIT);
            if (k > 0) { got += (size_t)k; moved = 1; }
            else if (k == 0) { fprintf(stderr, "tcpbw: peer closed\n"); exit(1); }
            else if (errno != EAGAIN && errno != EINTR) die("recv");
        }
        if (!moved) {
            struct pollfd p[2] = {{sfd, (short)(sent < n ? POLLOUT : 0), 0}, {rfd, (short)(got < n ? POLLIN : 0), 0}};
            if (sfd == rfd) {
                p[0].events |= p[1].events;
                poll(p, 1, -1);
            } else {
                poll(p, 2, -1);
            }
        }
    }
}

/* Mode 3 connections wait here for their second connection (mode 4, the client's next). */
static pthread_mutex_t pair_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pair_cv = PTHREAD_COND_INITIALIZER;
static int pair_fd = -1;

static void *serve_conn(void *arg) {
    int fd = (int)(intptr_t)arg, xfd = -1;
    nodelay(fd);
    uint64_t mode;
    if (!read_all(fd, &mode, sizeof mode)) goto out;
    if (mode == 4) { /* the data connection server -> client of a mode 3 exchange */
        pthread_mutex_lock(&pair_mu);
        pair_fd = fd;
        pthread_cond_broadcast(&pair_cv);
        pthread_mutex_unlock(&pair_mu);
        return NULL; /* the mode 3 thread owns it now */
    }
    if (mode == 3) {
        pthread_mutex_lock(&pair_mu);
        while (pair_fd < 0) pthread_cond_wait(&pair_cv, &pair_mu);
        xfd = pair_fd;
        pair_fd = -1;
        pthread_mutex_unlock(&pair_mu);
    }
    char *buf = malloc(CHUNK);
    if (mode == 1) {
        uint64_t total = 0;
        for (;;) {
            ssize_t k = read(fd, buf, CHUNK);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            total += (uint64_t)k;
        }
        write_all(fd, &total, sizeof total);
    } else if (mode == 2 || mode == 3) {
        char *sbuf = NULL, *rbuf = NULL;
        size_t cap = 0;
        for (;;) {
            uint64_t hdr[2];
            if (!read_all(fd, hdr, sizeof hdr) || hdr[0] == 0) break;
            if (hdr[0] > cap) {
                free(sbuf);
                free(rbuf);
                cap = hdr[0];
                sbuf = malloc(cap);
                rbuf = malloc(cap);
                if (!sbuf || !rbuf) die("malloc");
                memset(sbuf, 1, cap);
            }
            write_all(fd, "r", 1);
            for (uint64_t i = 0; i < hdr[1]; i++) exchange(xfd >= 0 ? xfd : fd, fd, sbuf, rbuf, hdr[0]);
        }
        free(sbuf);
        free(rbuf);
    }
    free(buf);
out:
    close(fd);
    if (xfd >= 0) close(xfd);
    return NULL;
}

static struct sockaddr_in addr_of(const char *host, const char *port) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(port));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "tcpbw: %s is not an IPv4 address\n", host);
        exit(2);
    }
    return sa;
}

static int dial(const char *host, const char *port) {
    struct sockaddr_in sa = addr_of(host, port);
    /* The server may be starting: retry refused connections for up to 5 s. */
    for (int i = 0;; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) die("socket");
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            nodelay(fd);
            return fd;
        }
        if (errno != ECONNREFUSED || i >= 100) die("connect");
        close(fd);
        usleep(50000);
    }
}

struct streamer {
    int fd;
    double until;
};

static void *stream_one(void *arg) {
    struct streamer *s = arg;
    char *buf = malloc(CHUNK);
    memset(buf, 7, CHUNK);
    while (now() < s->until) write_all(s->fd, buf, CHUNK);
    free(buf);
    shutdown(s->fd, SHUT_WR);
    return NULL;
}

static int do_stream(const char *host, const char *port, double seconds, int streams) {
    struct streamer *s = calloc((size_t)streams, sizeof *s);
    pthread_t *th = calloc((size_t)streams, sizeof *th);
    uint64_t mode = 1, total = 0;
    for (int i = 0; i < streams; i++) {
        s[i].fd = dial(host, port);
        write_all(s[i].fd, &mode, sizeof mode);
    }
    double t0 = now();
    for (int i = 0; i < streams; i++) {
        s[i].until = t0 + seconds;
        pthread_create(&th[i], NULL, stream_one, &s[i]);
    }
    for (int i = 0; i < streams; i++) {
        pthread_join(th[i], NULL);
        uint64_t got;
        if (!read_all(s[i].fd, &got, sizeof got)) { fprintf(stderr, "tcpbw: no count from the server\n"); return 1; }
        total += got;
        close(s[i].fd);
    }
    double dt = now() - t0;
    printf("streams,seconds,GBs\n%d,%.3f,%.3f\n", streams, dt, (double)total / dt / 1e9);
    return 0;
}

static double xblock(int fd, int rfd, char *sbuf, char *rbuf, size_t size, int rounds) {
    uint64_t hdr[2] = {size, (uint64_t)rounds};
    char ready;
    write_all(fd, hdr, sizeof hdr);
    read_all(fd, &ready, 1);
    double t0 = now();
    for (int i = 0; i < rounds; i++) exchange(fd, rfd, sbuf, rbuf, size);
    return (now() - t0) / rounds;
}

static int do_exchange(const char *host, const char *port, int argc, char **argv) {
    size_t minb = 8, maxb = 64 << 20, scale = 128 << 20;
    int blocks = 5, maxiters = 1000, two = 0, opt;
    double block_s = 0.05;
    optind = 1;
    while ((opt = getopt(argc, argv, "b:e:r:s:m:t:2")) != -1) {
        switch (opt) {
        case '2': two = 1; break;
        case 'b': minb = parse_size(optarg); break;
        case 'e': maxb = parse_size(optarg); break;
        case 'r': blocks = atoi(optarg); break;
        case 's': scale = parse_size(optarg); break;
        case 'm': maxiters = atoi(optarg); break;
        case 't': block_s = atof(optarg); break;
        default: fprintf(stderr, "tcpbw exchange: bad option\n"); return 2;
        }
    }
    if (minb < 1 || maxb < minb || blocks < 1 || maxiters < 1) { fprintf(stderr, "tcpbw exchange: bad arguments\n"); return 2; }
    int fd = dial(host, port), rfd = fd;
    uint64_t mode = two ? 3 : 2;
    write_all(fd, &mode, sizeof mode);
    if (two) { /* a second connection that only carries server -> client data */
        rfd = dial(host, port);
        uint64_t m4 = 4;
        write_all(rfd, &m4, sizeof m4);
    }
    char *sbuf = malloc(maxb), *rbuf = malloc(maxb);
    double *t = malloc(sizeof(double) * (size_t)blocks);
    if (!sbuf || !rbuf || !t) die("malloc");
    memset(sbuf, 2, maxb);
    printf("bytes,iters,time_us,GBs\n");
    fflush(stdout);
    for (size_t size = minb; size <= maxb; size *= 2) {
        size_t want = scale / size;
        int iters = want < 1 ? 1 : want > (size_t)maxiters ? maxiters : (int)want;
        xblock(fd, rfd, sbuf, rbuf, size, iters < 3 ? iters : 3); /* warm-up */
        double probe = xblock(fd, rfd, sbuf, rbuf, size, iters < 3 ? iters : 3);
        if (probe > 0 && probe * iters > block_s) iters = (int)(block_s / probe);
        if (iters < 1) iters = 1;
        for (int r = 0; r < blocks; r++) t[r] = xblock(fd, rfd, sbuf, rbuf, size, iters);
        qsort(t, (size_t)blocks, sizeof(double), cmp_double);
        double med = blocks % 2 ? t[blocks / 2] : 0.5 * (t[blocks / 2 - 1] + t[blocks / 2]);
        printf("%zu,%d,%.2f,%.4f\n", size, iters, med * 1e6, (double)size / med / 1e9);
        fflush(stdout);
    }
    uint64_t end[2] = {0, 0};
    write_all(fd, end, sizeof end);
    close(fd);
    if (rfd != fd) close(rfd);
    return 0;
}

static int do_serve(const char *host, const char *port) {
    struct sockaddr_in sa = addr_of(host, port);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (ls < 0) die("socket");
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0) die("bind");
    if (listen(ls, 64) < 0) die("listen");
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR) continue;
            die("accept");
        }
        pthread_t th;
        pthread_create(&th, NULL, serve_conn, (void *)(intptr_t)fd);
        pthread_detach(th);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "serve") == 0) return do_serve(argv[2], argv[3]);
    if (argc == 6 && strcmp(argv[1], "stream") == 0) return do_stream(argv[2], argv[3], atof(argv[4]), atoi(argv[5]));
    if (argc >= 4 && strcmp(argv[1], "exchange") == 0) return do_exchange(argv[2], argv[3], argc - 3, argv + 3);
    fprintf(stderr, "usage: tcpbw serve ADDR PORT | stream ADDR PORT SECONDS STREAMS | exchange ADDR PORT [-b MIN] [-e MAX] [-r BLOCKS] [-s SCALE] [-m MAXITERS] [-t BLOCK_SECONDS]\n");
    return 2;
}

/* The C half of gorun-pmix: PMIx server set-up and the callbacks the
 * library calls on its progress thread. Each callback hands its work to an
 * exported Go function (_cgo_export.h) and returns at once. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pmix.h>
#include <pmix_server.h>

#include "pmixsrv.h"
#include "_cgo_export.h"

/* A blocking wait for the library's operation callbacks. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int done;
    pmix_status_t status;
} waiter;

static void waiter_init(waiter *w) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->done = 0;
    w->status = PMIX_SUCCESS;
}

static void op_done(pmix_status_t status, void *cbdata) {
    waiter *w = cbdata;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->done = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

static pmix_status_t waiter_wait(waiter *w) {
    pthread_mutex_lock(&w->mu);
    while (!w->done) pthread_cond_wait(&w->cond, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond);
    return w->status;
}

/* The status of an operation that may complete now or through op_done. */
static pmix_status_t finish(pmix_status_t rc, waiter *w) {
    if (rc == PMIX_OPERATION_SUCCEEDED) return PMIX_SUCCESS;
    if (rc != PMIX_SUCCESS) return rc;
    return waiter_wait(w);
}

static void seterr(char *err, size_t errlen, const char *what, pmix_status_t rc) {
    snprintf(err, errlen, "%s: %s", what, PMIx_Error_string(rc));
}

/* A client that goConnected does not trust is refused: libpmix then
 * closes its connection. */
static pmix_status_t cb_connected(const pmix_proc_t *p, void *obj, pmix_op_cbfunc_t cb, void *cbdata) {
    if (goConnected((char *)p->nspace, p->rank) != 0) return PMIX_ERR_NO_PERMISSIONS;
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t cb_finalized(const pmix_proc_t *p, void *obj, pmix_op_cbfunc_t cb, void *cbdata) {
    goFinalized((char *)p->nspace, p->rank);
    return PMIX_OPERATION_SUCCEEDED;
}

/* An abort is held: the client stays blocked until gorun kills the job, as
 * an aborting rank must not carry on. */
static pmix_status_t cb_abort(const pmix_proc_t *p, void *obj, int status, const char msg[],
                              pmix_proc_t procs[], size_t nprocs, pmix_op_cbfunc_t cb, void *cbdata) {
    goAbort((char *)p->nspace, p->rank, status, (char *)(msg ? msg : ""));
    return PMIX_SUCCESS;
}

typedef struct {
    pmix_modex_cbfunc_t cb;
    void *cbdata;
} fence_op;

static pmix_status_t cb_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                              size_t ninfo, char *data, size_t ndata, pmix_modex_cbfunc_t cb,
                              void *cbdata) {
    if (nprocs < 1) return PMIX_ERR_BAD_PARAM;
    /* gorun's fences span the whole job: a fence over part of it is not
     * something MPI_Init or MPI_Finalize asks for. */
    for (size_t i = 0; i < nprocs; i++) {
        if (procs[i].rank != PMIX_RANK_WILDCARD) return PMIX_ERR_NOT_SUPPORTED;
    }
    fence_op *op = malloc(sizeof *op);
    if (op == NULL) return PMIX_ERR_NOMEM;
    op->cb = cb;
    op->cbdata = cbdata;
    goFence((char *)procs[0].nspace, (uintptr_t)op, data, ndata);
    return PMIX_SUCCESS;
}

static void release_data(void *cbdata) { free(cbdata); }

void gorun_fence_done(uintptr_t opp, int ok, const char *data, size_t n) {
    fence_op *op = (fence_op *)opp;
    char *copy = NULL;
    if (ok && n > 0) {
        copy = malloc(n);
        if (copy == NULL) {
            ok = 0;
            n = 0;
        } else {
            memcpy(copy, data, n);
        }
    }
    if (!ok) n = 0;
    if (op->cb != NULL) {
        op->cb(ok ? PMIX_SUCCESS : PMIX_ERROR, copy, n, op->cbdata, release_data, copy);
    } else {
        free(copy);
    }
    free(op);
}

static pmix_server_module_t module = {
    .client_connected = cb_connected,
    .client_finalized = cb_finalized,
    .abort = cb_abort,
    .fence_nb = cb_fence,
};

int gorun_init(const char *tmpdir, const char *hostname, char *err, size_t errlen) {
    pmix_info_t info[5];
    bool no = false;
    PMIX_INFO_LOAD(&info[0], PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[1], PMIX_SYSTEM_TMPDIR, tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[2], PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[3], PMIX_SERVER_SYSTEM_SUPPORT, &no, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[4], PMIX_HOSTNAME, hostname, PMIX_STRING);
    pmix_status_t rc = PMIx_server_init(&module, info, 5);
    for (int i = 0; i < 5; i++) PMIX_INFO_DESTRUCT(&info[i]);
    if (rc != PMIX_SUCCESS) {
        seterr(err, errlen, "PMIx_server_init", rc);
        return -1;
    }
    return 0;
}

/* join joins n strings with sep into a malloc'd string. */
static char *join(const char *const *s, size_t n, const char *sep) {
    size_t len = 1;
    for (size_t i = 0; i < n; i++) len += strlen(s[i]) + strlen(sep);
    char *out = malloc(len);
    if (out == NULL) return NULL;
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) strcat(out, sep);
        strcat(out, s[i]);
    }
    return out;
}

/* ranks_on returns the comma list of node's ranks (malloc'd), and counts. */
static char *ranks_on(uint32_t node, uint32_t size, const uint32_t *node_of, uint32_t *count,
                      uint32_t *first) {
    size_t cap = 16, len = 0;
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    out[0] = 0;
    *count = 0;
    for (uint32_t r = 0; r < size; r++) {
        if (node_of[r] != node) continue;
        char num[16];
        int k = snprintf(num, sizeof num, "%s%u", *count ? "," : "", r);
        if (len + k + 1 > cap) {
            cap = 2 * (len + k + 1);
            char *bigger = realloc(out, cap);
            if (bigger == NULL) {
                free(out);
                return NULL;
            }
            out = bigger;
        }
        memcpy(out + len, num, k + 1);
        len += k;
        if (*count == 0) *first = r;
        (*count)++;
    }
    return out;
}

int gorun_register(const char *nspace, uint32_t size, uint32_t nnodes, const char *const *hosts,
                   const uint32_t *node_of, const uint16_t *local_rank_of, const uint32_t *app_of,
                   uint32_t mynode, char *err, size_t errlen) {
    pmix_status_t rc;
    char *nodelist = join(hosts, nnodes, ",");
    char **per = calloc(nnodes, sizeof(char *));
    uint32_t *counts = calloc(nnodes, sizeof(uint32_t));
    uint32_t *leaders = calloc(nnodes, sizeof(uint32_t));
    char *ppn = NULL, *node_regex = NULL, *ppn_regex = NULL;
    pmix_info_t *info = NULL;
    size_t ninfo = 0;
    int ret = -1;
    if (nodelist == NULL || per == NULL || counts == NULL || leaders == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (uint32_t n = 0; n < nnodes; n++) {
        per[n] = ranks_on(n, size, node_of, &counts[n], &leaders[n]);
        if (per[n] == NULL) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
    }
    ppn = join((const char *const *)per, nnodes, ";");
    if (ppn == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if ((rc = PMIx_generate_regex(nodelist, &node_regex)) != PMIX_SUCCESS) {
        seterr(err, errlen, "PMIx_generate_regex", rc);
        goto out;
    }
    if ((rc = PMIx_generate_ppn(ppn, &ppn_regex)) != PMIX_SUCCESS) {
        seterr(err, errlen, "PMIx_generate_ppn", rc);
        goto out;
    }

    /* Job-level information, then one PMIX_PROC_DATA array per rank. */
    const size_t njob = 13;
    ninfo = njob + size;
    PMIX_INFO_CREATE(info, ninfo);
    uint32_t zero = 0, local = counts[mynode], leader = leaders[mynode];
    size_t k = 0;
    PMIX_INFO_LOAD(&info[k++], PMIX_UNIV_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_JOB_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_MAX_PROCS, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_APP_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_JOBID, nspace, PMIX_STRING);
    PMIX_INFO_LOAD(&info[k++], PMIX_NUM_NODES, &nnodes, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_NODE_MAP, node_regex, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_PROC_MAP, ppn_regex, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_SIZE, &local, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_NODE_SIZE, &local, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_PEERS, per[mynode], PMIX_STRING);
    PMIX_INFO_LOAD(&info[k++], PMIX_APPNUM, &zero, PMIX_UINT32);
    for (uint32_t r = 0; r < size; r++) {
        pmix_data_array_t darray;
        pmix_info_t *pi;
        uint16_t lr = local_rank_of[r];
        uint32_t nodeid = node_of[r];
        uint32_t appnum = app_of ? app_of[r] : 0; /* MPI_APPNUM */
        pmix_rank_t rank = r;
        PMIX_DATA_ARRAY_CONSTRUCT(&darray, 6, PMIX_INFO);
        pi = darray.array;
        PMIX_INFO_LOAD(&pi[0], PMIX_RANK, &rank, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&pi[1], PMIX_APPNUM, &appnum, PMIX_UINT32);
        PMIX_INFO_LOAD(&pi[2], PMIX_LOCAL_RANK, &lr, PMIX_UINT16);
        PMIX_INFO_LOAD(&pi[3], PMIX_NODE_RANK, &lr, PMIX_UINT16);
        PMIX_INFO_LOAD(&pi[4], PMIX_NODEID, &nodeid, PMIX_UINT32);
        PMIX_INFO_LOAD(&pi[5], PMIX_HOSTNAME, hosts[nodeid], PMIX_STRING);
        PMIX_INFO_LOAD(&info[k++], PMIX_PROC_DATA, &darray, PMIX_DATA_ARRAY);
        PMIX_DATA_ARRAY_DESTRUCT(&darray);
    }

    waiter w;
    waiter_init(&w);
    rc = finish(PMIx_server_register_nspace(nspace, (int)local, info, ninfo, op_done, &w), &w);
    if (rc != PMIX_SUCCESS) {
        seterr(err, errlen, "PMIx_server_register_nspace", rc);
        goto out;
    }
    waiter_init(&w);
    rc = finish(PMIx_server_setup_local_support(nspace, info, ninfo, op_done, &w), &w);
    if (rc != PMIX_SUCCESS && rc != PMIX_ERR_NOT_SUPPORTED) {
        seterr(err, errlen, "PMIx_server_setup_local_support", rc);
        goto out;
    }
    ret = 0;
out:
    if (info) PMIX_INFO_FREE(info, ninfo);
    if (per) {
        for (uint32_t n = 0; n < nnodes; n++) free(per[n]);
        free(per);
    }
    free(counts);
    free(leaders);
    free(nodelist);
    free(ppn);
    free(node_regex);
    free(ppn_regex);
    return ret;
}

int gorun_client(const char *nspace, uint32_t rank, uint32_t uid, uint32_t gid, char ***env,
                 char *err, size_t errlen) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, rank);
    waiter w;
    waiter_init(&w);
    pmix_status_t rc = finish(PMIx_server_register_client(&proc, uid, gid, NULL, op_done, &w), &w);
    if (rc != PMIX_SUCCESS) {
        seterr(err, errlen, "PMIx_server_register_client", rc);
        return -1;
    }
    char **e = calloc(1, sizeof(char *));
    if (e == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rc = PMIx_server_setup_fork(&proc, &e);
    if (rc != PMIX_SUCCESS) {
        gorun_free_env(e);
        seterr(err, errlen, "PMIx_server_setup_fork", rc);
        return -1;
    }
    *env = e;
    return 0;
}

void gorun_free_env(char **env) {
    if (env == NULL) return;
    for (char **p = env; *p; p++) free(*p);
    free(env);
}

void gorun_deregister(const char *nspace) {
    waiter w;
    waiter_init(&w);
    PMIx_server_deregister_nspace(nspace, op_done, &w);
    waiter_wait(&w);
}

void gorun_finalize(void) { PMIx_server_finalize(); }

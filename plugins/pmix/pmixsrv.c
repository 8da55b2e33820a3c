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

static void free_strs(char **s) {
    if (s == NULL) return;
    for (char **p = s; *p; p++) free(*p);
    free(s);
}

typedef struct {
    pmix_modex_cbfunc_t cb;
    void *cbdata;
} fence_op;

static pmix_status_t cb_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                              size_t ninfo, char *data, size_t ndata, pmix_modex_cbfunc_t cb,
                              void *cbdata) {
    if (nprocs < 1) return PMIX_ERR_BAD_PARAM;
    /* Its processes: a whole namespace (MPI_Init's, MPI_Finalize's), or
     * ranks of several (Open MPI's MPI_Comm_disconnect fences the two
     * sides of an intercommunicator). */
    char **names = calloc(nprocs + 1, sizeof(char *));
    uint32_t *ranks = calloc(nprocs, sizeof(uint32_t));
    fence_op *op = malloc(sizeof *op);
    if (names == NULL || ranks == NULL || op == NULL) {
        free(names);
        free(ranks);
        free(op);
        return PMIX_ERR_NOMEM;
    }
    for (size_t i = 0; i < nprocs; i++) {
        names[i] = strdup(procs[i].nspace);
        ranks[i] = procs[i].rank;
    }
    op->cb = cb;
    op->cbdata = cbdata;
    goFence((char *)procs[0].nspace, (uintptr_t)op, data, ndata, names, ranks, nprocs);
    free_strs(names);
    free(ranks);
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

/* ---- Dynamic processes: spawn, name publishing, connect, direct modex.
 * Each request becomes an op that Go answers later (gorun_op_done and the
 * like), after the job's head has: the callback and its data wait in it. */

typedef struct {
    void *cb;
    void *cbdata;
} gorun_op;

static gorun_op *new_op(void *cb, void *cbdata) {
    gorun_op *op = malloc(sizeof *op);
    if (op != NULL) {
        op->cb = cb;
        op->cbdata = cbdata;
    }
    return op;
}

/* status maps the bridge's status classes (pmixbridge.Status*) to PMIx's. */
static pmix_status_t status(int class) {
    switch (class) {
    case 0: return PMIX_SUCCESS;
    case 2: return PMIX_ERR_NOT_FOUND;
    case 3: return PMIX_ERR_NOT_SUPPORTED;
    case 4: return PMIX_ERR_TIMEOUT;
    case 5: return PMIX_ERR_DUPLICATE_KEY;
    }
    return PMIX_ERROR;
}

/* vstr is a value as text (malloc'd): strings as they are, numbers and
 * booleans in decimal, a proc as nspace:rank, bytes as "\x02" and their
 * hex; any other type as "\x01" followed by the type's name, which Go
 * refuses by name. */
static char *vstr(const pmix_value_t *v) {
    char buf[64];
    switch (v->type) {
    case PMIX_STRING: return strdup(v->data.string ? v->data.string : "");
    case PMIX_BOOL: return strdup(v->data.flag ? "true" : "false");
    case PMIX_INT: snprintf(buf, sizeof buf, "%d", v->data.integer); break;
    case PMIX_INT8: snprintf(buf, sizeof buf, "%d", v->data.int8); break;
    case PMIX_INT16: snprintf(buf, sizeof buf, "%d", v->data.int16); break;
    case PMIX_INT32: snprintf(buf, sizeof buf, "%d", v->data.int32); break;
    case PMIX_INT64: snprintf(buf, sizeof buf, "%lld", (long long)v->data.int64); break;
    case PMIX_UINT: snprintf(buf, sizeof buf, "%u", v->data.uint); break;
    case PMIX_UINT8: snprintf(buf, sizeof buf, "%u", v->data.uint8); break;
    case PMIX_UINT16: snprintf(buf, sizeof buf, "%u", v->data.uint16); break;
    case PMIX_UINT32: snprintf(buf, sizeof buf, "%u", v->data.uint32); break;
    case PMIX_UINT64: snprintf(buf, sizeof buf, "%llu", (unsigned long long)v->data.uint64); break;
    case PMIX_SIZE: snprintf(buf, sizeof buf, "%zu", v->data.size); break;
    case PMIX_PID: snprintf(buf, sizeof buf, "%d", (int)v->data.pid); break;
    case PMIX_PROC_RANK: snprintf(buf, sizeof buf, "%u", v->data.rank); break;
    case PMIX_BYTE_OBJECT: {
        /* "\x02" and the bytes in hex: gorun stores and returns them so. */
        size_t n = v->data.bo.size;
        char *s = malloc(2 + 2 * n);
        if (s == NULL) return NULL;
        s[0] = 2;
        for (size_t i = 0; i < n; i++) snprintf(s + 1 + 2 * i, 3, "%02x", (unsigned char)v->data.bo.bytes[i]);
        s[1 + 2 * n] = 0;
        return s;
    }
    case PMIX_PROC:
        if (v->data.proc == NULL) return strdup("");
        {
            size_t n = strlen(v->data.proc->nspace) + 16;
            char *s = malloc(n);
            if (s != NULL) snprintf(s, n, "%s:%u", v->data.proc->nspace, v->data.proc->rank);
            return s;
        }
    default: snprintf(buf, sizeof buf, "\x01%s", PMIx_Data_type_string(v->type)); break;
    }
    return strdup(buf);
}

/* infos turns n infos into NULL-terminated key and value arrays (malloc'd;
 * free with free_strs). */
static void infos(const pmix_info_t *info, size_t n, char ***keys, char ***vals) {
    *keys = calloc(n + 1, sizeof(char *));
    *vals = calloc(n + 1, sizeof(char *));
    if (*keys == NULL || *vals == NULL) return;
    for (size_t i = 0; i < n; i++) {
        (*keys)[i] = strdup(info[i].key);
        (*vals)[i] = vstr(&info[i].value);
    }
}


static char *empty_strs[1] = {NULL};

static pmix_status_t cb_spawn(const pmix_proc_t *p, const pmix_info_t job_info[], size_t ninfo,
                              const pmix_app_t apps[], size_t napps, pmix_spawn_cbfunc_t cb,
                              void *cbdata) {
    gorun_op *op = new_op((void *)cb, cbdata);
    if (op == NULL) return PMIX_ERR_NOMEM;
    for (size_t a = 0; a < napps; a++) {
        char **keys, **vals;
        infos(apps[a].info, apps[a].ninfo, &keys, &vals);
        goSpawnApp((uintptr_t)op, apps[a].cmd ? apps[a].cmd : "", apps[a].argv ? apps[a].argv : empty_strs,
                   apps[a].env ? apps[a].env : empty_strs, apps[a].cwd ? apps[a].cwd : "", apps[a].maxprocs,
                   keys ? keys : empty_strs, vals ? vals : empty_strs);
        free_strs(keys);
        free_strs(vals);
    }
    char **keys, **vals;
    infos(job_info, ninfo, &keys, &vals);
    goRequest((char *)p->nspace, p->rank, GORUN_SPAWN, (uintptr_t)op, keys ? keys : empty_strs,
              vals ? vals : empty_strs, empty_strs, NULL, 0);
    free_strs(keys);
    free_strs(vals);
    return PMIX_SUCCESS;
}

static pmix_status_t cb_publish(const pmix_proc_t *p, const pmix_info_t info[], size_t ninfo,
                                pmix_op_cbfunc_t cb, void *cbdata) {
    gorun_op *op = new_op((void *)cb, cbdata);
    if (op == NULL) return PMIX_ERR_NOMEM;
    char **keys, **vals;
    infos(info, ninfo, &keys, &vals);
    goRequest((char *)p->nspace, p->rank, GORUN_PUBLISH, (uintptr_t)op, keys ? keys : empty_strs,
              vals ? vals : empty_strs, empty_strs, NULL, 0);
    free_strs(keys);
    free_strs(vals);
    return PMIX_SUCCESS;
}

static pmix_status_t cb_names(int kind, const pmix_proc_t *p, char **names, const pmix_info_t info[],
                              size_t ninfo, void *cb, void *cbdata) {
    gorun_op *op = new_op(cb, cbdata);
    if (op == NULL) return PMIX_ERR_NOMEM;
    char **keys, **vals;
    infos(info, ninfo, &keys, &vals);
    goRequest((char *)p->nspace, p->rank, kind, (uintptr_t)op, keys ? keys : empty_strs,
              vals ? vals : empty_strs, names ? names : empty_strs, NULL, 0);
    free_strs(keys);
    free_strs(vals);
    return PMIX_SUCCESS;
}

static pmix_status_t cb_lookup(const pmix_proc_t *p, char **names, const pmix_info_t info[],
                               size_t ninfo, pmix_lookup_cbfunc_t cb, void *cbdata) {
    return cb_names(GORUN_LOOKUP, p, names, info, ninfo, (void *)cb, cbdata);
}

static pmix_status_t cb_unpublish(const pmix_proc_t *p, char **names, const pmix_info_t info[],
                                  size_t ninfo, pmix_op_cbfunc_t cb, void *cbdata) {
    return cb_names(GORUN_UNPUBLISH, p, names, info, ninfo, (void *)cb, cbdata);
}

static pmix_status_t cb_procs(int kind, const pmix_proc_t procs[], size_t nprocs,
                              const pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cb,
                              void *cbdata) {
    if (nprocs < 1) return PMIX_ERR_BAD_PARAM;
    gorun_op *op = new_op((void *)cb, cbdata);
    char **names = calloc(nprocs + 1, sizeof(char *));
    uint32_t *ranks = calloc(nprocs, sizeof(uint32_t));
    if (op == NULL || names == NULL || ranks == NULL) {
        free(op);
        free(names);
        free(ranks);
        return PMIX_ERR_NOMEM;
    }
    for (size_t i = 0; i < nprocs; i++) {
        names[i] = strdup(procs[i].nspace);
        ranks[i] = procs[i].rank;
    }
    char **keys, **vals;
    infos(info, ninfo, &keys, &vals);
    goRequest((char *)procs[0].nspace, PMIX_RANK_WILDCARD, kind, (uintptr_t)op, keys ? keys : empty_strs,
              vals ? vals : empty_strs, names, ranks, nprocs);
    free_strs(keys);
    free_strs(vals);
    free_strs(names);
    free(ranks);
    return PMIX_SUCCESS;
}

static pmix_status_t cb_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                                size_t ninfo, pmix_op_cbfunc_t cb, void *cbdata) {
    return cb_procs(GORUN_CONNECT, procs, nprocs, info, ninfo, cb, cbdata);
}

static pmix_status_t cb_disconnect(const pmix_proc_t procs[], size_t nprocs,
                                   const pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cb,
                                   void *cbdata) {
    return cb_procs(GORUN_DISCONNECT, procs, nprocs, info, ninfo, cb, cbdata);
}

/* A local client asked for the data of a process another host's server
 * holds (a spawned job's rank on another host, say). */
static pmix_status_t cb_dmodex(const pmix_proc_t *proc, const pmix_info_t info[], size_t ninfo,
                               pmix_modex_cbfunc_t cb, void *cbdata) {
    gorun_op *op = new_op((void *)cb, cbdata);
    if (op == NULL) return PMIX_ERR_NOMEM;
    char *names[2] = {(char *)proc->nspace, NULL};
    uint32_t rank = proc->rank;
    goRequest((char *)proc->nspace, proc->rank, GORUN_DMODEX, (uintptr_t)op, empty_strs, empty_strs,
              names, &rank, 1);
    return PMIX_SUCCESS;
}

void gorun_op_done(uintptr_t opp, int kind, int class, const char *nspace) {
    gorun_op *op = (gorun_op *)opp;
    pmix_status_t st = status(class);
    if (op->cb != NULL) {
        if (kind == GORUN_SPAWN) {
            pmix_nspace_t ns;
            PMIX_LOAD_NSPACE(ns, nspace ? nspace : "");
            ((pmix_spawn_cbfunc_t)op->cb)(st, ns, op->cbdata);
        } else {
            ((pmix_op_cbfunc_t)op->cb)(st, op->cbdata);
        }
    }
    free(op);
}

void gorun_lookup_done(uintptr_t opp, int class, size_t n, char **keys, char **vals, const size_t *lens,
                       const int *bytes, char **nspaces, const uint32_t *ranks) {
    gorun_op *op = (gorun_op *)opp;
    pmix_pdata_t *pd = NULL;
    if (n > 0) PMIX_PDATA_CREATE(pd, n);
    if (n > 0 && pd == NULL) {
        class = 1;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        PMIX_LOAD_PROCID(&pd[i].proc, nspaces[i], ranks[i]);
        PMIX_LOAD_KEY(pd[i].key, keys[i]);
        if (bytes[i]) {
            pmix_byte_object_t bo = {.bytes = vals[i], .size = lens[i]};
            PMIX_VALUE_LOAD(&pd[i].value, &bo, PMIX_BYTE_OBJECT);
        } else {
            PMIX_VALUE_LOAD(&pd[i].value, vals[i], PMIX_STRING);
        }
    }
    if (op->cb != NULL) ((pmix_lookup_cbfunc_t)op->cb)(status(class), pd, n, op->cbdata);
    if (pd != NULL) PMIX_PDATA_FREE(pd, n);
    free(op);
}

void gorun_modex_done(uintptr_t opp, int class, const char *data, size_t n) {
    gorun_op *op = (gorun_op *)opp;
    char *copy = NULL;
    if (class == 0 && n > 0) {
        copy = malloc(n);
        if (copy == NULL) {
            class = 1;
            n = 0;
        } else {
            memcpy(copy, data, n);
        }
    }
    if (class != 0) n = 0;
    if (op->cb != NULL) {
        ((pmix_modex_cbfunc_t)op->cb)(status(class), copy, n, op->cbdata, release_data, copy);
    } else {
        free(copy);
    }
    free(op);
}

/* The answer to a direct modex request, which the waiter below holds. */
typedef struct {
    waiter w;
    char *data;
    size_t n;
} dmodex_wait;

static void dmodex_answer(pmix_status_t st, char *data, size_t sz, void *cbdata) {
    dmodex_wait *d = cbdata;
    if (st == PMIX_SUCCESS && sz > 0) {
        d->data = malloc(sz);
        if (d->data != NULL) {
            memcpy(d->data, data, sz);
            d->n = sz;
        } else {
            st = PMIX_ERR_NOMEM;
        }
    }
    op_done(st, &d->w);
}

int gorun_dmodex(const char *nspace, uint32_t rank, char **data, size_t *n, char *err, size_t errlen) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, rank);
    dmodex_wait d = {.data = NULL, .n = 0};
    waiter_init(&d.w);
    pmix_status_t rc = PMIx_server_dmodex_request(&proc, dmodex_answer, &d);
    if (rc == PMIX_SUCCESS) rc = waiter_wait(&d.w);
    if (rc != PMIX_SUCCESS) {
        free(d.data);
        seterr(err, errlen, "PMIx_server_dmodex_request", rc);
        return -1;
    }
    *data = d.data;
    *n = d.n;
    return 0;
}

static pmix_server_module_t module = {
    .client_connected = cb_connected,
    .client_finalized = cb_finalized,
    .abort = cb_abort,
    .fence_nb = cb_fence,
    .direct_modex = cb_dmodex,
    .publish = cb_publish,
    .lookup = cb_lookup,
    .unpublish = cb_unpublish,
    .spawn = cb_spawn,
    .connect = cb_connect,
    .disconnect = cb_disconnect,
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
                   uint32_t mynode, uint32_t univ, const char *parent_ns, uint32_t parent_rank,
                   char *err, size_t errlen) {
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

    /* Job-level information, then one PMIX_PROC_DATA array per rank. A
     * namespace with no rank on this host (another host's spawned job,
     * registered for the ranks here that connect to it) has no local
     * peers or leader here. */
    const size_t njob = 15;
    ninfo = njob + size;
    PMIX_INFO_CREATE(info, ninfo);
    uint32_t zero = 0, local = 0, leader = 0;
    if (mynode < nnodes) {
        local = counts[mynode];
        leader = leaders[mynode];
    }
    bool yes = true;
    pmix_proc_t parent;
    if (univ < size) univ = size;
    size_t k = 0;
    PMIX_INFO_LOAD(&info[k++], PMIX_UNIV_SIZE, &univ, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_JOB_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_MAX_PROCS, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_APP_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_JOBID, nspace, PMIX_STRING);
    PMIX_INFO_LOAD(&info[k++], PMIX_NUM_NODES, &nnodes, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_NODE_MAP, node_regex, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_PROC_MAP, ppn_regex, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_SIZE, &local, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_NODE_SIZE, &local, PMIX_UINT32);
    if (local > 0) {
        PMIX_INFO_LOAD(&info[k++], PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_PEERS, per[mynode], PMIX_STRING);
    }
    PMIX_INFO_LOAD(&info[k++], PMIX_APPNUM, &zero, PMIX_UINT32);
    if (parent_ns != NULL) {
        /* A job that MPI_Comm_spawn started. */
        PMIX_LOAD_PROCID(&parent, parent_ns, parent_rank);
        PMIX_INFO_LOAD(&info[k++], PMIX_SPAWNED, &yes, PMIX_BOOL);
        PMIX_INFO_LOAD(&info[k++], PMIX_PARENT_ID, &parent, PMIX_PROC);
    }
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
    /* k infos are filled in; the rest (unused job-level slots) stay empty
     * and are not handed to the library. */

    waiter w;
    waiter_init(&w);
    rc = finish(PMIx_server_register_nspace(nspace, (int)local, info, k, op_done, &w), &w);
    if (rc != PMIX_SUCCESS) {
        seterr(err, errlen, "PMIx_server_register_nspace", rc);
        goto out;
    }
    waiter_init(&w);
    rc = finish(PMIx_server_setup_local_support(nspace, info, k, op_done, &w), &w);
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

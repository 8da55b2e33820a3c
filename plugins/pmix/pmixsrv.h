/* The C half of gorun-pmix: a PMIx server on libpmix whose callbacks hand
 * work to Go (see server.go). */
#ifndef GORUN_PMIXSRV_H
#define GORUN_PMIXSRV_H

#include <stddef.h>
#include <stdint.h>

/* gorun_init starts the PMIx server library. */
int gorun_init(const char *tmpdir, const char *hostname, char *err, size_t errlen);

/* gorun_register registers a namespace (one job generation):
 * size ranks over nnodes nodes; node_of[r] is rank r's node, local_rank_of[r]
 * its rank on that node, app_of[r] its program's index in a job of several
 * (MPMD; NULL: all 0); hosts[n] the name of node n; mynode this host. */
int gorun_register(const char *nspace, uint32_t size, uint32_t nnodes, const char *const *hosts,
                   const uint32_t *node_of, const uint16_t *local_rank_of, const uint32_t *app_of,
                   uint32_t mynode, char *err, size_t errlen);

/* gorun_client registers one local rank and returns its environment
 * (a NULL-terminated array the caller frees with gorun_free_env). */
int gorun_client(const char *nspace, uint32_t rank, uint32_t uid, uint32_t gid, char ***env,
                 char *err, size_t errlen);
void gorun_free_env(char **env);

/* gorun_fence_done completes the fence op with data (copied). */
void gorun_fence_done(uintptr_t op, int ok, const char *data, size_t n);

/* gorun_deregister forgets a namespace. */
void gorun_deregister(const char *nspace);

/* gorun_finalize stops the library. */
void gorun_finalize(void);

#endif

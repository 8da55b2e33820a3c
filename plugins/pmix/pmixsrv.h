/* The C half of gorun-pmix: a PMIx server on libpmix whose callbacks hand
 * work to Go (see server.go). */
#ifndef GORUN_PMIXSRV_H
#define GORUN_PMIXSRV_H

#include <stddef.h>
#include <stdint.h>

/* gorun_init starts the PMIx server library. */
int gorun_init(const char *tmpdir, const char *hostname, char *err, size_t errlen);

/* gorun_register registers a namespace (one job generation, or a job it
 * spawned): size ranks over nnodes nodes; node_of[r] is rank r's node,
 * local_rank_of[r] its rank on that node, app_of[r] its program's index in
 * a job of several (MPMD; NULL: all 0); hosts[n] the name of node n; mynode
 * this host; univ the universe size (slots; below size: size); parent_ns
 * and parent_rank the process that spawned it (parent_ns NULL: none). */
int gorun_register(const char *nspace, uint32_t size, uint32_t nnodes, const char *const *hosts,
                   const uint32_t *node_of, const uint16_t *local_rank_of, const uint32_t *app_of,
                   uint32_t mynode, uint32_t univ, const char *parent_ns, uint32_t parent_rank,
                   char *err, size_t errlen);

/* gorun_client registers one local rank and returns its environment
 * (a NULL-terminated array the caller frees with gorun_free_env). */
int gorun_client(const char *nspace, uint32_t rank, uint32_t uid, uint32_t gid, char ***env,
                 char *err, size_t errlen);
void gorun_free_env(char **env);

/* gorun_fence_done completes the fence op with data (copied). */
void gorun_fence_done(uintptr_t op, int ok, const char *data, size_t n);

/* The kinds of requests goRequest hands to Go (pmixbridge's event kinds). */
enum { GORUN_SPAWN = 1, GORUN_PUBLISH, GORUN_LOOKUP, GORUN_UNPUBLISH, GORUN_CONNECT, GORUN_DISCONNECT, GORUN_DMODEX };

/* gorun_op_done completes a spawn (with the new namespace), publish,
 * unpublish, connect or disconnect request; class is a pmixbridge status
 * class (0: success). */
void gorun_op_done(uintptr_t op, int kind, int class, const char *nspace);

/* gorun_lookup_done completes a lookup with n published names: vals[i]
 * is lens[i] bytes, a byte object where bytes[i], else a string. */
void gorun_lookup_done(uintptr_t op, int class, size_t n, char **keys, char **vals, const size_t *lens,
                       const int *bytes, char **nspaces, const uint32_t *ranks);

/* gorun_modex_done completes a direct modex request with a process's data
 * (copied). */
void gorun_modex_done(uintptr_t op, int class, const char *data, size_t n);

/* gorun_dmodex asks the server for the data of one of its local processes,
 * for another host's server; *data is malloc'd. */
int gorun_dmodex(const char *nspace, uint32_t rank, char **data, size_t *n, char *err, size_t errlen);

/* gorun_deregister forgets a namespace. */
void gorun_deregister(const char *nspace);

/* gorun_finalize stops the library. */
void gorun_finalize(void);

#endif

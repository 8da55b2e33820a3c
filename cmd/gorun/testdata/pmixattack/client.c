/* A PMIx client that another user of the node runs against a job's PMIx
 * server (TestPMIxAsAnotherUser): it tries to join the job as the rank in
 * PMIX_RANK and, if let in, reads the job's size and publishes a key, as
 * an impostor poisoning the job's address exchange would. */
#include <stdio.h>
#include <pmix.h>

int main(void) {
    pmix_proc_t me, job;
    pmix_value_t *val;
    pmix_value_t mine = {.type = PMIX_STRING, .data.string = "tcp://attacker:1"};
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    printf("init: %s\n", PMIx_Error_string(rc));
    if (rc != PMIX_SUCCESS) return 1;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &val);
    printf("job size: %s %u\n", PMIx_Error_string(rc), rc == PMIX_SUCCESS ? val->data.uint32 : 0);
    rc = PMIx_Put(PMIX_GLOBAL, "btl.tcp.address", &mine);
    printf("put: %s\n", PMIx_Error_string(rc));
    rc = PMIx_Commit();
    printf("commit: %s\n", PMIx_Error_string(rc));
    PMIx_Finalize(NULL, 0);
    return 0;
}

/*
 * A rank that leaves nspcomm right after a collective returns owes its peers
 * nothing (src/transport/ucx.c, ucx_flush_owed). Three ranks over UCX shared
 * memory (a receive FIFO of 8 elements per rank, the rendezvous threshold at
 * 256 KiB), one sendrecv each round the ring 0 -> 1 -> 2 -> 0:
 *   - rank 0 sends rank 1 1 MiB (rendezvous: rank 1 fetches it and must
 *     send back an acknowledgement), then computes for 100 ms without
 *     progressing;
 *   - rank 2 sends rank 0 an eager 200 KiB (25 fragments): rank 0's FIFO
 *     is full while rank 0 computes;
 *   - rank 1 posts 20 ms later, so its acknowledgement finds rank 0's FIFO
 *     full and UCX queues it for a later progress call of rank 1. Rank 1's
 *     own operations are complete then; it goes straight into "another
 *     library's" barrier (a counter in shared memory, no UCX call), as the
 *     training example goes into gloo's all-reduce.
 * Rank 0 must still complete within the 2 s timeout: without the flush it
 * waited for the acknowledgement queued in rank 1 and failed with
 * NSP_ERR_TIMEOUT ("still waiting: send to rank 1"). Data checked, 8 rounds.
 */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 60.0
#define NRANKS        3
#define ITERS         8
#define BIG_BYTES     (1u << 20)          /* rank 0 -> 1: rendezvous */
#define EAGER_BYTES   (200u * 1024)       /* rank 2 -> 0: eager, 25 fragments */
#define SMALL_BYTES   64u                 /* rank 1 -> 2 */
#define COMPUTE_NS    (100 * 1000 * 1000) /* rank 0 away from nspcomm after posting */
#define LATE_NS       (20 * 1000 * 1000)  /* rank 1 posts this much later */

typedef struct owed_case {
    nsp_unique_id_t id;
    volatile int   *arrived; /* [ITERS]: shared memory, the outside barrier */
} owed_case_t;

/* The other library's barrier: no nspcomm call while waiting (up to 10 s). */
static int outside_barrier(volatile int *count, int nranks)
{
    __atomic_add_fetch(count, 1, __ATOMIC_ACQ_REL);
    for (int i = 0; i < 10000 && __atomic_load_n(count, __ATOMIC_ACQUIRE) < nranks; ++i) {
        usleep(1000);
    }
    return __atomic_load_n(count, __ATOMIC_ACQUIRE) >= nranks ? 0 : -1;
}

/* Bytes rank `me` sends its successor in the ring. */
static size_t owed_bytes(int me)
{
    return me == 0 ? BIG_BYTES : me == 2 ? EAGER_BYTES : SMALL_BYTES;
}

/* One round: send to the successor, receive from the predecessor, checked. */
static int owed_exchange(nsp_tp_comm_t *tp, int iter, int me, unsigned char *send,
                         unsigned char *recv)
{
    int            dst = (me + 1) % NRANKS, src = (me + NRANKS - 1) % NRANKS;
    nsp_request_t *req = NULL;
    nsp_status_t   st;

    cu_fill(send, owed_bytes(me), iter, me, dst);
    if (me == 1) {
        nanosleep(&(struct timespec){0, LATE_NS}, NULL);
    }
    st = tp->ops->sendrecv_post(tp, send, owed_bytes(me), dst, recv, owed_bytes(src), src,
                                NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, iter), NULL, &req);
    if (st != NSP_OK) {
        return cu_fail("sendrecv_post", st);
    }
    if (me == 0) {
        nanosleep(&(struct timespec){0, COMPUTE_NS}, NULL); /* a kernel: no progress */
    }
    st = nsp_request_wait(req);
    nsp_request_free(req);
    if (st != NSP_OK) {
        mp_note("round %d: %s", iter, nsp_last_error());
        return 11;
    }
    return cu_check(recv, owed_bytes(src), iter, src, me) < 0 ? 0 : 12;
}

static int rank_owed(int rank, int nranks, void *arg)
{
    const owed_case_t *c    = arg;
    nsp_config_t       cfg  = cu_config(2.0);
    nsp_comm_t        *comm = NULL;
    unsigned char     *send = malloc(BIG_BYTES), *recv = malloc(BIG_BYTES);
    int                rc   = 0;
    nsp_status_t       st   = nsp_comm_init_rank(&comm, nranks, c->id, rank, &cfg);

    if (st != NSP_OK || send == NULL || recv == NULL) {
        rc = st != NSP_OK ? cu_fail("init", st) : 2;
        goto out;
    }
    for (int iter = 0; iter < ITERS; ++iter) {
        int r = owed_exchange(nsp_comm_tp(comm), iter, rank, send, recv);
        rc    = rc != 0 ? rc : r;
        if (outside_barrier(&c->arrived[iter], nranks) != 0 && rc == 0) {
            mp_note("iteration %d: the other rank never reached the outside barrier", iter);
            rc = 13;
        }
        if (rc != 0) {
            break;
        }
    }
    nsp_comm_destroy(comm);
out:
    free(send);
    free(recv);
    return rc;
}

static void test_owed(const char *what)
{
    owed_case_t c;
    mp_result_t res;

    c.arrived = mmap(NULL, ITERS * sizeof(int), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c.arrived == MAP_FAILED) {
        tap_ok(0, "mmap of the outside barrier");
        return;
    }
    memset((void *)c.arrived, 0, ITERS * sizeof(int));
    mp_run_uid(NRANKS, RUN_TIMEOUT_S, rank_owed, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res),
           "%s: %d rounds, each rank straight into an outside barrier after its "
           "exchange returns: the rank whose acknowledgement was queued completes within "
           "the 2 s timeout (%.2f s)",
           what, ITERS, res.elapsed_s);
    for (int r = 0; r < NRANKS; ++r) {
        if (res.rank[r].note[0] != '\0') {
            tap_diag("rank %d: %s", r, res.rank[r].note);
        }
    }
    munmap((void *)c.arrived, ITERS * sizeof(int));
}

int main(void)
{
    setenv("UCX_LOG_FILE", "stderr", 0);
    setenv("UCX_SYSV_FIFO_SIZE", "8", 1);
    setenv("UCX_POSIX_FIFO_SIZE", "8", 1);
    setenv("UCX_RNDV_THRESH", "262144", 1);
    test_owed("UCX shared memory, receive FIFO of 8");
    return tap_done();
}

/*
 * The transport's variable-length all-to-all and sendrecv over real
 * processes (UCX on loopback): random byte counts (zeros included) whose
 * expected contents every rank computes on its own from (iteration, source,
 * destination); several all-to-alls in flight with distinct tags; size
 * disagreements reported as NSP_ERR_MISMATCH; a stream on a host backend
 * refused; and the bandwidth of an 8-rank exchange at 1 MiB per peer.
 */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_TIMEOUT_S 50.0

/* One exchange's buffers and counts for this rank: [n] counts, bytes. */
typedef struct a2a_bufs {
    size_t        *arrays;   /* [4][n]: sendcounts, sdispls, recvcounts, rdispls */
    unsigned char *send;
    unsigned char *recv;
    nsp_tp_alltoallv_t args;
} a2a_bufs_t;

/* Lay out iteration `iter` of an exchange whose counts are cu_count(...). */
static int a2a_setup(a2a_bufs_t *b, int iter, int me, int n, size_t max_bytes)
{
    size_t soff = 0, roff = 0;

    b->arrays = calloc(4 * (size_t)n, sizeof(size_t));
    if (b->arrays == NULL) {
        return -1;
    }
    for (int j = 0; j < n; ++j) {
        b->arrays[j]         = cu_count(iter, me, j, max_bytes);
        b->arrays[n + j]     = soff;
        soff += b->arrays[j];
        b->arrays[2 * n + j] = cu_count(iter, j, me, max_bytes);
        b->arrays[3 * n + j] = roff;
        roff += b->arrays[2 * n + j];
    }
    b->send = malloc(soff + 1);
    b->recv = malloc(roff + 1);
    if (b->send == NULL || b->recv == NULL) {
        return -1;
    }
    memset(b->recv, 0xee, roff + 1);
    for (int j = 0; j < n; ++j) {
        cu_fill(b->send + b->arrays[n + j], b->arrays[j], iter, me, j);
    }
    b->args.sendbuf    = b->send;
    b->args.sendcounts = b->arrays;
    b->args.sdispls    = b->arrays + n;
    b->args.recvbuf    = b->recv;
    b->args.recvcounts = b->arrays + 2 * n;
    b->args.rdispls    = b->arrays + 3 * n;
    return 0;
}

/* Check what arrived against the pattern each sender would have written. */
static int a2a_verify(const a2a_bufs_t *b, int iter, int me, int n)
{
    for (int j = 0; j < n; ++j) {
        long bad = cu_check(b->recv + b->arrays[3 * n + j], b->arrays[2 * n + j], iter, j, me);
        if (bad >= 0) {
            mp_note("iteration %d: byte %ld of the %zu from rank %d is wrong", iter, bad,
                    b->arrays[2 * n + j], j);
            return 1;
        }
    }
    return 0;
}

static void a2a_free(a2a_bufs_t *b)
{
    free(b->arrays);
    free(b->send);
    free(b->recv);
}

static nsp_comm_t *join(const nsp_unique_id_t *id, int rank, int nranks, double timeout)
{
    nsp_config_t cfg  = cu_config(timeout);
    nsp_comm_t  *comm = NULL;
    nsp_status_t st   = nsp_comm_init_rank(&comm, nranks, *id, rank, &cfg);

    if (st != NSP_OK) {
        cu_fail("init", st);
        return NULL;
    }
    return comm;
}

/* ------------------------------------------------------------------------ */

typedef struct random_case {
    nsp_unique_id_t id;
    int             iters;
    size_t          max_bytes;
    int             inflight; /* exchanges posted before the first wait */
} random_case_t;

static int rank_random(int rank, int nranks, void *arg)
{
    const random_case_t *c    = arg;
    nsp_comm_t          *comm = join(&c->id, rank, nranks, 20.0);
    nsp_tp_comm_t       *tp;
    int                  rc   = 0;

    if (comm == NULL) {
        return 10;
    }
    tp = nsp_comm_tp(comm);
    for (int iter = 0; iter < c->iters && rc == 0; iter += c->inflight) {
        a2a_bufs_t     bufs[8];
        nsp_request_t *reqs[8] = {NULL};
        int            k       = c->inflight;

        memset(bufs, 0, sizeof(bufs));
        for (int i = 0; i < k && rc == 0; ++i) {
            nsp_status_t st;
            if (a2a_setup(&bufs[i], iter + i, rank, nranks, c->max_bytes) != 0) {
                rc = 2;
                break;
            }
            st = tp->ops->alltoallv_post(tp, &bufs[i].args,
                                         NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, iter + i), NULL,
                                         &reqs[i]);
            if (st != NSP_OK) {
                rc = cu_fail("alltoallv_post", st);
            }
        }
        /* Wait newest first: completion must not depend on order. */
        for (int i = k - 1; i >= 0; --i) {
            if (reqs[i] != NULL) {
                nsp_status_t st = nsp_request_wait(reqs[i]);
                if (st != NSP_OK && rc == 0) {
                    rc = cu_fail("wait", st);
                }
                if (rc == 0) {
                    rc = a2a_verify(&bufs[i], iter + i, rank, nranks);
                }
                nsp_request_free(reqs[i]);
            }
            a2a_free(&bufs[i]);
        }
    }
    nsp_comm_destroy(comm);
    return rc;
}

static void test_random(int nranks, int iters, size_t max_bytes, int inflight)
{
    random_case_t c = {.iters = iters, .max_bytes = max_bytes, .inflight = inflight};
    mp_result_t   res;

    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_random, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res),
           "alltoallv, %d ranks, %d exchanges of random counts 0..%zu bytes, %d in flight "
           "(%.2f s)",
           nranks, iters, max_bytes, inflight, res.elapsed_s);
}

/* ------------------------------------------------------------------------ */
/* Disagreements and refused arguments                                      */
/* ------------------------------------------------------------------------ */

/* Rank 1 expects `delta` more (or fewer) bytes from rank 0 than rank 0 sends. */
static int rank_mismatch(int rank, int nranks, void *arg)
{
    const random_case_t *c     = arg;
    int                  delta = c->iters;
    nsp_comm_t          *comm  = join(&c->id, rank, nranks, 5.0);
    nsp_tp_comm_t       *tp;
    size_t               counts[4][2];
    unsigned char        sendbuf[64] = {0}, recvbuf[128];
    nsp_request_t       *req         = NULL;
    nsp_status_t         st;
    int                  rc = 0;

    if (comm == NULL) {
        return 10;
    }
    tp = nsp_comm_tp(comm);
    for (int j = 0; j < 2; ++j) {
        counts[0][j] = 32;      /* sendcounts */
        counts[1][j] = 0;       /* sdispls */
        counts[2][j] = 32;      /* recvcounts */
        counts[3][j] = 64 * (size_t)j;
    }
    if (rank == 1) {
        counts[2][0] = (size_t)(32 + delta);
    }
    nsp_tp_alltoallv_t args = {sendbuf, counts[0], counts[1], recvbuf, counts[2], counts[3]};
    st = tp->ops->alltoallv_post(tp, &args, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, 1), NULL, &req);
    if (st == NSP_OK) {
        st = nsp_request_wait(req);
        nsp_request_free(req);
    }
    if (rank == 1 && st != NSP_ERR_MISMATCH) {
        rc = cu_fail("rank 1 expected NSP_ERR_MISMATCH", st);
    } else if (rank == 1) {
        mp_note("%s", nsp_last_error());
    } else if (rank == 0 && st != NSP_OK) {
        rc = cu_fail("rank 0 (its sends are fine)", st);
    }
    nsp_comm_destroy(comm);
    return rc;
}

static void test_mismatch(int delta)
{
    random_case_t c = {.iters = delta};
    mp_result_t   res;

    mp_run_uid(2, RUN_TIMEOUT_S, rank_mismatch, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res), "receiver expects %+d bytes: NSP_ERR_MISMATCH, not a hang or a "
                            "silent truncation",
           delta);
    tap_diag("rank 1 says: %s", res.rank[1].note);
}

static int rank_refusals(int rank, int nranks, void *arg)
{
    const random_case_t *c    = arg;
    nsp_comm_t          *comm = join(&c->id, rank, nranks, 10.0);
    nsp_tp_comm_t       *tp;
    size_t               zeros[4][2] = {{0}};
    char                 one = 1, got = 0;
    nsp_request_t       *req = NULL;
    nsp_status_t         st;
    int                  rc  = 0;
    int                  fake_stream;

    if (comm == NULL) {
        return 10;
    }
    tp = nsp_comm_tp(comm);
    nsp_tp_alltoallv_t args = {&one, zeros[0], zeros[1], &got, zeros[2], zeros[3]};
    st = tp->ops->alltoallv_post(tp, &args, 5, &fake_stream, &req);
    if (st != NSP_ERR_UNSUPPORTED || req != NULL) {
        rc = cu_fail("alltoallv with a stream on ucx", st);
    }
    st = tp->ops->world_wrap(&fake_stream, NULL, NULL);
    if (rc == 0 && st != NSP_ERR_UNSUPPORTED) {
        rc = cu_fail("world_wrap on ucx", st);
    }
    /* sendrecv to self: a copy. */
    st = tp->ops->sendrecv_post(tp, &one, 1, rank, &got, 1, rank, 9, NULL, &req);
    if (rc == 0 && (st != NSP_OK || nsp_request_wait(req) != NSP_OK || got != 1)) {
        rc = cu_fail("sendrecv to self", st);
    }
    nsp_request_free(req);
    /* Ring by sendrecv: to the next rank, from the previous one. */
    {
        int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
        int mine = 1000 + rank, theirs = -1;
        req = NULL;
        st  = tp->ops->sendrecv_post(tp, &mine, sizeof(mine), to, &theirs, sizeof(theirs), from,
                                     10, NULL, &req);
        if (st == NSP_OK) {
            st = nsp_request_wait(req);
        }
        nsp_request_free(req);
        if (rc == 0 && (st != NSP_OK || theirs != 1000 + from)) {
            mp_note("sendrecv ring: got %d from %d (%s)", theirs, from, nsp_status_string(st));
            rc = 3;
        }
    }
    nsp_comm_destroy(comm);
    return rc;
}

static void test_refusals(void)
{
    random_case_t c = {0};
    mp_result_t   res;

    mp_run_uid(3, RUN_TIMEOUT_S, rank_refusals, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res), "ucx refuses a CUDA stream and world_wrap (UNSUPPORTED); "
                            "sendrecv to self copies; sendrecv ring of 3");
}

/* ------------------------------------------------------------------------ */
/* Bandwidth: nccl-tests' definitions, size = bytes each rank sends          */
/* ------------------------------------------------------------------------ */

typedef struct bw_case {
    nsp_unique_id_t id;
    size_t          per_peer;
    int             warmup, iters;
} bw_case_t;

static int rank_bandwidth(int rank, int nranks, void *arg)
{
    const bw_case_t *c    = arg;
    nsp_comm_t      *comm = join(&c->id, rank, nranks, 20.0);
    nsp_tp_comm_t   *tp;
    size_t          *arrays = calloc(4 * (size_t)nranks, sizeof(size_t));
    size_t           total  = c->per_peer * (size_t)nranks;
    unsigned char   *send   = malloc(total), *recv = malloc(total);
    double           t0     = 0;
    int              rc     = 0;

    if (comm == NULL || arrays == NULL || send == NULL || recv == NULL) {
        return 10;
    }
    tp = nsp_comm_tp(comm);
    for (int j = 0; j < nranks; ++j) {
        arrays[j] = arrays[2 * nranks + j] = c->per_peer;
        arrays[nranks + j] = arrays[3 * nranks + j] = (size_t)j * c->per_peer;
        cu_fill(send + (size_t)j * c->per_peer, c->per_peer, 0, rank, j);
    }
    nsp_tp_alltoallv_t args = {send, arrays, arrays + nranks, recv, arrays + 2 * nranks,
                               arrays + 3 * nranks};
    for (int it = 0; it < c->warmup + c->iters && rc == 0; ++it) {
        nsp_status_t st;
        if (it == c->warmup) {
            st = nsp_comm_barrier(comm);
            t0 = mp_now();
        }
        st = nsp_tp_alltoallv(tp, &args, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, it));
        if (st != NSP_OK) {
            rc = cu_fail("alltoallv", st);
        }
    }
    if (rc == 0) {
        double dt = (mp_now() - t0) / c->iters;
        mp_set_value(0, dt);
        for (int j = 0; j < nranks && rc == 0; ++j) {
            if (cu_check(recv + (size_t)j * c->per_peer, c->per_peer, 0, j, rank) >= 0) {
                mp_note("wrong bytes from rank %d", j);
                rc = 2;
            }
        }
    }
    nsp_comm_destroy(comm);
    free(arrays);
    free(send);
    free(recv);
    return rc;
}

static void test_bandwidth(int nranks, size_t per_peer)
{
    bw_case_t   c = {.per_peer = per_peer, .warmup = 3, .iters = 20};
    mp_result_t res;
    double      worst = 0;

    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_bandwidth, &c, &c.id, &res);
    for (int r = 0; r < nranks; ++r) {
        worst = res.rank[r].value[0] > worst ? res.rank[r].value[0] : worst;
    }
    if (tap_ok(mp_all_ok(&res), "alltoallv %d ranks x %zu bytes per peer, %d iterations, data "
                                "checked",
               nranks, per_peer, c.iters)) {
        double size  = (double)per_peer * nranks; /* bytes each rank sends, self included */
        double algbw = size / worst / 1e9;
        double busbw = algbw * (nranks - 1) / nranks;
        tap_diag("alltoallv %d ranks, %zu B per peer (size %.0f B): time %.1f us, algbw %.2f "
                 "GB/s, busbw %.2f GB/s (UCX_TLS=%s)",
                 nranks, per_peer, size, worst * 1e6, algbw, busbw,
                 getenv("UCX_TLS") != NULL ? getenv("UCX_TLS") : "default");
    }
}

int main(void)
{
    setenv("UCX_LOG_FILE", "stderr", 0);
    test_random(2, 20, 4096, 1);
    test_random(4, 20, 65536, 2);
    test_random(8, 12, 65536, 3);
    test_random(8, 4, 1 << 20, 2); /* rendezvous-sized messages */
    test_random(5, 10, 300, 4);    /* odd size, tiny messages */
    /* tcp, as across hosts, with UCX's peer error handling on every endpoint. */
    const char *user_tls = getenv("UCX_TLS");
    char        saved_tls[256] = "";
    if (user_tls != NULL) {
        snprintf(saved_tls, sizeof(saved_tls), "%s", user_tls);
    }
    setenv("UCX_TLS", "tcp,self", 1);
    setenv("NSPCOMM_UCX_ERR_MODE", "peer", 1);
    tap_diag("UCX_TLS=tcp,self NSPCOMM_UCX_ERR_MODE=peer:");
    test_random(4, 8, 1 << 18, 2);
    if (saved_tls[0] != '\0') {
        setenv("UCX_TLS", saved_tls, 1);
    } else {
        unsetenv("UCX_TLS");
    }
    unsetenv("NSPCOMM_UCX_ERR_MODE");
    test_mismatch(+8);
    test_mismatch(-8);
    test_refusals();
    test_bandwidth(8, 1 << 20);
    return tap_done();
}

/*
 * The transport's all-to-all of scattered runs (alltoallv_iov_post) over
 * real processes (UCX on loopback). Each sender cuts the stream it owes a
 * peer into random runs scattered with gaps through its buffer, and each
 * receiver cuts what it expects into runs of its own, independently; every
 * rank computes the expected bytes from (iteration, source, destination)
 * (comm_util.h patterns) and checks every byte landed and no gap byte was
 * written. Both paths of the UCX backend: same-host peers pulled with
 * process_vm_readv (the default where the kernel allows it, which the test
 * finds out on its own) and UCX's iov datatype (NSPCOMM_UCX_CMA=off); run
 * counts above process_vm_readv's IOV_MAX per call; zero counts; several
 * exchanges in flight; a size disagreement reported as NSP_ERR_MISMATCH on
 * either path; the ack bit of the tag refused. A failed exchange returns only
 * once no peer copies into its buffers any more: with rank 1 pushing into
 * rank 0 late, rank 0's receive buffer (painted once the wait returned)
 * stays as painted; and when rank 0 freed the exchange unfinished and
 * destroyed its world, its buffer painted after the destroy stays so.
 */
#define _GNU_SOURCE /* process_vm_readv */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"
#include "transport/comm.h"
#include "transport/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 60.0
#define GAP_BYTE      0xee

/* One rank's side of one exchange: runs into one buffer with gaps. */
typedef struct side {
    unsigned char *buf;       /* [cap] */
    size_t         cap;
    nsp_tp_iov_t  *runs;      /* [nruns] */
    size_t        *first;     /* [n + 1] */
    size_t         nruns;
} side_t;

typedef struct iov_case {
    nsp_unique_id_t id;
    int             iters, inflight;
    size_t          max_bytes; /* per pair */
    size_t          max_run;   /* longest run; small ones make many runs */
    int             cma_off;   /* NSPCOMM_UCX_CMA=off in the ranks */
    int             push;      /* the hint: the sender copies */
    int             mismatch;  /* rank 1 expects 8 bytes more from rank 0 */
    int             late;      /* with mismatch, push: rank 1 copies into rank 0 late */
    int             one_way;   /* rank 0 sends rank 1 nothing (rank 1 waits for no copy) */
} iov_case_t;

#define LATE_S 0.2 /* how late rank 1 starts its part (seconds) */

/* The runs of `bytes` for one peer, lengths 0..max_run from `seed` (a
 * 0-byte run now and then), appended to s with a gap of 0..15 bytes before
 * each; a run's buf holds its offset in the buffer until side_place. */
static int side_cut(side_t *s, size_t *used, size_t bytes, size_t max_run, uint64_t seed)
{
    size_t left = bytes, k = 0, cap = 0;

    do {
        uint64_t h   = cu_hash(seed, k, 7, 11);
        size_t   len = (size_t)(h % (max_run + 1));
        if (len == 0 && k % 8 != 0) {
            len = 1;
        }
        if (len > left) {
            len = left;
        }
        if (s->nruns == cap || cap == 0) {
            cap = s->nruns * 2 + 64;
            nsp_tp_iov_t *grown = realloc(s->runs, cap * sizeof(nsp_tp_iov_t));
            if (grown == NULL) {
                return -1;
            }
            s->runs = grown;
        }
        *used += (size_t)((h >> 32) % 16); /* the gap */
        s->runs[s->nruns].buf = (void *)(uintptr_t)*used;
        s->runs[s->nruns].len = len;
        ++s->nruns;
        *used += len;
        left -= len;
        ++k;
    } while (left > 0);
    return 0;
}

/* Allocate s's buffer (gap bytes everywhere) and turn offsets into pointers. */
static int side_place(side_t *s, size_t used)
{
    s->cap = used + 1;
    s->buf = malloc(s->cap);
    if (s->buf == NULL) {
        return -1;
    }
    memset(s->buf, GAP_BYTE, s->cap);
    for (size_t r = 0; r < s->nruns; ++r) {
        s->runs[r].buf = s->buf + (uintptr_t)s->runs[r].buf;
    }
    return 0;
}

/* Both sides of exchange `iter` for rank me of n: counts cu_count(). */
static int iov_setup(const iov_case_t *c, int iter, int me, int n, side_t *snd, side_t *rcv)
{
    size_t sused = 0, rused = 0;

    snd->first = calloc((size_t)n + 1, sizeof(size_t));
    rcv->first = calloc((size_t)n + 1, sizeof(size_t));
    if (snd->first == NULL || rcv->first == NULL) {
        return -1;
    }
    for (int j = 0; j < n; ++j) {
        size_t out = cu_count(iter, me, j, c->max_bytes);
        size_t in  = cu_count(iter, j, me, c->max_bytes);
        if (c->mismatch && me == 1 && j == 0) {
            in += 8;
        }
        if (c->one_way && me == 0 && j == 1) {
            out = 0;
        }
        if (c->one_way && me == 1 && j == 0) {
            in = 0;
        }
        snd->first[j] = snd->nruns;
        rcv->first[j] = rcv->nruns;
        if (side_cut(snd, &sused, out, c->max_run, cu_hash(iter, me, j, 1)) != 0 ||
            side_cut(rcv, &rused, in, c->max_run, cu_hash(iter, j, me, 2)) != 0) {
            return -1;
        }
    }
    snd->first[n] = snd->nruns;
    rcv->first[n] = rcv->nruns;
    if (side_place(snd, sused) != 0 || side_place(rcv, rused) != 0) {
        return -1;
    }
    for (int j = 0; j < n; ++j) { /* the stream to j, written run by run */
        size_t         out    = cu_count(iter, me, j, c->max_bytes), off = 0;
        unsigned char *stream = malloc(out + 1);
        if (stream == NULL) {
            return -1;
        }
        cu_fill(stream, out, iter, me, j);
        for (size_t r = snd->first[j]; r < snd->first[j + 1]; ++r) {
            memcpy(snd->runs[r].buf, stream + off, snd->runs[r].len);
            off += snd->runs[r].len;
        }
        free(stream);
    }
    return 0;
}

/* Every received byte against the sender's pattern; every gap untouched. */
static int iov_verify(const side_t *rcv, int iter, int me, int n)
{
    unsigned char *marked = calloc(rcv->cap, 1);
    int            rc     = 0;

    if (marked == NULL) {
        return 2;
    }
    for (int j = 0; j < n && rc == 0; ++j) {
        size_t         bytes = 0, off = 0;
        unsigned char *stream;
        for (size_t r = rcv->first[j]; r < rcv->first[j + 1]; ++r) {
            bytes += rcv->runs[r].len;
        }
        stream = malloc(bytes + 1);
        if (stream == NULL) {
            rc = 2;
            break;
        }
        for (size_t r = rcv->first[j]; r < rcv->first[j + 1]; ++r) {
            memcpy(stream + off, rcv->runs[r].buf, rcv->runs[r].len);
            memset(marked + ((unsigned char *)rcv->runs[r].buf - rcv->buf), 1,
                   rcv->runs[r].len);
            off += rcv->runs[r].len;
        }
        if (cu_check(stream, bytes, iter, j, me) >= 0) {
            mp_note("iteration %d: byte %ld of the %zu from rank %d is wrong", iter,
                    cu_check(stream, bytes, iter, j, me), bytes, j);
            rc = 1;
        }
        free(stream);
    }
    for (size_t i = 0; i < rcv->cap && rc == 0; ++i) {
        if (!marked[i] && rcv->buf[i] != GAP_BYTE) {
            mp_note("iteration %d: gap byte %zu was written", iter, i);
            rc = 1;
        }
    }
    free(marked);
    return rc;
}

static void side_free(side_t *s)
{
    free(s->buf);
    free(s->runs);
    free(s->first);
}

/* value[0]: pulls, value[1]: sends through UCX's iov datatype. */
/* The bytes of s's runs for peer j. */
static size_t side_bytes(const side_t *s, int j)
{
    size_t n = 0;

    for (size_t r = s->first[j]; r < s->first[j + 1]; ++r) {
        n += s->runs[r].len;
    }
    return n;
}

/* After a failed exchange's wait (or the world's destroy) returned: paint
 * every run of s, wait past LATE_S, check no peer wrote into it since. */
static int painted_stays(const side_t *s)
{
    for (size_t r = 0; r < s->nruns; ++r) {
        memset(s->runs[r].buf, 0x5a, s->runs[r].len);
    }
    nanosleep(&(struct timespec){0, (long)(1.5 * LATE_S * 1e9)}, NULL);
    for (size_t r = 0; r < s->nruns; ++r) {
        const unsigned char *b = s->runs[r].buf;
        for (size_t i = 0; i < s->runs[r].len; ++i) {
            if (b[i] != 0x5a) {
                mp_note("run %zu byte %zu written after the wait or destroy returned", r, i);
                return 3;
            }
        }
    }
    return 0;
}

static int rank_iov(int rank, int nranks, void *arg)
{
    const iov_case_t  *c = arg;
    nsp_config_t       cfg;
    nsp_comm_t        *comm = NULL;
    nsp_tp_comm_t     *tp;
    nsp_tp_ucx_stats_t st0, st1;
    nsp_status_t       st;
    int                rc = 0;

    if (c->cma_off) {
        setenv("NSPCOMM_UCX_CMA", "off", 1);
    }
    cfg = cu_config(c->mismatch ? 5.0 : 20.0);
    st  = nsp_comm_init_rank(&comm, nranks, c->id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("init", st);
    }
    tp = nsp_comm_tp(comm);
    nsp_tp_ucx_stats(tp, &st0);
    for (int iter = 0; iter < c->iters && rc == 0; iter += c->inflight) {
        side_t         snd[4], rcv[4];
        nsp_request_t *reqs[4] = {NULL};
        int            k       = c->inflight;

        memset(snd, 0, sizeof(snd));
        memset(rcv, 0, sizeof(rcv));
        for (int i = 0; i < k && rc == 0; ++i) {
            nsp_tp_alltoallv_iov_t a;
            if (iov_setup(c, iter + i, rank, nranks, &snd[i], &rcv[i]) != 0) {
                rc = 2;
                break;
            }
            a.send   = snd[i].runs;
            a.sfirst = snd[i].first;
            a.recv   = rcv[i].runs;
            a.rfirst = rcv[i].first;
            a.push   = c->push;
            st = tp->ops->alltoallv_iov_post(tp, &a, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, iter + i),
                                             NULL, &reqs[i]);
            if (st != NSP_OK) {
                rc = cu_fail("alltoallv_iov_post", st);
            }
        }
        if (c->late && rank == 1) {
            nanosleep(&(struct timespec){0, (long)(LATE_S * 1e9)}, NULL);
        }
        for (int i = k - 1; i >= 0; --i) { /* newest first */
            if (reqs[i] != NULL) {
                st = nsp_request_wait(reqs[i]);
                if (c->late && rank == 0 && rc == 0) {
                    mp_set_value(2, (double)side_bytes(&rcv[i], 1)); /* rank 1 pushes it */
                    rc = painted_stays(&rcv[i]);
                }
                if (c->mismatch) { /* the copying side tells the other (cma pairs) */
                    if (rank == 1 && st != NSP_ERR_MISMATCH) {
                        rc = cu_fail("rank 1 expected NSP_ERR_MISMATCH", st);
                    } else if (rank == 0 && st != NSP_OK && st != NSP_ERR_MISMATCH &&
                               st != NSP_ERR_PEER_FAILED) {
                        /* PEER_FAILED: rank 1 saw the mismatch first and its
                         * process had left while rank 0 was still copying
                         * from it (process_vm_readv: no such process) */
                        rc = cu_fail("rank 0 expected NSP_OK, NSP_ERR_MISMATCH or "
                                     "NSP_ERR_PEER_FAILED", st);
                    } else if (rank == 1) {
                        mp_note("%s", nsp_last_error());
                    }
                } else if (st != NSP_OK && rc == 0) {
                    rc = cu_fail("wait", st);
                } else if (rc == 0) {
                    rc = iov_verify(&rcv[i], iter + i, rank, nranks);
                }
                nsp_request_free(reqs[i]);
            }
            side_free(&snd[i]);
            side_free(&rcv[i]);
        }
    }
    nsp_tp_ucx_stats(tp, &st1);
    mp_set_value(0, (double)(st1.iov_copies - st0.iov_copies));
    mp_set_value(1, (double)(st1.iov_ucx - st0.iov_ucx));
    nsp_comm_destroy(comm); /* after a mismatch the world is broken: destroy only */
    return rc;
}

/* Can a forked child read its parent's memory here (what the UCX backend
 * needs to pull)? Decided independently of the library. */
static uint64_t probe_word = 0x1234567887654321ull;

static int cma_possible(void)
{
    pid_t parent = getpid();
    pid_t child  = fork();
    int   status = 0;

    if (child == 0) {
        uint64_t     v = 0;
        struct iovec l = {&v, sizeof(v)}, r = {&probe_word, sizeof(v)};
        _exit(process_vm_readv(parent, &l, 1, &r, 1, 0) == (ssize_t)sizeof(v) &&
                      v == 0x1234567887654321ull
                  ? 0
                  : 1);
    }
    if (child < 0 || waitpid(child, &status, 0) != child) {
        return 0;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_iov(int nranks, int iters, int inflight, size_t max_bytes, size_t max_run,
                     int cma_off, int push, int cma_here)
{
    iov_case_t  c = {.iters = iters, .inflight = inflight, .max_bytes = max_bytes,
                     .max_run = max_run, .cma_off = cma_off, .push = push};
    mp_result_t res;
    double      pulls = 0, via_ucx = 0;

    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_iov, &c, &c.id, &res);
    for (int r = 0; r < nranks; ++r) {
        pulls += res.rank[r].value[0];
        via_ucx += res.rank[r].value[1];
    }
    tap_ok(mp_all_ok(&res),
           "alltoallv_iov, %d ranks, %d exchanges of 0..%zu bytes in runs of 0..%zu, %d in "
           "flight, push %d, %s: every byte and gap right (%.2f s)",
           nranks, iters, max_bytes, max_run, inflight, push,
           cma_off ? "NSPCOMM_UCX_CMA=off" : "default", res.elapsed_s);
    if (cma_off || !cma_here) {
        tap_ok(pulls == 0 && via_ucx > 0, "... all through UCX's iov datatype (%.0f sends, "
                                          "%.0f pulls)", via_ucx, pulls);
    } else {
        tap_ok(pulls > 0 && via_ucx == 0, "... all copied with %s (%.0f copies, %.0f UCX iov "
                                          "sends)",
               push ? "process_vm_writev" : "process_vm_readv", pulls, via_ucx);
    }
}

static void test_iov_mismatch(int cma_off, int push)
{
    iov_case_t  c = {.iters = 1, .inflight = 1, .max_bytes = 4096, .max_run = 100,
                     .cma_off = cma_off, .mismatch = 1, .push = push};
    mp_result_t res;

    mp_run_uid(2, RUN_TIMEOUT_S, rank_iov, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res) && (strstr(res.rank[1].note, "expected") != NULL ||
                               strstr(res.rank[1].note, "disagree on the bytes") != NULL),
           "alltoallv_iov, receiver expects 8 bytes more (%s): NSP_ERR_MISMATCH, not a hang",
           cma_off ? "UCX iov" : push ? "push" : "pull");
    tap_diag("rank 1 says: %s", res.rank[1].note);
}

/* The failed exchange of test_iov_mismatch (push) with rank 1 pushing into
 * rank 0 LATE_S late: rank 0's wait returns only after that (the request
 * drains), so its buffer, painted once the wait returned, stays painted. */
static void test_iov_late(void)
{
    iov_case_t  c = {.iters = 1, .inflight = 1, .max_bytes = 4096, .max_run = 100,
                     .mismatch = 1, .push = 1, .late = 1};
    mp_result_t res;

    mp_run_uid(2, RUN_TIMEOUT_S, rank_iov, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res) && res.rank[0].value[2] > 0,
           "a failed exchange returns only once no peer copies into it: %.0f bytes pushed "
           "%.1f s late, rank 0's buffer painted after its wait stays painted (%s)",
           res.rank[0].value[2], LATE_S, res.rank[0].note[0] ? res.rank[0].note : "ok");
}

/* Rank 0 frees its exchange unfinished and destroys its world at once;
 * rank 1 (to which rank 0 sends nothing, so its own part succeeds) pushes
 * into rank 0 LATE_S later. Rank 0's destroy returns only
 * once that push was answered, so its buffer, painted after the destroy,
 * stays painted. */
static int rank_abandon(int rank, int nranks, void *arg)
{
    const iov_case_t      *c = arg;
    nsp_config_t           cfg = cu_config(10.0);
    nsp_comm_t            *comm = NULL;
    side_t                 snd, rcv;
    nsp_tp_alltoallv_iov_t a;
    nsp_request_t         *req = NULL;
    nsp_status_t           st;
    int                    rc = 0;

    memset(&snd, 0, sizeof(snd));
    memset(&rcv, 0, sizeof(rcv));
    st = nsp_comm_init_rank(&comm, nranks, c->id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("init", st);
    }
    if (iov_setup(c, 0, rank, nranks, &snd, &rcv) != 0) {
        rc = 2;
        goto out;
    }
    a = (nsp_tp_alltoallv_iov_t){snd.runs, snd.first, rcv.runs, rcv.first, 1};
    st = nsp_comm_tp(comm)->ops->alltoallv_iov_post(nsp_comm_tp(comm), &a,
                                                    NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, 0), NULL,
                                                    &req);
    if (st != NSP_OK) {
        rc = cu_fail("alltoallv_iov_post", st);
    } else if (rank == 0) {
        mp_set_value(2, (double)side_bytes(&rcv, 1)); /* rank 1 pushes it */
        nsp_request_free(req); /* unfinished: rank 1 has not copied yet */
        nsp_comm_destroy(comm);
        comm = NULL;
        rc   = painted_stays(&rcv);
    } else {
        nanosleep(&(struct timespec){0, (long)(LATE_S * 1e9)}, NULL);
        st = nsp_request_wait(req); /* pushes into rank 0 */
        nsp_request_free(req);
        if (st != NSP_OK && st != NSP_ERR_MISMATCH && st != NSP_ERR_PEER_FAILED) {
            rc = cu_fail("rank 1 expected NSP_OK, NSP_ERR_MISMATCH or NSP_ERR_PEER_FAILED", st);
        }
    }
out:
    if (comm != NULL) {
        nsp_comm_destroy(comm);
    }
    side_free(&snd);
    side_free(&rcv);
    return rc;
}

static void test_iov_abandon(void)
{
    iov_case_t  c = {.iters = 1, .inflight = 1, .max_bytes = 4096, .max_run = 100, .push = 1,
                     .one_way = 1};
    mp_result_t res;

    mp_run_uid(2, RUN_TIMEOUT_S, rank_abandon, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res) && res.rank[0].value[2] > 0,
           "an exchange freed unfinished: destroying the world waits for its copier (%.0f "
           "bytes pushed %.1f s late; rank 0's buffer painted after the destroy stays "
           "painted: %s)", res.rank[0].value[2], LATE_S,
           res.rank[0].note[0] ? res.rank[0].note : "ok");
}

static int rank_refuse(int rank, int nranks, void *arg)
{
    const iov_case_t      *c = arg;
    nsp_config_t           cfg = cu_config(10.0);
    nsp_comm_t            *comm = NULL;
    nsp_tp_comm_t         *tp;
    size_t                 first[3] = {0, 0, 0};
    nsp_tp_alltoallv_iov_t a = {NULL, first, NULL, first, 0};
    nsp_request_t         *req = NULL;
    nsp_status_t           st;
    int                    rc = 0, fake_stream;

    st = nsp_comm_init_rank(&comm, nranks, c->id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("init", st);
    }
    tp = nsp_comm_tp(comm);
    st = tp->ops->alltoallv_iov_post(tp, &a, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, 1) |
                                                 NSP_TP_TAG_IOV_ACK, NULL, &req);
    if (st != NSP_ERR_INVALID_ARG || req != NULL) {
        rc = cu_fail("a tag with the ack bit", st);
    }
    st = tp->ops->alltoallv_iov_post(tp, &a, 5, &fake_stream, &req);
    if (rc == 0 && (st != NSP_ERR_UNSUPPORTED || req != NULL)) {
        rc = cu_fail("a stream on ucx", st);
    }
    /* all counts 0: completes */
    st = tp->ops->alltoallv_iov_post(tp, &a, 6, NULL, &req);
    if (st == NSP_OK) {
        st = nsp_request_wait(req);
        nsp_request_free(req);
    }
    if (rc == 0 && st != NSP_OK) {
        rc = cu_fail("an empty exchange", st);
    }
    nsp_comm_destroy(comm);
    return rc;
}

int main(void)
{
    int        cma_here = cma_possible();
    iov_case_t c        = {0};
    mp_result_t res;

    setenv("UCX_LOG_FILE", "stderr", 0);
    tap_diag("process_vm_readv between forked processes here: %s",
             cma_here ? "allowed" : "refused (the UCX backend uses UCX's iov datatype)");
    for (int mode = 0; mode < 3; ++mode) { /* pull, push, then UCX's iov datatype */
        int off = mode == 2, push = mode == 1;
        test_iov(2, 6, 1, 4096, 64, off, push, cma_here);
        test_iov(4, 8, 2, 65536, 4096, off, push, cma_here);
        test_iov(8, 4, 2, 1 << 20, 65536, off, push, cma_here); /* rendezvous-sized */
        test_iov(3, 4, 1, 40000, 7, off, push, cma_here);  /* ~10^4 runs: above IOV_MAX */
        test_iov(5, 6, 3, 300, 13, off, push, cma_here);   /* odd sizes, tiny runs */
        test_iov_mismatch(off, push);
        if (push && !off && cma_here) {
            test_iov_late();
            test_iov_abandon();
        } else if (push && !off) {
            tap_skip(2, "a late push into a failed or abandoned exchange: process_vm_writev "
                        "is refused here, the exchange goes through UCX's iov datatype");
        }
    }
    mp_run_uid(2, RUN_TIMEOUT_S, rank_refuse, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res), "alltoallv_iov refuses the ack bit in a tag (INVALID_ARG) and a "
                            "stream (UNSUPPORTED); an exchange of nothing completes");
    return tap_done();
}

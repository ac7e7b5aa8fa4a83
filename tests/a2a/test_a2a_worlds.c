/*
 * Persistent nested all-to-alls (nsp_a2a_create / start / destroy) and the
 * state they keep per world, on 4 forked ranks over UCX against the
 * single-process reference (a2a_ref.h):
 *
 *   persistent  one handle started three times on fresh buffers, and the
 *               errors of a handle whose requests are still held
 *   two worlds  every rank in world A, ranks 0-1 also in a world B where
 *               they run exchanges first; then A's exchanges on all ranks
 *               (per-world operation numbers: B's do not shift A's tags)
 *   threads     two threads per process, each with its own world, running
 *               exchanges at the same time, then allocating mapped regions
 *               (nsp_mem_alloc) and exchanging from them (mapped = 1) at the
 *               same time: the process-wide count of live regions and each
 *               world's count of mapped levels stay right (run under
 *               ThreadSanitizer by scripts/test.sh)
 */
#include "nspcomm.h"

#include "a2a_ref.h"
#include "attn_sp/nested_a2a.h"
#include "transport/transport.h"
#include "../mp.h"
#include "../tap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NRANKS    4
#define MAX_IDS   4
#define MAX_LEVEL 16

/* Ids of the extra worlds: made by rank 0 (never in the parent, which
 * must not fork with a rendezvous thread), read by the others. */
typedef struct shared_ids {
    int             ready[MAX_IDS];
    nsp_unique_id_t id[MAX_IDS];
} shared_ids_t;

typedef struct worlds_case {
    nsp_unique_id_t id;     /* world A of every rank */
    shared_ids_t   *shared; /* MAP_SHARED: ids of worlds B, C, D */
    int             kind;
} worlds_case_t;

enum { CASE_PERSISTENT = 0, CASE_TWO_WORLDS = 1, CASE_THREADS = 2 };
enum { ID_B = 0, ID_C = 1, ID_D = 2 };

static int shared_id(shared_ids_t *s, int k, int rank, nsp_unique_id_t *id)
{
    if (rank == 0) {
        if (nsp_get_unique_id(&s->id[k]) != NSP_OK) {
            FAIL("nsp_get_unique_id: %s", nsp_last_error());
        }
        __atomic_store_n(&s->ready[k], 1, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < 30000 && !__atomic_load_n(&s->ready[k], __ATOMIC_ACQUIRE); ++i) {
        usleep(1000);
    }
    if (!__atomic_load_n(&s->ready[k], __ATOMIC_ACQUIRE)) {
        FAIL("id %d never came from rank 0", k);
    }
    *id = s->id[k];
    return 0;
out:
    return 1;
}

/* One exchange's buffers and its reference. */
typedef struct xbufs {
    void   *seq, *head, *back, *ref;
    int64_t T, rows;
    size_t  row;  /* D * elem bytes */
} xbufs_t;

static void xbufs_free(xbufs_t *b)
{
    free(b->seq);
    free(b->head);
    free(b->back);
    free(b->ref);
    memset(b, 0, sizeof(*b));
}

static int xbufs_init(xbufs_t *b, const nsp_plan_t *plan, int rank, int heads, int D, size_t es)
{
    memset(b, 0, sizeof(*b));
    b->row = (size_t)D * es;
    if (a2a_ref_seq_sharded(plan, 0, rank, heads, D, es, 0, &b->seq, &b->T) ||
        a2a_ref_head_sharded(plan, 0, rank, heads, D, es, 0, &b->ref, &b->rows)) {
        return -1;
    }
    b->head = malloc((size_t)b->rows * b->row + 1);
    b->back = malloc((size_t)b->T * (size_t)heads * b->row + 1);
    if (b->head == NULL || b->back == NULL) {
        return -1;
    }
    memset(b->head, 0xab, (size_t)b->rows * b->row);
    memset(b->back, 0xcd, (size_t)b->T * (size_t)heads * b->row);
    return 0;
}

static void params_init(nsp_a2a_params_t *p, nsp_a2a_dir_t dir, int heads, int D, size_t es)
{
    memset(p, 0, sizeof(*p));
    p->direction = dir;
    p->heads     = heads;
    p->head_dim  = D;
    p->elem_size = es;
}

/* Wait for and free the nlevels requests of one start. */
static nsp_status_t wait_free(nsp_request_t **req, int nlevels)
{
    nsp_status_t st = nsp_request_wait_all(req, nlevels);

    for (int l = 0; l < nlevels; ++l) {
        nsp_request_free(req[l]);
        req[l] = NULL;
    }
    return st;
}

/* A world's exchanges: `starts` round trips through two handles (s2h and
 * h2s) on fresh buffers each time, then one nsp_a2a_post round trip; every
 * result against the reference. Returns 0 or 1 (with a note). */
static int round_trips(nsp_tree_t *tree, const nsp_plan_t *plan, int rank, int heads, int D,
                       int starts, int *checks)
{
    nsp_layout_t     *lay = NULL;
    nsp_layout_info_t info;
    nsp_a2a_params_t  p;
    nsp_a2a_t        *s2h = NULL, *h2s = NULL;
    nsp_request_t    *req[MAX_LEVEL];
    xbufs_t           b;
    int               rc = 1;

    memset(&b, 0, sizeof(b));
    if (nsp_layout_create(plan, 0, rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK || info.nlevels > MAX_LEVEL) {
        FAIL("layout: %s", nsp_last_error());
    }
    params_init(&p, NSP_A2A_SEQ_TO_HEAD, heads, D, 2);
    if (nsp_a2a_create(tree, lay, &p, &s2h) != NSP_OK) {
        FAIL("create s2h: %s", nsp_last_error());
    }
    params_init(&p, NSP_A2A_HEAD_TO_SEQ, heads, D, 2);
    if (nsp_a2a_create(tree, lay, &p, &h2s) != NSP_OK) {
        FAIL("create h2s: %s", nsp_last_error());
    }
    for (int k = 0; k < starts; ++k) {
        if (xbufs_init(&b, plan, rank, heads, D, 2) != 0) {
            FAIL("no memory");
        }
        if (nsp_a2a_start(s2h, b.seq, b.head, NULL, req) != NSP_OK ||
            wait_free(req, info.nlevels) != NSP_OK) {
            FAIL("start %d s2h: %s", k, nsp_last_error());
        }
        if (memcmp(b.head, b.ref, (size_t)b.rows * b.row) != 0) {
            FAIL("start %d: head-sharded buffer differs from the reference", k);
        }
        if (nsp_a2a_start(h2s, b.head, b.back, NULL, req) != NSP_OK ||
            wait_free(req, info.nlevels) != NSP_OK) {
            FAIL("start %d h2s: %s", k, nsp_last_error());
        }
        if (memcmp(b.back, b.seq, (size_t)b.T * (size_t)heads * b.row) != 0) {
            FAIL("start %d: head-to-sequence did not give back the input", k);
        }
        *checks += 2;
        xbufs_free(&b);
    }
    /* the one-shot form on the same world, in between persistent handles */
    if (xbufs_init(&b, plan, rank, heads, D, 2) != 0) {
        FAIL("no memory");
    }
    params_init(&p, NSP_A2A_SEQ_TO_HEAD, heads, D, 2);
    p.src = b.seq;
    p.dst = b.head;
    if (nsp_a2a_post(tree, lay, &p, req) != NSP_OK || wait_free(req, info.nlevels) != NSP_OK ||
        memcmp(b.head, b.ref, (size_t)b.rows * b.row) != 0) {
        FAIL("post after persistent starts: %s", nsp_last_error());
    }
    *checks += 1;
    rc = 0;
out:
    xbufs_free(&b);
    nsp_a2a_destroy(s2h);
    nsp_a2a_destroy(h2s);
    nsp_layout_free(lay);
    return rc;
}

static nsp_plan_t *plan_for(int nranks, uint64_t seed, int *heads)
{
    uint64_t        rng = seed;
    a2a_plan_opts_t o;

    memset(&o, 0, sizeof(o));
    o.nranks         = nranks;
    o.nrounds        = 1;
    o.seqs_per_round = 12;
    o.max_len        = 200;
    o.ndegrees       = nranks == 4 ? 3 : 2;
    o.degrees[0]     = 1;
    o.degrees[1]     = 2;
    o.degrees[2]     = 4;
    *heads           = 4;
    return a2a_random_plan(&rng, &o);
}

/* The errors of a handle whose requests are held; 0 or 1. */
static int held_errors(nsp_tree_t *tree, const nsp_plan_t *plan, int rank, int heads,
                       int *checks)
{
    nsp_layout_t     *lay = NULL;
    nsp_layout_info_t info;
    nsp_a2a_params_t  p;
    nsp_a2a_t        *a2a = NULL;
    nsp_request_t    *req[MAX_LEVEL], *req2[MAX_LEVEL];
    xbufs_t           b;
    nsp_status_t      st;
    int               rc = 1;

    memset(&b, 0, sizeof(b));
    params_init(&p, NSP_A2A_SEQ_TO_HEAD, heads, 3, 2);
    if (nsp_layout_create(plan, 0, rank, &lay) != NSP_OK || nsp_layout_query(lay, &info) ||
        xbufs_init(&b, plan, rank, heads, 3, 2) != 0 ||
        nsp_a2a_create(tree, lay, &p, &a2a) != NSP_OK) {
        FAIL("setup: %s", nsp_last_error());
    }
    if (nsp_a2a_start(a2a, b.seq, b.head, NULL, req) != NSP_OK) {
        FAIL("start: %s", nsp_last_error());
    }
    if ((st = nsp_a2a_start(a2a, b.seq, b.head, NULL, req2)) != NSP_ERR_INVALID_ARG) {
        FAIL("a second start with the first's requests held: %s, not INVALID_ARG",
             nsp_status_string(st));
    }
    if ((st = nsp_a2a_destroy(a2a)) != NSP_ERR_INVALID_ARG) {
        FAIL("destroy with requests held: %s, not INVALID_ARG", nsp_status_string(st));
    }
    if (wait_free(req, info.nlevels) != NSP_OK ||
        memcmp(b.head, b.ref, (size_t)b.rows * b.row) != 0) {
        FAIL("the first start after the refused calls: %s", nsp_last_error());
    }
    if ((st = nsp_a2a_start(a2a, NULL, b.head, NULL, req)) != NSP_ERR_INVALID_ARG &&
        b.T > 0) {
        FAIL("start with a NULL src: %s, not INVALID_ARG", nsp_status_string(st));
    }
    if (nsp_a2a_destroy(a2a) != NSP_OK || nsp_a2a_destroy(NULL) != NSP_OK) {
        FAIL("destroy: %s", nsp_last_error());
    }
    a2a = NULL;
    /* Replica modes: a sum of another element size, and no mode at all,
     * are refused on every rank before any traffic. */
    p.field_mask |= NSP_A2A_FIELD_REPLICAS;
    p.direction = NSP_A2A_HEAD_TO_SEQ;
    p.replicas  = NSP_A2A_REPLICAS_SUM_F32; /* 2-byte elements */
    if ((st = nsp_a2a_create(tree, lay, &p, &a2a)) != NSP_ERR_INVALID_ARG ||
        strstr(nsp_last_error(), "4-byte") == NULL) {
        FAIL("SUM_F32 on 2-byte elements: %s (%s), not INVALID_ARG", nsp_status_string(st),
             nsp_last_error());
    }
    p.replicas = (nsp_a2a_replicas_t)9;
    if ((st = nsp_a2a_create(tree, lay, &p, &a2a)) != NSP_ERR_INVALID_ARG) {
        FAIL("replicas 9: %s, not INVALID_ARG", nsp_status_string(st));
    }
    a2a = NULL;
    *checks += 6;
    rc = 0;
out:
    if (rc != 0) {
        nsp_a2a_destroy(a2a);
    }
    xbufs_free(&b);
    nsp_layout_free(lay);
    return rc;
}

/* ---- the threads case: one world per thread ------------------------------ */

/* One s2h from a mapped region of `comm` (mapped = 1) against the
 * reference; the region is freed after. Counts what this world read in
 * place or fell back (nsp_a2a_mapped_counts: its own, not the other
 * thread's world's) and that the process holds a live region meanwhile. */
static int mapped_trip(nsp_comm_t *comm, nsp_tree_t *tree, const nsp_plan_t *plan, int rank,
                       int heads, int *checks)
{
    nsp_layout_t     *lay = NULL;
    nsp_layout_info_t info;
    nsp_a2a_params_t  p;
    nsp_request_t    *req[MAX_LEVEL];
    xbufs_t           b;
    void             *region = NULL;
    uint64_t          m0 = 0, f0 = 0, m1 = 0, f1 = 0;
    int               live = 0, rc = 1;

    memset(&b, 0, sizeof(b));
    if (nsp_layout_create(plan, 0, rank, &lay) != NSP_OK || nsp_layout_query(lay, &info) ||
        xbufs_init(&b, plan, rank, heads, 2, 2) != 0) {
        FAIL("setup: %s", nsp_last_error());
    }
    if (nsp_mem_alloc(comm, (size_t)b.T * (size_t)heads * b.row + 64, &region) != NSP_OK) {
        FAIL("nsp_mem_alloc: %s", nsp_last_error());
    }
    memcpy(region, b.seq, (size_t)b.T * (size_t)heads * b.row);
    nsp_tp_ucx_regions_live(&live);
    nsp_a2a_mapped_counts(comm, &m0, &f0);
    params_init(&p, NSP_A2A_SEQ_TO_HEAD, heads, 2, 2);
    p.field_mask = NSP_A2A_FIELD_MAPPED;
    p.mapped     = 1;
    p.src        = region;
    p.dst        = b.head;
    if (nsp_a2a_post(tree, lay, &p, req) != NSP_OK || wait_free(req, info.nlevels) != NSP_OK ||
        memcmp(b.head, b.ref, (size_t)b.rows * b.row) != 0) {
        FAIL("mapped s2h: %s", nsp_last_error());
    }
    nsp_a2a_mapped_counts(comm, &m1, &f1);
    if (live < 1 || m1 + f1 - m0 - f0 != (uint64_t)(info.nlevels - 1)) {
        FAIL("mapped s2h: %d live region(s), %llu levels read in place and %llu fell back "
             "of %d", live, (unsigned long long)(m1 - m0), (unsigned long long)(f1 - f0),
             info.nlevels - 1);
    }
    *checks += 1;
    rc = 0;
out:
    if (region != NULL && nsp_mem_free(comm, region) != NSP_OK) {
        mp_note("nsp_mem_free: %s", nsp_last_error());
        rc = 1;
    }
    xbufs_free(&b);
    nsp_layout_free(lay);
    return rc;
}

typedef struct thread_arg {
    nsp_unique_id_t id;
    int             rank, checks, rc;
    uint64_t        seed;
    char            why[256];
} thread_arg_t;

static void *thread_body(void *argp)
{
    thread_arg_t *t = argp;
    nsp_comm_t   *comm = NULL;
    nsp_tree_t   *tree = NULL;
    nsp_plan_t   *plan;
    int           heads;

    t->rc = 1;
    plan  = plan_for(NRANKS, t->seed, &heads);
    if (plan == NULL) {
        snprintf(t->why, sizeof(t->why), "no plan");
        return NULL;
    }
    if (mp_comm_tree(&t->id, t->rank, NRANKS, 60.0, 0, &comm, &tree) != 0) {
        snprintf(t->why, sizeof(t->why), "world: %s", nsp_last_error());
    } else if (round_trips(tree, plan, t->rank, heads, 2, 4, &t->checks) != 0) {
        snprintf(t->why, sizeof(t->why), "exchanges: %s", nsp_last_error());
    } else if (mapped_trip(comm, tree, plan, t->rank, heads, &t->checks) != 0) {
        snprintf(t->why, sizeof(t->why), "mapped exchange: %s", nsp_last_error());
    } else {
        t->rc = 0;
    }
    mp_comm_tree_free(comm, tree);
    nsp_plan_free(plan);
    return NULL;
}

static int case_threads(const worlds_case_t *wc, int rank)
{
    thread_arg_t t[2];
    pthread_t    th[2];

    memset(t, 0, sizeof(t));
    for (int k = 0; k < 2; ++k) {
        t[k].rank = rank;
        t[k].seed = 11 + (uint64_t)k;
        if (shared_id(wc->shared, k == 0 ? ID_C : ID_D, rank, &t[k].id) != 0) {
            return 1;
        }
    }
    for (int k = 0; k < 2; ++k) {
        if (pthread_create(&th[k], NULL, thread_body, &t[k]) != 0) {
            mp_note("pthread_create failed");
            return 1;
        }
    }
    for (int k = 0; k < 2; ++k) {
        pthread_join(th[k], NULL);
    }
    for (int k = 0; k < 2; ++k) {
        if (t[k].rc != 0 || t[k].checks != 10) {
            mp_note("thread %d: %s (%d checks)", k, t[k].why, t[k].checks);
            return 1;
        }
    }
    mp_set_value(0, t[0].checks + t[1].checks);
    return 0;
}

/* ---- the two-worlds and persistent cases --------------------------------- */

static int case_two_worlds(const worlds_case_t *wc, int rank, nsp_tree_t *tree_a,
                           const nsp_plan_t *plan_a, int heads, int *checks)
{
    nsp_unique_id_t idb;
    nsp_comm_t     *comm_b = NULL;
    nsp_tree_t     *tree_b = NULL;
    nsp_plan_t     *plan_b = NULL;
    int             heads_b, rc = 1;

    if (rank < 2) { /* ranks 0-1: exchanges on B first, A's count unchanged */
        if (shared_id(wc->shared, ID_B, rank, &idb) != 0) {
            return 1;
        }
        plan_b = plan_for(2, 7, &heads_b);
        if (plan_b == NULL || mp_comm_tree(&idb, rank, 2, 60.0, 0, &comm_b, &tree_b) != 0) {
            FAIL("world B: %s", nsp_last_error());
        }
        if (round_trips(tree_b, plan_b, rank, heads_b, 3, 2, checks) != 0) {
            goto out;
        }
    }
    if (round_trips(tree_a, plan_a, rank, heads, 2, 2, checks) != 0) {
        goto out;
    }
    rc = 0;
out:
    mp_comm_tree_free(comm_b, tree_b);
    nsp_plan_free(plan_b);
    return rc;
}

static int rank_main(int rank, int nranks, void *arg)
{
    const worlds_case_t *wc = arg;
    nsp_comm_t          *comm = NULL;
    nsp_tree_t          *tree = NULL;
    nsp_plan_t          *plan = NULL;
    int                  heads, checks = 0, rc = 1;

    if (wc->kind == CASE_THREADS) {
        return case_threads(wc, rank);
    }
    plan = plan_for(nranks, 5, &heads);
    if (plan == NULL || mp_comm_tree(&wc->id, rank, nranks, 60.0, 0, &comm, &tree) != 0) {
        FAIL("world A: %s", nsp_last_error());
    }
    if (wc->kind == CASE_PERSISTENT) {
        rc = round_trips(tree, plan, rank, heads, 2, 3, &checks) ||
             held_errors(tree, plan, rank, heads, &checks);
    } else {
        rc = case_two_worlds(wc, rank, tree, plan, heads, &checks);
    }
    mp_set_value(0, checks);
out:
    mp_comm_tree_free(comm, tree);
    nsp_plan_free(plan);
    return rc;
}

static void run_case(int kind, const char *what, int want_checks)
{
    worlds_case_t wc;
    mp_result_t   res;
    int           bad, ok_checks = 1;

    memset(&wc, 0, sizeof(wc));
    wc.kind   = kind;
    wc.shared = mp_shared_alloc(sizeof(*wc.shared));
    if (wc.shared == NULL) {
        tap_ok(0, "%s: shared memory", what);
        return;
    }
    memset(wc.shared, 0, sizeof(*wc.shared));
    bad = mp_run_uid(NRANKS, 120.0, rank_main, &wc, &wc.id, &res);
    for (int r = 0; r < NRANKS && bad == 0; ++r) {
        ok_checks &= (int)res.rank[r].value[0] >= want_checks;
    }
    tap_ok(bad == 0 && ok_checks, "%s (%d ranks, >= %d checks each)", what, NRANKS,
           want_checks);
    if (bad != 0) {
        mp_diag(&res);
    }
    mp_shared_free(wc.shared, sizeof(*wc.shared));
}

int main(void)
{
    run_case(CASE_PERSISTENT, "one handle started three times, and a held handle's errors",
             3 * 2 + 1 + 4);
    run_case(CASE_TWO_WORLDS, "two worlds in one process: exchanges on B do not shift A's",
             2 * 2 + 1);
    run_case(CASE_THREADS, "two threads, a world each, exchanging (plain and from mapped "
             "regions) at the same time", 20);
    return tap_done();
}

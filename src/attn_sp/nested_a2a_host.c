/*
 * The host engine of the nested all-to-all (nested_a2a_engine.h): host
 * memory over a host transport (UCX). Each start queues, per level, the
 * steps of src/streams/levels.h:
 *
 *   level 0:      [copy]                               (no traffic)
 *   level l > 0:  [start] -> [exchange] -> [finish]
 *     start     s2h: pack my chunks per peer and part, post the group's
 *                    alltoallv per part, copy my own block directly;
 *               h2s: pack (or send in place), post, copy my own block
 *     exchange  test the transport request(s) until the data landed
 *     finish    unpack (unless received in place)
 *
 * A level whose runs are long enough (nsp_a2a_iov_min) on a tree group
 * moves as runs instead: one part, the transport's alltoallv_iov_post from
 * the source buffer's runs straight into the destination's (pack.h
 * "Runs"), no pack and no unpack; the UCX backend copies each byte once
 * (a same-host peer's process_vm_readv).
 *
 * with [wait to be opened] first on gated handles, and [announce] ->
 * [copy from mapped peers, or pack and post] in place of [start] on levels
 * that may read mapped sources (nested_a2a_mapped.h). Parts (the small
 * sequences batched, each large one in place), their counts and the
 * scratch are derived at create; a start only binds and posts.
 */
#include "config.h"

#include "attn_sp/nested_a2a_engine.h"

#include "attn_sp/nested_a2a_common.h"
#include "attn_sp/nested_a2a_mapped.h"
#include "attn_sp/pack.h"
#include "attn_sp/replica_sum.h"
#include "common/log.h"
#include "transport/comm.h"
#include "transport/request.h"

#include <stdlib.h>
#include <string.h>

/* ---- what the host engine keeps per world --------------------------------- */

/* Pack and receive space is large and touched on every exchange; a world
 * keeps the space of destroyed exchanges (a few buffers, best fit), so
 * one-shot posts (nsp_a2a_post) do not page-fault on every call. A handle
 * holds its own space from create to destroy. */
#define A2A_POOL_MAX 8

typedef struct a2a_host_world {
    struct {
        void  *ptr;
        size_t cap;
    } pool[A2A_POOL_MAX];
    int      pool_n;
    uint64_t levels_mapped;    /* levels of mapped exchanges that read in place */
    uint64_t levels_fell_back; /* ... that fell back to the transport */
} a2a_host_world_t;

static void host_world_release(void *ptr)
{
    a2a_host_world_t *hw = ptr;

    for (int k = 0; k < hw->pool_n; ++k) {
        free(hw->pool[k].ptr);
    }
    free(hw);
}

/* The host engine's state of `world`, made on first use (NULL: no memory). */
static a2a_host_world_t *host_world(nsp_comm_t *world)
{
    nsp_comm_slot_t *slot = nsp_comm_slot(world, NSP_COMM_SLOT_A2A_HOST);

    if (slot->ptr == NULL) {
        slot->ptr     = calloc(1, sizeof(a2a_host_world_t));
        slot->release = host_world_release;
    }
    return slot->ptr;
}

static void *scratch_get(a2a_host_world_t *hw, size_t size, size_t *cap)
{
    int best = -1;

    size = size > 0 ? size : 1;
    for (int k = 0; k < hw->pool_n; ++k) {
        if (hw->pool[k].cap >= size && (best < 0 || hw->pool[k].cap < hw->pool[best].cap)) {
            best = k;
        }
    }
    if (best >= 0) {
        void *p = hw->pool[best].ptr;
        *cap    = hw->pool[best].cap;
        hw->pool[best] = hw->pool[--hw->pool_n];
        return p;
    }
    *cap = size;
    return malloc(size);
}

static void scratch_put(a2a_host_world_t *hw, void *ptr, size_t cap)
{
    int smallest = 0;

    if (ptr == NULL) {
        return;
    }
    if (hw->pool_n < A2A_POOL_MAX) {
        hw->pool[hw->pool_n].ptr   = ptr;
        hw->pool[hw->pool_n++].cap = cap;
        return;
    }
    for (int k = 1; k < hw->pool_n; ++k) {
        if (hw->pool[k].cap < hw->pool[smallest].cap) {
            smallest = k;
        }
    }
    if (hw->pool[smallest].cap < cap) { /* keep the larger buffers */
        free(hw->pool[smallest].ptr);
        hw->pool[smallest].ptr = ptr;
        hw->pool[smallest].cap = cap;
    } else {
        free(ptr);
    }
}

nsp_status_t nsp_a2a_mapped_counts(nsp_comm_t *world, uint64_t *mapped, uint64_t *fell_back)
{
    a2a_host_world_t *hw;

    if (world == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_mapped_counts: NULL world");
    }
    hw = host_world(world);
    if (hw == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nsp_a2a_mapped_counts: cannot allocate");
    }
    if (mapped != NULL) {
        *mapped = hw->levels_mapped;
    }
    if (fell_back != NULL) {
        *fell_back = hw->levels_fell_back;
    }
    return NSP_OK;
}

/* ---- the engine's state ------------------------------------------------------- */

/* Most direct parts per level (the tag has 8 bits for the part). */
#define A2A_MAX_DIRECT 128

typedef struct host_level {
    void             *send_scratch, *recv_scratch; /* the handle's, create to destroy */
    size_t            send_cap, recv_cap;
    nsp_a2a_mapped_t *map;  /* the mapped path, when the level may read mapped sources */
    int               iov;  /* 1: moves as runs (one part, no pack, no unpack) */
    nsp_pack_run_t   *sruns, *rruns;   /* runs as offsets into L->src / L->dst */
    size_t           *sfirst, *rfirst; /* [d + 1] each peer's first run */
    nsp_tp_iov_t     *siov, *riov;     /* the runs bound to a start's buffers */
} host_level_t;

typedef struct host_handle {
    a2a_host_world_t *hw;              /* the world's pool and counters */
    int               first_pass_done; /* level 0 copies after every level posted */
} host_handle_t;

static host_handle_t *host_of(const nsp_a2a_t *a)
{
    return a->eng;
}

static host_level_t *hlevel(const nsp_a2a_level_t *L)
{
    return L->eng;
}

/* ---- the steps ------------------------------------------------------------------ */

/* Gated handles: the level's first step waits until the caller opens it. */
static nsp_status_t step_gate(void *arg)
{
    return ((nsp_a2a_level_t *)arg)->open ? NSP_OK : NSP_INPROGRESS;
}

/* Level 0: a local copy of [T_0, H, D]; it waits for the first pass so the
 * exchanges of the other levels are posted before it. */
static nsp_status_t step_copy_level0(void *arg)
{
    nsp_a2a_level_t *L  = arg;
    nsp_a2a_t       *op = L->a2a;
    size_t           bytes = (size_t)L->lv.local_tokens * (size_t)op->heads * op->row_bytes;

    if (!host_of(op)->first_pass_done) {
        return NSP_INPROGRESS;
    }
    if (bytes > 0) {
        memcpy(op->dst, op->src, bytes); /* level 0 sits at offset 0 in both buffers */
    }
    return NSP_OK;
}

/* Post part `k` of level L (its own tag). */
static nsp_status_t part_post(nsp_a2a_level_t *L, int k)
{
    nsp_a2a_part_t *P = &L->parts[k];

    return nsp_a2a_tps_post(&L->tps, L->group, P->send, P->sb, P->sd, P->recv, P->rb, P->rd,
                            nsp_a2a_part_tag(L->a2a->post_seq, L->degree_id, k), NULL);
}

/* A level of runs: bind them to this start's buffers and post. */
static nsp_status_t runs_post(nsp_a2a_level_t *L)
{
    host_level_t          *H = hlevel(L);
    int                    d = L->lv.degree;
    /* s2h: the send runs (head slices of my tokens) are the scattered ones */
    nsp_tp_alltoallv_iov_t args = {H->siov, H->sfirst, H->riov, H->rfirst,
                                   L->a2a->dir == NSP_A2A_SEQ_TO_HEAD};
    nsp_a2a_tps_t         *t = &L->tps;

    for (size_t k = 0; k < H->sfirst[d]; ++k) {
        H->siov[k].buf = (char *)L->src + H->sruns[k].off; /* read only */
        H->siov[k].len = H->sruns[k].len;
    }
    for (size_t k = 0; k < H->rfirst[d]; ++k) {
        H->riov[k].buf = L->dst + H->rruns[k].off;
        H->riov[k].len = H->rruns[k].len;
    }
    NSP_CHECK(nsp_group_alltoallv_iov_post(L->group, &args,
                                           nsp_a2a_part_tag(L->a2a->post_seq, L->degree_id, 0),
                                           NULL, &t->reqs[t->n]));
    t->seen[t->n] = t->reqs[t->n]->progress;
    ++t->n;
    return NSP_OK;
}

/* Pack part P of level L (unless it leaves in place) and bind its buffers. */
static nsp_status_t part_pack(nsp_a2a_level_t *L, nsp_a2a_part_t *P)
{
    nsp_a2a_t    *op   = L->a2a;
    host_level_t *H    = hlevel(L);
    int           direct = P->seq >= 0;
    char         *send = (char *)H->send_scratch + P->send_off;

    if (op->dir == NSP_A2A_SEQ_TO_HEAD) {
        /* in place: the blocks land where the sequence sits in the block */
        P->recv = direct ? L->dst : (char *)H->recv_scratch + P->recv_off;
        P->send = send;
        return nsp_pack_s2h_sel(&L->view, P->sel, op->heads, op->row_bytes, L->src, send, P->sb,
                                P->sd);
    }
    /* in place: the blocks leave from where the sequence sits in the block */
    P->send = direct ? (const void *)L->src : (const void *)send;
    P->recv = (char *)H->recv_scratch + P->recv_off;
    if (direct) {
        return NSP_OK;
    }
    return nsp_pack_h2s_sel(&L->view, P->sel, op->heads, op->row_bytes, L->src, send, P->sb,
                            P->sd);
}

/* Level l > 0, first step: for every part, pack (unless it leaves in place)
 * and post; then copy my own block. */
static nsp_status_t step_start(void *arg)
{
    nsp_a2a_level_t *L  = arg;
    nsp_a2a_t       *op = L->a2a;
    int              idle;

    if (hlevel(L)->iov) {
        NSP_CHECK(runs_post(L));
    }
    for (int k = 0; k < L->nparts && !hlevel(L)->iov; ++k) {
        NSP_CHECK(part_pack(L, &L->parts[k]));
        NSP_CHECK(part_post(L, k));
    }
    NSP_CHECK(L->group->tp->ops->progress(L->group->tp, &idle));
    NSP_TRACE("a2a post %u level %d: %d part(s) packed and posted at %.6f", op->post_seq,
              L->level, L->nparts, nsp_now_s());
    if (op->dir == NSP_A2A_SEQ_TO_HEAD || L->self_first) {
        return nsp_pack_copy_self(&L->view, op->dir, op->heads, op->row_bytes, op->replicas,
                                  L->src, L->dst);
    }
    return NSP_OK;
}

/* Level l > 0 that may map, first step: announce this rank's source. */
static nsp_status_t step_announce(void *arg)
{
    nsp_a2a_level_t *L = arg;

    return nsp_a2a_mapped_announce(L, hlevel(L)->map);
}

/* Level l > 0 that may map, second step: copy from the mapped peers, or
 * fall back to packing and posting. */
static nsp_status_t step_decide(void *arg)
{
    nsp_a2a_level_t  *L  = arg;
    a2a_host_world_t *hw = host_of(L->a2a)->hw;
    int               fell_back = 0;
    nsp_status_t      status = nsp_a2a_mapped_decide(L, hlevel(L)->map, &fell_back);

    if (status != NSP_OK) {
        return status; /* still deciding, or failed */
    }
    if (fell_back) {
        ++hw->levels_fell_back;
        return step_start(L);
    }
    ++hw->levels_mapped;
    return NSP_OK;
}

/* Level l > 0, second step: wait for the transport (the parts, or a mapped
 * level's "done" messages). */
static nsp_status_t step_exchange(void *arg)
{
    nsp_a2a_level_t *L  = arg;
    nsp_a2a_t       *op = L->a2a;
    nsp_status_t     status = nsp_a2a_tps_test(&L->tps, &op->progress, &op->idle);
    nsp_status_t     ctl;

    if (status < 0) {
        return status;
    }
    ctl = hlevel(L)->map != NULL ? nsp_a2a_mapped_test(hlevel(L)->map, &op->progress, &op->idle)
                                 : NSP_OK;
    if (ctl != NSP_OK) {
        return ctl;
    }
    if (status == NSP_OK) {
        NSP_TRACE("a2a post %u level %d: exchanged at %.6f", op->post_seq, L->level,
                  nsp_now_s());
    }
    return status;
}

/* Level l > 0, last step: unpack what did not land in place. */
static nsp_status_t step_finish(void *arg)
{
    nsp_a2a_level_t *L  = arg;
    nsp_a2a_t       *op = L->a2a;
    nsp_status_t     status = NSP_OK;

    if (hlevel(L)->map != NULL && hlevel(L)->map->mapped) {
        return NSP_OK; /* every byte was copied in place by step_decide */
    }
    for (int k = 0; k < L->nparts && status == NSP_OK && !hlevel(L)->iov; ++k) {
        nsp_a2a_part_t *P = &L->parts[k];
        if (op->dir == NSP_A2A_SEQ_TO_HEAD) {
            if (P->seq < 0) {
                status = nsp_unpack_s2h_sel(&L->view, P->sel, op->heads, op->row_bytes,
                                            P->recv, P->rb, P->rd, L->dst);
            }
        } else {
            status = nsp_unpack_h2s_sel(&L->view, P->sel, op->heads, op->row_bytes,
                                        op->replicas, P->recv, P->rb, P->rd, L->dst);
        }
    }
    if (status == NSP_OK && op->dir == NSP_A2A_HEAD_TO_SEQ && !L->self_first) {
        status = nsp_pack_copy_self(&L->view, op->dir, op->heads, op->row_bytes, op->replicas,
                                    L->src, L->dst);
    }
    NSP_TRACE("a2a post %u level %d: unpacked at %.6f", op->post_seq, L->level, nsp_now_s());
    return status;
}

/* ---- derive: parts, scratch, the mapped path --------------------------------------- */

static int level_direct_parts(const nsp_a2a_level_t *L)
{
    int n = 0;

    for (int k = 0; k < L->nparts; ++k) {
        n += L->parts[k].seq >= 0;
    }
    return n;
}

/* Which sequences move in a part of their own (nsp_pack_seq_direct: every
 * rank of the group decides alike), into direct[n]; their number. */
static int level_pick_direct(const nsp_a2a_level_t *L, unsigned char *direct)
{
    const nsp_a2a_t *op = L->a2a;
    size_t           min_bytes = nsp_a2a_direct_min();
    int              ndirect = 0;

    for (int j = 0; j < L->view.nseqs; ++j) {
        direct[j] = ndirect < A2A_MAX_DIRECT &&
                    nsp_pack_seq_direct(&L->view, j, op->heads, op->row_bytes, min_bytes);
        ndirect += direct[j];
    }
    return ndirect;
}

/* The selections of L's parts: with one sequence (or none), one direct
 * part; otherwise one batched part for the small sequences (if any) and
 * one direct part per large sequence. */
static void level_select_parts(nsp_a2a_level_t *L, const unsigned char *direct, int nsmall)
{
    int n = L->view.nseqs, k = 0;

    if (n <= 1) {                       /* the whole level in place */
        L->parts[0].sel = NULL;
        L->parts[0].seq = n == 1 ? 0 : -1;
        return;
    }
    if (nsmall > 0) {                   /* part 0: the small sequences, batched */
        for (int j = 0; j < n; ++j) {
            L->parts[0].sel[j] = !direct[j];
        }
        k = 1;
    }
    for (int j = 0; j < n; ++j) {       /* then each large sequence alone */
        if (direct[j]) {
            L->parts[k].sel[j] = 1;
            L->parts[k++].seq  = j;
        }
    }
}

/* Counts, in-place displacements and scratch offsets of L's parts:
 * scratch holds what is packed (s2h: every part; h2s: batched parts) and
 * what is received outside the block (s2h: batched; h2s: every part). */
static nsp_status_t level_count_parts(nsp_a2a_level_t *L)
{
    int s2h = L->a2a->dir == NSP_A2A_SEQ_TO_HEAD, d = L->lv.degree;

    for (int p = 0; p < L->nparts; ++p) {
        nsp_a2a_part_t *P = &L->parts[p];
        NSP_CHECK(nsp_a2a_part_counts(L, P));
        if (s2h || P->seq < 0) {
            P->send_off = L->send_total;
            L->send_total += nsp_a2a_sum(P->sb, d);
        }
        if (!s2h || P->seq < 0) {
            P->recv_off = L->recv_total;
            L->recv_total += nsp_a2a_sum(P->rb, d);
        }
    }
    return NSP_OK;
}

/* Does level L move as runs? Decided from what every rank of the group
 * shares (the carrier, direction, replicas, heads, degree, row_bytes and
 * the agreed threshold), so all decide alike. Summed replicas need the
 * receiver to add, which runs cannot. */
static int level_uses_runs(const nsp_a2a_level_t *L)
{
    const nsp_a2a_t *op  = L->a2a;
    size_t           run = nsp_pack_run_min(&L->view, op->heads, op->row_bytes);

    return L->group->level >= 0 &&
           !(op->dir == NSP_A2A_HEAD_TO_SEQ && nsp_rs_sums((int32_t)op->replicas)) &&
           run > 0 && run >= nsp_a2a_iov_min();
}

/* Level L as runs: one part of every sequence (its counts), the runs of
 * both sides (send: L->src, receive: L->dst) and room to bind them. */
static nsp_status_t level_make_runs(nsp_a2a_level_t *L)
{
    host_level_t   *H   = hlevel(L);
    const nsp_a2a_t *op = L->a2a;
    nsp_a2a_part_t *P;
    size_t          max = nsp_pack_runs_max(&L->view) + 1, d = (size_t)L->lv.degree;
    int             s2h = op->dir == NSP_A2A_SEQ_TO_HEAD;

    NSP_CHECK(nsp_a2a_parts_alloc(L, 1));
    P      = &L->parts[0];
    P->sel = NULL;
    H->sruns  = calloc(max, sizeof(*H->sruns));
    H->rruns  = calloc(max, sizeof(*H->rruns));
    H->sfirst = calloc(d + 1, sizeof(size_t));
    H->rfirst = calloc(d + 1, sizeof(size_t));
    H->siov   = calloc(max, sizeof(*H->siov));
    H->riov   = calloc(max, sizeof(*H->riov));
    if (H->sruns == NULL || H->rruns == NULL || H->sfirst == NULL || H->rfirst == NULL ||
        H->siov == NULL || H->riov == NULL || nsp_a2a_tps_alloc(&L->tps, 1) != NSP_OK) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate the %zu runs "
                         "of level %d", max, L->level);
    }
    NSP_CHECK(nsp_a2a_part_counts(L, P));
    if (s2h) { /* my chunks' head slices out, whole chunks into my block */
        NSP_CHECK(nsp_pack_runs_chunks(&L->view, NULL, op->heads, op->row_bytes, P->sb,
                                       H->sruns, H->sfirst));
        return nsp_pack_runs_block(&L->view, NULL, op->heads, op->row_bytes, P->rb, H->rruns,
                                   H->rfirst);
    }
    NSP_CHECK(nsp_pack_runs_block(&L->view, NULL, op->heads, op->row_bytes, P->sb, H->sruns,
                                  H->sfirst));
    return nsp_pack_runs_chunks(&L->view, NULL, op->heads, op->row_bytes, P->rb, H->rruns,
                                H->rfirst);
}

/* Split level L into parts (nsp_pack_seq_direct) with their counts. */
static nsp_status_t level_make_parts(nsp_a2a_level_t *L)
{
    int            n = L->view.nseqs, ndirect, nsmall;
    unsigned char *direct = calloc((size_t)n + 1, 1);
    nsp_status_t   status;

    if (direct == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate the parts of "
                         "level %d (%d sequences)", L->level, n);
    }
    ndirect = level_pick_direct(L, direct);
    nsmall  = n - ndirect;
    NSP_CHECK_GOTO(nsp_a2a_parts_alloc(L, n <= 1 ? 1 : ndirect + (nsmall > 0)), status,
                   out_free);
    /* the group's requests per part: 1 on a tree group, at most d over the world */
    if (nsp_a2a_tps_alloc(&L->tps, (size_t)L->nparts *
                                       (size_t)nsp_group_alltoallv_max_reqs(L->group)) != NSP_OK) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate the requests "
                           "of level %d", L->level);
        goto out_free;
    }
    level_select_parts(L, direct, nsmall);
    status = level_count_parts(L);
out_free:
    free(direct);
    return status;
}

/* Level l > 0: parts, the mapped path, scratch (owned by the handle from
 * here to destroy). */
static nsp_status_t level_derive(nsp_a2a_t *a, nsp_a2a_level_t *L)
{
    host_level_t *H = hlevel(L);
    int           d = L->lv.degree;

    H->iov = level_uses_runs(L);
    NSP_CHECK(H->iov ? level_make_runs(L) : level_make_parts(L));
    NSP_DEBUG("nested all-to-all %s: level %d degree %d (group %d..%d, %s), %d seqs in %d "
              "part(s) (%d in place%s), sends %zu B, receives %zu B",
              a->dir == NSP_A2A_SEQ_TO_HEAD ? "s2h" : "h2s", L->level, d, L->lv.rank0,
              L->lv.rank0 + d - 1, L->group->level < 0 ? "pairwise over the world" : "tree group",
              L->lv.nseqs, L->nparts, level_direct_parts(L), H->iov ? ", as runs" : "",
              nsp_a2a_level_bytes(L, 0), nsp_a2a_level_bytes(L, 1));
    NSP_CHECK(nsp_a2a_mapped_setup(L, &H->map));
    H->send_scratch = scratch_get(host_of(a)->hw, L->send_total, &H->send_cap);
    H->recv_scratch = scratch_get(host_of(a)->hw, L->recv_total, &H->recv_cap);
    if (H->send_scratch == NULL || H->recv_scratch == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate %zu + %zu "
                         "bytes of pack space for level %d (degree %d)", L->send_total,
                         L->recv_total, L->level, d);
    }
    return NSP_OK;
}

/* ---- the engine ---------------------------------------------------------------- */

static nsp_status_t host_check(const nsp_a2a_t *a, const nsp_layout_t *layout)
{
    (void)layout; /* every level runs on the host */
    if (a->world->ops->mem_type != NSP_MEM_HOST) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested all-to-all: the '%s' backend moves "
                         "device memory, and the host engine packs host memory only; use the "
                         "UCX backend with host buffers", a->world->ops->name);
    }
    return NSP_OK;
}

static nsp_status_t host_derive(nsp_a2a_t *a)
{
    host_handle_t *h = calloc(1, sizeof(*h));

    a->eng = h;
    if (h == NULL || (h->hw = host_world(a->comm)) == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate");
    }
    /* steps of a level: [open,] pack and post (or announce, then copy or
     * pack and post, when mapped), exchange, unpack */
    a->max_steps = 3 + a->gated + a->prep.mapped;
    for (int l = 0; l < a->nlevels; ++l) {
        nsp_a2a_level_t *L = &a->levels[l];
        L->eng = calloc(1, sizeof(host_level_t));
        if (L->eng == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate level %d",
                             l);
        }
        if (l > 0) {
            NSP_CHECK(level_derive(a, L));
        }
    }
    return NSP_OK;
}

/* Level l's steps of this start. */
static nsp_status_t level_arm(nsp_a2a_t *a, nsp_a2a_level_t *L)
{
    nsp_levels_t *q = a->queues;
    int           l = L->level;

    if (a->gated) {
        NSP_CHECK(nsp_levels_push(q, l, step_gate, L, "wait to be opened"));
    }
    if (l == 0) {
        return nsp_levels_push(q, 0, step_copy_level0, L, "copy level 0");
    }
    if (hlevel(L)->map != NULL) {
        nsp_a2a_mapped_arm(L, hlevel(L)->map);
        NSP_CHECK(nsp_levels_push(q, l, step_announce, L, "announce mapped source"));
        NSP_CHECK(nsp_levels_push(q, l, step_decide, L,
                                  "copy from mapped peers, or pack and post"));
    } else {
        NSP_CHECK(nsp_levels_push(q, l, step_start, L, "pack and post"));
    }
    NSP_CHECK(nsp_levels_push(q, l, step_exchange, L, "exchange"));
    return nsp_levels_push(q, l, step_finish, L, "unpack");
}

static nsp_status_t host_start(nsp_a2a_t *a)
{
    if (a->stream != NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested all-to-all: a CUDA stream was given but "
                         "this is the host path (UCX, host memory); pass stream = NULL");
    }
    host_of(a)->first_pass_done = 0;
    for (int l = 0; l < a->nlevels; ++l) {
        NSP_CHECK(level_arm(a, &a->levels[l]));
    }
    /* First pass: every level packs and posts (ascending); level 0's copy
     * waits for the second pass, so the exchanges are already under way. */
    NSP_CHECK(nsp_levels_progress(a->queues, NULL));
    host_of(a)->first_pass_done = 1;
    return nsp_levels_progress(a->queues, NULL);
}

/* Opening needs nothing more here: the gate step sees the flag. */
static nsp_status_t host_open(nsp_a2a_t *a, int level)
{
    (void)a;
    (void)level;
    return NSP_OK;
}

static void host_disarm(nsp_a2a_t *a)
{
    for (int l = 0; l < a->nlevels; ++l) {
        host_level_t *H = hlevel(&a->levels[l]);
        if (H != NULL && H->map != NULL) {
            nsp_a2a_mapped_disarm(H->map);
        }
    }
}

static void host_release(nsp_a2a_t *a)
{
    host_handle_t *h = host_of(a);

    for (int l = 0; l < a->nlevels; ++l) {
        host_level_t *H = hlevel(&a->levels[l]);
        if (H == NULL) {
            continue;
        }
        nsp_a2a_mapped_free(H->map);
        free(H->sruns);
        free(H->rruns);
        free(H->sfirst);
        free(H->rfirst);
        free(H->siov);
        free(H->riov);
        if (h != NULL && h->hw != NULL) {
            scratch_put(h->hw, H->send_scratch, H->send_cap);
            scratch_put(h->hw, H->recv_scratch, H->recv_cap);
        } else {
            free(H->send_scratch);
            free(H->recv_scratch);
        }
        free(H);
        a->levels[l].eng = NULL;
    }
    free(h);
    a->eng = NULL;
}

const nsp_a2a_engine_t nsp_a2a_engine_host = {
    .name    = "host",
    .check   = host_check,
    .derive  = host_derive,
    .start   = host_start,
    .open    = host_open,
    .disarm  = host_disarm,
    .release = host_release,
};

/*
 * The nested all-to-all on the GPU (nested_a2a_cuda.h): CUDA pack kernels
 * (pack_cuda.h), one stream per level (src/streams/streams_cuda.h), the
 * tree's transport (NCCL) on those streams, and the host level queues of
 * src/streams/levels.h for completion. The layout and count logic is the
 * host path's (nested_a2a.c): the same nsp_pack_counts(), the same tags,
 * the same in-place cases, the same agreement check.
 */
#include "config.h"

#include "attn_sp/nested_a2a_cuda.h"

#include "attn_sp/layout.h"
#include "attn_sp/nested_a2a.h"
#include "attn_sp/nested_a2a_common.h"
#include "attn_sp/nested_a2a_engine.h"
#include "attn_sp/pack.h"
#include "attn_sp/pack_cuda.h"
#include "common/log.h"
#include "nested_groups/tree.h"
#include "streams/cuda_util.h"
#include "streams/levels.h"
#include "streams/streams_cuda.h"
#include "transport/comm.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CA_WHAT      "nested all-to-all (cuda)"
#define CA_CACHE_MAX 8 /* layouts whose device tables are kept */

/* ---- state a world keeps between exchanges --------------------------------- */

typedef struct ca_entry {
    int               used;
    uint64_t          plan_hash;
    int               rank, round, nlevels;
    nsp_cuda_level_t *levels[NSP_TREE_MAX_LEVELS]; /* NULL for level 0 */
    int               live;                        /* operations using it */
    uint64_t          last_use;
} ca_entry_t;

/* Level streams, the scratch pool and the device tables of recent layouts,
 * per world (slot NSP_COMM_SLOT_A2A_CUDA; freed by nsp_comm_destroy). */
typedef struct ca_world {
    int                 device;    /* -1: nothing created yet */
    nsp_cuda_streams_t *streams;   /* NSP_TREE_MAX_LEVELS level streams */
    cudaMemPool_t       pool;      /* scratch, stream-ordered */
    int                 have_pool;
    ca_entry_t          cache[CA_CACHE_MAX];
    uint64_t            clock;
    int                 ops_live;  /* operations and handles using the tables */
} ca_world_t;

static void ca_entry_release(ca_world_t *ca, ca_entry_t *e)
{
    for (int l = 0; l < e->nlevels; ++l) {
        /* In stream order after the last kernels of that level. */
        nsp_cuda_level_release(e->levels[l], nsp_cuda_streams_get(ca->streams, l));
        e->levels[l] = NULL;
    }
    e->used = 0;
}

/* Free the tables, the pool and the streams (nothing may be in flight). */
static void ca_world_clear(ca_world_t *ca)
{
    for (int k = 0; k < CA_CACHE_MAX; ++k) {
        if (ca->cache[k].used) {
            ca_entry_release(ca, &ca->cache[k]);
        }
    }
    if (ca->have_pool) {
        cudaMemPoolDestroy(ca->pool); /* released once its frees completed */
        ca->have_pool = 0;
    }
    nsp_cuda_streams_free(ca->streams);
    ca->streams = NULL;
    ca->device  = -1;
}

static void ca_world_release(void *ptr)
{
    ca_world_clear(ptr);
    free(ptr);
}

/* The CUDA engine's state of `world`, made on first use. */
static nsp_status_t ca_world(nsp_comm_t *world, ca_world_t **out)
{
    nsp_comm_slot_t *slot = nsp_comm_slot(world, NSP_COMM_SLOT_A2A_CUDA);
    ca_world_t      *ca   = slot->ptr;

    if (ca == NULL) {
        ca = calloc(1, sizeof(*ca));
        if (ca == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", CA_WHAT);
        }
        ca->device    = -1;
        slot->ptr     = ca;
        slot->release = ca_world_release;
    }
    *out = ca;
    return NSP_OK;
}

/* Streams and the scratch pool on the current device (recreated if the
 * caller moved to another device with nothing in flight). */
static nsp_status_t ca_setup(ca_world_t *ca)
{
    int              dev = 0;
    struct cudaMemPoolProps props;
    uint64_t         keep = UINT64_MAX;
    nsp_status_t     status;

    NSP_CUDA_CHECK(cudaGetDevice(&dev), CA_WHAT);
    if (ca->device == dev) {
        return NSP_OK;
    }
    if (ca->device >= 0) {
        if (ca->ops_live > 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s: the current device changed from %d to "
                             "%d while %d exchanges use this world's tables", CA_WHAT,
                             ca->device, dev, ca->ops_live);
        }
        ca_world_clear(ca);
    }
    NSP_CHECK(nsp_cuda_streams_create(NSP_TREE_MAX_LEVELS, dev, 1, &ca->streams));
    memset(&props, 0, sizeof(props));
    props.allocType     = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id   = dev;
    NSP_CUDA_GOTO(cudaMemPoolCreate(&ca->pool, &props), CA_WHAT, status, err_free_streams);
    /* Keep freed scratch for the next post instead of returning it. */
    NSP_CUDA_GOTO(cudaMemPoolSetAttribute(ca->pool, cudaMemPoolAttrReleaseThreshold, &keep),
                  CA_WHAT, status, err_destroy_pool);
    ca->have_pool = 1;
    ca->device    = dev;
    return NSP_OK;
err_destroy_pool:
    cudaMemPoolDestroy(ca->pool);
err_free_streams:
    nsp_cuda_streams_free(ca->streams);
    ca->streams = NULL;
    return status;
}

/* The device tables of a layout: cached, or uploaded now. */
static nsp_status_t ca_tables(ca_world_t *ca, const nsp_layout_t *layout, const nsp_layout_info_t *info,
                              ca_entry_t **out)
{
    ca_entry_t  *e = NULL, *lru = NULL;
    nsp_status_t status;

    for (int k = 0; k < CA_CACHE_MAX; ++k) {
        ca_entry_t *c = &ca->cache[k];
        if (c->used && c->plan_hash == info->plan_hash && c->rank == info->rank &&
            c->round == info->round && c->nlevels == info->nlevels) {
            e = c;
            goto found;
        }
        if (!c->used) {
            e = e != NULL ? e : c;
        } else if (c->live == 0 && (lru == NULL || c->last_use < lru->last_use)) {
            lru = c;
        }
    }
    if (e == NULL) {
        if (lru == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: %d layouts are in flight at once; free "
                             "some requests first", CA_WHAT, CA_CACHE_MAX);
        }
        ca_entry_release(ca, lru);
        e = lru;
    }
    memset(e, 0, sizeof(*e));
    e->plan_hash = info->plan_hash;
    e->rank      = info->rank;
    e->round     = info->round;
    e->nlevels   = info->nlevels;
    e->used      = 1;
    for (int l = 1; l < info->nlevels; ++l) {
        nsp_level_view_t view;
        NSP_CHECK_GOTO(nsp_layout_level_view(layout, l, &view), status, err_release);
        NSP_CHECK_GOTO(nsp_cuda_level_create(&view, &e->levels[l]), status, err_release);
    }
found:
    e->last_use = ++ca->clock;
    *out        = e;
    return NSP_OK;
err_release:
    ca_entry_release(ca, e);
    return status;
}

static void *ca_alloc(ca_world_t *ca, size_t bytes, cudaStream_t s, nsp_status_t *status)
{
    void       *p = NULL;
    cudaError_t e;

    if (bytes == 0) {
        return NULL;
    }
    e = cudaMallocFromPoolAsync(&p, bytes, ca->pool, s);
    if (e != cudaSuccess) {
        *status = nsp_cuda_status(e, CA_WHAT, "cudaMallocFromPoolAsync (scratch)");
        return NULL;
    }
    return p;
}

/* ---- the operation -------------------------------------------------------- */

typedef struct ca_op     ca_op_t;
typedef struct ca_handle ca_handle_t;

typedef struct ca_level {
    nsp_request_t           req;        /* FIRST: the public request of the level */
    ca_op_t                *op;
    int                     level;
    int                     freed;
    nsp_layout_level_t      lv;
    nsp_level_view_t        view;
    nsp_layout_heads_t      hs;
    nsp_cuda_level_t       *dev;        /* tables, from the cache */
    nsp_group_t            *group;      /* the level's group (the tree decides its carrier) */
    int                     in_place;
    int                     self_first;
    int                     open;       /* gated: the caller let this level start */
    size_t                 *sb, *sd, *rb, *rd;
    const char             *src;
    char                   *dst;
    cudaStream_t            stream;
    cudaEvent_t             done;       /* this post's work of the level ran */
    nsp_a2a_tps_t           tps;        /* transport requests in flight */
} ca_level_t;

struct ca_op {
    ca_world_t        *ca;         /* the world's streams, pool and tables */
    ca_handle_t       *handle;     /* gated: the handle whose open() reaches this op
                                      (NULL once either is gone) */
    int                gated;      /* levels are enqueued by open(), not by start */
    int                serial;
    void              *user_stream; /* the start's stream: open() forks from it */
    nsp_levels_t      *queues;
    nsp_tp_comm_t     *world;
    ca_entry_t        *entry;
    int                nlevels;
    int                live;
    int                idle;
    uint64_t           progress;
    nsp_a2a_dir_t      dir;
    int                heads;
    size_t             row_bytes;
    nsp_a2a_replicas_t replicas;
    uint32_t           post_seq;
    const char        *src;
    char              *dst;
    ca_level_t        *levels;
};

/* A CUDA exchange handle: what start needs to build one operation; the
 * device tables of its layout are held (not evicted) until destroy. */
struct ca_handle {
    nsp_a2a_t           base;    /* FIRST */
    nsp_tree_t         *tree;    /* borrowed until destroy */
    const nsp_layout_t *layout;  /* borrowed until destroy */
    nsp_a2a_params_t    params;  /* a copy; src, dst and stream come with each start */
    nsp_a2a_prep_t      prep;
    ca_world_t         *ca;
    ca_entry_t         *entry;   /* the layout's device tables */
    int                 gated;   /* every start waits for open() per level */
    ca_op_t            *running; /* gated: the latest start, while its requests live */
};

/* Unlink a gated op and its handle (whichever goes first). */
static void ca_handle_forget(ca_op_t *op)
{
    if (op->handle != NULL && op->handle->running == op) {
        op->handle->running = NULL;
    }
    op->handle = NULL;
}

static void ca_op_destroy(ca_op_t *op)
{
    for (int l = 0; l < op->nlevels && op->levels != NULL; ++l) {
        ca_level_t *L = &op->levels[l];
        nsp_a2a_tps_free(&L->tps); /* abandons (aborts) what is still running */
        free(L->sb);
        if (L->done != NULL) {
            cudaEventDestroy(L->done); /* safe while recorded work is pending */
        }
    }
    if (op->entry != NULL) {
        --op->entry->live;
    }
    ca_handle_forget(op);
    --op->ca->ops_live;
    nsp_levels_free(op->queues);
    free(op->levels);
    free(op);
}

/* Post the level's exchange on its stream (as the host path). */
static nsp_status_t ca_post_exchange(ca_level_t *L, const void *send, void *recv)
{
    return nsp_a2a_tps_post(&L->tps, L->group, send, L->sb, L->sd, recv, L->rb, L->rd,
                            nsp_a2a_tag(L->op->post_seq, L->lv.degree), L->stream);
}

/* Enqueue everything of level l > 0 on its stream. */
static nsp_status_t ca_enqueue_level(ca_level_t *L)
{
    ca_op_t     *op = L->op;
    int          d  = L->lv.degree;
    size_t       rbytes = op->row_bytes;
    nsp_status_t status = NSP_OK;
    char        *send_scratch = NULL, *recv_scratch = NULL;
    const void  *send;
    void        *recv;

    if (op->dir == NSP_A2A_SEQ_TO_HEAD) {
        send = send_scratch = ca_alloc(op->ca, nsp_a2a_sum(L->sb, d), L->stream, &status);
        recv = L->in_place ? (void *)L->dst
                           : (void *)(recv_scratch = ca_alloc(op->ca, nsp_a2a_sum(L->rb, d), L->stream,
                                                              &status));
        NSP_CHECK_GOTO(status, status, out_free);
        NSP_CHECK_GOTO(nsp_cuda_pack_s2h(L->dev, op->heads, rbytes, L->src, send_scratch, L->sb,
                                         L->sd, L->stream),
                       status, out_free);
        NSP_CHECK_GOTO(ca_post_exchange(L, send, recv), status, out_free);
        NSP_CHECK_GOTO(nsp_cuda_pack_copy_self(L->dev, op->dir, op->heads, rbytes, op->replicas,
                                               L->src, L->dst, L->stream),
                       status, out_free);
        if (!L->in_place) {
            NSP_CHECK_GOTO(nsp_cuda_unpack_s2h(L->dev, op->heads, rbytes, recv, L->rb, L->rd,
                                               L->dst, L->stream),
                           status, out_free);
        }
    } else {
        send = L->in_place ? (const void *)L->src
                           : (const void *)(send_scratch = ca_alloc(op->ca, nsp_a2a_sum(L->sb, d), L->stream,
                                                                    &status));
        recv = recv_scratch = ca_alloc(op->ca, nsp_a2a_sum(L->rb, d), L->stream, &status);
        NSP_CHECK_GOTO(status, status, out_free);
        if (!L->in_place) {
            NSP_CHECK_GOTO(nsp_cuda_pack_h2s(L->dev, op->heads, rbytes, L->src, send_scratch,
                                             L->sb, L->sd, L->stream),
                           status, out_free);
        }
        NSP_CHECK_GOTO(ca_post_exchange(L, send, recv), status, out_free);
        if (L->self_first) {
            NSP_CHECK_GOTO(nsp_cuda_pack_copy_self(L->dev, op->dir, op->heads, rbytes,
                                                   op->replicas, L->src, L->dst, L->stream),
                           status, out_free);
        }
        NSP_CHECK_GOTO(nsp_cuda_unpack_h2s(L->dev, op->heads, rbytes, op->replicas, recv, L->rb,
                                           L->rd, L->dst, L->stream),
                       status, out_free);
        if (!L->self_first) {
            NSP_CHECK_GOTO(nsp_cuda_pack_copy_self(L->dev, op->dir, op->heads, rbytes,
                                                   op->replicas, L->src, L->dst, L->stream),
                           status, out_free);
        }
    }
out_free:
    /* Stream-ordered: released after the kernels and NCCL that use them. */
    if (send_scratch != NULL) {
        cudaFreeAsync(send_scratch, L->stream);
    }
    if (recv_scratch != NULL) {
        cudaFreeAsync(recv_scratch, L->stream);
    }
    return status;
}

/* Step 1 of a level: its transport requests completed (errors, timeouts
 * and count mismatches are decided there). */
static nsp_status_t ca_step_exchange(void *arg)
{
    ca_level_t *L = arg;

    return nsp_a2a_tps_test(&L->tps, &L->op->progress, &L->op->idle);
}

/* Step 2 of a level (the only one of level 0): its device work ran. */
static nsp_status_t ca_step_event(void *arg)
{
    ca_level_t *L = arg;
    cudaError_t e = cudaEventQuery(L->done);

    if (e == cudaSuccess) {
        return NSP_OK;
    }
    if (e == cudaErrorNotReady) {
        return NSP_INPROGRESS;
    }
    return nsp_cuda_status(e, CA_WHAT, "cudaEventQuery (a kernel of the level failed)");
}

static nsp_status_t ca_level_test(nsp_request_t *req)
{
    ca_level_t *L = (ca_level_t *)req;

    return nsp_a2a_queues_test(L->op->queues, L->level, &L->op->progress, &L->op->idle, req);
}

static void ca_level_describe(const nsp_request_t *req, char *buf, size_t len)
{
    const ca_level_t *L = (const ca_level_t *)req;

    snprintf(buf, len, "level %d (degree %d, group of ranks %d..%d, GPU) at step '%s'",
             L->level, L->lv.degree, L->lv.rank0, L->lv.rank0 + L->lv.degree - 1,
             nsp_levels_pending_step(L->op->queues, L->level));
}

static void ca_level_free(nsp_request_t *req)
{
    ca_level_t *L  = (ca_level_t *)req;
    ca_op_t    *op = L->op;

    if (L->freed) {
        return;
    }
    L->freed = 1;
    if (--op->live == 0) {
        ca_op_destroy(op);
    }
}

static const nsp_request_ops_t ca_level_req_ops = {
    .name             = "nested all-to-all (cuda)",
    .test             = ca_level_test,
    .describe_pending = ca_level_describe,
    .free             = ca_level_free,
};

/* ---- post ------------------------------------------------------------------ */

/* The all-to-all of this path runs whole Ulysses groups only. */
static nsp_status_t ca_check_levels(const nsp_layout_t *layout, const nsp_layout_info_t *info)
{
    if (info->nlevels > NSP_TREE_MAX_LEVELS) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %d levels (at most %d)", CA_WHAT,
                         info->nlevels, NSP_TREE_MAX_LEVELS);
    }
    for (int l = 1; l < info->nlevels; ++l) {
        nsp_layout_level_t lv;
        NSP_CHECK(nsp_layout_level(layout, l, &lv));
        if (lv.ring > 1) {
            return nsp_error(NSP_ERR_UNSUPPORTED, "%s: the group of degree %d at rank %d has "
                             "ring degree %d; the all-to-all runs Ulysses groups only",
                             CA_WHAT, lv.degree, lv.rank0, lv.ring);
        }
    }
    return NSP_OK;
}

/* Displacements of an in-place block: peer q's part starts at its chunk. */
static void ca_in_place_displs(const ca_level_t *L, size_t *displ)
{
    size_t tok_bytes = (size_t)L->hs.nheads * L->op->row_bytes;

    for (int q = 0; q < L->lv.degree; ++q) {
        int64_t start = 0, len = 0;
        if (L->lv.nseqs == 1) {
            nsp_chunk_of(L->lv.seq_len[0], L->lv.degree, q, &start, &len);
        }
        displ[q] = (size_t)start * tok_bytes;
    }
}

static nsp_status_t ca_level_setup(nsp_tree_t *tree, const nsp_layout_t *layout, ca_op_t *op,
                                   int l)
{
    ca_level_t *L = &op->levels[l];
    int         d;

    L->op     = op;
    L->level  = l;
    L->stream = (cudaStream_t)nsp_cuda_streams_get(op->ca->streams, l);
    nsp_request_init(&L->req, &ca_level_req_ops, op->world->timeout_s);
    NSP_CUDA_CHECK(cudaEventCreateWithFlags(&L->done, cudaEventDisableTiming), CA_WHAT);
    NSP_CHECK(nsp_layout_level(layout, l, &L->lv));
    NSP_CHECK(nsp_layout_level_view(layout, l, &L->view));
    NSP_CHECK(nsp_layout_heads(layout, l, op->heads, &L->hs));
    d = L->lv.degree;
    nsp_a2a_level_bufs(op->dir, op->src, op->dst, op->heads, op->row_bytes, &L->lv, &L->hs,
                       &L->src, &L->dst);
    if (l == 0) {
        return NSP_OK;
    }
    L->dev = op->entry->levels[l];
    NSP_CHECK(nsp_tree_group_get(tree, L->lv.rank0, L->lv.degree, &L->group));
    L->sb = calloc(4 * (size_t)d, sizeof(size_t));
    if (nsp_a2a_tps_alloc(&L->tps, (size_t)d) != NSP_OK || L->sb == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate level %d", CA_WHAT, l);
    }
    L->sd = L->sb + d;
    L->rb = L->sd + d;
    L->rd = L->rb + d;
    NSP_CHECK(nsp_pack_counts(&L->view, op->dir, op->heads, op->row_bytes, op->replicas,
                              NSP_PACK_SKIP_SELF, L->sb, L->sd, L->rb, L->rd));
    NSP_CHECK(nsp_pack_self_is_first(&L->view, op->heads, &L->self_first));
    L->in_place = nsp_pack_block_is_contiguous(&L->view);
    if (L->in_place) {
        ca_in_place_displs(L, op->dir == NSP_A2A_SEQ_TO_HEAD ? L->rd : L->sd);
    }
    NSP_DEBUG("%s %s: level %d degree %d (group %d..%d, %s), %d seqs, sends %zu B, receives "
              "%zu B%s", CA_WHAT, op->dir == NSP_A2A_SEQ_TO_HEAD ? "s2h" : "h2s", l, d,
              L->lv.rank0, L->lv.rank0 + d - 1, L->group->level < 0 ? "pairwise over the world"
                                                             : "tree group",
              L->lv.nseqs, nsp_a2a_sum(L->sb, d), nsp_a2a_sum(L->rb, d), L->in_place ? ", in place" : "");
    return NSP_OK;
}

/* Gated posts: a level's first step waits until the caller opens it. */
static nsp_status_t ca_step_gate(void *arg)
{
    return ((ca_level_t *)arg)->open ? NSP_OK : NSP_INPROGRESS;
}

/* The steps of level l: [opened] -> [exchange done] (l > 0) -> [event fired]. */
static nsp_status_t ca_level_steps(ca_op_t *op, int l)
{
    ca_level_t *L = &op->levels[l];

    if (op->gated) {
        NSP_CHECK(nsp_levels_push(op->queues, l, ca_step_gate, L, "wait to be opened"));
    }
    if (l > 0) {
        NSP_CHECK(nsp_levels_push(op->queues, l, ca_step_exchange, L, "exchange"));
    }
    return nsp_levels_push(op->queues, l, ca_step_event, L, "device work of the level");
}

/*
 * Enqueue all of level l on its stream: it waits for `producer` (where the
 * source was written), in serial mode also for level l-1's stream; then the
 * level-0 copy or the pack, exchange and unpack; then its done event.
 */
static nsp_status_t ca_enqueue_level_all(ca_op_t *op, int l, void *producer)
{
    ca_level_t *L = &op->levels[l];

    NSP_CHECK(nsp_cuda_streams_fork(op->ca->streams, l, producer));
    if (op->serial && l > 0) {
        /* Level l starts when level l-1 ran (measures what pipelining buys). */
        NSP_CHECK(nsp_cuda_streams_fork(op->ca->streams, l, op->levels[l - 1].stream));
    }
    if (l == 0) {
        size_t bytes = (size_t)L->lv.local_tokens * (size_t)op->heads * op->row_bytes;
        if (bytes > 0) {
            /* Level 0 sits at offset 0 of both buffers. */
            NSP_CUDA_CHECK(cudaMemcpyAsync(op->dst, op->src, bytes, cudaMemcpyDeviceToDevice,
                                           L->stream),
                           CA_WHAT);
        }
    } else {
        NSP_CHECK(ca_enqueue_level(L));
    }
    NSP_CUDA_CHECK(cudaEventRecord(L->done, L->stream), CA_WHAT);
    return NSP_OK;
}

/* Enqueue every level, ascending (gated starts: none, open() does). */
static nsp_status_t ca_enqueue(ca_op_t *op, void *user_stream)
{
    for (int l = 0; l < op->nlevels && !op->gated; ++l) {
        NSP_CHECK(ca_enqueue_level_all(op, l, user_stream));
    }
    return NSP_OK;
}

/* ---- the engine ------------------------------------------------------------ */


static nsp_status_t ca_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                              const nsp_a2a_params_t *params, int gated, nsp_a2a_t **a2a)
{
    ca_handle_t *h = calloc(1, sizeof(*h));
    nsp_status_t status;

    if (h == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", CA_WHAT);
    }
    NSP_CHECK_GOTO(nsp_a2a_prepare(tree, layout, params, CA_WHAT, &h->prep), status, err_free);
    if (h->prep.mapped) {
        status = nsp_error(NSP_ERR_UNSUPPORTED, "%s: mapped = 1 reads peers' host memory from "
                           "nsp_mem_alloc (UCX backend); pass mapped = 0 with device buffers",
                           CA_WHAT);
        goto err_free;
    }
    NSP_CHECK_GOTO(ca_check_levels(layout, &h->prep.info), status, err_free);
    NSP_CHECK_GOTO(nsp_a2a_agree(&h->prep, params, "nested all-to-all"), status, err_free);
    NSP_CHECK_GOTO(ca_world(h->prep.world, &h->ca), status, err_free);
    NSP_CHECK_GOTO(ca_setup(h->ca), status, err_free);
    NSP_CHECK_GOTO(ca_tables(h->ca, layout, &h->prep.info, &h->entry), status, err_free);
    ++h->entry->live;
    ++h->ca->ops_live;
    h->base.engine  = &nsp_a2a_engine_cuda;
    h->base.nlevels = h->prep.info.nlevels;
    h->tree         = tree;
    h->layout       = layout;
    h->params       = *params;
    h->gated        = gated;
    *a2a            = &h->base;
    return NSP_OK;

err_free:
    free(h);
    return status;
}

static nsp_status_t ca_destroy(nsp_a2a_t *a2a)
{
    ca_handle_t *h = (ca_handle_t *)a2a;

    if (h->running != NULL) {
        h->running->handle = NULL; /* it runs on; open() can no longer reach it */
    }
    --h->entry->live;
    --h->ca->ops_live;
    free(h);
    return NSP_OK;
}

/* A new operation of handle h with its levels set up and their steps
 * queued (nothing enqueued on the GPU yet). */
static nsp_status_t ca_op_new(ca_handle_t *h, const void *src, void *dst, void *user_stream,
                              ca_op_t **out)
{
    const nsp_a2a_params_t *params  = &h->params;
    int                     nlevels = h->prep.info.nlevels;
    ca_op_t                *op      = calloc(1, sizeof(*op));
    nsp_status_t            status;

    if (op == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", CA_WHAT);
    }
    ++h->ca->ops_live;
    op->ca          = h->ca;
    op->world       = nsp_comm_tp(h->prep.world);
    op->nlevels     = nlevels;
    op->dir         = params->direction;
    op->heads       = params->heads;
    op->row_bytes   = (size_t)params->head_dim * params->elem_size;
    op->replicas    = h->prep.replicas;
    op->post_seq    = nsp_comm_seq(h->prep.world);
    op->src         = src;
    op->dst         = dst;
    op->gated       = h->gated;
    op->serial      = h->prep.serial;
    op->user_stream = user_stream;
    op->entry       = h->entry;
    ++op->entry->live;
    op->levels = calloc((size_t)nlevels, sizeof(*op->levels));
    if (op->levels == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate %d levels", CA_WHAT,
                           nlevels);
        goto err_destroy_op;
    }
    /* steps of a level: [opened,] [exchange,] [event] */
    NSP_CHECK_GOTO(nsp_levels_create(nlevels, 2 + op->gated,
                                     op->serial ? NSP_LEVELS_SERIAL : NSP_LEVELS_PIPELINED,
                                     &op->queues),
                   status, err_destroy_op);
    for (int l = 0; l < nlevels; ++l) {
        NSP_CHECK_GOTO(ca_level_setup(h->tree, h->layout, op, l), status, err_destroy_op);
        NSP_CHECK_GOTO(ca_level_steps(op, l), status, err_destroy_op);
    }
    *out = op;
    return NSP_OK;

err_destroy_op:
    ca_op_destroy(op);
    return status;
}

/* One operation of handle h (freed with its last request, apart from h). */
static nsp_status_t ca_start(nsp_a2a_t *a2a, const void *src, void *dst, void *user_stream,
                             nsp_request_t **reqs)
{
    ca_handle_t *h = (ca_handle_t *)a2a;
    ca_op_t     *op = NULL;
    nsp_status_t status;

    if (h->gated && a2a->oneshot) {
        /* nsp_a2a_level_open() takes host level requests only */
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s: nsp_a2a_post_gated on device memory: use "
                         "nsp_a2a_create_gated(), nsp_a2a_start() and nsp_a2a_open()",
                         CA_WHAT);
    }
    NSP_CHECK(nsp_a2a_check_bufs(&h->prep, src, dst, CA_WHAT));
    NSP_CHECK(ca_setup(h->ca));
    NSP_CHECK(ca_op_new(h, src, dst, user_stream, &op));
    NSP_CHECK_GOTO(ca_enqueue(op, user_stream), status, err_destroy_op);
    nsp_comm_seq_next(h->prep.world);
    op->live = op->nlevels;
    for (int l = 0; l < op->nlevels; ++l) {
        reqs[l] = &op->levels[l].req;
    }
    if (h->gated) {
        if (h->running != NULL) {
            ca_handle_forget(h->running); /* open() reaches the latest start only */
        }
        op->handle = h;
        h->running = op;
    }
    if (a2a->oneshot) {
        ca_destroy(a2a); /* the operation holds what it needs */
    }
    return NSP_OK;

err_destroy_op:
    ca_op_destroy(op);
    return status;
}

/*
 * Open level `level` of the running start of a gated handle: the level's
 * stream waits for the work queued so far on the start's stream (the
 * caller's kernels that wrote the level's source: the condition the sends
 * wait for, on the GPU), then the level's pack, exchange and unpack are
 * enqueued and its steps may complete. Opening twice is a no-op.
 */
static nsp_status_t ca_open(nsp_a2a_t *a2a, int level)
{
    ca_handle_t *h  = (ca_handle_t *)a2a;
    ca_op_t     *op = h->running;
    ca_level_t  *L;

    if (!h->gated || op == NULL || level < 0 || level >= op->nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: cannot open level %d (%d levels, %s)",
                         CA_WHAT, level, a2a->nlevels,
                         !h->gated ? "not a gated handle"
                                   : op == NULL ? "no start running" : "out of range");
    }
    L = &op->levels[level];
    if (L->open) {
        return NSP_OK;
    }
    NSP_CHECK(ca_enqueue_level_all(op, level, op->user_stream));
    L->open = 1;
    return nsp_levels_progress(op->queues, NULL);
}

const nsp_a2a_engine_t nsp_a2a_engine_cuda = {
    .name    = "cuda",
    .create  = ca_create,
    .start   = ca_start,
    .open    = ca_open,
    .destroy = ca_destroy,
};

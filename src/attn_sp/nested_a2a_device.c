/*
 * The device engine of the nested all-to-all (nested_a2a_engine.h): memory
 * of a device with streams, written against the memory type's device
 * operations (devops.h) and pack kernels (pack_ops.h) only, so the CUDA
 * memory type and any other device run the same ordering, gating and
 * completion. Per level l of a start, enqueued by start (or, on gated
 * handles, by nsp_a2a_open(a2a, l)) in ascending level order (the agreed
 * order of docs/design.md §4):
 *
 *   level stream l waits for the start's stream (where src was written;
 *   serial mode: also for level l-1's stream)
 *   [l == 0]  copy the level-0 block (devops memcpy_async)
 *   [l  > 0]  scratch from the world's pool -> pack kernel -> the level's
 *             exchange -> self-block kernel -> unpack kernel -> scratch back
 *   record the level's done event
 *
 * The exchange goes onto the level stream when the world's transport is
 * stream-ordered (NCCL: transport.h); over a host transport (UCX) the
 * level's "packed" event is recorded instead, and the host steps post the
 * exchange once it fired and enqueue the unpack once the exchange landed.
 * A level's request completes when its done event fired and its transport
 * requests did: then dst holds the level's block. Host steps per level
 * (src/streams/levels.h; [open] on gated handles):
 *
 *   stream-ordered transport   [open] -> [exchange] -> [device work]
 *   host transport             [open] -> [packed: post] -> [exchange] ->
 *                              [enqueue unpack] -> [device work]
 *
 * Everything but the buffers is derived at create: the parts (one per
 * level), counts and in-place cases, scratch sizes, the level's events,
 * its device tables. A world keeps the level streams, the scratch pool and
 * the device tables of recent layouts (key: plan hash, rank, round) for the
 * next handles, until nsp_comm_destroy().
 */
#include "config.h"

#include "attn_sp/nested_a2a_engine.h"

#include "attn_sp/memtype.h"
#include "attn_sp/nested_a2a_common.h"
#include "attn_sp/pack.h"
#include "common/log.h"
#include "streams/level_streams.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEV_WHAT      "nested all-to-all (device)"
#define DEV_CACHE_MAX 64 /* layouts whose device tables a world keeps (the demo holds every
                            round of 4 planners x 2 modes at once) */

/* ---- state a world keeps between exchanges --------------------------------- */

typedef struct dev_entry {
    int      used;
    uint64_t plan_hash;
    int      rank, round, nlevels;
    void    *levels[NSP_TREE_MAX_LEVELS]; /* pack tables (pack_ops.h); NULL for level 0 */
    int      live;                        /* handles using it */
    uint64_t last_use;
} dev_entry_t;

/* Level streams, the scratch pool and the device tables of recent layouts,
 * per world (slot NSP_COMM_SLOT_A2A_DEVICE; freed by nsp_comm_destroy),
 * all made by one memory type on one device. */
typedef struct dev_world {
    const nsp_memtype_t *mem;     /* whose devops and kernels made them; NULL: nothing yet */
    void                *ctx;     /* its device context (memtype device(); NULL on CUDA) */
    int                  device;
    nsp_dev_streams_t   *streams; /* NSP_TREE_MAX_LEVELS level streams */
    void                *pool;    /* scratch, stream-ordered */
    dev_entry_t          cache[DEV_CACHE_MAX];
    uint64_t             clock;
    int                  handles; /* handles using the tables */
} dev_world_t;

static void dev_entry_release(dev_world_t *dw, dev_entry_t *e)
{
    for (int l = 0; l < e->nlevels; ++l) {
        /* In stream order after the last kernels of that level. */
        dw->mem->pack->level_release(e->levels[l], nsp_dev_streams_get(dw->streams, l));
        e->levels[l] = NULL;
    }
    e->used = 0;
}

/* Free the tables, the pool and the streams (nothing may be in flight). */
static void dev_world_clear(dev_world_t *dw)
{
    if (dw->mem == NULL) {
        return;
    }
    for (int k = 0; k < DEV_CACHE_MAX; ++k) {
        if (dw->cache[k].used) {
            dev_entry_release(dw, &dw->cache[k]);
        }
    }
    dw->mem->devops->pool_destroy(dw->pool); /* released once its frees completed */
    dw->pool = NULL;
    nsp_dev_streams_free(dw->streams);
    dw->streams = NULL;
    dw->mem     = NULL;
}

static void dev_world_release(void *ptr)
{
    dev_world_clear(ptr);
    free(ptr);
}

/* The device engine's state of `world`, made on first use. */
static nsp_status_t dev_world(nsp_comm_t *world, dev_world_t **out)
{
    nsp_comm_slot_t *slot = nsp_comm_slot(world, NSP_COMM_SLOT_A2A_DEVICE);

    if (slot->ptr == NULL) {
        slot->ptr = calloc(1, sizeof(dev_world_t));
        if (slot->ptr == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", DEV_WHAT);
        }
        slot->release = dev_world_release;
    }
    *out = slot->ptr;
    return NSP_OK;
}

/* Streams and the scratch pool of `mem` on its current device of `world`
 * (made again when the caller moved to another device with no exchange
 * holding them). */
static nsp_status_t dev_setup(dev_world_t *dw, const nsp_memtype_t *mem, nsp_comm_t *world)
{
    const nsp_devops_t *ops = mem->devops;
    void               *ctx = NULL;
    int                 dev = 0;
    nsp_status_t        status;

    NSP_CHECK(mem->device(world, &ctx));
    NSP_CHECK(ops->device_current(ctx, &dev));
    if (dw->mem == mem && dw->device == dev && dw->ctx == ctx) {
        return NSP_OK;
    }
    if (dw->mem != NULL && dw->handles > 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: the current device changed from %d (%s) to "
                         "%d (%s) while %d exchanges use this world's tables", DEV_WHAT,
                         dw->device, dw->mem->name, dev, mem->name, dw->handles);
    }
    dev_world_clear(dw);
    NSP_CHECK(nsp_dev_streams_create(ops, ctx, NSP_TREE_MAX_LEVELS, 1, &dw->streams));
    NSP_CHECK_GOTO(ops->pool_create(ctx, dev, &dw->pool), status, err_free_streams);
    dw->mem    = mem;
    dw->ctx    = ctx;
    dw->device = dev;
    return NSP_OK;
err_free_streams:
    nsp_dev_streams_free(dw->streams);
    dw->streams = NULL;
    return status;
}

/* A free cache slot, or the least recently used one no handle holds. */
static nsp_status_t dev_entry_slot(dev_world_t *dw, dev_entry_t **out)
{
    dev_entry_t *e = NULL, *lru = NULL;

    for (int k = 0; k < DEV_CACHE_MAX && e == NULL; ++k) {
        dev_entry_t *c = &dw->cache[k];
        if (!c->used) {
            e = c;
        } else if (c->live == 0 && (lru == NULL || c->last_use < lru->last_use)) {
            lru = c;
        }
    }
    if (e == NULL) {
        if (lru == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: %d layouts are held at once; destroy "
                             "some exchanges first", DEV_WHAT, DEV_CACHE_MAX);
        }
        dev_entry_release(dw, lru);
        e = lru;
    }
    *out = e;
    return NSP_OK;
}

/* The device tables of the handle's layout: cached, or built now. */
static nsp_status_t dev_tables(dev_world_t *dw, const nsp_a2a_t *a, dev_entry_t **out)
{
    const nsp_layout_info_t *info = &a->prep.info;
    dev_entry_t             *e    = NULL;
    nsp_status_t             status;

    for (int k = 0; k < DEV_CACHE_MAX; ++k) {
        dev_entry_t *c = &dw->cache[k];
        if (c->used && c->plan_hash == info->plan_hash && c->rank == info->rank &&
            c->round == info->round && c->nlevels == info->nlevels) {
            e = c;
            goto found;
        }
    }
    NSP_CHECK(dev_entry_slot(dw, &e));
    memset(e, 0, sizeof(*e));
    e->plan_hash = info->plan_hash;
    e->rank      = info->rank;
    e->round     = info->round;
    e->nlevels   = info->nlevels;
    e->used      = 1;
    for (int l = 1; l < info->nlevels; ++l) {
        NSP_CHECK_GOTO(dw->mem->pack->level_create(&a->levels[l].view, &e->levels[l]), status,
                       err_release);
    }
found:
    e->last_use = ++dw->clock;
    *out        = e;
    return NSP_OK;
err_release:
    dev_entry_release(dw, e);
    return status;
}

/* ---- the engine's state ------------------------------------------------------ */

typedef struct dev_handle {
    dev_world_t *dw;
    dev_entry_t *entry;          /* the layout's device tables (held) */
    int          stream_ordered; /* the transport takes the exchange on the level stream */
} dev_handle_t;

typedef struct dev_level {
    void *tables;       /* the level's device tables (the entry's) */
    void *stream;       /* the world's level stream */
    void *done;         /* event: the start's work of the level ran */
    void *packed;       /* host transport: event after the pack */
    int   in_place;     /* one part that lands in (s2h) / leaves from (h2s) the block */
    void *send_scratch; /* this start's, from the world's pool */
    void *recv_scratch;
} dev_level_t;

static dev_handle_t *dev_of(const nsp_a2a_t *a)
{
    return a->eng;
}

static dev_level_t *dlevel(const nsp_a2a_level_t *L)
{
    return L->eng;
}

static const nsp_devops_t *dops(const nsp_a2a_t *a)
{
    return a->mem->devops;
}

/* ---- what a level enqueues ---------------------------------------------------- */

/* Scratch for the start: s2h sends from scratch and receives into it unless
 * in place; h2s the other way round. */
static nsp_status_t level_scratch(nsp_a2a_level_t *L)
{
    nsp_a2a_t   *a = L->a2a;
    dev_level_t *D = dlevel(L);
    int          s2h = a->dir == NSP_A2A_SEQ_TO_HEAD;
    void        *pool = dev_of(a)->dw->pool;

    if (L->send_total > 0 && (s2h || !D->in_place)) {
        NSP_CHECK(dops(a)->alloc_async(pool, &D->send_scratch, L->send_total, D->stream));
    }
    if (L->recv_total > 0 && (!s2h || !D->in_place)) {
        NSP_CHECK(dops(a)->alloc_async(pool, &D->recv_scratch, L->recv_total, D->stream));
    }
    return NSP_OK;
}

/* Give the start's scratch back, in stream order after what uses it. */
static void level_scratch_free(nsp_a2a_level_t *L)
{
    dev_level_t *D = dlevel(L);

    dops(L->a2a)->free_async(D->send_scratch, D->stream);
    dops(L->a2a)->free_async(D->recv_scratch, D->stream);
    D->send_scratch = NULL;
    D->recv_scratch = NULL;
}

/* Scratch, then the pack kernel (unless the blocks leave in place). */
static nsp_status_t level_enqueue_pack(nsp_a2a_level_t *L)
{
    nsp_a2a_t            *a  = L->a2a;
    dev_level_t          *D  = dlevel(L);
    const nsp_pack_ops_t *pk = a->mem->pack;
    nsp_a2a_part_t       *P  = &L->parts[0];

    NSP_CHECK(level_scratch(L));
    P->send = D->send_scratch;
    P->recv = D->recv_scratch;
    if (a->dir == NSP_A2A_SEQ_TO_HEAD) {
        P->recv = D->in_place ? (void *)L->dst : D->recv_scratch;
        return pk->pack_s2h(D->tables, a->heads, a->row_bytes, L->src, D->send_scratch, P->sb,
                            P->sd, D->stream);
    }
    if (D->in_place) {
        P->send = L->src;
        return NSP_OK;
    }
    return pk->pack_h2s(D->tables, a->heads, a->row_bytes, L->src, D->send_scratch, P->sb,
                        P->sd, D->stream);
}

/* Post the level's exchange: on the level stream (stream-ordered
 * transport) or from the host (stream NULL). */
static nsp_status_t level_post(nsp_a2a_level_t *L, void *stream)
{
    nsp_a2a_part_t *P = &L->parts[0];

    return nsp_a2a_tps_post(&L->tps, L->group, P->send, P->sb, P->sd, P->recv, P->rb, P->rd,
                            nsp_a2a_tag(L->a2a->post_seq, L->lv.degree), stream);
}

/* After the exchange: the self block and the unpack (h2s: the first
 * replica copies its own block before the peers' sums, the others after),
 * the scratch back, the done event. */
static nsp_status_t level_enqueue_tail(nsp_a2a_level_t *L)
{
    nsp_a2a_t            *a  = L->a2a;
    dev_level_t          *D  = dlevel(L);
    const nsp_pack_ops_t *pk = a->mem->pack;
    nsp_a2a_part_t       *P  = &L->parts[0];
    int                   s2h = a->dir == NSP_A2A_SEQ_TO_HEAD;

    if (s2h || L->self_first) {
        NSP_CHECK(pk->copy_self(D->tables, a->dir, a->heads, a->row_bytes, a->replicas, L->src,
                                L->dst, D->stream));
    }
    if (s2h && !D->in_place) {
        NSP_CHECK(pk->unpack_s2h(D->tables, a->heads, a->row_bytes, P->recv, P->rb, P->rd,
                                 L->dst, D->stream));
    }
    if (!s2h) {
        NSP_CHECK(pk->unpack_h2s(D->tables, a->heads, a->row_bytes, a->replicas, P->recv, P->rb,
                                 P->rd, L->dst, D->stream));
    }
    if (!s2h && !L->self_first) {
        NSP_CHECK(pk->copy_self(D->tables, a->dir, a->heads, a->row_bytes, a->replicas, L->src,
                                L->dst, D->stream));
    }
    level_scratch_free(L);
    return dops(a)->event_record(D->done, D->stream);
}

/* Level l > 0 on a stream-ordered transport: all of it now. */
static nsp_status_t level_enqueue_ordered(nsp_a2a_level_t *L)
{
    nsp_status_t status;

    NSP_CHECK_GOTO(level_enqueue_pack(L), status, err_free_scratch);
    NSP_CHECK_GOTO(level_post(L, dlevel(L)->stream), status, err_free_scratch);
    return level_enqueue_tail(L);
err_free_scratch:
    level_scratch_free(L);
    return status;
}

/*
 * Enqueue level L on its stream: it waits for `producer` (where the source
 * was written), in serial mode also for level l-1's stream; then the
 * level-0 copy, or the level's pack (and, stream-ordered, the rest).
 */
static nsp_status_t level_enqueue(nsp_a2a_t *a, nsp_a2a_level_t *L, void *producer)
{
    dev_level_t       *D = dlevel(L);
    nsp_dev_streams_t *s = dev_of(a)->dw->streams;
    int                l = L->level;

    NSP_CHECK(nsp_dev_streams_fork(s, l, producer));
    if (a->prep.serial && l > 0) {
        /* Level l starts when level l-1 ran (measures what pipelining buys). */
        NSP_CHECK(nsp_dev_streams_fork(s, l, dlevel(&a->levels[l - 1])->stream));
    }
    if (l == 0) {
        size_t bytes = (size_t)L->lv.local_tokens * (size_t)a->heads * a->row_bytes;
        if (bytes > 0) {
            /* Level 0 sits at offset 0 of both buffers. */
            NSP_CHECK(dops(a)->memcpy_async(a->dst, a->src, bytes, D->stream));
        }
        return dops(a)->event_record(D->done, D->stream);
    }
    if (dev_of(a)->stream_ordered) {
        return level_enqueue_ordered(L);
    }
    NSP_CHECK(level_enqueue_pack(L));
    return dops(a)->event_record(D->packed, D->stream);
}

/* ---- the host steps of a level ------------------------------------------------ */

/* Gated handles: the level waits until the caller opens it. */
static nsp_status_t step_gate(void *arg)
{
    return ((nsp_a2a_level_t *)arg)->open ? NSP_OK : NSP_INPROGRESS;
}

/* Host transport: once the pack ran, post the exchange from the host. */
static nsp_status_t step_post(void *arg)
{
    nsp_a2a_level_t *L = arg;
    nsp_status_t     status = dops(L->a2a)->event_query(dlevel(L)->packed);

    if (status != NSP_OK) {
        return status; /* still packing, or the pack failed */
    }
    return level_post(L, NULL);
}

/* The level's transport requests completed (errors, timeouts and count
 * mismatches are decided there). */
static nsp_status_t step_exchange(void *arg)
{
    nsp_a2a_level_t *L = arg;

    return nsp_a2a_tps_test(&L->tps, &L->a2a->progress, &L->a2a->idle);
}

/* Host transport: the data landed; enqueue the unpack. */
static nsp_status_t step_unpack(void *arg)
{
    return level_enqueue_tail(arg);
}

/* The level's device work ran (the only step of level 0 but the gate). */
static nsp_status_t step_event(void *arg)
{
    nsp_a2a_level_t *L = arg;

    return dops(L->a2a)->event_query(dlevel(L)->done);
}

static nsp_status_t level_steps(nsp_a2a_t *a, nsp_a2a_level_t *L)
{
    nsp_levels_t *q = a->queues;
    int           l = L->level;

    if (a->gated) {
        NSP_CHECK(nsp_levels_push(q, l, step_gate, L, "wait to be opened"));
    }
    if (l > 0 && !dev_of(a)->stream_ordered) {
        NSP_CHECK(nsp_levels_push(q, l, step_post, L, "pack on the device, then post"));
    }
    if (l > 0) {
        NSP_CHECK(nsp_levels_push(q, l, step_exchange, L, "exchange"));
    }
    if (l > 0 && !dev_of(a)->stream_ordered) {
        NSP_CHECK(nsp_levels_push(q, l, step_unpack, L, "enqueue the unpack"));
    }
    return nsp_levels_push(q, l, step_event, L, "device work of the level");
}

/* ---- derive -------------------------------------------------------------------- */

/* The all-to-all of this engine runs whole Ulysses groups only. */
static nsp_status_t dev_check(const nsp_a2a_t *a, const nsp_layout_t *layout)
{
    const nsp_layout_info_t *info = &a->prep.info;

    if (a->prep.mapped) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s: mapped = 1 reads peers' host memory from "
                         "nsp_mem_alloc (UCX backend); pass mapped = 0 with device buffers",
                         DEV_WHAT);
    }
    if (info->nlevels > NSP_TREE_MAX_LEVELS) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %d levels (at most %d)", DEV_WHAT,
                         info->nlevels, NSP_TREE_MAX_LEVELS);
    }
    for (int l = 1; l < info->nlevels; ++l) {
        nsp_layout_level_t lv;
        NSP_CHECK(nsp_layout_level(layout, l, &lv));
        if (lv.ring > 1) {
            return nsp_error(NSP_ERR_UNSUPPORTED, "%s: the group of degree %d at rank %d has "
                             "ring degree %d; the all-to-all runs Ulysses groups only",
                             DEV_WHAT, lv.degree, lv.rank0, lv.ring);
        }
    }
    return NSP_OK;
}

/* Level l > 0: one part for the whole level (in place when its block is
 * contiguous), its counts and scratch sizes, room for its requests. */
static nsp_status_t level_derive(nsp_a2a_t *a, nsp_a2a_level_t *L)
{
    dev_level_t    *D = dlevel(L);
    nsp_a2a_part_t *P;
    int             d = L->lv.degree;

    D->tables   = dev_of(a)->entry->levels[L->level];
    D->in_place = nsp_pack_block_is_contiguous(&L->view);
    NSP_CHECK(nsp_a2a_parts_alloc(L, 1));
    P      = &L->parts[0];
    P->sel = NULL;
    P->seq = L->view.nseqs == 1 ? 0 : -1;
    NSP_CHECK(nsp_a2a_part_counts(L, P));
    L->send_total = nsp_a2a_sum(P->sb, d);
    L->recv_total = nsp_a2a_sum(P->rb, d);
    if (nsp_a2a_tps_alloc(&L->tps, (size_t)nsp_group_alltoallv_max_reqs(L->group)) != NSP_OK) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate level %d", DEV_WHAT, L->level);
    }
    if (!dev_of(a)->stream_ordered) {
        NSP_CHECK(dops(a)->event_create(dev_of(a)->dw->ctx, &D->packed));
    }
    NSP_DEBUG("%s %s: level %d degree %d (group %d..%d, %s), %d seqs, sends %zu B, receives "
              "%zu B%s", DEV_WHAT, a->dir == NSP_A2A_SEQ_TO_HEAD ? "s2h" : "h2s", L->level, d,
              L->lv.rank0, L->lv.rank0 + d - 1,
              L->group->level < 0 ? "pairwise over the world" : "tree group", L->lv.nseqs,
              L->send_total, L->recv_total, D->in_place ? ", in place" : "");
    return NSP_OK;
}

static nsp_status_t dev_derive(nsp_a2a_t *a)
{
    dev_handle_t *h = calloc(1, sizeof(*h));

    a->eng = h;
    if (h == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", DEV_WHAT);
    }
    h->stream_ordered = a->world->ops->mem_type != NSP_MEM_HOST;
    /* steps of a level: [open,] [post,] [exchange,] [unpack,] [event] */
    a->max_steps = a->gated + (h->stream_ordered ? 2 : 4);
    NSP_CHECK(dev_world(a->comm, &h->dw));
    NSP_CHECK(dev_setup(h->dw, a->mem, a->comm));
    NSP_CHECK(dev_tables(h->dw, a, &h->entry));
    ++h->entry->live;
    ++h->dw->handles;
    for (int l = 0; l < a->nlevels; ++l) {
        nsp_a2a_level_t *L = &a->levels[l];
        dev_level_t     *D = calloc(1, sizeof(*D));
        L->eng             = D;
        if (D == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate level %d", DEV_WHAT, l);
        }
        D->stream = nsp_dev_streams_get(h->dw->streams, l);
        NSP_CHECK(dops(a)->event_create(h->dw->ctx, &D->done));
        if (l > 0) {
            NSP_CHECK(level_derive(a, L));
        }
    }
    return NSP_OK;
}

/* ---- start, open, disarm, release ---------------------------------------------- */

static nsp_status_t dev_start(nsp_a2a_t *a)
{
    dev_handle_t *h   = dev_of(a);
    int           dev = -1;

    if (a->gated && a->oneshot) {
        /* a one-shot gated post is opened through its host level requests */
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s: nsp_a2a_post_gated on device memory: use "
                         "nsp_a2a_create_gated(), nsp_a2a_start() and nsp_a2a_open()",
                         DEV_WHAT);
    }
    NSP_CHECK(dops(a)->device_current(h->dw->ctx, &dev));
    if (dev != h->dw->device) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: the current device is %d, but the exchange "
                         "was created on device %d", DEV_WHAT, dev, h->dw->device);
    }
    for (int l = 0; l < a->nlevels; ++l) {
        NSP_CHECK(level_steps(a, &a->levels[l]));
    }
    for (int l = 0; l < a->nlevels && !a->gated; ++l) {
        NSP_CHECK(level_enqueue(a, &a->levels[l], a->stream));
    }
    /* a host transport: post what is packed already */
    return h->stream_ordered ? NSP_OK : nsp_levels_progress(a->queues, NULL);
}

/*
 * Open level `level` of the running start of a gated handle: the level's
 * stream waits for the work queued so far on the start's stream (the
 * caller's kernels that wrote the level's source: the condition the sends
 * wait for, on the device), then the level is enqueued and its steps may
 * complete.
 */
static nsp_status_t dev_open(nsp_a2a_t *a, int level)
{
    return level_enqueue(a, &a->levels[level], a->stream);
}

/* A start abandoned before its unpacks were enqueued (host transport):
 * its scratch goes back after what was queued. */
static void dev_disarm(nsp_a2a_t *a)
{
    for (int l = 1; l < a->nlevels; ++l) {
        if (dlevel(&a->levels[l]) != NULL) {
            level_scratch_free(&a->levels[l]);
        }
    }
}

static void dev_release(nsp_a2a_t *a)
{
    dev_handle_t *h = dev_of(a);

    for (int l = 0; l < a->nlevels; ++l) {
        dev_level_t *D = dlevel(&a->levels[l]);
        if (D == NULL) {
            continue;
        }
        dops(a)->event_destroy(D->done); /* safe while recorded work is pending */
        dops(a)->event_destroy(D->packed);
        free(D);
        a->levels[l].eng = NULL;
    }
    if (h != NULL && h->entry != NULL) {
        --h->entry->live;
        --h->dw->handles;
    }
    free(h);
    a->eng = NULL;
}

const nsp_a2a_engine_t nsp_a2a_engine_device = {
    .name    = "device",
    .check   = dev_check,
    .derive  = dev_derive,
    .start   = dev_start,
    .open    = dev_open,
    .disarm  = dev_disarm,
    .release = dev_release,
};

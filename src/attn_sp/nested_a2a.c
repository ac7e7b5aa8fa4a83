/*
 * The nested variable-length all-to-all on the host (docs/design.md §6): per-level
 * step queues (src/streams), host pack/unpack (pack.c), and one transport
 * exchange per level of degree > 1. See nested_a2a.h for the steps.
 */
#include "config.h"

#include "attn_sp/nested_a2a.h"
#include "attn_sp/layout.h"
#include "attn_sp/nested_a2a_common.h"
#include "attn_sp/nested_a2a_engine.h"
#include "attn_sp/pack.h"
#include "common/log.h"
#include "nested_groups/tree.h"
#include "streams/levels.h"
#include "transport/comm.h"
#include "transport/request.h"

#include <pthread.h>
#include <stdio.h>
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

/* ---- pure helpers -------------------------------------------------------- */

uint32_t nsp_a2a_tag(uint32_t post_seq, int degree)
{
    return NSP_TP_TAG(NSP_TP_TAG_CLASS_A2A, ((post_seq & 0xfffu) << 12) | ((uint32_t)degree & 0xfffu));
}

/* The environment is configuration of the process, read once (any thread). */
static pthread_once_t direct_min_once = PTHREAD_ONCE_INIT;
static size_t         direct_min_bytes;

static void direct_min_read(void)
{
    const char *env = getenv("NSPCOMM_A2A_DIRECT_MIN");

    direct_min_bytes = NSP_PACK_DIRECT_MIN_BYTES;
    if (env != NULL && *env != '\0') {
        char              *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0' && v > 0) {
            direct_min_bytes = (size_t)v;
        } else {
            NSP_WARN("NSPCOMM_A2A_DIRECT_MIN=%s is not a positive byte count; using %zu",
                     env, direct_min_bytes);
        }
    }
}

size_t nsp_a2a_direct_min(void)
{
    pthread_once(&direct_min_once, direct_min_read);
    return direct_min_bytes;
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

uint32_t nsp_a2a_part_tag(uint32_t post_seq, int degree_id, int part)
{
    return NSP_TP_TAG(NSP_TP_TAG_CLASS_A2A, ((post_seq & 0x7ffu) << 13) |
                                                (((uint32_t)degree_id & 0x1fu) << 8) |
                                                ((uint32_t)part & 0xffu));
}

uint64_t nsp_a2a_check_hash(uint64_t plan_hash, nsp_a2a_dir_t dir, int heads, int head_dim,
                            size_t elem_size, nsp_a2a_replicas_t replicas, int mapped)
{
    int64_t v[7] = {(int64_t)dir, heads, head_dim, (int64_t)elem_size, (int64_t)replicas,
                    (int64_t)nsp_a2a_direct_min(), mapped};

    return nsp_fnv1a(plan_hash, v, sizeof(v));
}

nsp_status_t nsp_a2a_compare_hashes(const uint64_t *hashes, int nranks, const char *what)
{
    char list[160] = "";
    int  ndiff = 0, len = 0, first = -1;

    for (int r = 1; r < nranks; ++r) {
        if (hashes[r] == hashes[0]) {
            continue;
        }
        if (first < 0) {
            first = r;
        }
        if (ndiff < 8) {
            len += snprintf(list + len, sizeof(list) - (size_t)len, "%s%d", ndiff ? "," : "", r);
        }
        ++ndiff;
    }
    if (ndiff == 0) {
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_MISMATCH, "%s: %d rank(s) (%s%s) differ from rank 0 (hash "
                     "%016llx on rank %d vs %016llx on rank 0); every rank must build its "
                     "layout from the same plan and round and pass the same direction, heads, "
                     "head_dim, elem_size, replicas and mapped, after the same exchanges "
                     "on this world", what, ndiff, list,
                     ndiff > 8 ? ",..." : "", (unsigned long long)hashes[first], first,
                     (unsigned long long)hashes[0]);
}

/* ---- the operation ------------------------------------------------------- */

typedef struct a2a_op a2a_op_t;

/*
 * One exchange of a level. A level's sequences move in parts: the small ones
 * batched in one part (packed, and unpacked on arrival), and each large one
 * in a part of its own that lands in place in the head-sharded block (s2h)
 * or leaves from it (h2s), saving a copy (nsp_pack_seq_direct()).
 */
typedef struct a2a_part {
    unsigned char *sel;                 /* [nseqs] its sequences; NULL: all of them */
    int            seq;                 /* the one sequence of a direct part, else -1 */
    size_t        *sb, *sd, *rb, *rd;   /* [d] bytes and displacements */
    size_t         send_off, recv_off;  /* where its blocks start in the level's scratch */
    const void    *send;                /* what the transport reads */
    void          *recv;                /* what the transport writes */
} a2a_part_t;

/* Most direct parts per level (the tag has 8 bits for the part). */
#define A2A_MAX_DIRECT 128
/* Parts numbers of a mapped level's control messages (above any data part). */
#define A2A_PART_ANNOUNCE 254
#define A2A_PART_DONE     255

/*
 * What a rank tells each peer of a level that may read mapped sources
 * (nsp_mem_alloc): whether its level source lies in a mapped region, and
 * where. Sent as bytes between processes of one build.
 */
typedef struct a2a_desc {
    uint32_t ok;      /* 1: [offset, offset + bytes) of region `region` is the source */
    uint32_t region;  /* region id (nsp_tp_ops_t mem_find) */
    uint64_t offset;  /* bytes into the region */
    uint64_t bytes;   /* the level source's bytes (nsp_pack_src_bytes) */
} a2a_desc_t;

typedef struct a2a_level {
    nsp_request_t       req;          /* FIRST: the public request of this level */
    a2a_op_t           *op;
    int                 level;
    int                 freed;        /* the caller freed req */
    int                 open;         /* gated posts: the caller let this level start */
    int                 tag_degree;   /* the level's group degree: its tag (lv may hold the
                                         Ulysses subgroup of a ring level instead) */
    nsp_layout_level_t  lv;
    nsp_level_view_t    view;
    nsp_layout_heads_t  hs;
    nsp_group_t        *group;        /* the level's group (the tree's: it decides the
                                         communicator) */
    int                 degree_id;    /* tells levels apart in tags */
    int                 self_first;   /* h2s: copy my own block before the peers' */
    int                 nparts;
    a2a_part_t         *parts;        /* [nparts] */
    size_t             *counts;       /* [nparts][4][d], the parts' arrays */
    unsigned char      *sels;         /* [nparts][nseqs], the parts' selections */
    size_t              send_total, recv_total; /* scratch bytes needed */
    const char         *src;          /* s2h: chunks; h2s: block */
    char               *dst;          /* s2h: block;  h2s: chunks */
    void               *send_scratch, *recv_scratch;
    size_t              send_cap, recv_cap;
    nsp_a2a_tps_t       tps;          /* transport requests in flight */
    /* mapped sources (docs/a2a.md "Mapped sources"); only when `may_map` */
    int                 may_map;      /* the group shares a mapped region: announce */
    int                 mapped;       /* decided: every peer's source read directly */
    nsp_a2a_tps_t       ctl;          /* the announce, then the "done" messages */
    a2a_desc_t          mine;         /* what this rank announces */
    a2a_desc_t         *descs;        /* [d] what each index announced */
    unsigned char      *copied;       /* [d] index q's share already copied */
    int                 spec_off;     /* an announce said no: copy nothing more early */
    size_t             *ctl_counts;   /* [d] zeros: counts and displacements of "done" */
} a2a_level_t;

struct a2a_op {
    nsp_a2a_t           base;           /* FIRST: the public handle */
    nsp_comm_t         *comm;           /* the tree's world */
    a2a_host_world_t   *hw;             /* its host engine state */
    nsp_levels_t       *queues;         /* the running exchange's steps; NULL between */
    nsp_tp_comm_t      *world;
    int                 nlevels;
    int                 live;           /* level requests not yet freed */
    int                 first_pass_done;
    int                 gated;          /* levels wait for nsp_a2a_level_open() */
    int                 idle;           /* the last poll moved nothing */
    uint64_t            progress;       /* parts completed so far, all levels */
    nsp_a2a_dir_t       dir;
    int                 heads;
    size_t              row_bytes;      /* D * elem_size */
    nsp_a2a_replicas_t  replicas;
    uint32_t            post_seq;       /* the world's operation number of this start */
    size_t              direct_min;     /* nsp_a2a_direct_min() at post */
    int                 mapped;         /* params->mapped: levels may read mapped sources */
    int                 serial;         /* levels one after another */
    nsp_layout_info_t   info;           /* of the layout at create */
    int64_t             head_rows;      /* rows of the head-sharded block */
    const char         *src;
    char               *dst;
    a2a_level_t        *levels;         /* [nlevels] */
};

static void level_release_scratch(a2a_op_t *op, a2a_level_t *L)
{
    scratch_put(op->hw, L->send_scratch, L->send_cap);
    scratch_put(op->hw, L->recv_scratch, L->recv_cap);
    L->send_scratch = NULL;
    L->recv_scratch = NULL;
}

/* Free the transport requests of a run (abandoning what is still in
 * flight) and its step queues; the levels stay built for the next start. */
static void op_disarm(a2a_op_t *op)
{
    for (int l = 0; l < op->nlevels && op->levels != NULL; ++l) {
        a2a_level_t *L = &op->levels[l];
        nsp_a2a_tps_reset(&L->tps);
        nsp_a2a_tps_reset(&L->ctl);
    }
    nsp_levels_free(op->queues);
    op->queues = NULL;
}

static void op_destroy(a2a_op_t *op)
{
    op_disarm(op);
    for (int l = 0; l < op->nlevels && op->levels != NULL; ++l) {
        a2a_level_t *L = &op->levels[l];
        nsp_a2a_tps_free(&L->tps);
        nsp_a2a_tps_free(&L->ctl);
        free(L->descs);
        free(L->copied);
        free(L->ctl_counts);
        free(L->parts);
        free(L->counts);
        free(L->sels);
        level_release_scratch(op, L);
    }
    free(op->levels);
    free(op);
}

/* Gated posts: the level's first step waits until the caller opens it. */
static nsp_status_t step_gate(void *arg)
{
    return ((a2a_level_t *)arg)->open ? NSP_OK : NSP_INPROGRESS;
}

/* Level 0: a local copy of [T_0, H, D]; it waits for the first pass so the
 * exchanges of the other levels are posted before it. */
static nsp_status_t step_copy_level0(void *arg)
{
    a2a_level_t *L  = arg;
    a2a_op_t    *op = L->op;
    size_t       bytes = (size_t)L->lv.local_tokens * (size_t)op->heads * op->row_bytes;

    if (!op->first_pass_done) {
        return NSP_INPROGRESS;
    }
    if (bytes > 0) {
        memcpy(op->dst, op->src, bytes); /* level 0 sits at offset 0 in both buffers */
    }
    return NSP_OK;
}

/* Post part `k` of level L (its own tag). */
static nsp_status_t part_post(a2a_level_t *L, int k)
{
    a2a_part_t *P = &L->parts[k];

    return nsp_a2a_tps_post(&L->tps, L->group, P->send, P->sb, P->sd, P->recv, P->rb, P->rd,
                            nsp_a2a_part_tag(L->op->post_seq, L->degree_id, k), NULL);
}

/* Level l > 0, first step: for every part, pack (unless it leaves in place)
 * and post; then copy my own block. */
static nsp_status_t step_start(void *arg)
{
    a2a_level_t *L  = arg;
    a2a_op_t    *op = L->op;
    int          s2h = op->dir == NSP_A2A_SEQ_TO_HEAD, idle;

    for (int k = 0; k < L->nparts; ++k) {
        a2a_part_t *P = &L->parts[k];
        int         direct = P->seq >= 0;
        char       *send = (char *)L->send_scratch + P->send_off;
        if (s2h) {
            /* in place: the blocks land where the sequence sits in the block */
            P->recv = direct ? L->dst : (char *)L->recv_scratch + P->recv_off;
            P->send = send;
            NSP_CHECK(nsp_pack_s2h_sel(&L->view, P->sel, op->heads, op->row_bytes, L->src,
                                       send, P->sb, P->sd));
        } else {
            /* in place: the blocks leave from where the sequence sits in the block */
            P->send = direct ? (const void *)L->src : (const void *)send;
            P->recv = (char *)L->recv_scratch + P->recv_off;
            if (!direct) {
                NSP_CHECK(nsp_pack_h2s_sel(&L->view, P->sel, op->heads, op->row_bytes, L->src,
                                           send, P->sb, P->sd));
            }
        }
        NSP_CHECK(part_post(L, k));
    }
    NSP_CHECK(L->group->tp->ops->progress(L->group->tp, &idle));
    NSP_TRACE("a2a post %u level %d: %d part(s) packed and posted at %.6f", op->post_seq,
              L->level, L->nparts, nsp_now_s());
    if (s2h || L->self_first) {
        return nsp_pack_copy_self(&L->view, op->dir, op->heads, op->row_bytes, op->replicas,
                                  L->src, L->dst);
    }
    return NSP_OK;
}

/* ---- mapped sources -------------------------------------------------------
 *
 * A level whose group shares a mapped region (nsp_mem_alloc) first
 * announces where its source sits (one small message to each peer). Every
 * index then holds the same d descriptors, so all decide alike: if every
 * source is mapped and readable by the whole group, each rank copies its
 * share straight out of the peers' sources (one copy per byte) and sends a
 * zero-byte "done" to each; the level completes when its copies are done
 * and every peer said done (so no one reads its source any more).
 * Otherwise the level goes on exactly as without mapping.
 */

/* Level l > 0 with may_map, first step: announce this rank's source. */
static nsp_status_t step_announce(void *arg)
{
    a2a_level_t   *L  = arg;
    a2a_op_t      *op = L->op;
    int            d = L->lv.degree, me = L->lv.index;
    size_t         bytes, offset = 0;
    uint32_t       region = 0;
    nsp_tp_comm_t *w = op->world;

    NSP_CHECK(nsp_pack_src_bytes(&L->view, op->dir, op->heads, op->row_bytes, me, &bytes));
    L->mine.bytes  = bytes;
    L->mine.ok     = bytes == 0 ||
                     w->ops->mem_find(w, L->src, bytes, &region, &offset) == NSP_OK;
    L->mine.region = region;
    L->mine.offset = offset;
    L->descs[me]   = L->mine;
    NSP_TRACE("a2a post %u level %d: announcing at %.6f", op->post_seq, L->level, nsp_now_s());
    /* one step per peer, so each announce is seen as soon as it arrives:
     * step k sends to index me+k and receives from index me-k into descs */
    for (int k = 1; k < d; ++k) {
        int to = (me + k) % d, from = (me - k + d) % d;
        NSP_CHECK(nsp_group_sendrecv_post(
            L->group, &L->mine, sizeof(a2a_desc_t), to, &L->descs[from], sizeof(a2a_desc_t),
            from, nsp_a2a_part_tag(op->post_seq, L->degree_id, A2A_PART_ANNOUNCE), NULL,
            &L->ctl.reqs[L->ctl.n]));
        L->ctl.seen[L->ctl.n] = L->ctl.reqs[L->ctl.n]->progress;
        ++L->ctl.n;
    }
    return NSP_OK;
}

/* May index q's share be copied now, before every announce is in? Its own
 * announce allows the mapped path (a later "no" from another index makes the
 * level fall back, and the exchange then overwrites all of dst: early
 * copies only ever write this rank's own dst, and read sources that stay
 * borrowed until this rank took part in the level). */
static nsp_status_t desc_ok(a2a_level_t *L, int q, int *yes)
{
    a2a_op_t         *op = L->op;
    nsp_tp_comm_t    *w  = op->world;
    const a2a_desc_t *D  = &L->descs[q];
    size_t            want;

    NSP_CHECK(nsp_pack_src_bytes(&L->view, op->dir, op->heads, op->row_bytes, q, &want));
    *yes = D->ok && D->bytes == want;
    if (*yes && want > 0) {
        NSP_CHECK(w->ops->mem_group_mapped(w, D->region, L->lv.rank0, L->lv.degree, yes));
    }
    return NSP_OK;
}

/* Copy index q's share out of its mapped source into this rank's dst. */
static nsp_status_t copy_from(a2a_level_t *L, int q)
{
    a2a_op_t         *op  = L->op;
    nsp_tp_comm_t    *w   = op->world;
    const a2a_desc_t *D   = &L->descs[q];
    const void       *src = L->src;

    if (D->bytes > 0 && q != L->lv.index) {
        NSP_CHECK(w->ops->mem_peer_ptr(w, L->lv.rank0 + q, D->region, D->offset, D->bytes,
                                       &src));
    }
    if (D->bytes > 0 || q == L->lv.index) {
        NSP_CHECK(nsp_pack_copy_peer(&L->view, op->dir, op->heads, op->row_bytes, q, src,
                                     L->dst));
    }
    L->copied[q] = 1;
    return NSP_OK;
}

/* Level l > 0 with may_map, second step: copy from each peer whose announce
 * arrived (and allowed it); once all are in, every index holds the same d
 * announces and decides alike: all mapped -> say "done" to every peer;
 * otherwise fall back to the exchange. */
static nsp_status_t step_decide(void *arg)
{
    a2a_level_t  *L  = arg;
    a2a_op_t     *op = L->op;
    int           d = L->lv.degree, me = L->lv.index, yes;
    const size_t *zero = L->ctl_counts;
    nsp_status_t  status = nsp_a2a_tps_test(&L->ctl, &op->progress, &op->idle);

    if (status < 0) {
        return status;
    }
    /* k = 0: my own share; k >= 1: index me-k, whose announce arrived when
     * request k-1 is done (and freed) */
    for (int k = 0; k < d && L->ctl.n == d - 1 && !L->spec_off; ++k) {
        int q = (me - k + d) % d;
        if (k > 0 && L->ctl.reqs[k - 1] != NULL) {
            continue;
        }
        if (!L->copied[q]) {
            NSP_CHECK(desc_ok(L, q, &yes));
            L->spec_off = !yes;
            if (yes) {
                NSP_CHECK(copy_from(L, q));
            }
        }
    }
    if (status == NSP_INPROGRESS) {
        return status;
    }
    L->ctl.n = 0; /* every announce request is done and freed */
    for (int q = 0, all = 1; q < d && all; ++q) {
        NSP_CHECK(desc_ok(L, q, &all));
        if (!all) {
            NSP_DEBUG("a2a post %u level %d: index %d's source is not mapped for the whole "
                      "group; exchanging through the transport", op->post_seq, L->level, q);
            ++op->hw->levels_fell_back;
            return step_start(L);
        }
    }
    for (int q = 0; q < d; ++q) {
        if (!L->copied[q]) {
            NSP_CHECK(copy_from(L, q));
        }
    }
    L->mapped = 1;
    ++op->hw->levels_mapped;
    NSP_TRACE("a2a post %u level %d: copied from mapped peers at %.6f", op->post_seq,
              L->level, nsp_now_s());
    /* zero bytes to and from every peer: "I no longer read your source" */
    return nsp_a2a_tps_post(&L->ctl, L->group, &L->mine, zero, zero, L->descs, zero, zero,
                            nsp_a2a_part_tag(op->post_seq, L->degree_id, A2A_PART_DONE), NULL);
}

/* Level l > 0, second step: wait for the transport (the parts, or a mapped
 * level's "done" messages). */
static nsp_status_t step_exchange(void *arg)
{
    a2a_level_t *L      = arg;
    nsp_status_t status = nsp_a2a_tps_test(&L->tps, &L->op->progress, &L->op->idle);
    nsp_status_t ctl;

    if (status < 0) {
        return status;
    }
    ctl = L->may_map ? nsp_a2a_tps_test(&L->ctl, &L->op->progress, &L->op->idle) : NSP_OK;
    if (ctl != NSP_OK) {
        return ctl;
    }
    if (status == NSP_OK) {
        NSP_TRACE("a2a post %u level %d: exchanged at %.6f", L->op->post_seq, L->level,
                  nsp_now_s());
    }
    return status;
}

/* Level l > 0, last step: unpack what did not land in place. */
static nsp_status_t step_finish(void *arg)
{
    a2a_level_t *L  = arg;
    a2a_op_t    *op = L->op;
    nsp_status_t status = NSP_OK;

    if (L->mapped) {
        return NSP_OK; /* every byte was copied in place by step_decide */
    }
    for (int k = 0; k < L->nparts && status == NSP_OK; ++k) {
        a2a_part_t *P = &L->parts[k];
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

/* ---- the public request of a level ---------------------------------------- */

static nsp_status_t level_req_test(nsp_request_t *req)
{
    a2a_level_t *L = (a2a_level_t *)req;

    return nsp_a2a_queues_test(L->op->queues, L->level, &L->op->progress, &L->op->idle, req);
}

static void level_req_describe(const nsp_request_t *req, char *buf, size_t len)
{
    const a2a_level_t *L = (const a2a_level_t *)req;

    snprintf(buf, len, "level %d (degree %d, group of ranks %d..%d) at step '%s'", L->level,
             L->lv.degree, L->lv.rank0, L->lv.rank0 + L->lv.degree - 1,
             nsp_levels_pending_step(L->op->queues, L->level));
}

static void level_req_free(nsp_request_t *req)
{
    a2a_level_t *L  = (a2a_level_t *)req;
    a2a_op_t    *op = L->op;

    if (L->freed) {
        return;
    }
    L->freed = 1;
    if (--op->live > 0) {
        return;
    }
    if (op->base.oneshot) {
        op_destroy(op);
    } else {
        op_disarm(op); /* ready for the next nsp_a2a_start() */
    }
}

static const nsp_request_ops_t a2a_level_req_ops = {
    .name             = "nested all-to-all",
    .test             = level_req_test,
    .describe_pending = level_req_describe,
    .free             = level_req_free,
};

/* ---- post ---------------------------------------------------------------- */

/* ---- shared with the CUDA path (nested_a2a_common.h) ---------------------- */

static nsp_status_t check_params(const nsp_a2a_params_t *p, const nsp_layout_info_t *info,
                                 int64_t head_rows, const char *what)
{
    size_t es = p->elem_size;

    if (es != 1 && es != 2 && es != 4 && es != 8) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: elem_size %zu is not 1, 2, 4 or 8 bytes",
                         what, es);
    }
    if (p->heads < 1 || p->head_dim < 1 ||
        (p->direction != NSP_A2A_SEQ_TO_HEAD && p->direction != NSP_A2A_HEAD_TO_SEQ)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: heads %d, head_dim %d or direction %d "
                         "invalid", what, p->heads, p->head_dim, (int)p->direction);
    }
    if ((p->field_mask & NSP_A2A_FIELD_REPLICAS) && p->replicas == NSP_A2A_REPLICAS_SUM_F32 &&
        es != 4) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: REPLICAS_SUM_F32 needs float32 elements, "
                         "elem_size is %zu", what, es);
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_check_bufs(const nsp_a2a_prep_t *prep, const void *src, const void *dst,
                                const char *what)
{
    if ((prep->info.local_tokens > 0 || prep->head_rows > 0) && (src == NULL || dst == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: NULL src or dst for %lld tokens", what,
                         (long long)prep->info.local_tokens);
    }
    return NSP_OK;
}

static nsp_status_t a2a_world(nsp_tree_t *tree, const nsp_layout_info_t *info,
                              const char *what, nsp_comm_t **world_p)
{
    nsp_comm_t *world;
    int         rank, size;

    NSP_CHECK(nsp_tree_world(tree, &world));
    NSP_CHECK(nsp_comm_rank(world, &rank));
    NSP_CHECK(nsp_comm_size(world, &size));
    if (info->rank != rank || info->ranks != size) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: the layout is for rank %d of %d, but this "
                         "is rank %d of a world of %d", what, info->rank, info->ranks, rank,
                         size);
    }
    *world_p = world;
    return NSP_OK;
}

nsp_status_t nsp_a2a_prepare(nsp_tree_t *tree, const nsp_layout_t *layout,
                             const nsp_a2a_params_t *params, const char *what,
                             nsp_a2a_prep_t *prep)
{
    int64_t head_rows = 0;
    uint64_t mask;

    if (tree == NULL || layout == NULL || params == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_post: NULL tree, layout, params or "
                         "requests");
    }
    mask = params->field_mask;
    NSP_CHECK(nsp_layout_query(layout, &prep->info));
    NSP_CHECK(nsp_layout_head_rows(layout, params->heads, &head_rows));
    NSP_CHECK(check_params(params, &prep->info, head_rows, what));
    NSP_CHECK(a2a_world(tree, &prep->info, what, &prep->world));
    prep->head_rows = head_rows;
    prep->serial   = (mask & NSP_A2A_FIELD_SERIAL) ? params->serial : 0;
    prep->check    = (mask & NSP_A2A_FIELD_CHECK) ? params->check : 1;
    prep->replicas = (mask & NSP_A2A_FIELD_REPLICAS) ? params->replicas : NSP_A2A_REPLICAS_FIRST;
    prep->mapped   = (mask & NSP_A2A_FIELD_MAPPED) ? params->mapped : 0;
    if (prep->mapped != 0 && prep->mapped != 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: mapped is %d; pass 0 or 1", what,
                         prep->mapped);
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_allgather_check(nsp_comm_t *world, uint64_t hash, const char *what)
{
    int          size;
    uint64_t    *all;
    nsp_status_t status;

    NSP_CHECK(nsp_comm_size(world, &size));
    all = malloc(sizeof(uint64_t) * (size_t)size);
    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate %d hashes", what, size);
    }
    NSP_CHECK_GOTO(nsp_comm_allgather(world, &hash, all, sizeof(hash)), status, out_free);
    status = nsp_a2a_compare_hashes(all, size, what);
out_free:
    free(all);
    return status;
}

nsp_status_t nsp_a2a_agree(const nsp_a2a_prep_t *prep, const nsp_a2a_params_t *params,
                           const char *what)
{
    uint64_t hash;
    uint32_t seq;

    if (!prep->check) {
        return NSP_OK;
    }
    /* the world's operation number too: ranks whose counts drifted apart
     * would cross their messages */
    seq  = nsp_comm_seq(prep->world);
    hash = nsp_a2a_check_hash(prep->info.plan_hash, params->direction, params->heads,
                              params->head_dim, params->elem_size, prep->replicas,
                              prep->mapped);
    return nsp_a2a_allgather_check(prep->world, nsp_fnv1a(hash, &seq, sizeof(seq)), what);
}

void nsp_a2a_level_bufs(nsp_a2a_dir_t dir, const char *src, char *dst, int heads,
                        size_t row_bytes, const nsp_layout_level_t *lv,
                        const nsp_layout_heads_t *hs, const char **level_src, char **level_dst)
{
    size_t chunks = (size_t)lv->local_offset * (size_t)heads * row_bytes;
    size_t block  = (size_t)hs->row_offset * row_bytes;

    *level_src = src + (dir == NSP_A2A_SEQ_TO_HEAD ? chunks : block);
    *level_dst = dst + (dir == NSP_A2A_SEQ_TO_HEAD ? block : chunks);
}

size_t nsp_a2a_sum(const size_t *v, int n)
{
    size_t s = 0;

    for (int k = 0; k < n; ++k) {
        s += v[k];
    }
    return s;
}

nsp_status_t nsp_a2a_tps_alloc(nsp_a2a_tps_t *t, size_t max)
{
    t->n    = 0;
    t->reqs = calloc(max, sizeof(*t->reqs));
    t->seen = calloc(max, sizeof(*t->seen));
    return t->reqs != NULL && t->seen != NULL ? NSP_OK : NSP_ERR_NO_MEMORY;
}

void nsp_a2a_tps_reset(nsp_a2a_tps_t *t)
{
    for (int k = 0; k < t->n; ++k) {
        nsp_request_free(t->reqs[k]);
        t->reqs[k] = NULL;
    }
    t->n = 0;
}

void nsp_a2a_tps_free(nsp_a2a_tps_t *t)
{
    nsp_a2a_tps_reset(t);
    free(t->reqs);
    free(t->seen);
    memset(t, 0, sizeof(*t));
}

nsp_status_t nsp_a2a_tps_post(nsp_a2a_tps_t *t, nsp_group_t *group, const void *send,
                              const size_t *sb, const size_t *sd, void *recv, const size_t *rb,
                              const size_t *rd, uint32_t tag, void *stream)
{
    nsp_tp_alltoallv_t args = {.sendbuf = send, .sendcounts = sb, .sdispls = sd,
                               .recvbuf = recv, .recvcounts = rb, .rdispls = rd};
    int                n;

    NSP_CHECK(nsp_group_alltoallv_post(group, &args, tag, stream, &t->reqs[t->n], &n));
    for (int k = 0; k < n; ++k) { /* their progress so far seen */
        t->seen[t->n] = t->reqs[t->n]->progress;
        ++t->n;
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_tps_test(nsp_a2a_tps_t *t, uint64_t *progress, int *idle)
{
    int left = 0;

    for (int k = 0; k < t->n; ++k) {
        nsp_request_t *r = t->reqs[k];
        nsp_status_t   st;
        if (r == NULL) {
            continue;
        }
        st = nsp_request_test(r);
        *progress += r->progress - t->seen[k];
        t->seen[k] = r->progress;
        if (st == NSP_INPROGRESS) {
            *idle &= r->idle;
            ++left;
            continue;
        }
        if (st < 0) {
            return st; /* decided (and logged) by the transport or its request */
        }
        nsp_request_free(r);
        t->reqs[k] = NULL;
        ++*progress;
    }
    return left > 0 ? NSP_INPROGRESS : NSP_OK;
}

nsp_status_t nsp_a2a_queues_test(nsp_levels_t *queues, int level, uint64_t *progress,
                                 int *idle, nsp_request_t *req)
{
    int advanced = 0;

    *idle = 1;
    NSP_CHECK(nsp_levels_progress(queues, &advanced));
    *progress += (uint64_t)advanced;
    req->progress = *progress; /* any level's progress counts for every level */
    req->idle     = *idle && advanced == 0;
    return nsp_levels_status(queues, level);
}

/* ---- the host levels --------------------------------------------------- */

static int level_direct_parts(const a2a_level_t *L)
{
    int n = 0;

    for (int k = 0; k < L->nparts; ++k) {
        n += L->parts[k].seq >= 0;
    }
    return n;
}

/* Bytes the level sends (recv = 0) or receives (recv = 1) over all parts. */
static size_t level_bytes(const a2a_level_t *L, int recv)
{
    size_t n = 0;

    for (int k = 0; k < L->nparts; ++k) {
        n += nsp_a2a_sum(recv ? L->parts[k].rb : L->parts[k].sb, L->lv.degree);
    }
    return n;
}

/*
 * Split level L into parts: with one sequence (or none), one direct part;
 * otherwise one batched part for the small sequences (if any) and one direct
 * part per large sequence (nsp_pack_seq_direct: every rank of the group
 * decides alike). Fills counts, in-place displacements and scratch offsets.
 */
static nsp_status_t level_make_parts(a2a_level_t *L)
{
    a2a_op_t      *op = L->op;
    int            d = L->lv.degree, n = L->view.nseqs, ndirect = 0, nsmall = 0, k = 0;
    int            s2h = op->dir == NSP_A2A_SEQ_TO_HEAD;
    unsigned char *direct = calloc((size_t)n + 1, 1);
    nsp_status_t   status_out;

    if (direct == NULL) {
        goto err_no_memory;
    }
    for (int j = 0; j < n; ++j) {
        direct[j] = ndirect < A2A_MAX_DIRECT &&
                    nsp_pack_seq_direct(&L->view, j, op->heads, op->row_bytes, op->direct_min);
        ndirect += direct[j];
    }
    nsmall    = n - ndirect;
    L->nparts = n <= 1 ? 1 : ndirect + (nsmall > 0);
    L->parts  = calloc((size_t)L->nparts, sizeof(*L->parts));
    L->counts = calloc(4 * (size_t)d * (size_t)L->nparts, sizeof(size_t));
    L->sels   = calloc((size_t)L->nparts * ((size_t)n + 1), 1);
    /* the group's requests per part: 1 on a tree group, at most d over the world */
    if (nsp_a2a_tps_alloc(&L->tps, (size_t)L->nparts *
                                       (size_t)nsp_group_alltoallv_max_reqs(L->group)) != NSP_OK ||
        L->parts == NULL || L->counts == NULL || L->sels == NULL) {
        goto err_free_direct;
    }
    for (int p = 0; p < L->nparts; ++p) {
        a2a_part_t *P = &L->parts[p];
        P->sb  = L->counts + (size_t)p * 4 * (size_t)d;
        P->sd  = P->sb + d;
        P->rb  = P->sd + d;
        P->rd  = P->rb + d;
        P->sel = L->sels + (size_t)p * ((size_t)n + 1);
        P->seq = -1;
    }
    if (n <= 1) {                       /* the whole level in place */
        L->parts[0].sel = NULL;
        L->parts[0].seq = n == 1 ? 0 : -1;
    } else {
        if (nsmall > 0) {               /* part 0: the small sequences, batched */
            for (int j = 0; j < n; ++j) {
                L->parts[0].sel[j] = !direct[j];
            }
            k = 1;
        }
        for (int j = 0; j < n; ++j) {   /* then each large sequence alone */
            if (direct[j]) {
                L->parts[k].sel[j] = 1;
                L->parts[k++].seq  = j;
            }
        }
    }
    for (int p = 0; p < L->nparts; ++p) {
        a2a_part_t *P = &L->parts[p];
        NSP_CHECK_GOTO(nsp_pack_counts_sel(&L->view, P->sel, op->dir, op->heads, op->row_bytes,
                                           op->replicas, NSP_PACK_SKIP_SELF, P->sb, P->sd,
                                           P->rb, P->rd), status_out, err_free_direct_st);
        if (P->seq >= 0) {              /* in place: where the sequence sits */
            NSP_CHECK_GOTO(nsp_pack_seq_displs(&L->view, P->seq, op->heads, op->row_bytes,
                                               s2h ? P->rd : P->sd), status_out,
                           err_free_direct_st);
        }
        /* scratch: what is packed (s2h: every part; h2s: batched parts) and
         * what is received outside the block (s2h: batched; h2s: every part) */
        if (s2h || P->seq < 0) {
            P->send_off = L->send_total;
            L->send_total += nsp_a2a_sum(P->sb, d);
        }
        if (!s2h || P->seq < 0) {
            P->recv_off = L->recv_total;
            L->recv_total += nsp_a2a_sum(P->rb, d);
        }
    }
    free(direct);
    return NSP_OK;

err_free_direct:
    free(direct);
err_no_memory:
    return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate the parts of "
                     "level %d (%d sequences)", L->level, n);
err_free_direct_st:
    free(direct);
    return status_out;
}

/* May level L read mapped sources? Only if the post asked for it
 * (params->mapped, the same on every rank: agreement hash), its whole group
 * shares some mapped region (the same answer on every rank of the group:
 * regions are allocated collectively) and the copy needs no sum of
 * replicas. Then it gets room for the announce and "done" messages. */
static nsp_status_t level_setup_mapped(a2a_level_t *L)
{
    a2a_op_t      *op = L->op;
    nsp_tp_comm_t *w  = op->world;
    int            d = L->lv.degree, yes = 0;

    if (d < 2 || !op->mapped ||
        (op->dir == NSP_A2A_HEAD_TO_SEQ && op->replicas == NSP_A2A_REPLICAS_SUM_F32)) {
        return NSP_OK;
    }
    NSP_CHECK(w->ops->mem_group_mapped(w, NSP_TP_REGION_ANY, L->lv.rank0, d, &yes));
    if (!yes) {
        return NSP_OK;
    }
    L->descs      = calloc((size_t)d, sizeof(*L->descs));
    L->copied     = calloc((size_t)d, 1);
    L->ctl_counts = calloc((size_t)d, sizeof(size_t));
    if (L->descs == NULL || L->copied == NULL || L->ctl_counts == NULL ||
        nsp_a2a_tps_alloc(&L->ctl, 2 * (size_t)(d - 1)) != NSP_OK) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate the mapped "
                         "path of level %d (degree %d)", L->level, d);
    }
    L->may_map = 1;
    return NSP_OK;
}

/* Build level l of the exchange: its views, communicator, parts and
 * scratch space (owned by the handle from here to destroy). */
static nsp_status_t level_build(nsp_tree_t *tree, const nsp_layout_t *layout, a2a_op_t *op,
                                int l)
{
    a2a_level_t *L = &op->levels[l];
    int          d;

    L->op    = op;
    L->level = l;
    NSP_CHECK(nsp_layout_level(layout, l, &L->lv));
    L->tag_degree = L->lv.degree;
    nsp_layout_level_as_exchange(&L->lv); /* a ring level: its Ulysses subgroup */
    NSP_CHECK(nsp_layout_level_view(layout, l, &L->view));
    NSP_CHECK(nsp_layout_heads(layout, l, op->heads, &L->hs));
    d = L->lv.degree;
    if (l == 0) {
        return NSP_OK;
    }
    NSP_CHECK(nsp_tree_group_get(tree, L->lv.rank0, L->lv.degree, &L->group));
    NSP_CHECK(nsp_layout_degree_id(layout, l, &L->degree_id));
    NSP_CHECK(nsp_pack_self_is_first(&L->view, op->heads, &L->self_first));
    NSP_CHECK(level_make_parts(L));
    NSP_DEBUG("nested all-to-all %s: level %d degree %d (group %d..%d, %s), %d seqs in %d "
              "part(s) (%d in place), sends %zu B, receives %zu B",
              op->dir == NSP_A2A_SEQ_TO_HEAD ? "s2h" : "h2s", l, d, L->lv.rank0,
              L->lv.rank0 + d - 1, L->group->level < 0 ? "pairwise over the world" : "tree group",
              L->lv.nseqs, L->nparts, level_direct_parts(L), level_bytes(L, 0),
              level_bytes(L, 1));
    NSP_CHECK(level_setup_mapped(L));
    L->send_scratch = scratch_get(op->hw, L->send_total, &L->send_cap);
    L->recv_scratch = scratch_get(op->hw, L->recv_total, &L->recv_cap);
    if (L->send_scratch == NULL || L->recv_scratch == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate %zu + %zu "
                         "bytes of pack space for level %d (degree %d)", L->send_total,
                         L->recv_total, L->level, L->lv.degree);
    }
    return NSP_OK;
}

/* Arm level l for one start: its request, its buffers and its steps. */
static nsp_status_t level_arm(a2a_op_t *op, int l)
{
    a2a_level_t *L = &op->levels[l];

    nsp_request_init(&L->req, &a2a_level_req_ops, op->world->timeout_s);
    L->freed    = 0;
    L->open     = 0;
    L->mapped   = 0;
    L->spec_off = 0;
    if (L->copied != NULL) {
        memset(L->copied, 0, (size_t)L->lv.degree);
    }
    nsp_a2a_level_bufs(op->dir, op->src, op->dst, op->heads, op->row_bytes, &L->lv, &L->hs,
                       &L->src, &L->dst);
    if (op->gated) {
        NSP_CHECK(nsp_levels_push(op->queues, l, step_gate, L, "wait to be opened"));
    }
    if (l == 0) {
        return nsp_levels_push(op->queues, 0, step_copy_level0, L, "copy level 0");
    }
    if (L->may_map) {
        NSP_CHECK(nsp_levels_push(op->queues, l, step_announce, L, "announce mapped source"));
        NSP_CHECK(nsp_levels_push(op->queues, l, step_decide, L,
                                  "copy from mapped peers, or pack and post"));
    } else {
        NSP_CHECK(nsp_levels_push(op->queues, l, step_start, L, "pack and post"));
    }
    NSP_CHECK(nsp_levels_push(op->queues, l, step_exchange, L, "exchange"));
    return nsp_levels_push(op->queues, l, step_finish, L, "unpack");
}

nsp_status_t nsp_layout_check(nsp_tree_t *tree, const nsp_layout_t *layout)
{
    nsp_layout_info_t info;
    nsp_comm_t       *world;

    if (tree == NULL || layout == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_check: NULL tree or layout");
    }
    NSP_CHECK(nsp_layout_query(layout, &info));
    NSP_CHECK(a2a_world(tree, &info, "nested all-to-all", &world));
    return nsp_a2a_allgather_check(world, info.plan_hash, "layout check");
}

nsp_status_t nsp_a2a_level_open(nsp_request_t *req)
{
    a2a_level_t *L = (a2a_level_t *)req;

    if (req == NULL || req->ops != &a2a_level_req_ops) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_level_open: not a level request of a "
                         "host nested all-to-all");
    }
    if (L->open) {
        return NSP_OK;
    }
    L->open = 1;
    /* Start it now (pack and post), so the data moves before the next test. */
    return nsp_levels_progress(L->op->queues, NULL);
}

/* ---- the host engine ----------------------------------------------------- */

static nsp_status_t host_check_world(const nsp_a2a_prep_t *prep)
{
    nsp_tp_comm_t *tp = nsp_comm_tp(prep->world);

    if (tp->ops->mem_type != NSP_MEM_HOST) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested all-to-all: the '%s' backend moves "
                         "device memory, and this build's nested all-to-all packs on the host "
                         "only; use the UCX backend with host buffers", tp->ops->name);
    }
    return NSP_OK;
}

/* A handle with its levels built (no steps yet). */
static nsp_status_t host_build(nsp_tree_t *tree, const nsp_layout_t *layout,
                               const nsp_a2a_params_t *params, const nsp_a2a_prep_t *prep,
                               int gated, a2a_op_t **out)
{
    int          nlevels = prep->info.nlevels;
    a2a_op_t    *op      = calloc(1, sizeof(*op));
    nsp_status_t status;

    if (op == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate");
    }
    op->base.engine  = prep->mapped ? &nsp_a2a_engine_host_mapped : &nsp_a2a_engine_host;
    op->base.nlevels = nlevels;
    op->comm         = prep->world;
    op->hw           = host_world(prep->world);
    op->world        = nsp_comm_tp(prep->world);
    op->nlevels      = nlevels;
    op->dir          = params->direction;
    op->heads        = params->heads;
    op->row_bytes    = (size_t)params->head_dim * params->elem_size;
    op->replicas     = prep->replicas;
    op->direct_min   = nsp_a2a_direct_min();
    op->gated        = gated;
    op->serial       = prep->serial;
    op->mapped       = prep->mapped;
    op->levels       = calloc((size_t)nlevels, sizeof(*op->levels));
    if (op->hw == NULL || op->levels == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate %d levels",
                           nlevels);
        goto err_destroy_op;
    }
    for (int l = 0; l < nlevels; ++l) {
        NSP_CHECK_GOTO(level_build(tree, layout, op, l), status, err_destroy_op);
    }
    *out = op;
    return NSP_OK;

err_destroy_op:
    op_destroy(op);
    return status;
}

static nsp_status_t host_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                                const nsp_a2a_params_t *params, int gated, nsp_a2a_t **a2a)
{
    nsp_a2a_prep_t prep;
    a2a_op_t      *op = NULL;

    NSP_CHECK(nsp_a2a_prepare(tree, layout, params, "nested all-to-all", &prep));
    NSP_CHECK(host_check_world(&prep));
    NSP_CHECK(nsp_a2a_agree(&prep, params, "nested all-to-all"));
    NSP_CHECK(host_build(tree, layout, params, &prep, gated, &op));
    op->head_rows = prep.head_rows;
    op->info      = prep.info;
    *a2a          = &op->base;
    return NSP_OK;
}

static nsp_status_t host_start(nsp_a2a_t *a2a, const void *src, void *dst, void *stream,
                               nsp_request_t **reqs)
{
    a2a_op_t      *op = (a2a_op_t *)a2a;
    int            nlevels = op->nlevels;
    nsp_a2a_prep_t prep = {.info = op->info, .head_rows = op->head_rows};
    nsp_status_t   status;

    if (op->live > 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_start: %d level request(s) of the last "
                         "start are still held; free them first", op->live);
    }
    if (stream != NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested all-to-all: a CUDA stream was given but "
                         "this is the host path (UCX, host memory); pass stream = NULL");
    }
    NSP_CHECK(nsp_a2a_check_bufs(&prep, src, dst, "nested all-to-all"));
    op->src             = src;
    op->dst             = dst;
    op->post_seq        = nsp_comm_seq(op->comm);
    op->first_pass_done = 0;
    op->progress        = 0;
    /* steps of a level: [open,] pack and post (or announce, then copy or
     * pack and post, when mapped), exchange, unpack */
    NSP_CHECK(nsp_levels_create(nlevels, 3 + (op->gated ? 1 : 0) + (op->mapped ? 1 : 0),
                                op->serial ? NSP_LEVELS_SERIAL : NSP_LEVELS_PIPELINED,
                                &op->queues));
    for (int l = 0; l < nlevels; ++l) {
        NSP_CHECK_GOTO(level_arm(op, l), status, err_disarm);
    }
    /* First pass: every level packs and posts (ascending); level 0's copy
     * waits for the second pass, so the exchanges are already under way. */
    NSP_CHECK_GOTO(nsp_levels_progress(op->queues, NULL), status, err_disarm);
    op->first_pass_done = 1;
    NSP_CHECK_GOTO(nsp_levels_progress(op->queues, NULL), status, err_disarm);
    for (int l = 0; l < nlevels; ++l) {
        status = nsp_levels_status(op->queues, l);
        if (status < 0) {
            goto err_disarm;
        }
    }
    nsp_comm_seq_next(op->comm);
    op->live = nlevels;
    for (int l = 0; l < nlevels; ++l) {
        reqs[l] = &op->levels[l].req;
    }
    return NSP_OK;

err_disarm:
    op_disarm(op);
    return status;
}

static nsp_status_t host_open(nsp_a2a_t *a2a, int level)
{
    a2a_op_t *op = (a2a_op_t *)a2a;

    if (level < 0 || level >= op->nlevels || op->live == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nested all-to-all: cannot open level %d (%d "
                         "levels, %s)", level, op->nlevels, op->live ? "started" : "not started");
    }
    return nsp_a2a_level_open(&op->levels[level].req);
}

static nsp_status_t host_destroy(nsp_a2a_t *a2a)
{
    a2a_op_t *op = (a2a_op_t *)a2a;

    if (op->live > 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_destroy: %d level request(s) are still "
                         "held; free them first", op->live);
    }
    op_destroy(op);
    return NSP_OK;
}

const nsp_a2a_engine_t nsp_a2a_engine_host = {
    .name    = "host",
    .create  = host_create,
    .start   = host_start,
    .open    = host_open,
    .destroy = host_destroy,
};

/* The same code: host_build picks this table when params.mapped = 1 (each
 * level then decides whether its group reads in place). */
const nsp_a2a_engine_t nsp_a2a_engine_host_mapped = {
    .name    = "host-mapped",
    .create  = host_create,
    .start   = host_start,
    .open    = host_open,
    .destroy = host_destroy,
};

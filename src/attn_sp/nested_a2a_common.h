/*
 * The engine-neutral nested all-to-all (docs/design.md §6): the handle
 * every engine (nested_a2a_engine.h) runs under, derived once at create,
 * and the helpers all engines share (nested_a2a_common.c): the checks and
 * defaults of a post, the agreement over the world, where a level's data
 * sits, the parts of a level, and the transport requests of a level.
 * Which communicator carries a level is the tree's decision
 * (nsp_tree_group_get, nested_groups/group.h). `what` arguments start
 * error messages ("nested all-to-all", "... (cuda)").
 *
 * Lifecycle (nested_a2a_handle.c):
 *   create   prepare (local checks), engine check, agreement (collective),
 *            the levels derived (views, head shares, groups, tags), the
 *            engine's derive (parts, scratch, tables, events), the level
 *            queues: all once
 *   start    bind src, dst and the stream to the levels, init the level
 *            requests, take the world's operation number, engine start
 *   open     gated handles: let level l go (engine open, then progress)
 *   request  testing one level's request progresses every level's queue;
 *            when the caller freed the last one, the engine disarms (or,
 *            one-shot posts, the handle goes)
 */
#ifndef NSP_ATTN_SP_NESTED_A2A_COMMON_H_
#define NSP_ATTN_SP_NESTED_A2A_COMMON_H_

#include "nspcomm.h"
#include "attn_sp/layout.h"
#include "attn_sp/nested_a2a.h"
#include "nested_groups/group.h"
#include "streams/levels.h"
#include "transport/comm.h"

#include <stddef.h>
#include <stdint.h>

struct nsp_memtype;
struct nsp_a2a_engine;

/** A post's arguments as every engine uses them, from nsp_a2a_prepare(). */
typedef struct nsp_a2a_prep {
    nsp_layout_info_t  info;
    nsp_comm_t        *world;    /* the tree's world, checked against the layout */
    int                serial;   /* NSP_A2A_FIELD_SERIAL (default 0) */
    int                check;    /* NSP_A2A_FIELD_CHECK (default 1) */
    nsp_a2a_replicas_t replicas; /* NSP_A2A_FIELD_REPLICAS (default REPLICAS_FIRST) */
    int                mapped;   /* NSP_A2A_FIELD_MAPPED (default 0): 0 or 1 */
    int64_t            head_rows; /* rows of D of the head-sharded block */
} nsp_a2a_prep_t;

/** The transport requests of one level: reqs[n] in flight (NULL once done),
 *  seen[n] their progress counters at the last test. */
typedef struct nsp_a2a_tps {
    nsp_request_t **reqs;
    uint64_t       *seen;
    int             n;
} nsp_a2a_tps_t;

/*
 * One exchange of a level. A level's sequences move in parts: on the host
 * engine the small ones batched in one part (packed, and unpacked on
 * arrival) and each large one in a part of its own that lands in place in
 * the head-sharded block (s2h) or leaves from it (h2s), saving a copy
 * (nsp_pack_seq_direct()); on the device engine one part for the level.
 * A host level that moves as runs (nested_a2a_host.c level_uses_runs) has
 * one part too, whose counts are all the engine reads: no pack space.
 */
typedef struct nsp_a2a_part {
    unsigned char *sel;                 /* [nseqs] its sequences; NULL: all of them */
    int            seq;                 /* the one sequence of a direct part, else -1 */
    size_t        *sb, *sd, *rb, *rd;   /* [d] bytes and displacements */
    size_t         send_off, recv_off;  /* where its blocks start in the level's scratch */
    const void    *send;                /* what the transport reads (bound at start) */
    void          *recv;                /* what the transport writes */
} nsp_a2a_part_t;

/* One level of an exchange: derived at create, bound at each start. */
typedef struct nsp_a2a_level {
    nsp_request_t       req;          /* FIRST: the public request of this level */
    nsp_a2a_t          *a2a;
    int                 level;
    int                 freed;        /* the caller freed req */
    int                 open;         /* gated: the caller let this level start */
    int                 tag_degree;   /* the level's group degree: its tag (lv may hold the
                                         Ulysses subgroup of a ring level instead) */
    nsp_layout_level_t  lv;           /* as the exchange sees it (a ring level: its
                                         Ulysses subgroup, nsp_layout_level_as_exchange) */
    nsp_level_view_t    view;
    nsp_layout_heads_t  hs;
    nsp_group_t        *group;        /* level > 0: its group (the tree decides the carrier) */
    int                 degree_id;    /* tells levels apart in tags */
    int                 self_first;   /* h2s: copy my own block before the peers' */
    int                 nparts;
    nsp_a2a_part_t     *parts;        /* [nparts] (engine derive) */
    size_t             *counts;       /* [nparts][4][d], the parts' arrays */
    unsigned char      *sels;         /* [nparts][nseqs + 1], the parts' selections */
    size_t              send_total, recv_total; /* scratch bytes of one start */
    const char         *src;          /* bound: s2h its chunks; h2s its block */
    char               *dst;          /* bound: s2h its block;  h2s its chunks */
    nsp_a2a_tps_t       tps;          /* transport requests in flight */
    void               *eng;          /* the engine's own state of the level */
} nsp_a2a_level_t;

/** What a handle did (nsp_a2a_stats): tests check that a start derives
 *  nothing. */
typedef struct nsp_a2a_stats {
    uint64_t levels_derived; /* levels derived (views, counts, parts, tables): at create */
    uint64_t starts;         /* starts that posted */
} nsp_a2a_stats_t;

/* The engine-neutral handle (the public nsp_a2a_t). */
struct nsp_a2a {
    const struct nsp_a2a_engine *engine;
    const struct nsp_memtype    *mem;       /* its memory type: devops and kernels */
    nsp_tree_t                  *tree;      /* borrowed until destroy */
    nsp_comm_t                  *comm;      /* the tree's world */
    nsp_tp_comm_t               *world;     /* its transport communicator */
    nsp_a2a_prep_t               prep;      /* parameters with defaults, the layout's info */
    nsp_a2a_dir_t                dir;
    int                          heads;
    size_t                       row_bytes; /* D * elem_size */
    nsp_a2a_replicas_t           replicas;
    int                          nlevels;
    int                          gated;     /* levels wait for open */
    int                          oneshot;   /* nsp_a2a_post: freed with its last request */
    int                          max_steps; /* of a level's queue (engine derive) */
    nsp_levels_t                *queues;    /* each start's steps (created once) */
    int                          live;      /* level requests of the start not yet freed */
    uint32_t                     post_seq;  /* the world's operation number of the start */
    const char                  *src;       /* the start's buffers and stream */
    char                        *dst;
    void                        *stream;
    uint64_t                     progress;  /* parts and steps completed, all levels */
    int                          idle;      /* the last poll moved nothing */
    nsp_a2a_stats_t              stats;
    nsp_a2a_level_t             *levels;    /* [nlevels] */
    void                        *eng;       /* the engine's own state of the handle */
};

/** What `a2a` did so far. Errors: NSP_ERR_INVALID_ARG (NULL). */
nsp_status_t nsp_a2a_stats(const nsp_a2a_t *a2a, nsp_a2a_stats_t *stats);

/**
 * The start of a post on any engine: NULL arguments, the layout's info,
 * the parameter checks every engine makes (elem_size, heads, head_dim,
 * direction, a summing replica mode on elements of its size; nsp_a2a_check_bufs checks src and
 * dst), the world of `tree` (the layout must be for this rank of this
 * world) and the optional fields with their defaults. Local: no traffic.
 */
nsp_status_t nsp_a2a_prepare(nsp_tree_t *tree, const nsp_layout_t *layout,
                             const nsp_a2a_params_t *params, const char *what,
                             nsp_a2a_prep_t *prep);

/** The tree's world, which must be the world of the layout's rank and
 *  size (NSP_ERR_INVALID_ARG otherwise). */
nsp_status_t nsp_a2a_world(nsp_tree_t *tree, const nsp_layout_info_t *info, const char *what,
                           nsp_comm_t **world);

/** src and dst for a rank holding data (tokens or head rows) must not be
 *  NULL: NSP_ERR_INVALID_ARG. */
nsp_status_t nsp_a2a_check_bufs(const nsp_a2a_prep_t *prep, const void *src, const void *dst,
                                const char *what);

/** Allgather `hash` over `world` and compare (nsp_a2a_compare_hashes names
 *  the ranks that differ). Collective. */
nsp_status_t nsp_a2a_allgather_check(nsp_comm_t *world, uint64_t hash, const char *what);

/** When prep->check: the agreement of an exchange (nsp_a2a_check_hash of
 *  the round's plan hash and the parameters, mixed with the world's next
 *  operation number) over the world. Collective. */
nsp_status_t nsp_a2a_agree(const nsp_a2a_prep_t *prep, const nsp_a2a_params_t *params,
                           const char *what);

/**
 * Where level `lv` reads and writes (bytes): s2h reads its chunks of the
 * sequence-sharded buffer [T_local, heads, D] at lv->local_offset tokens and
 * writes the head-sharded block at hs->row_offset rows of D; h2s the other
 * way round. row_bytes = D * elem_size.
 */
void nsp_a2a_level_bufs(nsp_a2a_dir_t dir, const char *src, char *dst, int heads,
                        size_t row_bytes, const nsp_layout_level_t *lv,
                        const nsp_layout_heads_t *hs, const char **level_src,
                        char **level_dst);

/** Sum of v[n]. */
size_t nsp_a2a_sum(const size_t *v, int n);

/**
 * Room for `nparts` parts of level L (degree d): their count arrays [4][d]
 * and selections [nseqs + 1], each part selecting nothing, not direct. The
 * engine's derive fills them (nsp_a2a_part_counts). Errors:
 * NSP_ERR_NO_MEMORY (with a message).
 */
nsp_status_t nsp_a2a_parts_alloc(nsp_a2a_level_t *L, int nparts);

/**
 * Counts and displacements of part P of level L (nsp_pack_counts_sel of
 * its selection, the self block skipped), and its in-place displacements
 * when it is direct (P->seq >= 0: where that sequence sits in the block).
 */
nsp_status_t nsp_a2a_part_counts(const nsp_a2a_level_t *L, nsp_a2a_part_t *P);

/** Bytes the level sends (recv = 0) or receives (recv = 1) over all parts. */
size_t nsp_a2a_level_bytes(const nsp_a2a_level_t *L, int recv);

/** Room for `max` requests. Errors: NSP_ERR_NO_MEMORY (no message: the
 *  caller says what it was allocating). */
nsp_status_t nsp_a2a_tps_alloc(nsp_a2a_tps_t *t, size_t max);

/** Free every request (abandoning what is still in flight); keep the room. */
void nsp_a2a_tps_reset(nsp_a2a_tps_t *t);

/** Free every request (abandoning what is still in flight) and the room. */
void nsp_a2a_tps_free(nsp_a2a_tps_t *t);

/**
 * Post one exchange of a level on its group (nsp_group_alltoallv_post: one
 * alltoallv on a tree group, pairwise sendrecv steps over the world).
 * sb/sd/rb/rd [d]: bytes and displacements per group index. `stream`: the
 * transport's stream (NULL on a host transport). Appends the requests to t
 * (room for nsp_group_alltoallv_max_reqs more).
 */
nsp_status_t nsp_a2a_tps_post(nsp_a2a_tps_t *t, nsp_group_t *group, const void *send,
                              const size_t *sb, const size_t *sd, void *recv, const size_t *rb,
                              const size_t *rd, uint32_t tag, void *stream);

/**
 * Test every request of t: adds what they progressed (and one per request
 * done) to *progress, clears *idle when one in flight is not idle. NSP_OK
 * when all are done, NSP_INPROGRESS, or the error of a request (decided
 * and logged by the transport).
 */
nsp_status_t nsp_a2a_tps_test(nsp_a2a_tps_t *t, uint64_t *progress, int *idle);

/**
 * Create an exchange handle on memory type `mem` (its engine, devops and
 * kernels): what nsp_a2a_create() does once it chose the world's memory
 * type; tests pass a memory type of their own. Errors: as nsp_a2a_create().
 */
nsp_status_t nsp_a2a_handle_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                                   const nsp_a2a_params_t *params,
                                   const struct nsp_memtype *mem, int gated, nsp_a2a_t **a2a);

/** nsp_a2a_start(), nsp_a2a_open() and nsp_a2a_destroy() of a handle
 *  (checked non-NULL by the caller). */
nsp_status_t nsp_a2a_handle_start(nsp_a2a_t *a2a, const void *src, void *dst, void *stream,
                                  nsp_request_t **reqs);
nsp_status_t nsp_a2a_handle_open(nsp_a2a_t *a2a, int level);
nsp_status_t nsp_a2a_handle_destroy(nsp_a2a_t *a2a);

#endif /* NSP_ATTN_SP_NESTED_A2A_COMMON_H_ */

/*
 * Layouts (docs/design.md §6): for one rank and one round of a plan, which chunks of
 * which sequences the rank holds, per level, and where they sit in the
 * sequence-sharded and head-sharded buffers. Pure index math: no transport.
 *
 * The public API (nsp_layout_*) is in include/nspcomm.h section 7; this
 * header adds the pure per-(rank, size) functions the pack code and the
 * tests use, so one process can compute every rank's view.
 */
#ifndef NSP_ATTN_SP_LAYOUT_H_
#define NSP_ATTN_SP_LAYOUT_H_

#include "nspcomm.h"

/**
 * The chunk of a sequence of `len` tokens held by index `i` of a group of
 * `d` ranks: tokens [*start, *start + *clen). Chunks are in token order and
 * differ by at most one token: the first len % d indices get one more.
 * Pure; i in [0, d), d >= 1, len >= 0.
 */
static inline void nsp_chunk_of(int64_t len, int d, int i, int64_t *start, int64_t *clen)
{
    int64_t base = len / d;
    int64_t rem  = len % d;

    *start = (int64_t)i * base + (i < rem ? i : rem);
    *clen  = base + (i < rem ? 1 : 0);
}

/**
 * The share of `heads` heads held by index `i` of a group of `d` ranks after
 * sequence-to-head: heads [*first, *first + *count).
 *  - d == 1 or heads % d == 0: count = heads / d, first = i * heads / d;
 *  - d % heads == 0 (KV heads when d > n_kv): count = 1, first = i*heads/d,
 *    so each head is replicated on d/heads consecutive indices; *replicas
 *    is d/heads (1 otherwise).
 * Errors: NSP_ERR_INVALID_ARG (heads < 1, or neither divides the other; the
 * message names both).
 */
nsp_status_t nsp_head_share(int heads, int d, int i, int *first, int *count, int *replicas);

/** One level of a layout as the pack code sees it (borrowed arrays). */
typedef struct nsp_level_view {
    int            degree;   /**< d */
    int            index;    /**< this rank's index in the group, [0, d) */
    int            nseqs;
    const int64_t *seq_len;  /**< [nseqs] tokens of each whole sequence */
} nsp_level_view_t;

/** The view of level `level` of a layout (borrowed from it). */
nsp_status_t nsp_layout_level_view(const nsp_layout_t *layout, int level,
                                   nsp_level_view_t *view);

/**
 * Rewrite a level as the exchange its all-to-all runs: for a ring level
 * (ring > 1) the rank's Ulysses subgroup (degree u, first rank
 * ulysses_rank0, index ulysses_index) over the spans (seq_len = span_len);
 * a level with ring == 1 is unchanged. Pure.
 */
static inline void nsp_layout_level_as_exchange(nsp_layout_level_t *lv)
{
    lv->degree  = lv->ulysses;
    lv->rank0   = lv->ulysses_rank0;
    lv->index   = lv->ulysses_index;
    lv->seq_len = lv->span_len;
}

/**
 * The id of level `level`'s degree in its round: how many distinct group
 * sizes of the round are below it (size 1 always counted). The same on every
 * rank for the same degree, so it tells levels apart in message tags.
 * Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_layout_degree_id(const nsp_layout_t *layout, int level, int *id);

/** FNV-1a 64 over `len` bytes, continuing from `h` (start with NSP_FNV_SEED). */
#define NSP_FNV_SEED 0xcbf29ce484222325ull
uint64_t nsp_fnv1a(uint64_t h, const void *data, size_t len);

#endif /* NSP_ATTN_SP_LAYOUT_H_ */

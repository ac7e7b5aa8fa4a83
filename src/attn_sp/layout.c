/*
 * Layouts: per-rank, per-round chunk positions from a plan (docs/design.md §6).
 * The rules (levels, chunks, both buffer layouts) are documented with the
 * public API in include/nspcomm.h section 7.
 */
#include "attn_sp/layout.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* One level while it is being collected from the plan's groups. */
typedef struct layout_level_src {
    int degree;
    int rank0;
    int ring;
    int nseqs;
} layout_level_src_t;

struct nsp_layout {
    nsp_layout_info_t   info;
    nsp_layout_level_t *levels;   /* [nlevels], arrays point into the blocks below */
    int                *seqs;     /* [nseqs_all] */
    int64_t            *i64;      /* 7 * nseqs_all + nlevels: seq_len, chunk_start,
                                     chunk_len, chunk_offset, span_start, span_len,
                                     seq_offset (+1 per level) */
    int                *degree_id; /* [nlevels]: index of the level's degree among the
                                      distinct group sizes of the round (ascending) */
};

/* Entries a group contributes to a level: one per sequence, or two (its
 * zigzag chunks) for a ring group. */
static int group_entries(const nsp_plan_group_t *pg)
{
    return pg->ring > 1 ? 2 * pg->nseqs : pg->nseqs;
}

uint64_t nsp_fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t k = 0; k < len; ++k) {
        h ^= p[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv_i64(uint64_t h, int64_t v)
{
    return nsp_fnv1a(h, &v, sizeof(v));
}

nsp_status_t nsp_head_share(int heads, int d, int i, int *first, int *count, int *replicas)
{
    if (heads < 1 || d < 1 || i < 0 || i >= d) {
        return nsp_error(NSP_ERR_INVALID_ARG, "head share: invalid heads=%d, degree=%d, "
                         "index=%d (need heads >= 1 and 0 <= index < degree)", heads, d, i);
    }
    if (heads % d == 0) {
        *first    = i * (heads / d);
        *count    = heads / d;
        *replicas = 1;
        return NSP_OK;
    }
    if (d % heads == 0) {
        /* More ranks than heads (KV heads above n_kv): each head is held by
         * d/heads consecutive indices. */
        *first    = i / (d / heads);
        *count    = 1;
        *replicas = d / heads;
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_INVALID_ARG, "cannot shard %d heads over a group of degree %d: "
                     "the heads must be a multiple of the degree, or the degree a multiple "
                     "of the heads (KV replication); choose degrees that divide the head "
                     "counts", heads, d);
}

/* Hash of everything in the round that decides any rank's layout. */
static uint64_t round_hash(const nsp_plan_t *plan, int round)
{
    const nsp_plan_round_t *r = &plan->rounds[round];
    uint64_t                h = NSP_FNV_SEED;

    h = fnv_i64(h, plan->cluster.ranks);
    h = fnv_i64(h, round);
    h = fnv_i64(h, r->ngroups);
    for (int g = 0; g < r->ngroups; ++g) {
        const nsp_plan_group_t *pg = &r->groups[g];
        h = fnv_i64(h, pg->rank0);
        h = fnv_i64(h, pg->size);
        h = fnv_i64(h, pg->ring > 0 ? pg->ring : 1);
        h = fnv_i64(h, pg->nseqs);
        for (int j = 0; j < pg->nseqs; ++j) {
            h = fnv_i64(h, pg->seqs[j]);
            h = fnv_i64(h, plan->seq_lens[pg->seqs[j]]);
        }
    }
    return h;
}

static nsp_status_t check_round(const nsp_plan_t *plan, int round)
{
    const nsp_plan_round_t *r = &plan->rounds[round];

    for (int g = 0; g < r->ngroups; ++g) {
        const nsp_plan_group_t *pg = &r->groups[g];
        if (pg->size < 1 || pg->rank0 < 0 || pg->rank0 + pg->size > plan->cluster.ranks ||
            pg->nseqs < 0 || (pg->nseqs > 0 && pg->seqs == NULL)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "layout: round %d group %d (rank0 %d, "
                             "size %d, %d seqs) is outside ranks [0, %d)", round, g,
                             pg->rank0, pg->size, pg->nseqs, plan->cluster.ranks);
        }
        if (pg->ring > 1 && pg->size % pg->ring != 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "layout: round %d group %d (rank0 %d, "
                             "size %d) has ring degree %d, which does not divide its size; "
                             "the ring degree r must divide the degree d (Ulysses degree "
                             "d / r)", round, g, pg->rank0, pg->size, pg->ring);
        }
        for (int j = 0; j < pg->nseqs; ++j) {
            int s = pg->seqs[j];
            if (s < 0 || s >= plan->nseqs || plan->seq_lens[s] < 0) {
                return nsp_error(NSP_ERR_INVALID_ARG, "layout: round %d group %d names "
                                 "sequence %d, which is out of range [0, %d) or has a "
                                 "negative length", round, g, s, plan->nseqs);
            }
        }
    }
    return NSP_OK;
}

static int group_has_rank(const nsp_plan_group_t *pg, int rank)
{
    return rank >= pg->rank0 && rank < pg->rank0 + pg->size;
}

/*
 * Collect the levels of `rank`: level 0 (degree 1, possibly empty) plus each
 * other distinct degree of a group holding the rank, ascending. Fills
 * src[*nlevels] (caller-allocated, ngroups + 1 entries) and the total count
 * of sequences over the levels.
 */
static nsp_status_t collect_levels(const nsp_plan_t *plan, int round, int rank,
                                   layout_level_src_t *src, int *nlevels, int *nseqs_all)
{
    const nsp_plan_round_t *r = &plan->rounds[round];
    int                     n = 1, total = 0;

    src[0] = (layout_level_src_t){.degree = 1, .rank0 = rank, .ring = 1, .nseqs = 0};
    for (int g = 0; g < r->ngroups; ++g) {
        const nsp_plan_group_t *pg = &r->groups[g];
        int                     l;
        if (!group_has_rank(pg, rank)) {
            continue;
        }
        for (l = 0; l < n && src[l].degree != pg->size; ++l) {
        }
        if (l == n) {
            src[n++] = (layout_level_src_t){.degree = pg->size, .rank0 = pg->rank0,
                                            .ring = pg->ring > 0 ? pg->ring : 1};
        } else if (src[l].rank0 != pg->rank0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "layout: in round %d rank %d belongs to "
                             "two different groups of degree %d (rank0 %d and %d); groups "
                             "of one degree must not overlap", round, rank, pg->size,
                             src[l].rank0, pg->rank0);
        } else if (pg->size > 1 && src[l].ring != (pg->ring > 0 ? pg->ring : 1)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "layout: in round %d the group of degree "
                             "%d at rank0 %d appears twice with ring degrees %d and %d",
                             round, pg->size, pg->rank0, src[l].ring, pg->ring);
        }
        src[l].nseqs += group_entries(pg);
        total += group_entries(pg);
    }
    /* Insertion sort by degree; level 0 (degree 1) stays first. */
    for (int a = 2; a < n; ++a) {
        layout_level_src_t key = src[a];
        int                b   = a - 1;
        for (; b >= 1 && src[b].degree > key.degree; --b) {
            src[b + 1] = src[b];
        }
        src[b + 1] = key;
    }
    *nlevels   = n;
    *nseqs_all = total;
    return NSP_OK;
}

/* The arrays of one level, filled by fill_level(). */
typedef struct level_arrays {
    int     *seqs;
    int64_t *seq_len, *chunk_start, *chunk_len, *chunk_offset, *span_start, *span_len,
            *seq_offset;
} level_arrays_t;

/* The span of entry `c` (0 or 1) of a sequence of `len` tokens at level lv:
 * the whole sequence when ring == 1, else zigzag chunk c of ring index
 * lv->ring_index (chunk j, then 2r-1-j). */
static void entry_span(const nsp_layout_level_t *lv, int64_t len, int c, int64_t *start,
                       int64_t *slen)
{
    int64_t zs[2] = {0, 0}, zl[2] = {len, 0};

    if (lv->ring > 1) {
        (void)nsp_zigzag_chunks(len, lv->ring, lv->ring_index, zs, zl); /* args valid */
    }
    *start = zs[c];
    *slen  = zl[c];
}

/* Fill the arrays of level `lv` from the plan. */
static void fill_level(const nsp_plan_t *plan, int round, int rank, nsp_layout_level_t *lv,
                       const level_arrays_t *a, int64_t *local_cursor)
{
    const nsp_plan_round_t *r = &plan->rounds[round];
    int                     j = 0, per_seq = lv->ring > 1 ? 2 : 1;
    int64_t                 full = 0;

    lv->local_offset = *local_cursor;
    for (int g = 0; g < r->ngroups; ++g) {
        const nsp_plan_group_t *pg = &r->groups[g];
        if (pg->size != lv->degree || !group_has_rank(pg, rank)) {
            continue;
        }
        for (int k = 0; k < pg->nseqs; ++k) {
            for (int c = 0; c < per_seq; ++c, ++j) {
                int64_t piece = 0;
                a->seqs[j]    = pg->seqs[k];
                a->seq_len[j] = plan->seq_lens[pg->seqs[k]];
                entry_span(lv, a->seq_len[j], c, &a->span_start[j], &a->span_len[j]);
                /* The span is cut over the Ulysses subgroup like a sequence. */
                nsp_chunk_of(a->span_len[j], lv->ulysses, lv->ulysses_index, &piece,
                             &a->chunk_len[j]);
                a->chunk_start[j]  = a->span_start[j] + piece;
                a->chunk_offset[j] = *local_cursor;
                *local_cursor     += a->chunk_len[j];
                a->seq_offset[j]   = full;
                full              += a->span_len[j];
            }
        }
    }
    a->seq_offset[j] = full;
    lv->local_tokens = *local_cursor - lv->local_offset;
    lv->full_tokens  = full;
}

/* Number of distinct group sizes below `degree` in the round (1 counted even
 * when no group has size 1, as level 0 always exists). */
static int count_smaller_sizes(const nsp_plan_round_t *r, int degree)
{
    int n = degree > 1 ? 1 : 0; /* size 1 */

    for (int g = 0; g < r->ngroups; ++g) {
        int size = r->groups[g].size, seen = 0;
        if (size <= 1 || size >= degree) {
            continue;
        }
        for (int k = 0; k < g && !seen; ++k) {
            seen = r->groups[k].size == size;
        }
        n += !seen;
    }
    return n;
}

nsp_status_t nsp_layout_degree_id(const nsp_layout_t *layout, int level, int *id)
{
    if (layout == NULL || id == NULL || level < 0 || level >= layout->info.nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_degree_id: NULL argument or level "
                         "%d out of range", level);
    }
    *id = layout->degree_id[level];
    return NSP_OK;
}

nsp_status_t nsp_layout_create(const nsp_plan_t *plan, int round, int rank,
                               nsp_layout_t **layout_p)
{
    layout_level_src_t *src = NULL;
    nsp_layout_t       *layout;
    int                 nlevels = 0, nall = 0, cursor = 0;
    int64_t             local = 0, full = 0;
    size_t              n64;
    nsp_status_t        status;

    if (plan == NULL || layout_p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_create: NULL plan or output");
    }
    if (round < 0 || round >= plan->nrounds || rank < 0 || rank >= plan->cluster.ranks) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_create: round %d or rank %d out of "
                         "range (the plan has %d rounds and %d ranks)", round, rank,
                         plan->nrounds, plan->cluster.ranks);
    }
    NSP_CHECK(check_round(plan, round));

    src = malloc(sizeof(*src) * ((size_t)plan->rounds[round].ngroups + 1));
    if (src == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "layout: cannot allocate %d levels",
                           plan->rounds[round].ngroups + 1);
        goto err;
    }
    NSP_CHECK_GOTO(collect_levels(plan, round, rank, src, &nlevels, &nall), status,
                   err_free_src);

    layout = calloc(1, sizeof(*layout));
    if (layout == NULL) {
        goto err_no_memory;
    }
    n64            = 7 * (size_t)nall + (size_t)nlevels;
    layout->levels = calloc((size_t)nlevels, sizeof(*layout->levels));
    layout->seqs   = malloc(sizeof(int) * ((size_t)nall + 1));
    layout->i64    = malloc(sizeof(int64_t) * (n64 + 1));
    if (layout->levels == NULL || layout->seqs == NULL || layout->i64 == NULL) {
        goto err_free_layout;
    }

    {
        int64_t *seq_len = layout->i64;
        int64_t *cstart  = seq_len + nall;
        int64_t *clen    = cstart + nall;
        int64_t *coff    = clen + nall;
        int64_t *sstart  = coff + nall;
        int64_t *slen    = sstart + nall;
        int64_t *soff    = slen + nall; /* nall + nlevels entries */

        for (int l = 0; l < nlevels; ++l) {
            nsp_layout_level_t *lv = &layout->levels[l];
            level_arrays_t      a  = {
                .seqs = layout->seqs + cursor, .seq_len = seq_len + cursor,
                .chunk_start = cstart + cursor, .chunk_len = clen + cursor,
                .chunk_offset = coff + cursor, .span_start = sstart + cursor,
                .span_len = slen + cursor, .seq_offset = soff + cursor + l};
            lv->degree        = src[l].degree;
            lv->rank0         = src[l].rank0;
            lv->index         = rank - src[l].rank0;
            lv->ring          = src[l].ring;
            lv->ulysses       = src[l].degree / src[l].ring;
            lv->ring_index    = lv->index / lv->ulysses;
            lv->ulysses_index = lv->index % lv->ulysses;
            lv->ulysses_rank0 = lv->rank0 + lv->ring_index * lv->ulysses;
            lv->nseqs         = src[l].nseqs;
            lv->seqs          = a.seqs;
            lv->seq_len       = a.seq_len;
            lv->chunk_start   = a.chunk_start;
            lv->chunk_len     = a.chunk_len;
            lv->chunk_offset  = a.chunk_offset;
            lv->span_start    = a.span_start;
            lv->span_len      = a.span_len;
            lv->seq_offset    = a.seq_offset;
            fill_level(plan, round, rank, lv, &a, &local);
            full   += lv->full_tokens;
            cursor += src[l].nseqs;
        }
    }

    layout->degree_id = malloc(sizeof(int) * (size_t)nlevels);
    if (layout->degree_id == NULL) {
        goto err_free_layout;
    }
    for (int l = 0; l < nlevels; ++l) { /* distinct sizes below this level's degree */
        layout->degree_id[l] = count_smaller_sizes(&plan->rounds[round], src[l].degree);
    }
    layout->info.rank         = rank;
    layout->info.round        = round;
    layout->info.ranks        = plan->cluster.ranks;
    layout->info.nlevels      = nlevels;
    layout->info.local_tokens = local;
    layout->info.full_tokens  = full;
    layout->info.plan_hash    = round_hash(plan, round);
    free(src);
    *layout_p = layout;
    return NSP_OK;

err_free_layout:
    nsp_layout_free(layout);
err_no_memory:
    status = nsp_error(NSP_ERR_NO_MEMORY, "layout: cannot allocate %d levels and %d sequences",
                       nlevels, nall);
err_free_src:
    free(src);
err:
    return status;
}

void nsp_layout_free(nsp_layout_t *layout)
{
    if (layout == NULL) {
        return;
    }
    free(layout->degree_id);
    free(layout->levels);
    free(layout->seqs);
    free(layout->i64);
    free(layout);
}

nsp_status_t nsp_layout_query(const nsp_layout_t *layout, nsp_layout_info_t *info)
{
    if (layout == NULL || info == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_query: NULL layout or output");
    }
    *info = layout->info;
    return NSP_OK;
}

nsp_status_t nsp_layout_level(const nsp_layout_t *layout, int level, nsp_layout_level_t *out)
{
    if (layout == NULL || out == NULL || level < 0 || level >= layout->info.nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_level: NULL argument or level %d "
                         "out of range [0, %d)", level, layout ? layout->info.nlevels : 0);
    }
    *out = layout->levels[level];
    return NSP_OK;
}

nsp_status_t nsp_layout_level_view(const nsp_layout_t *layout, int level, nsp_level_view_t *view)
{
    const nsp_layout_level_t *lv;

    if (layout == NULL || view == NULL || level < 0 || level >= layout->info.nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_level_view: NULL argument or level "
                         "%d out of range [0, %d)", level, layout ? layout->info.nlevels : 0);
    }
    lv            = &layout->levels[level];
    view->degree  = lv->ulysses; /* the exchange's group: the Ulysses subgroup */
    view->index   = lv->ulysses_index;
    view->nseqs   = lv->nseqs;
    view->seq_len = lv->span_len;
    return NSP_OK;
}

nsp_status_t nsp_layout_heads(const nsp_layout_t *layout, int level, int heads,
                              nsp_layout_heads_t *out)
{
    int64_t row = 0;
    int     first = 0, count = 0, replicas = 1;

    if (layout == NULL || out == NULL || level < 0 || level >= layout->info.nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_heads: NULL argument or level %d "
                         "out of range [0, %d)", level, layout ? layout->info.nlevels : 0);
    }
    for (int l = 0; l <= level; ++l) {
        const nsp_layout_level_t *lv = &layout->levels[l];
        NSP_CHECK(nsp_head_share(heads, lv->ulysses, lv->ulysses_index, &first, &count,
                                 &replicas));
        if (l < level) {
            row += lv->full_tokens * count;
        }
    }
    out->first_head = first;
    out->nheads     = count;
    out->replicas   = replicas;
    out->row_offset = row;
    out->rows       = layout->levels[level].full_tokens * count;
    return NSP_OK;
}

nsp_status_t nsp_layout_head_rows(const nsp_layout_t *layout, int heads, int64_t *rows)
{
    nsp_layout_heads_t last;

    if (layout == NULL || rows == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_head_rows: NULL argument");
    }
    NSP_CHECK(nsp_layout_heads(layout, layout->info.nlevels - 1, heads, &last));
    *rows = last.row_offset + last.rows;
    return NSP_OK;
}

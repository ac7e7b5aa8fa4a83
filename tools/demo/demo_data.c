/*
 * The demo's data: deterministic inputs, the single-process reference of
 * every batch (computed once, sequence by sequence, spread over the ranks),
 * and the check of a rank's outputs against it (see demo.h).
 */
#include "demo.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const demo_tensor_names[DEMO_NTENSORS] = {"o", "lse", "dq", "dk", "dv"};

/* splitmix64 finaliser: a good 64-bit mix. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void demo_fill(uint64_t seed, int tensor, int seq, int64_t tok0, int64_t len, int heads,
               int D, float *out)
{
    /* q and k uniform in [-2, 2), v and dout in [-1, 1), as the tests use. */
    const float amp = tensor <= 1 ? 2.0f : 1.0f;
    uint64_t    base = mix64(seed ^ mix64(0x6e7370646d6full + (uint64_t)tensor));

    base = mix64(base ^ (uint64_t)(uint32_t)seq);
    for (int64_t t = 0; t < len; ++t) {
        uint64_t row_key = mix64(base ^ (uint64_t)(tok0 + t));
        for (int h = 0; h < heads; ++h) {
            /* One stream per (tensor, seq, token, head); D values from it. */
            uint64_t state = mix64(row_key + 0x9e3779b97f4a7c15ull * (uint64_t)(h + 1));
            float   *row = out + ((size_t)t * (size_t)heads + (size_t)h) * (size_t)D;
            for (int j = 0; j < D; ++j) {
                state += 0x9e3779b97f4a7c15ull;
                row[j] = amp * (float)((double)(mix64(state) >> 11) *
                                       (2.0 / 9007199254740992.0) - 1.0);
            }
        }
    }
}

/* Floats per token of each reference tensor. */
static size_t tensor_width(const nsp_attn_params_t *a, int t)
{
    switch (t) {
    case DEMO_LSE: return (size_t)a->q_heads;
    case DEMO_DK:
    case DEMO_DV: return (size_t)a->kv_heads * (size_t)a->head_dim;
    default: return (size_t)a->q_heads * (size_t)a->head_dim;
    }
}

nsp_status_t demo_reference_alloc(demo_t *demo)
{
    for (int b = 0; b < demo->nbatches; ++b) {
        size_t T = (size_t)demo->offsets[b][demo->nseqs[b]], off = 0, per_token = 0;
        char  *base;
        for (int t = 0; t < DEMO_NTENSORS; ++t) {
            per_token += tensor_width(&demo->attn, t);
        }
        demo->ref_bytes[b] = T * per_token * sizeof(float);
        base = demo_shared_alloc(demo->ref_bytes[b]);
        if (base == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "cannot map %zu bytes for the reference of "
                             "batch %d: lower --tokens-per-rank", demo->ref_bytes[b], b);
        }
        for (int t = 0; t < DEMO_NTENSORS; ++t) {
            demo->ref[b][t] = (float *)(void *)(base + off);
            off += T * tensor_width(&demo->attn, t) * sizeof(float);
        }
    }
    return NSP_OK;
}

void demo_reference_free(demo_t *demo)
{
    for (int b = 0; b < demo->nbatches; ++b) {
        demo_shared_free(demo->ref[b][0], demo->ref_bytes[b]);
        memset(demo->ref[b], 0, sizeof(demo->ref[b]));
    }
}

/* Owner of each sequence: longest processing time first on s^2, the same
 * on every rank. owner[nseqs] is caller-owned. */
static nsp_status_t reference_owners(const int64_t *lens, int nseqs, int nranks, int *owner)
{
    int    *order = malloc(sizeof(int) * (size_t)(nseqs + 1));
    double *load = calloc((size_t)nranks, sizeof(double));

    if (order == NULL || load == NULL) {
        free(order);
        free(load);
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the reference schedule");
    }
    for (int i = 0; i < nseqs; ++i) {
        order[i] = i;
    }
    /* insertion sort, longest first, ties by index: nseqs is small */
    for (int i = 1; i < nseqs; ++i) {
        int x = order[i], j = i;
        while (j > 0 && lens[order[j - 1]] < lens[x]) {
            order[j] = order[j - 1];
            --j;
        }
        order[j] = x;
    }
    for (int i = 0; i < nseqs; ++i) {
        int best = 0;
        for (int r = 1; r < nranks; ++r) {
            best = load[r] < load[best] ? r : best;
        }
        owner[order[i]] = best;
        load[best] += (double)lens[order[i]] * (double)lens[order[i]];
    }
    free(order);
    free(load);
    return NSP_OK;
}

nsp_status_t demo_reference(const demo_t *demo, int b, int rank, int nranks)
{
    const nsp_attn_params_t *a = &demo->attn;
    const int64_t           *lens = demo->lens[b], *offs = demo->offsets[b];
    const int                n = demo->nseqs[b];
    const size_t             wq = tensor_width(a, DEMO_O), wk = tensor_width(a, DEMO_DK);
    int64_t                  longest = 1;
    int                     *owner = malloc(sizeof(int) * (size_t)(n + 1));
    float                   *q = NULL, *k = NULL, *v = NULL, *dout = NULL;
    nsp_status_t             status;

    if (owner == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the reference schedule");
    }
    NSP_CHECK_GOTO(reference_owners(lens, n, nranks, owner), status, out_free);
    for (int i = 0; i < n; ++i) {
        longest = lens[i] > longest ? lens[i] : longest;
    }
    q    = malloc(sizeof(float) * (size_t)longest * wq);
    dout = malloc(sizeof(float) * (size_t)longest * wq);
    k    = malloc(sizeof(float) * (size_t)longest * wk);
    v    = malloc(sizeof(float) * (size_t)longest * wk);
    if (q == NULL || dout == NULL || k == NULL || v == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the reference inputs of %lld "
                           "tokens", (long long)longest);
        goto out_free;
    }
    for (int i = 0; i < n; ++i) {
        const int64_t cu[2] = {0, lens[i]};
        const size_t  t0 = (size_t)offs[i];
        /* this sequence's rows of the batch's reference buffers */
        float *o = demo->ref[b][DEMO_O] + t0 * wq, *dq = demo->ref[b][DEMO_DQ] + t0 * wq;
        float *lse = demo->ref[b][DEMO_LSE] + t0 * (size_t)a->q_heads;
        float *dk = demo->ref[b][DEMO_DK] + t0 * wk, *dv = demo->ref[b][DEMO_DV] + t0 * wk;
        if (owner[i] != rank) {
            continue;
        }
        demo_fill(demo->cfg.seed, 0, i, 0, lens[i], a->q_heads, a->head_dim, q);
        demo_fill(demo->cfg.seed, 1, i, 0, lens[i], a->kv_heads, a->head_dim, k);
        demo_fill(demo->cfg.seed, 2, i, 0, lens[i], a->kv_heads, a->head_dim, v);
        demo_fill(demo->cfg.seed, 3, i, 0, lens[i], a->q_heads, a->head_dim, dout);
        NSP_CHECK_GOTO(nsp_attn_fwd(a, 1, cu, q, k, v, o, lse), status, out_free);
        NSP_CHECK_GOTO(nsp_attn_bwd(a, 1, cu, q, k, v, o, lse, dout, dq, dk, dv), status,
                       out_free);
    }
    status = NSP_OK;

out_free:
    free(q);
    free(k);
    free(v);
    free(dout);
    free(owner);
    return status;
}

/* max |local - ref| and max |ref| over `rows` rows of `width` floats. */
static void compare_rows(const float *local, const float *ref, size_t count, double *diff,
                         double *scale)
{
    for (size_t x = 0; x < count; ++x) {
        double d = fabs((double)local[x] - (double)ref[x]), r = fabs((double)ref[x]);
        /* NaN anywhere must fail the check: make it infinite. */
        if (!(d == d) || !(r == r)) {
            d = INFINITY;
        }
        *diff  = d > *diff ? d : *diff;
        *scale = r > *scale ? r : *scale;
    }
}

void demo_check(const demo_t *demo, int b, const nsp_layout_t *layout, const float *o,
                const float *lse, const float *dq, const float *dk, const float *dv,
                demo_rank_check_t *chk)
{
    const nsp_attn_params_t *a = &demo->attn;
    const float             *local[DEMO_NTENSORS] = {o, lse, dq, dk, dv};
    nsp_layout_info_t        info;

    chk->done = 1;
    if (nsp_layout_query(layout, &info) != NSP_OK) {
        chk->max_diff[DEMO_O] = INFINITY;
        return;
    }
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        if (nsp_layout_level(layout, l, &lv) != NSP_OK) {
            chk->max_diff[DEMO_O] = INFINITY;
            return;
        }
        for (int j = 0; j < lv.nseqs; ++j) {
            size_t g = (size_t)(demo->offsets[b][lv.seqs[j]] + lv.chunk_start[j]);
            size_t loc = (size_t)lv.chunk_offset[j], len = (size_t)lv.chunk_len[j];
            for (int t = 0; t < DEMO_NTENSORS; ++t) {
                size_t w = tensor_width(a, t);
                compare_rows(local[t] + loc * w, demo->ref[b][t] + g * w, len * w,
                             &chk->max_diff[t], &chk->max_ref[t]);
            }
        }
    }
}

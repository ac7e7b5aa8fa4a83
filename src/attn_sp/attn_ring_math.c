/*
 * Ring attention math: zigzag layouts and the per-step forward/backward
 * (see attn_ring_math.h for the schedule, docs/design/attention.md for the why).
 */
#include "attn_sp/attn_ring_math.h"

#include "attn_sp/attn_ref.h"
#include "attn_sp/attn_tile.h"
#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

nsp_status_t nsp_ring_attn_layout(int nseqs, const int64_t *seq_lens, int r, int index,
                                  nsp_ring_attn_span_t *spans, int64_t *tokens)
{
    int64_t offset = 0;

    if (nseqs < 0 || (nseqs > 0 && (seq_lens == NULL || spans == NULL)) || tokens == NULL ||
        r < 1 || index < 0 || index >= r) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ring layout: nseqs %d, r %d, index %d: need "
                         "nseqs >= 0, 0 <= index < r and non-NULL arrays", nseqs, r, index);
    }
    for (int j = 0; j < nseqs; ++j) {
        int64_t start[2], len[2];

        NSP_CHECK(nsp_zigzag_chunks(seq_lens[j], r, index, start, len));
        for (int c = 0; c < 2; ++c) {
            spans[2 * j + c].pos0 = start[c];
            spans[2 * j + c].len = len[c];
            spans[2 * j + c].offset = offset;
            offset += len[c];
        }
    }
    *tokens = offset;
    return NSP_OK;
}

/* Allocate and fill the spans of one ring index. */
static nsp_status_t layout_alloc(int nseqs, const int64_t *seq_lens, int r, int index,
                                 nsp_ring_attn_span_t **spans, int64_t *tokens)
{
    nsp_status_t status;
    nsp_ring_attn_span_t *s = malloc((size_t)(2 * nseqs + 1) * sizeof(*s));

    if (s == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ring layout: cannot allocate %d spans",
                         2 * nseqs);
    }
    NSP_CHECK_GOTO(nsp_ring_attn_layout(nseqs, seq_lens, r, index, s, tokens), status, err_free);
    *spans = s;
    return NSP_OK;

err_free:
    free(s);
    return status;
}

nsp_status_t nsp_ring_attn_copy(int nseqs, const int64_t *offsets, int r, int index,
                                int64_t row_floats, float *full, float *local, int to_local)
{
    nsp_status_t status;
    nsp_ring_attn_span_t *spans = NULL;
    int64_t *lens, tokens;

    NSP_CHECK(nsp_attn_check_offsets(nseqs, offsets));
    if (row_floats < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ring copy: row_floats %lld must be >= 1",
                         (long long)row_floats);
    }
    lens = calloc((size_t)nseqs + 1, sizeof(*lens));
    if (lens == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ring copy: cannot allocate %d lengths", nseqs);
    }
    for (int j = 0; j < nseqs; ++j) {
        lens[j] = offsets[j + 1] - offsets[j];
    }
    NSP_CHECK_GOTO(layout_alloc(nseqs, lens, r, index, &spans, &tokens), status, out_free_lens);
    for (int j = 0; j < 2 * nseqs; ++j) {
        const nsp_ring_attn_span_t *sp = &spans[j];
        float *f = full + (offsets[j / 2] + sp->pos0) * row_floats;
        float *l = local + sp->offset * row_floats;
        size_t bytes = (size_t)(sp->len * row_floats) * sizeof(float);

        if (bytes == 0) {
            continue;
        }
        if (to_local) {
            memcpy(l, f, bytes);
        } else {
            memcpy(f, l, bytes);
        }
    }
    free(spans);
out_free_lens:
    free(lens);
    return status;
}

nsp_status_t nsp_ring_attn_fwd_begin(const nsp_attn_params_t *params, int64_t tokens, float *o,
                                     float *lse)
{
    NSP_CHECK(nsp_attn_check_params(params));
    if (tokens < 0 || (tokens > 0 && (o == NULL || lse == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ring forward: %lld tokens with o %p, lse %p",
                         (long long)tokens, (void *)o, (void *)lse);
    }
    for (int64_t i = 0; i < tokens * params->q_heads; ++i) {
        lse[i] = -INFINITY;
    }
    if (tokens > 0) {
        memset(o, 0, (size_t)(tokens * params->q_heads * params->head_dim) * sizeof(float));
    }
    return NSP_OK;
}

/* The layouts of a step: this index's spans and src's spans. */
typedef struct {
    nsp_ring_attn_span_t *mine;
    nsp_ring_attn_span_t *theirs;
    int64_t          max_q_len;  /* longest query span of this index */
} step_layout_t;

static nsp_status_t step_layout_make(int nseqs, const int64_t *seq_lens, int r, int index,
                                     int src, step_layout_t *sl)
{
    nsp_status_t status;
    int64_t tokens;

    if (src < 0 || src >= r) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ring step: source index %d outside [0, %d)",
                         src, r);
    }
    NSP_CHECK(layout_alloc(nseqs, seq_lens, r, index, &sl->mine, &tokens));
    NSP_CHECK_GOTO(layout_alloc(nseqs, seq_lens, r, src, &sl->theirs, &tokens),
                   status, err_free_mine);
    sl->max_q_len = 0;
    for (int j = 0; j < 2 * nseqs; ++j) {
        sl->max_q_len = sl->mine[j].len > sl->max_q_len ? sl->mine[j].len : sl->max_q_len;
    }
    return NSP_OK;

err_free_mine:
    free(sl->mine);
    return status;
}

static void step_layout_free(step_layout_t *sl)
{
    free(sl->mine);
    free(sl->theirs);
}

nsp_status_t nsp_ring_attn_fwd_step(const nsp_attn_params_t *params, int nseqs,
                                    const int64_t *seq_lens, int r, int index, int src,
                                    const float *q, const float *k, const float *v, float *o,
                                    float *lse)
{
    nsp_status_t status;
    step_layout_t sl;
    float *part_o = NULL, *part_lse;
    int nq, nkv, D;

    NSP_CHECK(nsp_attn_check_params(params));
    NSP_CHECK(step_layout_make(nseqs, seq_lens, r, index, src, &sl));
    nq = params->q_heads;
    nkv = params->kv_heads;
    D = params->head_dim;
    /* One partial result [max_q_len, n_q, D] + [max_q_len, n_q], reused per block pair. */
    part_o = malloc((size_t)(sl.max_q_len * nq * (D + 1) + 1) * sizeof(float));
    if (part_o == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "ring forward step: cannot allocate a partial "
                           "of %lld tokens", (long long)sl.max_q_len);
        goto out_free_layout;
    }
    part_lse = part_o + sl.max_q_len * nq * D;

    status = NSP_OK;
    for (int j = 0; j < 2 * nseqs; ++j) {
        const nsp_ring_attn_span_t *qs = &sl.mine[j];

        for (int b = 0; b < 2; ++b) {
            const nsp_ring_attn_span_t *ks = &sl.theirs[2 * (j / 2) + b];
            nsp_attn_geom_t g = nsp_attn_geom_make(params, qs->pos0, qs->len, ks->pos0,
                                                   ks->len);

            if (nsp_attn_geom_empty(&g)) {
                continue;
            }
            NSP_CHECK_GOTO(nsp_attn_tile_fwd(&g, q + qs->offset * nq * D,
                                             k + ks->offset * nkv * D,
                                             v + ks->offset * nkv * D, part_o, part_lse),
                           status, out_free_part);
            NSP_CHECK_GOTO(nsp_attn_merge(qs->len * nq, D, o + qs->offset * nq * D,
                                          lse + qs->offset * nq, part_o, part_lse),
                           status, out_free_part);
        }
    }
out_free_part:
    free(part_o);
out_free_layout:
    step_layout_free(&sl);
    return status;
}

nsp_status_t nsp_ring_attn_bwd_step(const nsp_attn_params_t *params, int nseqs,
                                    const int64_t *seq_lens, int r, int index, int src,
                                    const float *q, const float *dout, const float *lse,
                                    const float *delta, const float *k, const float *v,
                                    float *dq, float *dk, float *dv)
{
    nsp_status_t status = NSP_OK;
    step_layout_t sl;
    int nq, nkv, D;

    NSP_CHECK(nsp_attn_check_params(params));
    NSP_CHECK(step_layout_make(nseqs, seq_lens, r, index, src, &sl));
    nq = params->q_heads;
    nkv = params->kv_heads;
    D = params->head_dim;

    for (int j = 0; j < 2 * nseqs; ++j) {
        const nsp_ring_attn_span_t *qs = &sl.mine[j];
        const int64_t qrow = qs->offset * nq;

        for (int b = 0; b < 2; ++b) {
            const nsp_ring_attn_span_t *ks = &sl.theirs[2 * (j / 2) + b];
            const int64_t kvrow = ks->offset * nkv;
            nsp_attn_geom_t g = nsp_attn_geom_make(params, qs->pos0, qs->len, ks->pos0,
                                                   ks->len);

            if (nsp_attn_geom_empty(&g)) {
                continue;
            }
            NSP_CHECK_GOTO(nsp_attn_tile_bwd(&g, q + qrow * D, k + kvrow * D, v + kvrow * D,
                                             dout + qrow * D, lse + qrow, delta + qrow,
                                             dq + qrow * D, dk + kvrow * D, dv + kvrow * D),
                           status, out_free_layout);
        }
    }
out_free_layout:
    step_layout_free(&sl);
    return status;
}

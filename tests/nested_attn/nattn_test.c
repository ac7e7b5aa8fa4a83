/*
 * Test support for nested attention (see nattn_test.h).
 */
#include "nattn_test.h"

#include "planner/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t nt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t nt_range(uint64_t *state, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(nt_rand(state) % (uint64_t)(hi - lo + 1));
}

float nt_uniform(uint64_t *state)
{
    return (float)((double)(nt_rand(state) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

int64_t nt_long_tailed(uint64_t *state, int64_t max_len)
{
    /* exp of a skewed uniform between ln 1 and ln max_len: many short, a few long. */
    double u = (double)(nt_rand(state) >> 11) / 9007199254740992.0;
    double x = exp(u * u * u * log((double)max_len));
    int64_t len = (int64_t)x;

    return len < 1 ? 1 : (len > max_len ? max_len : len);
}

void nt_model(int q_heads, int kv_heads, int head_dim, nsp_model_t *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "test-%d-%d-%d", q_heads, kv_heads, head_dim);
    m->layers   = 1;
    m->hidden   = q_heads * head_dim;
    m->q_heads  = q_heads;
    m->kv_heads = kv_heads;
    m->head_dim = head_dim;
    m->ffn      = 2.0 * m->hidden;
    m->params   = 1e6;
}

void nt_cluster(int ranks, nsp_cluster_t *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "cpu-%d", ranks);
    c->ranks           = ranks;
    c->ranks_per_node  = ranks;
    c->mem_bytes       = 64e9;
    c->workspace_bytes = 1e9;
    c->gemm_flops      = 2e10;
    c->attn_flops      = 2e10;
    c->bw_intra        = 5e9;
    c->bw_inter        = 5e9;
    c->lat_intra       = 2e-5;
    c->lat_inter       = 2e-5;
    c->overlap         = 0.8;
}

nsp_plan_t *nt_plan(const nsp_model_t *model, const nsp_cluster_t *cluster,
                    const int64_t *lens, int nseqs, const nt_group_t *groups, int ngroups,
                    const int *seq_group)
{
    nsp_group_desc_t *gd = calloc((size_t)ngroups + 1, sizeof(*gd));
    nsp_plan_t       *plan = NULL;

    if (gd == NULL) {
        return NULL;
    }
    for (int g = 0; g < ngroups; ++g) {
        gd[g].round     = groups[g].round;
        gd[g].rank0     = groups[g].rank0;
        gd[g].size      = groups[g].size;
        gd[g].ring      = groups[g].ring > 0 ? groups[g].ring : 1;
        gd[g].pipelined = 1;
    }
    if (nsp_plan_build("hand", model, cluster, lens, nseqs, gd, ngroups, seq_group, &plan) !=
        NSP_OK) {
        plan = NULL;
    }
    free(gd);
    return plan;
}

nsp_plan_t *nt_random_nested(uint64_t *rng, const nsp_model_t *model,
                             const nsp_cluster_t *cluster, const int *degrees, int nd,
                             int nseqs, int64_t max_len)
{
    int          ranks = cluster->ranks, nrounds = 1 + (int)(nt_rand(rng) % 2);
    int          skip = nd > 2 ? (int)nt_range(rng, 0, nd) : nd; /* a degree left out */
    nt_group_t  *groups = calloc((size_t)nseqs + 1, sizeof(*groups));
    int         *seq_group = calloc((size_t)nseqs + 1, sizeof(int));
    int64_t     *lens = calloc((size_t)nseqs + 1, sizeof(int64_t));
    nsp_plan_t  *plan = NULL;

    if (groups == NULL || seq_group == NULL || lens == NULL) {
        goto out;
    }
    for (int i = 0; i < nseqs; ++i) {
        int k;
        lens[i] = nt_long_tailed(rng, max_len);
        /* Longer sequences to larger degrees, with noise. */
        k = (int)((double)(nd - 1) * (double)lens[i] / (double)max_len * 2.0 + 0.5);
        k += (int)nt_range(rng, -1, 1);
        k = k < 0 ? 0 : (k >= nd ? nd - 1 : k);
        if (k == skip && k > 0) {
            --k;
        }
        groups[i].round = (int)(nt_rand(rng) % (uint64_t)nrounds);
        groups[i].size  = degrees[k];
        groups[i].rank0 = (int)nt_range(rng, 0, ranks / degrees[k] - 1) * degrees[k];
        groups[i].ring  = 1;
        if (nt_rand(rng) % 5 == 0) {
            lens[i] = nt_range(rng, 1, 3); /* shorter than most degrees: empty chunks */
        }
        seq_group[i] = i; /* one group entry per sequence; same groups merge in layouts */
    }
    plan = nt_plan(model, cluster, lens, nseqs, groups, nseqs, seq_group);
out:
    free(groups);
    free(seq_group);
    free(lens);
    return plan;
}

void nt_ref_free(nt_ref_t *ref)
{
    free(ref->offsets);
    free(ref->q);
    free(ref->k);
    free(ref->v);
    free(ref->dout);
    free(ref->o);
    free(ref->lse);
    free(ref->dq);
    free(ref->dk);
    free(ref->dv);
    memset(ref, 0, sizeof(*ref));
}

int nt_ref_make(const nsp_plan_t *plan, const nsp_attn_params_t *params, uint64_t seed,
                nt_ref_t *ref)
{
    int64_t  T;
    size_t   nqf, nkf;
    uint64_t rng = seed;

    memset(ref, 0, sizeof(*ref));
    ref->nq      = params->q_heads;
    ref->nkv     = params->kv_heads;
    ref->D       = params->head_dim;
    ref->nseqs   = plan->nseqs;
    ref->offsets = calloc((size_t)plan->nseqs + 1, sizeof(int64_t));
    if (ref->offsets == NULL) {
        return -1;
    }
    for (int s = 0; s < plan->nseqs; ++s) {
        ref->offsets[s + 1] = ref->offsets[s] + plan->seq_lens[s];
    }
    T   = ref->offsets[plan->nseqs];
    nqf = (size_t)T * (size_t)ref->nq * (size_t)ref->D + 1;
    nkf = (size_t)T * (size_t)ref->nkv * (size_t)ref->D + 1;
    ref->q    = malloc(nqf * sizeof(float));
    ref->dout = malloc(nqf * sizeof(float));
    ref->o    = malloc(nqf * sizeof(float));
    ref->dq   = malloc(nqf * sizeof(float));
    ref->lse  = malloc(((size_t)T * (size_t)ref->nq + 1) * sizeof(float));
    ref->k    = malloc(nkf * sizeof(float));
    ref->v    = malloc(nkf * sizeof(float));
    ref->dk   = malloc(nkf * sizeof(float));
    ref->dv   = malloc(nkf * sizeof(float));
    if (!ref->q || !ref->dout || !ref->o || !ref->dq || !ref->lse || !ref->k || !ref->v ||
        !ref->dk || !ref->dv) {
        nt_ref_free(ref);
        return -1;
    }
    for (size_t x = 0; x < nqf; ++x) {
        ref->q[x]    = 2.0f * nt_uniform(&rng);
        ref->dout[x] = nt_uniform(&rng);
    }
    for (size_t x = 0; x < nkf; ++x) {
        ref->k[x] = 2.0f * nt_uniform(&rng);
        ref->v[x] = nt_uniform(&rng);
    }
    if (nsp_attn_fwd(params, plan->nseqs, ref->offsets, ref->q, ref->k, ref->v, ref->o,
                     ref->lse) != NSP_OK ||
        nsp_attn_bwd(params, plan->nseqs, ref->offsets, ref->q, ref->k, ref->v, ref->o,
                     ref->lse, ref->dout, ref->dq, ref->dk, ref->dv) != NSP_OK) {
        fprintf(stderr, "reference: %s\n", nsp_last_error());
        nt_ref_free(ref);
        return -1;
    }
    return 0;
}

/* Visit every chunk of the layout: (global row, local row, tokens). */
typedef void (*chunk_fn)(void *ctx, int64_t grow, int64_t lrow, int64_t len);

static void for_chunks(const nt_ref_t *ref, const nsp_layout_t *layout, chunk_fn fn, void *ctx)
{
    nsp_layout_info_t info;

    nsp_layout_query(layout, &info);
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_level(layout, l, &lv);
        for (int e = 0; e < lv.nseqs; ++e) {
            fn(ctx, ref->offsets[lv.seqs[e]] + lv.chunk_start[e], lv.chunk_offset[e],
               lv.chunk_len[e]);
        }
    }
}

typedef struct gather_ctx {
    const float *global;
    float       *local;
    size_t       row;   /* floats per token */
    const float *cmp;
    double       diff, scale;
} gather_ctx_t;

static void gather_one(void *p, int64_t grow, int64_t lrow, int64_t len)
{
    gather_ctx_t *g = p;

    memcpy(g->local + (size_t)lrow * g->row, g->global + (size_t)grow * g->row,
           (size_t)len * g->row * sizeof(float));
}

void nt_gather(const nt_ref_t *ref, const nsp_layout_t *layout, const float *global,
               int heads, int width, float *local)
{
    gather_ctx_t g = {.global = global, .local = local, .row = (size_t)heads * (size_t)width};

    for_chunks(ref, layout, gather_one, &g);
}

static void diff_one(void *p, int64_t grow, int64_t lrow, int64_t len)
{
    gather_ctx_t *g = p;

    for (size_t x = 0; x < (size_t)len * g->row; ++x) {
        double ref = g->global[(size_t)grow * g->row + x];
        double got = g->cmp[(size_t)lrow * g->row + x];
        double d   = fabs(got - ref);
        if (!(d <= g->diff)) { /* NaN counts as a difference */
            g->diff = isnan(d) ? INFINITY : d;
        }
        g->scale = fabs(ref) > g->scale ? fabs(ref) : g->scale;
    }
}

double nt_max_diff(const nt_ref_t *ref, const nsp_layout_t *layout, const float *global,
                   int heads, int width, const float *local, double *scale)
{
    gather_ctx_t g = {.global = global, .row = (size_t)heads * (size_t)width, .cmp = local};

    for_chunks(ref, layout, diff_one, &g);
    *scale = g.scale;
    return g.diff;
}

/* ---- bf16 / fp16 ------------------------------------------------------------ */

/* Written here apart from the library's own conversions: bf16 by its bits
 * (round to nearest even), fp16 by the compiler's _Float16. */
static uint16_t to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if (isnan(f)) {
        return 0x7fc0u;
    }
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float    f;

    memcpy(&f, &x, sizeof(f));
    return f;
}

int nt_have_fp16(void)
{
#if defined(__FLT16_MAX__)
    return 1;
#else
    return 0;
#endif
}

size_t nt_elem_size(nsp_attn_dtype_t dtype)
{
    return dtype == NSP_ATTN_FP32 ? 4 : 2;
}

static uint16_t narrow(nsp_attn_dtype_t dtype, float f)
{
#if defined(__FLT16_MAX__)
    if (dtype == NSP_ATTN_FP16) {
        _Float16 h = (_Float16)f;
        uint16_t b;
        memcpy(&b, &h, sizeof(b));
        return b;
    }
#endif
    (void)dtype;
    return to_bf16(f);
}

static float widen(nsp_attn_dtype_t dtype, uint16_t b)
{
#if defined(__FLT16_MAX__)
    if (dtype == NSP_ATTN_FP16) {
        _Float16 h;
        memcpy(&h, &b, sizeof(h));
        return (float)h;
    }
#endif
    (void)dtype;
    return from_bf16(b);
}

void nt_to_dtype(nsp_attn_dtype_t dtype, void *buf, size_t n)
{
    const float *f = buf;
    uint16_t    *h = buf;

    if (dtype == NSP_ATTN_FP32) {
        return;
    }
    for (size_t i = 0; i < n; ++i) { /* element i's 2 bytes never pass float i's 4 */
        float x = f[i];
        h[i] = narrow(dtype, x);
    }
}

void nt_from_dtype(nsp_attn_dtype_t dtype, void *buf, size_t n)
{
    float    *f = buf;
    uint16_t *h = buf;

    if (dtype == NSP_ATTN_FP32) {
        return;
    }
    for (size_t i = n; i-- > 0;) { /* from the end: float i covers halves >= i, read */
        uint16_t x = h[i];
        f[i] = widen(dtype, x);
    }
}

/* Rows of a kernel call, from 0 (the driver passes offsets from 0). */
static size_t rows_of(const int64_t *off, int nseqs)
{
    return (size_t)(off[nseqs] - off[0]);
}

/* n elements of dtype into a new float32 buffer (NULL: no memory). */
static float *widened(nsp_attn_dtype_t dtype, const void *src, size_t n)
{
    float *f = malloc(sizeof(float) * (n + 1));

    if (f != NULL && n > 0) {
        memcpy(f, src, n * nt_elem_size(dtype));
        nt_from_dtype(dtype, f, n);
    }
    return f;
}

static void rounded_into(nsp_attn_dtype_t dtype, float *f, size_t n, void *dst)
{
    nt_to_dtype(dtype, f, n);
    memcpy(dst, f, n * nt_elem_size(dtype));
}

static nsp_status_t dtype_fwd(void *ctx, const nsp_attn_batch_t *b, const void *q,
                              const void *k, const void *v, void *o, float *lse)
{
    const nt_dtype_kernel_t *dk = ctx;
    nsp_attn_batch_t         fb = *b;
    size_t nq = rows_of(b->q_offsets, b->nseqs) * (size_t)(b->params.q_heads * b->params.head_dim);
    size_t nk = rows_of(b->kv_offsets, b->nseqs) * (size_t)(b->params.kv_heads *
                                                            b->params.head_dim);
    float *fq = widened(dk->dtype, q, nq), *fk = widened(dk->dtype, k, nk);
    float *fv = widened(dk->dtype, v, nk), *fo = malloc(sizeof(float) * (nq + 1));
    nsp_status_t st = NSP_ERR_NO_MEMORY;

    if (b->dtype != dk->dtype) {
        st = NSP_ERR_INVALID_ARG;
    } else if (fq && fk && fv && fo) {
        fb.dtype = NSP_ATTN_FP32;
        st = dk->ref.fwd(dk->ref.ctx, &fb, fq, fk, fv, fo, lse);
        if (st == NSP_OK) {
            rounded_into(dk->dtype, fo, nq, o);
        }
    }
    free(fq), free(fk), free(fv), free(fo);
    return st;
}

static nsp_status_t dtype_bwd(void *ctx, const nsp_attn_batch_t *b, const void *q,
                              const void *k, const void *v, const void *o, const float *lse,
                              const void *dout, void *dq, void *dk_, void *dv)
{
    const nt_dtype_kernel_t *dk = ctx;
    nsp_attn_batch_t         fb = *b;
    size_t nq = rows_of(b->q_offsets, b->nseqs) * (size_t)(b->params.q_heads * b->params.head_dim);
    size_t nk = rows_of(b->kv_offsets, b->nseqs) * (size_t)(b->params.kv_heads *
                                                            b->params.head_dim);
    float *in[5] = {widened(dk->dtype, q, nq), widened(dk->dtype, k, nk),
                    widened(dk->dtype, v, nk), widened(dk->dtype, o, nq),
                    widened(dk->dtype, dout, nq)};
    float *g[3] = {malloc(sizeof(float) * (nq + 1)), malloc(sizeof(float) * (nk + 1)),
                   malloc(sizeof(float) * (nk + 1))};
    nsp_status_t st = NSP_ERR_NO_MEMORY;
    int          ok = g[0] && g[1] && g[2];

    for (int x = 0; x < 5; ++x) {
        ok &= in[x] != NULL;
    }
    if (b->dtype != dk->dtype) {
        st = NSP_ERR_INVALID_ARG;
    } else if (ok) {
        fb.dtype = NSP_ATTN_FP32;
        st = dk->ref.bwd(dk->ref.ctx, &fb, in[0], in[1], in[2], in[3], lse, in[4], g[0], g[1],
                         g[2]);
        if (st == NSP_OK) {
            rounded_into(dk->dtype, g[0], nq, dq);
            rounded_into(dk->dtype, g[1], nk, dk_);
            rounded_into(dk->dtype, g[2], nk, dv);
        }
    }
    for (int x = 0; x < 5; ++x) {
        free(in[x]);
    }
    free(g[0]), free(g[1]), free(g[2]);
    return st;
}

void nt_dtype_kernel(nt_dtype_kernel_t *dk, nsp_attn_dtype_t dtype, nsp_attn_kernel_t *kernel)
{
    nsp_attn_kernel_reference(&dk->ref);
    dk->dtype = dtype;
    *kernel   = (nsp_attn_kernel_t){.fwd = dtype_fwd, .bwd = dtype_bwd, .ctx = dk};
}

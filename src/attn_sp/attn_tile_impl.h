/*
 * Template of the tiled fp32 attention kernels (see attn_tile.c for the
 * dispatch). Included once per instruction-set variant with:
 *   NSP_TILE_VW      floats per vector: 4 (SSE2/NEON) or 8 (AVX2)
 *   NSP_TILE_FWD     name of the forward entry point to define
 *   NSP_TILE_BWD     name of the backward entry point to define
 *
 * Forward: online (running-max) softmax. Backward: FlashAttention style,
 * P recomputed from the final lse, dS = P * (dP - delta).
 *
 * Work is cut into tiles of TILE_ROWS query rows by TILE_COLS keys. The
 * query rows of a tile are (token, head) pairs of the query heads that share
 * one KV head, so a K/V tile is read once for the whole GQA group. All five
 * products of the backward and both of the forward are one small GEMM,
 * gemm() below, whose 4 x (2 vectors) register block is written with
 * GCC/Clang vector extensions; exp() of a row is vectorised the same way.
 * Every helper is static and forced inline, so each variant's entry points
 * carry that variant's instructions all the way down.
 */
#include "attn_sp/attn_tile.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(NSP_TILE_VW) || !defined(NSP_TILE_FWD) || !defined(NSP_TILE_BWD)
#error "define NSP_TILE_VW, NSP_TILE_FWD and NSP_TILE_BWD before including attn_tile_impl.h"
#endif

/* Query rows per tile (tokens x heads of a GQA group) and keys per tile:
 * 64 x 64 fp32 score tiles (16 KiB) stay in L1/L2 beside the K/V tiles. */
#define TILE_ROWS 64
#define TILE_COLS 64

/* Columns of the GEMM register block: two vectors. */
#define NB (2 * NSP_TILE_VW)

/* GCC notes that passing 32-byte vectors by value changes the ABI without
 * AVX; the helpers are always inlined, so no such call exists. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define NSP_ATTN_INLINE static inline __attribute__((always_inline))

typedef float   vf __attribute__((vector_size(4 * NSP_TILE_VW)));
typedef int32_t vi __attribute__((vector_size(4 * NSP_TILE_VW)));

NSP_ATTN_INLINE vf vf_load(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof(v));
    return v;
}

NSP_ATTN_INLINE void vf_store(float *p, vf v)
{
    memcpy(p, &v, sizeof(v));
}

NSP_ATTN_INLINE vf vf_splat(float x)
{
    return (vf){0} + x;
}

/* Lane-wise select: mask lanes (all ones) take a, the others b. */
#define VF_SELECT(mask, a, b) ((vf)(((vi)(a) & (mask)) | ((vi)(b) & ~(mask))))

NSP_ATTN_INLINE float vf_hsum(vf v)
{
    float s = 0.0f;
    for (int i = 0; i < NSP_TILE_VW; ++i) {
        s += v[i];
    }
    return s;
}

NSP_ATTN_INLINE float vf_hmax(vf v)
{
    float m = v[0];
    for (int i = 1; i < NSP_TILE_VW; ++i) {
        m = v[i] > m ? v[i] : m;
    }
    return m;
}

/*
 * exp(x) lane-wise for x in [-87, 88] (inputs outside are clamped; exp(-87)
 * is 1.6e-38, which is zero for every sum here). Cody-Waite reduction
 * x = n ln2 + r with |r| <= ln2/2, degree-7 Taylor polynomial (truncation
 * 5e-9 relative), then scaling by 2^n through the exponent bits.
 */
NSP_ATTN_INLINE vf vf_exp(vf x)
{
    const vf lo = vf_splat(-87.0f);
    const vf hi = vf_splat(88.0f);
    const vf magic = vf_splat(12582912.0f); /* 1.5 * 2^23: rounds to an integer */
    vf n, r, p;
    vi bits;

    x = VF_SELECT(x < lo, lo, x);
    x = VF_SELECT(x > hi, hi, x);
    n = (x * vf_splat(1.44269504088896341f) + magic) - magic;
    r = x - n * vf_splat(0.693359375f);         /* ln2, high part (exact in fp32) */
    r = r - n * vf_splat(-2.12194440e-4f);      /* ln2, low part */
    p = vf_splat(1.0f / 5040.0f);
    p = p * r + vf_splat(1.0f / 720.0f);
    p = p * r + vf_splat(1.0f / 120.0f);
    p = p * r + vf_splat(1.0f / 24.0f);
    p = p * r + vf_splat(1.0f / 6.0f);
    p = p * r + vf_splat(0.5f);
    p = p * r + vf_splat(1.0f);
    p = p * r + vf_splat(1.0f);
    bits = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)bits;
}

/* ------------------------------------------------------------------------ */
/* The one small GEMM                                                       */
/* ------------------------------------------------------------------------ */

/* A general strided operand: element (m, k) is p[m * ms + k * ks]. */
typedef struct {
    const float *p;
    ptrdiff_t    ms;
    ptrdiff_t    ks;
} strided_t;

/* C[0..4)[0..NB) (+)= A[0..4)[0..K) * B[0..K)[0..NB), in registers. */
NSP_ATTN_INLINE void gemm_4xnb(int64_t K, strided_t a, const float *b, ptrdiff_t ldb,
                               float *c, ptrdiff_t ldc, int overwrite)
{
    vf c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0};
    vf c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};

    for (int64_t k = 0; k < K; ++k) {
        const float *ak = a.p + k * a.ks;
        const float *bk = b + k * ldb;
        vf b0 = vf_load(bk);
        vf b1 = vf_load(bk + NSP_TILE_VW);
        float a0 = ak[0], a1 = ak[a.ms], a2 = ak[2 * a.ms], a3 = ak[3 * a.ms];

        c00 += a0 * b0; c01 += a0 * b1;
        c10 += a1 * b0; c11 += a1 * b1;
        c20 += a2 * b0; c21 += a2 * b1;
        c30 += a3 * b0; c31 += a3 * b1;
    }
    if (!overwrite) {
        c00 += vf_load(c);               c01 += vf_load(c + NSP_TILE_VW);
        c10 += vf_load(c + ldc);         c11 += vf_load(c + ldc + NSP_TILE_VW);
        c20 += vf_load(c + 2 * ldc);     c21 += vf_load(c + 2 * ldc + NSP_TILE_VW);
        c30 += vf_load(c + 3 * ldc);     c31 += vf_load(c + 3 * ldc + NSP_TILE_VW);
    }
    vf_store(c, c00);               vf_store(c + NSP_TILE_VW, c01);
    vf_store(c + ldc, c10);         vf_store(c + ldc + NSP_TILE_VW, c11);
    vf_store(c + 2 * ldc, c20);     vf_store(c + 2 * ldc + NSP_TILE_VW, c21);
    vf_store(c + 3 * ldc, c30);     vf_store(c + 3 * ldc + NSP_TILE_VW, c31);
}

/* The edges: any M x N block, one element at a time. */
NSP_ATTN_INLINE void gemm_edge(int64_t M, int64_t N, int64_t K, strided_t a,
                               const float *b, ptrdiff_t ldb, float *c,
                               ptrdiff_t ldc, int overwrite)
{
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                s += a.p[m * a.ms + k * a.ks] * b[k * ldb + n];
            }
            c[m * ldc + n] = overwrite ? s : c[m * ldc + n] + s;
        }
    }
}

/*
 * C[M][N] (+)= A[M][K] * B[K][N]: A strided (see strided_t), B row-major with
 * row stride ldb, C row-major with row stride ldc (all in floats).
 * overwrite = 1 stores the product, 0 adds it to C.
 */
NSP_ATTN_INLINE void gemm(int64_t M, int64_t N, int64_t K, strided_t a, const float *b,
                          ptrdiff_t ldb, float *c, ptrdiff_t ldc, int overwrite)
{
    int64_t m = 0;

    for (; m + 4 <= M; m += 4) {
        strided_t am = {a.p + m * a.ms, a.ms, a.ks};
        int64_t n = 0;

        for (; n + NB <= N; n += NB) {
            gemm_4xnb(K, am, b + n, ldb, c + m * ldc + n, ldc, overwrite);
        }
        if (n < N) {
            gemm_edge(4, N - n, K, am, b + n, ldb, c + m * ldc + n, ldc, overwrite);
        }
    }
    if (m < M) {
        strided_t am = {a.p + m * a.ms, a.ms, a.ks};

        gemm_edge(M - m, N, K, am, b, ldb, c + m * ldc, ldc, overwrite);
    }
}

/* ------------------------------------------------------------------------ */
/* Row operations of the softmax                                            */
/* ------------------------------------------------------------------------ */

/* max(init, x[0..n)) */
NSP_ATTN_INLINE float row_max(const float *x, int64_t n, float init)
{
    vf mv = vf_splat(init);
    float m;
    int64_t j = 0;

    for (; j + NSP_TILE_VW <= n; j += NSP_TILE_VW) {
        vf xv = vf_load(x + j);
        mv = VF_SELECT(xv > mv, xv, mv);
    }
    m = vf_hmax(mv);
    for (; j < n; ++j) {
        m = x[j] > m ? x[j] : m;
    }
    return m;
}

/* x[j] = exp(x[j] - shift) for j < n; returns the sum of the new x. */
NSP_ATTN_INLINE float row_exp_shift(float *x, int64_t n, float shift)
{
    const vf sv = vf_splat(shift);
    vf acc = {0};
    float sum;
    int64_t j = 0;

    for (; j + NSP_TILE_VW <= n; j += NSP_TILE_VW) {
        vf e = vf_exp(vf_load(x + j) - sv);
        vf_store(x + j, e);
        acc += e;
    }
    sum = vf_hsum(acc);
    for (; j < n; ++j) {
        x[j] = expf(x[j] - shift);
        sum += x[j];
    }
    return sum;
}

/* Keys of this key tile visible to a query at q_pos: a prefix [0, result). */
NSP_ATTN_INLINE int64_t visible_keys(const nsp_attn_geom_t *g, int64_t q_pos,
                                     int64_t kv_tile_pos0, int64_t ncols)
{
    int64_t vis;

    if (!g->causal) {
        return ncols;
    }
    vis = q_pos - kv_tile_pos0 + 1;
    return vis < 0 ? 0 : (vis > ncols ? ncols : vis);
}

/* ------------------------------------------------------------------------ */
/* Gathers between the [tokens, heads, D] buffers and a tile                */
/* ------------------------------------------------------------------------ */

/* Tile rows r = ti * rep + hr are (token t0 + ti, query head g * rep + hr). */
typedef struct {
    int     nq, nkv, D, rep;
    int64_t t0, ntok, rows;
    int     g;
} tile_t;

NSP_ATTN_INLINE const float *q_row(const tile_t *t, const float *base, int64_t r)
{
    int64_t ti = r / t->rep, hr = r % t->rep;
    return base + ((t->t0 + ti) * t->nq + (int64_t)t->g * t->rep + hr) * t->D;
}

/* dst[r][d] = mul * src row r (src [tokens, n_q, D]). */
NSP_ATTN_INLINE void gather_rows(const tile_t *t, const float *src, float mul, float *dst)
{
    for (int64_t r = 0; r < t->rows; ++r) {
        const float *s = q_row(t, src, r);
        for (int d = 0; d < t->D; ++d) {
            dst[r * t->D + d] = mul * s[d];
        }
    }
}

/* dst[r] = src[token, head] of row r (src [tokens, n_q]). */
NSP_ATTN_INLINE void gather_row_values(const tile_t *t, const float *src, float *dst)
{
    for (int64_t r = 0; r < t->rows; ++r) {
        int64_t ti = r / t->rep, hr = r % t->rep;
        dst[r] = src[(t->t0 + ti) * t->nq + (int64_t)t->g * t->rep + hr];
    }
}

/* dst[d][j] = src[(j0 + j), g, d] for j < ncols, d < D (dst row stride ld). */
NSP_ATTN_INLINE void transpose_kv(const tile_t *t, const float *src, int64_t j0,
                                  int64_t ncols, float *dst, int64_t ld)
{
    for (int64_t j = 0; j < ncols; ++j) {
        const float *row = src + ((j0 + j) * t->nkv + t->g) * t->D;
        for (int d = 0; d < t->D; ++d) {
            dst[d * ld + j] = row[d];
        }
    }
}

/*
 * K or V of one KV head, transposed tile by tile to [tiles][D][TILE_COLS] so
 * that the score GEMMs read each tile as a contiguous [D, TILE_COLS] block.
 * When the whole span fits nsp_attn_tile_transpose_cache() floats it is
 * transposed once per head and shared by every query tile (about 10% of
 * the time at 4K tokens); otherwise each use transposes its one tile again.
 */

typedef struct {
    float *buf;    /* [tiles or 1][D][TILE_COLS] */
    int    whole;  /* 1: every tile of the span, transposed by kvt_prepare() */
} kvt_t;

/* Floats of one kvt_t buffer for this geometry (nmat: 1 for K, 2 for K and V). */
NSP_ATTN_INLINE int64_t kvt_floats(const nsp_attn_geom_t *geom, int nmat, int *whole)
{
    int64_t tiles = (geom->kv_len + TILE_COLS - 1) / TILE_COLS;
    int64_t all = tiles * geom->head_dim * TILE_COLS;

    *whole = all * nmat <= nsp_attn_tile_transpose_cache();
    return *whole ? all : (int64_t)geom->head_dim * TILE_COLS;
}

NSP_ATTN_INLINE void kvt_init(kvt_t *x, float *buf, int whole)
{
    x->buf = buf;
    x->whole = whole;
}

/* Before the query tiles of head t->g: transpose every tile if cached. */
NSP_ATTN_INLINE void kvt_prepare(kvt_t *x, const tile_t *t, const float *src, int64_t kv_len)
{
    if (x->whole) {
        for (int64_t j0 = 0; j0 < kv_len; j0 += TILE_COLS) {
            int64_t n = kv_len - j0 < TILE_COLS ? kv_len - j0 : TILE_COLS;
            transpose_kv(t, src, j0, n, x->buf + (j0 / TILE_COLS) * t->D * TILE_COLS,
                         TILE_COLS);
        }
    }
}

/* The [D, TILE_COLS] tile of keys [j0, j0 + ncols) (j0 a multiple of TILE_COLS). */
NSP_ATTN_INLINE const float *kvt_tile(kvt_t *x, const tile_t *t, const float *src, int64_t j0,
                                      int64_t ncols)
{
    if (x->whole) {
        return x->buf + (j0 / TILE_COLS) * t->D * TILE_COLS;
    }
    transpose_kv(t, src, j0, ncols, x->buf, TILE_COLS);
    return x->buf;
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                  */
/* ------------------------------------------------------------------------ */

/* Tokens per tile so that tokens x rep ~ TILE_ROWS. */
static int64_t tile_tokens(int rep)
{
    return rep >= TILE_ROWS ? 1 : TILE_ROWS / rep;
}

/* Scratch of the forward, carved from one allocation (floats). */
typedef struct {
    float *qs;   /* [rows, D]          scaled queries */
    float *acc;  /* [rows, D]          unnormalised output */
    kvt_t  kt;   /* transposed keys */
    float *s;    /* [rows, TILE_COLS]  scores, then probabilities */
    float *m;    /* [rows]             running max */
    float *l;    /* [rows]             running sum */
} fwd_scratch_t;

/* Online softmax of one row of a tile: fold scores s[0..ncols) into the
 * running (m, l) and rescale the accumulated output row; leaves p in s. */
NSP_ATTN_INLINE void fwd_softmax_row(float *s, int64_t vis, int64_t ncols, float *m, float *l,
                                     float *acc_row, int D)
{
    float mx, corr;

    if (vis <= 0) {
        memset(s, 0, (size_t)ncols * sizeof(*s));
        return;
    }
    mx = row_max(s, vis, *m);
    corr = expf(*m - mx); /* 0 when m was -inf */
    *l = *l * corr + row_exp_shift(s, vis, mx);
    *m = mx;
    if (vis < ncols) {
        memset(s + vis, 0, (size_t)(ncols - vis) * sizeof(*s));
    }
    if (corr != 1.0f) {
        for (int d = 0; d < D; ++d) {
            acc_row[d] *= corr;
        }
    }
}

NSP_ATTN_INLINE void fwd_tile_rows(const nsp_attn_geom_t *geom, const tile_t *t, const float *q,
                                   const float *k, const float *v, float *o, float *lse,
                                   fwd_scratch_t *w)
{
    const int D = t->D;
    const int64_t last_q_pos = geom->q_pos0 + t->t0 + t->ntok - 1;

    gather_rows(t, q, geom->scale, w->qs);
    for (int64_t r = 0; r < t->rows; ++r) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->acc, 0, (size_t)(t->rows * D) * sizeof(float));

    for (int64_t j0 = 0; j0 < geom->kv_len; j0 += TILE_COLS) {
        int64_t ncols = geom->kv_len - j0 < TILE_COLS ? geom->kv_len - j0 : TILE_COLS;
        strided_t qa = {w->qs, D, 1};
        strided_t pa = {w->s, TILE_COLS, 1};

        if (geom->causal && geom->kv_pos0 + j0 > last_q_pos) {
            break; /* this and every later key tile is in the future */
        }
        {
        const float *kt = kvt_tile(&w->kt, t, k, j0, ncols);

        /* S [rows, ncols] = (scale * Q) [rows, D] x K^T [D, ncols] */
        gemm(t->rows, ncols, D, qa, kt, TILE_COLS, w->s, TILE_COLS, 1);
        for (int64_t r = 0; r < t->rows; ++r) {
            int64_t q_pos = geom->q_pos0 + t->t0 + r / t->rep;
            int64_t vis = visible_keys(geom, q_pos, geom->kv_pos0 + j0, ncols);

            fwd_softmax_row(w->s + r * TILE_COLS, vis, ncols, &w->m[r], &w->l[r],
                            w->acc + r * D, D);
        }
        /* acc [rows, D] += P [rows, ncols] x V [ncols, D] (V rows of head g) */
        gemm(t->rows, D, ncols, pa, v + (j0 * t->nkv + t->g) * D,
             (ptrdiff_t)t->nkv * D, w->acc, D, 0);
        }
    }

    for (int64_t r = 0; r < t->rows; ++r) {
        int64_t ti = r / t->rep, hr = r % t->rep;
        int64_t row = (t->t0 + ti) * t->nq + (int64_t)t->g * t->rep + hr;
        float *orow = o + row * D;

        if (w->l[r] > 0.0f) {
            float inv = 1.0f / w->l[r];
            for (int d = 0; d < D; ++d) {
                orow[d] = w->acc[r * D + d] * inv;
            }
            lse[row] = w->m[r] + logf(w->l[r]);
        } else { /* no visible key in this block */
            memset(orow, 0, (size_t)D * sizeof(*orow));
            lse[row] = -INFINITY;
        }
    }
}

nsp_status_t NSP_TILE_FWD(const nsp_attn_geom_t *geom, const float *q,
                          const float *k, const float *v, float *o,
                          float *lse)
{
    const int D = geom->head_dim;
    const int rep = geom->q_heads / geom->kv_heads;
    const int64_t ntok_max = tile_tokens(rep);
    const int64_t rows_max = ntok_max * rep;
    int whole;
    const int64_t kt_floats = kvt_floats(geom, 1, &whole);
    const size_t nfloats = (size_t)(2 * rows_max * D + kt_floats + rows_max * TILE_COLS +
                                    2 * rows_max);
    fwd_scratch_t w;
    float *mem;

    if (geom->q_len <= 0) {
        return NSP_OK;
    }
    mem = malloc(nfloats * sizeof(float));
    if (mem == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "attention forward: cannot allocate %zu bytes "
                         "of scratch (head_dim %d, %d query heads per KV head)",
                         nfloats * sizeof(float), D, rep);
    }
    w.qs = mem;
    w.acc = w.qs + rows_max * D;
    w.s = w.acc + rows_max * D;
    w.m = w.s + rows_max * TILE_COLS;
    w.l = w.m + rows_max;
    kvt_init(&w.kt, w.l + rows_max, whole);

    for (int g = 0; g < geom->kv_heads; ++g) {
        tile_t head = {geom->q_heads, geom->kv_heads, D, rep, 0, 0, 0, g};

        kvt_prepare(&w.kt, &head, k, geom->kv_len);
        for (int64_t t0 = 0; t0 < geom->q_len; t0 += ntok_max) {
            tile_t t = {geom->q_heads, geom->kv_heads, D, rep, t0, 0, 0, g};

            t.ntok = geom->q_len - t0 < ntok_max ? geom->q_len - t0 : ntok_max;
            t.rows = t.ntok * rep;
            fwd_tile_rows(geom, &t, q, k, v, o, lse, &w);
        }
    }
    free(mem);
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                 */
/* ------------------------------------------------------------------------ */

/* Scratch of the backward, carved from one allocation (floats). */
typedef struct {
    float *qs;    /* [rows, D]          scaled queries */
    float *dos;   /* [rows, D]          output gradient */
    float *dqs;   /* [rows, D]          dq / scale, accumulated over key tiles */
    kvt_t  kt;    /* transposed keys */
    kvt_t  vt;    /* transposed values */
    float *p;     /* [rows, TILE_COLS]  scores, then probabilities */
    float *ds;    /* [rows, TILE_COLS]  dP, then dS */
    float *lse;   /* [rows] */
    float *delta; /* [rows] */
} bwd_scratch_t;

/* P = exp(S - lse) on the visible prefix, 0 elsewhere; dS = P * (dP - delta). */
NSP_ATTN_INLINE void bwd_softmax_row(float *p, float *ds, int64_t vis, int64_t ncols,
                                     float lse, float delta)
{
    if (vis <= 0 || lse == -INFINITY) {
        memset(p, 0, (size_t)ncols * sizeof(*p));
        memset(ds, 0, (size_t)ncols * sizeof(*ds));
        return;
    }
    (void)row_exp_shift(p, vis, lse);
    {
        const vf dv = vf_splat(delta);
        int64_t j = 0;

        for (; j + NSP_TILE_VW <= vis; j += NSP_TILE_VW) {
            vf_store(ds + j, vf_load(p + j) * (vf_load(ds + j) - dv));
        }
        for (; j < vis; ++j) {
            ds[j] = p[j] * (ds[j] - delta);
        }
    }
    if (vis < ncols) {
        memset(p + vis, 0, (size_t)(ncols - vis) * sizeof(*p));
        memset(ds + vis, 0, (size_t)(ncols - vis) * sizeof(*ds));
    }
}

NSP_ATTN_INLINE void bwd_tile_rows(const nsp_attn_geom_t *geom, const tile_t *t, const float *q,
                                   const float *k, const float *v, const float *dout,
                                   const float *lse, const float *delta, float *dq, float *dk,
                                   float *dv, bwd_scratch_t *w)
{
    const int D = t->D;
    const ptrdiff_t ld_kv = (ptrdiff_t)t->nkv * D;
    const int64_t last_q_pos = geom->q_pos0 + t->t0 + t->ntok - 1;

    gather_rows(t, q, geom->scale, w->qs);
    gather_rows(t, dout, 1.0f, w->dos);
    gather_row_values(t, lse, w->lse);
    gather_row_values(t, delta, w->delta);
    memset(w->dqs, 0, (size_t)(t->rows * D) * sizeof(float));

    for (int64_t j0 = 0; j0 < geom->kv_len; j0 += TILE_COLS) {
        int64_t ncols = geom->kv_len - j0 < TILE_COLS ? geom->kv_len - j0 : TILE_COLS;
        const float *k_tile = k + (j0 * t->nkv + t->g) * D;  /* rows stride ld_kv */
        float *dk_tile = dk + (j0 * t->nkv + t->g) * D;
        float *dv_tile = dv + (j0 * t->nkv + t->g) * D;
        strided_t qa = {w->qs, D, 1}, doa = {w->dos, D, 1};
        strided_t pt = {w->p, 1, TILE_COLS}, dst = {w->ds, 1, TILE_COLS};
        strided_t dsa = {w->ds, TILE_COLS, 1};
        const float *kt, *vt;

        if (geom->causal && geom->kv_pos0 + j0 > last_q_pos) {
            break;
        }
        kt = kvt_tile(&w->kt, t, k, j0, ncols);
        vt = kvt_tile(&w->vt, t, v, j0, ncols);
        /* S [rows, ncols] = (scale Q) K^T;  dP [rows, ncols] = dO V^T */
        gemm(t->rows, ncols, D, qa, kt, TILE_COLS, w->p, TILE_COLS, 1);
        gemm(t->rows, ncols, D, doa, vt, TILE_COLS, w->ds, TILE_COLS, 1);
        for (int64_t r = 0; r < t->rows; ++r) {
            int64_t q_pos = geom->q_pos0 + t->t0 + r / t->rep;
            int64_t vis = visible_keys(geom, q_pos, geom->kv_pos0 + j0, ncols);

            bwd_softmax_row(w->p + r * TILE_COLS, w->ds + r * TILE_COLS, vis, ncols,
                            w->lse[r], w->delta[r]);
        }
        /* dV [ncols, D] += P^T dO;  dK [ncols, D] += dS^T (scale Q);
         * dQ/scale [rows, D] += dS K */
        gemm(ncols, D, t->rows, pt, w->dos, D, dv_tile, ld_kv, 0);
        gemm(ncols, D, t->rows, dst, w->qs, D, dk_tile, ld_kv, 0);
        gemm(t->rows, D, ncols, dsa, k_tile, ld_kv, w->dqs, D, 0);
    }

    for (int64_t r = 0; r < t->rows; ++r) {
        float *dqr = (float *)q_row(t, dq, r);
        for (int d = 0; d < D; ++d) {
            dqr[d] += geom->scale * w->dqs[r * D + d];
        }
    }
}

nsp_status_t NSP_TILE_BWD(const nsp_attn_geom_t *geom, const float *q,
                          const float *k, const float *v,
                          const float *dout, const float *lse,
                          const float *delta, float *dq, float *dk,
                          float *dv)
{
    const int D = geom->head_dim;
    const int rep = geom->q_heads / geom->kv_heads;
    const int64_t ntok_max = tile_tokens(rep);
    const int64_t rows_max = ntok_max * rep;
    int whole;
    const int64_t kt_floats = kvt_floats(geom, 2, &whole);
    const size_t nfloats = (size_t)(3 * rows_max * D + 2 * kt_floats +
                                    2 * rows_max * TILE_COLS + 2 * rows_max);
    bwd_scratch_t w;
    float *mem;

    if (nsp_attn_geom_empty(geom)) {
        return NSP_OK;
    }
    mem = malloc(nfloats * sizeof(float));
    if (mem == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "attention backward: cannot allocate %zu bytes "
                         "of scratch (head_dim %d, %d query heads per KV head)",
                         nfloats * sizeof(float), D, rep);
    }
    w.qs = mem;
    w.dos = w.qs + rows_max * D;
    w.dqs = w.dos + rows_max * D;
    w.p = w.dqs + rows_max * D;
    w.ds = w.p + rows_max * TILE_COLS;
    w.lse = w.ds + rows_max * TILE_COLS;
    w.delta = w.lse + rows_max;
    kvt_init(&w.kt, w.delta + rows_max, whole);
    kvt_init(&w.vt, w.kt.buf + kt_floats, whole);

    for (int g = 0; g < geom->kv_heads; ++g) {
        tile_t head = {geom->q_heads, geom->kv_heads, D, rep, 0, 0, 0, g};

        kvt_prepare(&w.kt, &head, k, geom->kv_len);
        kvt_prepare(&w.vt, &head, v, geom->kv_len);
        for (int64_t t0 = 0; t0 < geom->q_len; t0 += ntok_max) {
            tile_t t = {geom->q_heads, geom->kv_heads, D, rep, t0, 0, 0, g};

            t.ntok = geom->q_len - t0 < ntok_max ? geom->q_len - t0 : ntok_max;
            t.rows = t.ntok * rep;
            bwd_tile_rows(geom, &t, q, k, v, dout, lse, delta, dq, dk, dv, &w);
        }
    }
    free(mem);
    return NSP_OK;
}

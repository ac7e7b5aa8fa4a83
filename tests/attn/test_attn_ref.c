/*
 * The host reference attention (nspcomm.h section 9) against an independent
 * double-precision naive implementation (attn_naive.c) and against central
 * finite differences. Every check runs once per kernel variant this CPU can
 * run (generic 4-float vectors; AVX2+FMA where available).
 *
 * Tolerances (docs/reference/attention.md): with inputs uniform in [-a, a], errors are
 * measured as max |kernel - naive| over a whole batch, relative to max |naive|
 * of the same tensor (lse: relative to max(1, max |lse|)):
 *   forward o, lse          <= FWD_TOL
 *   backward dq, dk, dv     <= BWD_TOL
 *   finite differences of the fp32 kernel (h = FD_H)   <= FD_TOL_F32
 *   finite differences of the naive double oracle       <= FD_TOL_F64
 */
#include "nspcomm.h"

#include "attn_naive.h"
#include "attn_sp/attn_tile.h"
#include "../tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FWD_TOL    1e-4
#define BWD_TOL    1e-4
#define FD_H       1e-2
#define FD_TOL_F32 1e-3
#define FD_TOL_F64 1e-6

/* A random packed batch. Buffers have `pad` spare tokens before the first
 * sequence and after the last, to check that they are left alone. */
typedef struct {
    nsp_attn_params_t p;
    naive_shape_t     s;
    int               nseqs;
    int64_t          *offsets;   /* [nseqs + 1], offsets[0] = pad */
    int64_t           T;         /* tokens of every buffer, pads included */
    float            *q, *k, *v, *dout;
} problem_t;

static const int head_dims[] = {1, 3, 8, 16, 17, 32, 64, 80, 128};

static void problem_set_shape(problem_t *pb, int nq, int nkv, int D, float scale, int causal)
{
    pb->p.q_heads = nq;
    pb->p.kv_heads = nkv;
    pb->p.head_dim = D;
    pb->p.scale = scale;
    pb->p.causal = causal;
    pb->s.nq = nq;
    pb->s.nkv = nkv;
    pb->s.D = D;
    pb->s.scale = scale != 0.0f ? (double)scale : 1.0 / sqrt((double)D);
    pb->s.causal = causal;
}

/* Buffers for given sequence lengths, values uniform in [-amp, amp). */
static void problem_fill(problem_t *pb, int nseqs, const int64_t *lens, int pad, double amp,
                         uint64_t *st)
{
    pb->nseqs = nseqs;
    pb->offsets = malloc((size_t)(nseqs + 1) * sizeof(int64_t));
    pb->offsets[0] = pad;
    for (int j = 0; j < nseqs; ++j) {
        pb->offsets[j + 1] = pb->offsets[j] + lens[j];
    }
    pb->T = pb->offsets[nseqs] + pad;
    pb->q = alloc_floats(pb->T * pb->p.q_heads * pb->p.head_dim);
    pb->k = alloc_floats(pb->T * pb->p.kv_heads * pb->p.head_dim);
    pb->v = alloc_floats(pb->T * pb->p.kv_heads * pb->p.head_dim);
    pb->dout = alloc_floats(pb->T * pb->p.q_heads * pb->p.head_dim);
    naive_fill(pb->q, pb->T * pb->p.q_heads * pb->p.head_dim, -amp, amp, st);
    naive_fill(pb->k, pb->T * pb->p.kv_heads * pb->p.head_dim, -amp, amp, st);
    naive_fill(pb->v, pb->T * pb->p.kv_heads * pb->p.head_dim, -1.0, 1.0, st);
    naive_fill(pb->dout, pb->T * pb->p.q_heads * pb->p.head_dim, -1.0, 1.0, st);
}

/* A random GQA shape and varlen batch: lengths 0..max_len (mostly >= 1). */
static void problem_random(problem_t *pb, int max_len, int max_seqs, uint64_t *st)
{
    int nkv = naive_rand_int(st, 1, 4), rep = naive_rand_int(st, 1, 4);
    int D = head_dims[naive_rand_int(st, 0, (int)(sizeof(head_dims) / sizeof(int)) - 1)];
    float scale = naive_rand(st) < 0.7 ? 0.0f : (float)(0.05 + 0.95 * naive_rand(st));
    int causal = naive_rand(st) < 0.8;
    int nseqs = naive_rand_int(st, 1, max_seqs);
    int64_t lens[16];

    problem_set_shape(pb, nkv * rep, nkv, D, scale, causal);
    for (int j = 0; j < nseqs; ++j) {
        lens[j] = naive_rand(st) < 0.1 ? 0 : naive_rand_int(st, 1, max_len);
    }
    problem_fill(pb, nseqs, lens, naive_rand_int(st, 0, 3), naive_rand(st) < 0.5 ? 1.0 : 2.0,
                 st);
}

static void problem_free(problem_t *pb)
{
    free(pb->offsets);
    free(pb->q);
    free(pb->k);
    free(pb->v);
    free(pb->dout);
}

static const char *shape_str(const problem_t *pb, char *buf, size_t n)
{
    snprintf(buf, n, "n_q %d n_kv %d D %d %s scale %g, %d seqs, %lld tokens",
             pb->p.q_heads, pb->p.kv_heads, pb->p.head_dim,
             pb->p.causal ? "causal" : "full", pb->s.scale, pb->nseqs,
             (long long)(pb->offsets[pb->nseqs] - pb->offsets[0]));
    return buf;
}

/* Rows [0, offsets[0]) and [offsets[n], T) of x ([T, width]) still hold `canary`? */
static int pads_untouched(const problem_t *pb, const float *x, int64_t width, float canary)
{
    for (int64_t t = 0; t < pb->T; ++t) {
        if (t >= pb->offsets[0] && t < pb->offsets[pb->nseqs]) {
            continue;
        }
        for (int64_t i = 0; i < width; ++i) {
            if (x[t * width + i] != canary) {
                return 0;
            }
        }
    }
    return 1;
}

static void fill_value(float *x, int64_t n, float value)
{
    for (int64_t i = 0; i < n; ++i) {
        x[i] = value;
    }
}

/* Worst relative errors seen, for the summary diagnostics. */
static double worst_fwd, worst_bwd, worst_fd32;

static void check_forward(const problem_t *pb, const char *tag)
{
    const int64_t no = pb->T * pb->p.q_heads * pb->p.head_dim, nl = pb->T * pb->p.q_heads;
    float *o = alloc_floats(no), *lse = alloc_floats(nl);
    double *ro = alloc_doubles(no), *rlse = alloc_doubles(nl);
    const float canary = 1234.5f;
    double eo, el, so, sl;
    char sb[160];
    nsp_status_t st;

    fill_value(o, no, canary);
    fill_value(lse, nl, canary);
    st = nsp_attn_fwd(&pb->p, pb->nseqs, pb->offsets, pb->q, pb->k, pb->v, o, lse);
    naive_fwd(&pb->s, pb->nseqs, pb->offsets, pb->q, pb->k, pb->v, ro, rlse);
    so = naive_max_abs(ro, no);
    sl = naive_max_abs(rlse, nl);
    eo = naive_max_abs_diff(o + pb->offsets[0] * pb->p.q_heads * pb->p.head_dim,
                            ro + pb->offsets[0] * pb->p.q_heads * pb->p.head_dim,
                            (pb->offsets[pb->nseqs] - pb->offsets[0]) * pb->p.q_heads *
                                pb->p.head_dim) / (so > 0 ? so : 1.0);
    el = naive_max_abs_diff(lse + pb->offsets[0] * pb->p.q_heads,
                            rlse + pb->offsets[0] * pb->p.q_heads,
                            (pb->offsets[pb->nseqs] - pb->offsets[0]) * pb->p.q_heads) /
         (sl > 1 ? sl : 1.0);
    worst_fwd = fmax(worst_fwd, fmax(eo, el));
    if (!tap_ok(st == NSP_OK && eo <= FWD_TOL && el <= FWD_TOL &&
                    pads_untouched(pb, o, (int64_t)pb->p.q_heads * pb->p.head_dim, canary) &&
                    pads_untouched(pb, lse, pb->p.q_heads, canary),
                "%s forward = naive (%s)", tag, shape_str(pb, sb, sizeof(sb)))) {
        tap_diag("status %d (%s), rel err o %.3g lse %.3g (tol %g), pads %d %d", st,
                 nsp_last_error(), eo, el, FWD_TOL,
                 pads_untouched(pb, o, (int64_t)pb->p.q_heads * pb->p.head_dim, canary),
                 pads_untouched(pb, lse, pb->p.q_heads, canary));
    }
    free(o);
    free(lse);
    free(ro);
    free(rlse);
}

/* Relative error of a float gradient tensor over the batch rows. */
static double grad_err(const problem_t *pb, const float *g, const double *ref, int heads)
{
    int64_t row0 = pb->offsets[0] * heads * pb->p.head_dim;
    int64_t n = (pb->offsets[pb->nseqs] - pb->offsets[0]) * heads * pb->p.head_dim;
    double scale = naive_max_abs(ref + row0, n);

    return naive_max_abs_diff(g + row0, ref + row0, n) / (scale > 0 ? scale : 1.0);
}

static void check_backward(const problem_t *pb, const char *tag)
{
    const int D = pb->p.head_dim;
    const int64_t nqe = pb->T * pb->p.q_heads * D, nkve = pb->T * pb->p.kv_heads * D;
    float *o = alloc_floats(nqe), *lse = alloc_floats(pb->T * pb->p.q_heads);
    float *dq = alloc_floats(nqe), *dk = alloc_floats(nkve), *dv = alloc_floats(nkve);
    double *rdq = alloc_doubles(nqe), *rdk = alloc_doubles(nkve), *rdv = alloc_doubles(nkve);
    const float canary = -77.0f;
    double eq, ek, ev;
    nsp_status_t st;
    char sb[160];

    fill_value(dq, nqe, canary);
    fill_value(dk, nkve, canary);
    fill_value(dv, nkve, canary);
    st = nsp_attn_fwd(&pb->p, pb->nseqs, pb->offsets, pb->q, pb->k, pb->v, o, lse);
    if (st == NSP_OK) {
        st = nsp_attn_bwd(&pb->p, pb->nseqs, pb->offsets, pb->q, pb->k, pb->v, o, lse,
                          pb->dout, dq, dk, dv);
    }
    naive_bwd(&pb->s, pb->nseqs, pb->offsets, pb->q, pb->k, pb->v, pb->dout, rdq, rdk, rdv);
    eq = grad_err(pb, dq, rdq, pb->p.q_heads);
    ek = grad_err(pb, dk, rdk, pb->p.kv_heads);
    ev = grad_err(pb, dv, rdv, pb->p.kv_heads);
    worst_bwd = fmax(worst_bwd, fmax(eq, fmax(ek, ev)));
    if (!tap_ok(st == NSP_OK && eq <= BWD_TOL && ek <= BWD_TOL && ev <= BWD_TOL &&
                    pads_untouched(pb, dq, (int64_t)pb->p.q_heads * D, canary) &&
                    pads_untouched(pb, dk, (int64_t)pb->p.kv_heads * D, canary),
                "%s backward = naive double gradient (%s)", tag,
                shape_str(pb, sb, sizeof(sb)))) {
        tap_diag("status %d (%s), rel err dq %.3g dk %.3g dv %.3g (tol %g)", st,
                 nsp_last_error(), eq, ek, ev, BWD_TOL);
    }
    free(o); free(lse); free(dq); free(dk); free(dv);
    free(rdq); free(rdk); free(rdv);
}

/* ------------------------------------------------------------------------ */
/* Finite differences                                                       */
/* ------------------------------------------------------------------------ */

/* L = sum(dout * o) with o from the fp32 kernel (use_naive = 0) or the
 * naive double forward (1), accumulated in double. */
static double loss(const problem_t *pb, int use_naive)
{
    const int64_t n = pb->T * pb->p.q_heads * pb->p.head_dim, nl = pb->T * pb->p.q_heads;
    double L = 0.0;

    if (use_naive) {
        double *o = alloc_doubles(n), *lse = alloc_doubles(nl);
        naive_fwd(&pb->s, pb->nseqs, pb->offsets, pb->q, pb->k, pb->v, o, lse);
        for (int64_t i = 0; i < n; ++i) {
            L += (double)pb->dout[i] * o[i];
        }
        free(o);
        free(lse);
    } else {
        float *o = alloc_floats(n), *lse = alloc_floats(nl);
        if (nsp_attn_fwd(&pb->p, pb->nseqs, pb->offsets, pb->q, pb->k, pb->v, o, lse) !=
            NSP_OK) {
            L = NAN;
        }
        for (int64_t i = 0; i < n; ++i) {
            L += (double)pb->dout[i] * (double)o[i];
        }
        free(o);
        free(lse);
    }
    return L;
}

/* Central differences of L over every element of x [n]; the step actually
 * taken (after rounding x +- h to float) is the denominator. Returns
 * max |fd - grad| / max |grad|. */
static double fd_error(problem_t *pb, float *x, int64_t n, const double *grad, double h,
                       int use_naive)
{
    double worst = 0.0, gmax = naive_max_abs(grad, n);

    for (int64_t i = 0; i < n; ++i) {
        float x0 = x[i], xp = (float)(x0 + h), xm = (float)(x0 - h);
        double lp, lm, fd;

        x[i] = xp;
        lp = loss(pb, use_naive);
        x[i] = xm;
        lm = loss(pb, use_naive);
        x[i] = x0;
        fd = (lp - lm) / ((double)xp - (double)xm);
        worst = fmax(worst, fabs(fd - grad[i]));
    }
    return worst / (gmax > 0 ? gmax : 1.0);
}

static void to_double(const float *x, double *y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        y[i] = (double)x[i];
    }
}

/* FD of the fp32 kernel against its own backward, and FD of the naive
 * double forward against the naive gradient (which the other checks use). */
static void check_finite_differences(const char *tag, int causal, uint64_t *st)
{
    problem_t pb;
    const int64_t lens[] = {5, 1, 7};
    int64_t nqe, nkve;
    float *o, *lse, *dq, *dk, *dv;
    double *g, *rdq, *rdk, *rdv, e32 = 0.0, e64 = 0.0;
    nsp_status_t s;

    problem_set_shape(&pb, 4, 2, 6, 0.0f, causal);
    problem_fill(&pb, 3, lens, 1, 1.5, st);
    nqe = pb.T * 4 * 6;
    nkve = pb.T * 2 * 6;
    o = alloc_floats(nqe); lse = alloc_floats(pb.T * 4);
    dq = alloc_floats(nqe); dk = alloc_floats(nkve); dv = alloc_floats(nkve);
    g = alloc_doubles(nqe);
    rdq = alloc_doubles(nqe); rdk = alloc_doubles(nkve); rdv = alloc_doubles(nkve);

    s = nsp_attn_fwd(&pb.p, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, o, lse);
    if (s == NSP_OK) {
        s = nsp_attn_bwd(&pb.p, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, o, lse, pb.dout, dq,
                         dk, dv);
    }
    to_double(dq, g, nqe);
    e32 = fmax(e32, fd_error(&pb, pb.q, nqe, g, FD_H, 0));
    to_double(dk, g, nkve);
    e32 = fmax(e32, fd_error(&pb, pb.k, nkve, g, FD_H, 0));
    to_double(dv, g, nkve);
    e32 = fmax(e32, fd_error(&pb, pb.v, nkve, g, FD_H, 0));
    worst_fd32 = fmax(worst_fd32, e32);
    tap_ok(s == NSP_OK && e32 <= FD_TOL_F32,
           "%s %s: fp32 gradient = central differences of the fp32 forward (h %g): rel err "
           "%.3g <= %g", tag, causal ? "causal" : "full", FD_H, e32, FD_TOL_F32);

    naive_bwd(&pb.s, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, pb.dout, rdq, rdk, rdv);
    e64 = fmax(e64, fd_error(&pb, pb.q, nqe, rdq, 1e-3, 1));
    e64 = fmax(e64, fd_error(&pb, pb.k, nkve, rdk, 1e-3, 1));
    e64 = fmax(e64, fd_error(&pb, pb.v, nkve, rdv, 1e-3, 1));
    tap_ok(e64 <= FD_TOL_F64,
           "%s %s: naive double gradient = central differences of the naive forward: rel "
           "err %.3g <= %g", tag, causal ? "causal" : "full", e64, FD_TOL_F64);

    free(o); free(lse); free(dq); free(dk); free(dv); free(g);
    free(rdq); free(rdk); free(rdv);
    problem_free(&pb);
}

/* ------------------------------------------------------------------------ */
/* Stability, edges, errors, the kernel callback                            */
/* ------------------------------------------------------------------------ */

/* Scores of several hundred (exp overflows fp32 above 88): the running max
 * must keep everything finite and right. */
static void check_large_scores(const char *tag, uint64_t *st)
{
    problem_t pb;
    const int64_t lens[] = {300, 64};
    int64_t no, nl;
    float *o, *lse;
    double *ro, *rlse, eo, el;
    int finite = 1;
    nsp_status_t s;

    problem_set_shape(&pb, 2, 1, 16, 4.0f, 1);
    problem_fill(&pb, 2, lens, 0, 3.0, st); /* |scores| up to 4 * 16 * 9 = 576 */
    no = pb.T * 2 * 16;
    nl = pb.T * 2;
    o = alloc_floats(no); lse = alloc_floats(nl);
    ro = alloc_doubles(no); rlse = alloc_doubles(nl);
    s = nsp_attn_fwd(&pb.p, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, o, lse);
    naive_fwd(&pb.s, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, ro, rlse);
    for (int64_t i = 0; i < no; ++i) {
        finite &= isfinite(o[i]) != 0;
    }
    for (int64_t i = 0; i < nl; ++i) {
        finite &= isfinite(lse[i]) != 0;
    }
    eo = naive_max_abs_diff(o, ro, no) / naive_max_abs(ro, no);
    el = naive_max_abs_diff(lse, rlse, nl) / naive_max_abs(rlse, nl);
    tap_ok(s == NSP_OK && finite && eo <= 1e-3 && el <= 1e-6,
           "%s scores up to ~500: finite, o rel err %.3g <= 1e-3, lse rel err %.3g <= 1e-6 "
           "(max |lse| %.0f)", tag, eo, el, naive_max_abs(rlse, nl));
    free(o); free(lse); free(ro); free(rlse);
    problem_free(&pb);
}

static void check_errors(void)
{
    nsp_attn_params_t p = NSP_ATTN_PARAMS_INIT(6, 4, 8);
    int64_t off[3] = {0, 4, 2};
    float buf[4 * 8 * 8] = {0};
    float lse[64] = {0};
    nsp_attn_kernel_t kern;
    nsp_attn_batch_t batch;
    int64_t good[2] = {0, 1};

    tap_is_int(nsp_attn_fwd(&p, 1, off, buf, buf, buf, buf, lse), NSP_ERR_INVALID_ARG,
               "q_heads 6 with kv_heads 4: NSP_ERR_INVALID_ARG");
    tap_ok(strstr(nsp_last_error(), "kv_heads") != NULL, "... and the message names the "
           "field: %s", nsp_last_error());
    p.kv_heads = 2;
    tap_is_int(nsp_attn_fwd(&p, 2, off, buf, buf, buf, buf, lse), NSP_ERR_INVALID_ARG,
               "decreasing offsets: NSP_ERR_INVALID_ARG");
    tap_ok(strstr(nsp_last_error(), "sequence 1") != NULL, "... names the sequence: %s",
           nsp_last_error());
    p.head_dim = 0;
    tap_is_int(nsp_attn_fwd(&p, 1, off, buf, buf, buf, buf, lse), NSP_ERR_INVALID_ARG,
               "head_dim 0: NSP_ERR_INVALID_ARG");
    p.head_dim = 8;
    p.scale = NAN;
    tap_is_int(nsp_attn_bwd(&p, 1, off, buf, buf, buf, buf, lse, buf, buf, buf, buf),
               NSP_ERR_INVALID_ARG, "NaN scale: NSP_ERR_INVALID_ARG");
    p.scale = 0.0f;
    tap_is_int(nsp_attn_fwd(&p, 1, off, NULL, buf, buf, buf, lse), NSP_ERR_INVALID_ARG,
               "NULL q with tokens: NSP_ERR_INVALID_ARG");
    tap_is_int(nsp_attn_fwd(&p, 0, off, NULL, NULL, NULL, NULL, NULL), NSP_OK,
               "an empty batch with NULL buffers is fine");
    tap_is_int(nsp_attn_block_fwd(&p, -1, 2, buf, 0, 2, buf, buf, buf, lse),
               NSP_ERR_INVALID_ARG, "negative block position: NSP_ERR_INVALID_ARG");
    tap_is_int(nsp_attn_merge(-1, 8, buf, lse, buf, lse), NSP_ERR_INVALID_ARG,
               "merge with negative rows: NSP_ERR_INVALID_ARG");
    tap_is_int(nsp_attn_kernel_reference(NULL), NSP_ERR_INVALID_ARG,
               "reference kernel into NULL: NSP_ERR_INVALID_ARG");
    nsp_attn_kernel_reference(&kern);
    memset(&batch, 0, sizeof(batch));
    batch.params = p;
    batch.params.scale = 0.25f;
    batch.dtype = NSP_ATTN_BF16;
    batch.nseqs = 1;
    batch.q_offsets = good;
    batch.kv_offsets = good;
    tap_is_int(kern.fwd(kern.ctx, &batch, buf, buf, buf, buf, lse), NSP_ERR_UNSUPPORTED,
               "reference kernel with bf16: NSP_ERR_UNSUPPORTED");
}

/* The reference kernel callback computes what nsp_attn_fwd/bwd compute (the
 * same code: bit for bit), and handles q and kv offsets that differ. */
static void check_kernel_callback(const char *tag, uint64_t *st)
{
    problem_t pb;
    const int64_t lens[] = {37, 0, 130, 5};
    nsp_attn_kernel_t kern;
    nsp_attn_batch_t batch;
    int64_t nqe, nkve;
    float *o1, *o2, *l1, *l2, *g1[3], *g2[3];
    nsp_status_t s1, s2, s3, s4;
    int same = 1;

    problem_set_shape(&pb, 6, 2, 32, 0.0f, 1);
    problem_fill(&pb, 4, lens, 2, 1.0, st);
    nqe = pb.T * 6 * 32;
    nkve = pb.T * 2 * 32;
    o1 = alloc_floats(nqe); o2 = alloc_floats(nqe);
    l1 = alloc_floats(pb.T * 6); l2 = alloc_floats(pb.T * 6);
    for (int i = 0; i < 3; ++i) {
        g1[i] = alloc_floats(i == 0 ? nqe : nkve);
        g2[i] = alloc_floats(i == 0 ? nqe : nkve);
    }
    nsp_attn_kernel_reference(&kern);
    memset(&batch, 0, sizeof(batch));
    batch.params = pb.p;
    batch.params.scale = (float)pb.s.scale;
    batch.dtype = NSP_ATTN_FP32;
    batch.nseqs = pb.nseqs;
    batch.q_offsets = pb.offsets;
    batch.kv_offsets = pb.offsets;
    batch.max_q_len = batch.max_kv_len = 130;
    s1 = nsp_attn_fwd(&pb.p, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, o1, l1);
    s2 = kern.fwd(kern.ctx, &batch, pb.q, pb.k, pb.v, o2, l2);
    s3 = nsp_attn_bwd(&pb.p, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, o1, l1, pb.dout, g1[0],
                      g1[1], g1[2]);
    s4 = kern.bwd(kern.ctx, &batch, pb.q, pb.k, pb.v, o1, l1, pb.dout, g2[0], g2[1], g2[2]);
    same = memcmp(o1, o2, (size_t)nqe * sizeof(float)) == 0 &&
           memcmp(l1, l2, (size_t)pb.T * 6 * sizeof(float)) == 0;
    tap_ok(s1 == NSP_OK && s2 == NSP_OK && same,
           "%s reference kernel forward = nsp_attn_fwd bit for bit", tag);
    same = memcmp(g1[0], g2[0], (size_t)nqe * sizeof(float)) == 0 &&
           memcmp(g1[1], g2[1], (size_t)nkve * sizeof(float)) == 0 &&
           memcmp(g1[2], g2[2], (size_t)nkve * sizeof(float)) == 0;
    tap_ok(s3 == NSP_OK && s4 == NSP_OK && same,
           "%s reference kernel backward = nsp_attn_bwd bit for bit", tag);

    /* Ring-block style call: each sequence's queries against the keys of the
     * NEXT sequence's slot, non-causal, lengths differing. */
    {
        int64_t kvo[5];
        double *ro = alloc_doubles(nqe), *rl = alloc_doubles(pb.T * 6);
        double err = 0.0;

        kvo[0] = pb.offsets[0];
        for (int j = 0; j < 4; ++j) {
            kvo[j + 1] = kvo[j] + lens[(j + 1) % 4];
        }
        batch.kv_offsets = kvo;
        batch.params.causal = 0;
        s1 = kern.fwd(kern.ctx, &batch, pb.q, pb.k, pb.v, o2, l2);
        pb.s.causal = 0;
        for (int j = 0; j < 4; ++j) {
            int64_t qt = pb.offsets[j], kt = kvo[j];
            naive_block_fwd(&pb.s, 0, lens[j], pb.q + qt * 6 * 32, 0, kvo[j + 1] - kt,
                            pb.k + kt * 2 * 32, pb.v + kt * 2 * 32, ro + qt * 6 * 32,
                            rl + qt * 6);
        }
        for (int j = 0; j < 4; ++j) {
            int64_t qt = pb.offsets[j], n = lens[j] * 6;
            err = fmax(err, naive_max_abs_diff(o2 + qt * 6 * 32, ro + qt * 6 * 32, n * 32));
            err = fmax(err, naive_max_abs_diff(l2 + qt * 6, rl + qt * 6, n));
        }
        tap_ok(s1 == NSP_OK && err <= FWD_TOL * 4,
               "%s reference kernel with q and kv offsets that differ (non-causal): abs err "
               "%.3g", tag, err);
        free(ro);
        free(rl);
    }
    free(o1); free(o2); free(l1); free(l2);
    for (int i = 0; i < 3; ++i) {
        free(g1[i]);
        free(g2[i]);
    }
    problem_free(&pb);
}

/* Long spans transpose K/V tile by tile instead of once per head: the same
 * arithmetic, so the same bits. Forced here with a zero cache limit. */
static void check_transpose_paths(const char *tag, uint64_t *st)
{
    problem_t pb;
    const int64_t lens[] = {200, 77};
    int64_t nqe, nkve;
    float *o[2], *l[2], *dq[2], *dk[2], *dv[2];
    int64_t saved = nsp_attn_tile_transpose_cache();
    int ok = 1;

    problem_set_shape(&pb, 4, 2, 40, 0.0f, 1);
    problem_fill(&pb, 2, lens, 0, 1.0, st);
    nqe = pb.T * 4 * 40;
    nkve = pb.T * 2 * 40;
    for (int i = 0; i < 2; ++i) {
        o[i] = alloc_floats(nqe); l[i] = alloc_floats(pb.T * 4);
        dq[i] = alloc_floats(nqe); dk[i] = alloc_floats(nkve); dv[i] = alloc_floats(nkve);
        ok &= nsp_attn_tile_set_transpose_cache(i == 0 ? saved : 0) == NSP_OK;
        ok &= nsp_attn_fwd(&pb.p, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, o[i], l[i]) ==
              NSP_OK;
        ok &= nsp_attn_bwd(&pb.p, pb.nseqs, pb.offsets, pb.q, pb.k, pb.v, o[i], l[i], pb.dout,
                           dq[i], dk[i], dv[i]) == NSP_OK;
    }
    nsp_attn_tile_set_transpose_cache(saved);
    ok &= memcmp(o[0], o[1], (size_t)nqe * sizeof(float)) == 0;
    ok &= memcmp(l[0], l[1], (size_t)pb.T * 4 * sizeof(float)) == 0;
    ok &= memcmp(dq[0], dq[1], (size_t)nqe * sizeof(float)) == 0;
    ok &= memcmp(dk[0], dk[1], (size_t)nkve * sizeof(float)) == 0;
    ok &= memcmp(dv[0], dv[1], (size_t)nkve * sizeof(float)) == 0;
    tap_ok(ok, "%s K/V transposed per tile (long spans) = transposed once per head, bit for "
           "bit, forward and backward", tag);
    for (int i = 0; i < 2; ++i) {
        free(o[i]); free(l[i]); free(dq[i]); free(dk[i]); free(dv[i]);
    }
    problem_free(&pb);
}

static void run_variant(nsp_attn_isa_t isa, const char *tag, uint64_t seed)
{
    uint64_t st = seed;

    if (nsp_attn_tile_force_isa(isa) != NSP_OK) {
        tap_skip(1, "%s kernels: %s", tag, nsp_last_error());
        return;
    }
    for (int i = 0; i < 14; ++i) {
        problem_t pb;
        problem_random(&pb, 300, 6, &st);
        check_forward(&pb, tag);
        problem_free(&pb);
    }
    for (int i = 0; i < 6; ++i) {
        problem_t pb;
        problem_random(&pb, 160, 4, &st);
        check_backward(&pb, tag);
        problem_free(&pb);
    }
    {
        /* The demo's shape, one long sequence. */
        problem_t pb;
        int64_t len = 512;
        problem_set_shape(&pb, 8, 2, 64, 0.0f, 1);
        problem_fill(&pb, 1, &len, 0, 1.0, &st);
        check_forward(&pb, tag);
        check_backward(&pb, tag);
        problem_free(&pb);
    }
    check_finite_differences(tag, 1, &st);
    check_finite_differences(tag, 0, &st);
    check_large_scores(tag, &st);
    check_kernel_callback(tag, &st);
    check_transpose_paths(tag, &st);
}

int main(void)
{
    check_errors();
    run_variant(NSP_ATTN_ISA_GENERIC, "[generic]", 1);
    run_variant(NSP_ATTN_ISA_AVX2, "[avx2]", 2);
    nsp_attn_tile_force_isa(NSP_ATTN_ISA_AUTO);
    tap_diag("worst relative errors: forward %.3g (tol %g), backward %.3g (tol %g), "
             "fp32 finite differences %.3g (tol %g)", worst_fwd, FWD_TOL, worst_bwd, BWD_TOL,
             worst_fd32, FD_TOL_F32);
    return tap_done();
}

/*
 * The math of ring attention, in one process:
 *  - nsp_attn_merge: commutative bit for bit, associative to rounding,
 *    -inf is its neutral element, stable for large lse;
 *  - zigzag chunks cover every sequence exactly once, chunk lengths and
 *    per-rank token counts differ by at most one, causal work is balanced;
 *  - block forward/backward over arbitrary span splits of one sequence equal
 *    the whole-sequence result (naive double oracle);
 *  - a simulated ring of r virtual ranks (KV blocks and their gradients
 *    really copied from rank to rank each step) equals the single-process
 *    reference, forward (o, lse) and backward (dq, dk, dv), for varlen GQA
 *    batches.
 * Tolerances as in test_attn_ref.c (docs/reference/attention.md).
 */
#include "nspcomm.h"

#include "attn_naive.h"
#include "attn_sp/attn_ring_math.h"
#include "../tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FWD_TOL 1e-4
#define BWD_TOL 1e-4
/* Ring vs the fp32 reference: the same fp32 arithmetic, merged in another
 * order; both are within FWD_TOL/BWD_TOL of the naive oracle. */
#define RING_TOL 1e-5

/* max |a - b| / max(|b|, floor) for float arrays (both -inf counts as equal). */
static double rel_diff_f(const float *a, const float *b, int64_t n, double floor_)
{
    double m = 0.0, s = floor_;

    for (int64_t i = 0; i < n; ++i) {
        double d;
        if (isinf(a[i]) && isinf(b[i]) && (a[i] > 0) == (b[i] > 0)) {
            continue;
        }
        d = fabs((double)a[i] - (double)b[i]);
        m = (d <= m) ? m : (isnan(d) ? INFINITY : d);
        s = fmax(s, isfinite(b[i]) ? fabs((double)b[i]) : 0.0);
    }
    return m / s;
}

static double rel_diff_d(const float *a, const double *b, int64_t n, double floor_)
{
    double s = fmax(floor_, naive_max_abs(b, n));
    return naive_max_abs_diff(a, b, n) / s;
}

/* ------------------------------------------------------------------------ */
/* LSE merge                                                                */
/* ------------------------------------------------------------------------ */

static void check_merge(uint64_t *st)
{
    enum { ROWS = 40, D = 7 };
    float o[3][ROWS * D], l[3][ROWS];
    float ab[ROWS * D], lab[ROWS], ba[ROWS * D], lba[ROWS];
    float x[ROWS * D], lx[ROWS], y[ROWS * D], ly[ROWS];
    double worst = 0.0;
    int ok;

    for (int i = 0; i < 3; ++i) {
        naive_fill(o[i], ROWS * D, -1.0, 1.0, st);
        naive_fill(l[i], ROWS, -30.0, 30.0, st);
    }
    /* Some rows: equal lse, -inf on one side, far apart, large magnitude. */
    l[0][0] = l[1][0] = 3.0f;
    l[1][1] = -INFINITY;
    l[0][2] = -INFINITY;
    l[0][3] = -INFINITY; l[1][3] = -INFINITY; l[2][3] = -INFINITY;
    l[0][4] = 1e4f; l[1][4] = -1e4f;
    l[0][5] = 5000.0f; l[1][5] = 5000.5f; l[2][5] = 4999.0f;
    for (int d = 0; d < D; ++d) {
        o[0][3 * D + d] = o[1][3 * D + d] = o[2][3 * D + d] = 0.0f;
    }

    /* commutativity: a+b == b+a exactly */
    memcpy(ab, o[0], sizeof(ab)); memcpy(lab, l[0], sizeof(lab));
    memcpy(ba, o[1], sizeof(ba)); memcpy(lba, l[1], sizeof(lba));
    ok = nsp_attn_merge(ROWS, D, ab, lab, o[1], l[1]) == NSP_OK &&
         nsp_attn_merge(ROWS, D, ba, lba, o[0], l[0]) == NSP_OK;
    tap_ok(ok && memcmp(ab, ba, sizeof(ab)) == 0 && memcmp(lab, lba, sizeof(lab)) == 0,
           "merge is commutative bit for bit (incl. -inf rows and lse 1e4 apart)");

    /* associativity: (a+b)+c == a+(b+c) to rounding */
    memcpy(x, ab, sizeof(x)); memcpy(lx, lab, sizeof(lx));
    nsp_attn_merge(ROWS, D, x, lx, o[2], l[2]);
    memcpy(y, o[1], sizeof(y)); memcpy(ly, l[1], sizeof(ly));
    nsp_attn_merge(ROWS, D, y, ly, o[2], l[2]);
    {
        float a0[ROWS * D], la0[ROWS];
        memcpy(a0, o[0], sizeof(a0)); memcpy(la0, l[0], sizeof(la0));
        nsp_attn_merge(ROWS, D, a0, la0, y, ly);
        worst = fmax(rel_diff_f(x, a0, ROWS * D, 1.0), rel_diff_f(lx, la0, ROWS, 1.0));
    }
    tap_ok(worst <= 1e-6, "merge is associative to rounding: rel diff %.3g <= 1e-6", worst);

    /* exact values of special rows */
    tap_ok(lab[0] == (float)(3.0 + log(2.0)) || fabs(lab[0] - (3.0 + log(2.0))) < 1e-6,
           "equal lse: lse + ln 2 (%.7f)", (double)lab[0]);
    tap_ok(lab[1] == l[0][1] && memcmp(ab + D, o[0] + D, D * sizeof(float)) == 0,
           "merging -inf leaves the other side unchanged");
    tap_ok(lab[2] == l[1][2] && memcmp(ab + 2 * D, o[1] + 2 * D, D * sizeof(float)) == 0,
           "merging into -inf takes the other side");
    tap_ok(lab[3] == -INFINITY && ab[3 * D] == 0.0f, "-inf with -inf stays empty");
    tap_ok(lab[4] == 1e4f && memcmp(ab + 4 * D, o[0] + 4 * D, D * sizeof(float)) == 0,
           "lse 1e4 vs -1e4: the small side vanishes, no overflow");
    tap_ok(isfinite(lx[5]) && fabs(lx[5] - (5000.5 + log(1.0 + exp(-0.5) + exp(-1.5)))) < 1e-3,
           "three partials near lse 5000: %.4f", (double)lx[5]);
}

/* ------------------------------------------------------------------------ */
/* Zigzag chunks                                                            */
/* ------------------------------------------------------------------------ */

/* Causal (query, key) pairs of query positions [a, a+n) over keys [b, b+m). */
static int64_t causal_pairs(int64_t a, int64_t n, int64_t b, int64_t m)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t vis = a + i - b + 1;
        c += vis < 0 ? 0 : (vis > m ? m : vis);
    }
    return c;
}

static void check_zigzag(void)
{
    int bad_cover = 0, bad_chunk = 0, bad_rank = 0, bad_order = 0, cases = 0;

    for (int r = 1; r <= 17; ++r) {
        for (int64_t s = 0; s <= 260; s += (s < 70 ? 1 : 13)) {
            unsigned char *seen = calloc((size_t)s + 1, 1);
            int64_t cmin = INT64_MAX, cmax = 0, tmin = INT64_MAX, tmax = 0;

            ++cases;
            for (int i = 0; i < r; ++i) {
                int64_t start[2], len[2];
                if (nsp_zigzag_chunks(s, r, i, start, len) != NSP_OK) {
                    ++bad_cover;
                    continue;
                }
                /* chunk i then chunk 2r-1-i: in order, the second not before the first */
                if (start[0] + len[0] > start[1] && len[1] > 0) {
                    ++bad_order;
                }
                for (int c = 0; c < 2; ++c) {
                    for (int64_t t = start[c]; t < start[c] + len[c]; ++t) {
                        if (t < 0 || t >= s || seen[t]++) {
                            ++bad_cover;
                        }
                    }
                    cmin = len[c] < cmin ? len[c] : cmin;
                    cmax = len[c] > cmax ? len[c] : cmax;
                }
                tmin = len[0] + len[1] < tmin ? len[0] + len[1] : tmin;
                tmax = len[0] + len[1] > tmax ? len[0] + len[1] : tmax;
            }
            for (int64_t t = 0; t < s; ++t) {
                bad_cover += seen[t] != 1;
            }
            bad_chunk += cmax - cmin > 1;
            bad_rank += tmax - tmin > 1;
            free(seen);
        }
    }
    tap_ok(bad_cover == 0, "zigzag: every token of every sequence held exactly once (%d "
           "(s, r) cases, r = 1..17, s = 0..260)", cases);
    tap_ok(bad_chunk == 0, "zigzag: the 2r chunk lengths differ by at most one");
    tap_ok(bad_rank == 0, "zigzag: tokens per rank differ by at most one");
    tap_ok(bad_order == 0, "zigzag: rank i holds chunk i then chunk 2r-1-i");

    /* Causal work per rank: balanced by zigzag, not by contiguous chunks. */
    {
        const int64_t s = 4096;
        const int r = 8;
        int64_t zmin = INT64_MAX, zmax = 0, cmin = INT64_MAX, cmax = 0;

        for (int i = 0; i < r; ++i) {
            int64_t st[2], ln[2], z = 0, c;
            nsp_zigzag_chunks(s, r, i, st, ln);
            for (int a = 0; a < 2; ++a) {
                z += causal_pairs(st[a], ln[a], 0, s);
            }
            c = causal_pairs(i * s / r, s / r, 0, s);
            zmin = z < zmin ? z : zmin; zmax = z > zmax ? z : zmax;
            cmin = c < cmin ? c : cmin; cmax = c > cmax ? c : cmax;
        }
        tap_ok((double)zmax / (double)zmin < 1.001,
               "zigzag causal work, s 4096 over 8 ranks: max/min %.4f (contiguous chunks: "
               "%.2f)", (double)zmax / (double)zmin, (double)cmax / (double)cmin);
    }
    {
        int64_t st[2], ln[2];
        tap_is_int(nsp_zigzag_chunks(10, 4, 4, st, ln), NSP_ERR_INVALID_ARG,
                   "zigzag index out of range: NSP_ERR_INVALID_ARG");
    }
}

/* ------------------------------------------------------------------------ */
/* Blocks of one sequence                                                   */
/* ------------------------------------------------------------------------ */

/* Random cut of [0, len) into 1..maxn spans (some may be empty). */
static int random_cuts(int64_t len, int maxn, int64_t *cut, uint64_t *st)
{
    int n = naive_rand_int(st, 1, maxn);
    cut[0] = 0;
    cut[n] = len;
    for (int i = 1; i < n; ++i) {
        cut[i] = (int64_t)(naive_rand(st) * (double)(len + 1));
    }
    for (int i = 1; i < n; ++i) { /* sort the inner cuts */
        for (int j = i; j > 1 && cut[j] < cut[j - 1]; --j) {
            int64_t t = cut[j]; cut[j] = cut[j - 1]; cut[j - 1] = t;
        }
    }
    return n;
}

static void check_blocks(uint64_t *st, int causal)
{
    const int nq = 6, nkv = 2, D = 24;
    const int64_t len = naive_rand_int(st, 40, 260);
    nsp_attn_params_t p = NSP_ATTN_PARAMS_INIT(nq, nkv, D);
    naive_shape_t s = {nq, nkv, D, 1.0 / sqrt((double)D), causal};
    float *q = alloc_floats(len * nq * D), *k = alloc_floats(len * nkv * D);
    float *v = alloc_floats(len * nkv * D), *dout = alloc_floats(len * nq * D);
    float *o = alloc_floats(len * nq * D), *lse = alloc_floats(len * nq);
    float *po = alloc_floats(len * nq * D), *plse = alloc_floats(len * nq);
    float *delta = alloc_floats(len * nq);
    float *dq = alloc_floats(len * nq * D), *dk = alloc_floats(len * nkv * D);
    float *dv = alloc_floats(len * nkv * D);
    double *ro = alloc_doubles(len * nq * D), *rl = alloc_doubles(len * nq);
    double *rdq = alloc_doubles(len * nq * D), *rdk = alloc_doubles(len * nkv * D);
    double *rdv = alloc_doubles(len * nkv * D);
    int64_t qc[8], kc[8];
    int nqs, nks, ok = 1;
    double ef, eb;

    p.causal = causal;
    naive_fill(q, len * nq * D, -1.5, 1.5, st);
    naive_fill(k, len * nkv * D, -1.5, 1.5, st);
    naive_fill(v, len * nkv * D, -1.0, 1.0, st);
    naive_fill(dout, len * nq * D, -1.0, 1.0, st);
    nqs = random_cuts(len, 5, qc, st);
    nks = random_cuts(len, 5, kc, st);

    /* forward: per query span, merge the partials of every KV span */
    for (int a = 0; a < nqs; ++a) {
        int64_t q0 = qc[a], ql = qc[a + 1] - qc[a];
        ok &= nsp_ring_attn_fwd_begin(&p, ql, o + q0 * nq * D, lse + q0 * nq) == NSP_OK;
        for (int b = 0; b < nks; ++b) {
            int64_t k0 = kc[b], kl = kc[b + 1] - kc[b];
            ok &= nsp_attn_block_fwd(&p, q0, ql, q + q0 * nq * D, k0, kl, k + k0 * nkv * D,
                                     v + k0 * nkv * D, po, plse) == NSP_OK;
            ok &= nsp_attn_merge(ql * nq, D, o + q0 * nq * D, lse + q0 * nq, po, plse) ==
                  NSP_OK;
        }
    }
    naive_block_fwd(&s, 0, len, q, 0, len, k, v, ro, rl);
    ef = fmax(rel_diff_d(o, ro, len * nq * D, 1e-30), rel_diff_d(lse, rl, len * nq, 1.0));
    tap_ok(ok && ef <= FWD_TOL, "%s blocks: %d query spans x %d KV spans of %lld tokens, "
           "merged by lse = whole forward (rel err %.3g)", causal ? "causal" : "full", nqs,
           nks, (long long)len, ef);

    /* backward: every block pair adds its share, given the final lse and delta */
    ok &= nsp_attn_delta(len * nq, D, o, dout, delta) == NSP_OK;
    for (int a = 0; a < nqs; ++a) {
        int64_t q0 = qc[a], ql = qc[a + 1] - qc[a];
        for (int b = 0; b < nks; ++b) {
            int64_t k0 = kc[b], kl = kc[b + 1] - kc[b];
            ok &= nsp_attn_block_bwd(&p, q0, ql, q + q0 * nq * D, dout + q0 * nq * D,
                                     lse + q0 * nq, delta + q0 * nq, k0, kl,
                                     k + k0 * nkv * D, v + k0 * nkv * D, dq + q0 * nq * D,
                                     dk + k0 * nkv * D, dv + k0 * nkv * D) == NSP_OK;
        }
    }
    naive_block_bwd(&s, 0, len, q, 0, len, k, v, dout, rdq, rdk, rdv);
    eb = fmax(rel_diff_d(dq, rdq, len * nq * D, 1e-30),
              fmax(rel_diff_d(dk, rdk, len * nkv * D, 1e-30),
                   rel_diff_d(dv, rdv, len * nkv * D, 1e-30)));
    tap_ok(ok && eb <= BWD_TOL, "%s blocks: summed block backward = whole backward "
           "(rel err %.3g)", causal ? "causal" : "full", eb);

    free(q); free(k); free(v); free(dout); free(o); free(lse); free(po); free(plse);
    free(delta); free(dq); free(dk); free(dv);
    free(ro); free(rl); free(rdq); free(rdk); free(rdv);
}

/* ------------------------------------------------------------------------ */
/* The simulated ring                                                       */
/* ------------------------------------------------------------------------ */

/* One virtual rank's buffers (its local zigzag layout). */
typedef struct {
    int64_t tokens;
    float  *q, *dout, *o, *lse, *delta, *dq;
    float  *k, *v;          /* its own KV block */
    float  *hold_k, *hold_v, *hold_dk, *hold_dv;  /* the block it holds now */
    int     hold_src;       /* whose block that is */
} vrank_t;

/* Copy n floats into a fresh buffer (what arrives over the wire). */
static float *copy_of(const float *x, int64_t n)
{
    float *y = alloc_floats(n);
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* Every rank passes the block it holds (KV and/or dKV) to the next rank:
 * real copies into fresh buffers, as a ring exchange would deliver them. */
static void rotate(vrank_t *vr, int r, int64_t kvw, int with_kv, int with_dkv)
{
    vrank_t next[16];

    for (int i = 0; i < r; ++i) {
        int to = (i + 1) % r;
        int64_t n = vr[vr[i].hold_src].tokens * kvw;

        next[to].hold_src = vr[i].hold_src;
        next[to].hold_k = with_kv ? copy_of(vr[i].hold_k, n) : NULL;
        next[to].hold_v = with_kv ? copy_of(vr[i].hold_v, n) : NULL;
        next[to].hold_dk = with_dkv ? copy_of(vr[i].hold_dk, n) : NULL;
        next[to].hold_dv = with_dkv ? copy_of(vr[i].hold_dv, n) : NULL;
    }
    for (int i = 0; i < r; ++i) {
        if (with_kv) {
            free(vr[i].hold_k);
            free(vr[i].hold_v);
            vr[i].hold_k = next[i].hold_k;
            vr[i].hold_v = next[i].hold_v;
        }
        if (with_dkv) {
            free(vr[i].hold_dk);
            free(vr[i].hold_dv);
            vr[i].hold_dk = next[i].hold_dk;
            vr[i].hold_dv = next[i].hold_dv;
        }
        vr[i].hold_src = next[i].hold_src;
    }
}

static void check_ring(int r, uint64_t *st)
{
    const int nkv = naive_rand_int(st, 1, 3), nq = nkv * naive_rand_int(st, 1, 3);
    const int D = (int[]){8, 16, 20, 64}[naive_rand_int(st, 0, 3)];
    const int causal = r % 3 != 2; /* mostly causal; r = 2, 5 also full attention */
    const int nseqs = naive_rand_int(st, 1, 5);
    nsp_attn_params_t p = NSP_ATTN_PARAMS_INIT(nq, nkv, D);
    naive_shape_t s = {nq, nkv, D, 1.0 / sqrt((double)D), causal};
    int64_t lens[8], off[9], T;
    float *q, *k, *v, *dout, *o, *lse, *ro, *rlse, *dq, *dk, *dv, *rdq, *rdk, *rdv;
    double *no, *nl, *ndq, *ndk, *ndv;
    vrank_t vr[16];
    int ok = 1;
    double e_ref, e_naive;
    const int64_t qw = (int64_t)nq * D, kvw = (int64_t)nkv * D;

    p.causal = causal;
    off[0] = 0;
    for (int j = 0; j < nseqs; ++j) {
        /* lengths 1..300, some shorter than 2r so that chunks are empty */
        lens[j] = naive_rand(st) < 0.25 ? naive_rand_int(st, 1, 2 * r) : naive_rand_int(st, 1, 300);
        off[j + 1] = off[j] + lens[j];
    }
    T = off[nseqs];
    q = alloc_floats(T * qw); dout = alloc_floats(T * qw);
    k = alloc_floats(T * kvw); v = alloc_floats(T * kvw);
    o = alloc_floats(T * qw); lse = alloc_floats(T * nq);
    ro = alloc_floats(T * qw); rlse = alloc_floats(T * nq);
    dq = alloc_floats(T * qw); dk = alloc_floats(T * kvw); dv = alloc_floats(T * kvw);
    rdq = alloc_floats(T * qw); rdk = alloc_floats(T * kvw); rdv = alloc_floats(T * kvw);
    no = alloc_doubles(T * qw); nl = alloc_doubles(T * nq);
    ndq = alloc_doubles(T * qw); ndk = alloc_doubles(T * kvw); ndv = alloc_doubles(T * kvw);
    naive_fill(q, T * qw, -1.5, 1.5, st);
    naive_fill(k, T * kvw, -1.5, 1.5, st);
    naive_fill(v, T * kvw, -1.0, 1.0, st);
    naive_fill(dout, T * qw, -1.0, 1.0, st);

    /* each virtual rank takes its zigzag chunks of every sequence */
    for (int i = 0; i < r; ++i) {
        nsp_ring_attn_span_t spans[16];
        vrank_t *x = &vr[i];
        ok &= nsp_ring_attn_layout(nseqs, lens, r, i, spans, &x->tokens) == NSP_OK;
        x->q = alloc_floats(x->tokens * qw); x->dout = alloc_floats(x->tokens * qw);
        x->k = alloc_floats(x->tokens * kvw); x->v = alloc_floats(x->tokens * kvw);
        x->o = alloc_floats(x->tokens * qw); x->lse = alloc_floats(x->tokens * nq);
        x->delta = alloc_floats(x->tokens * nq); x->dq = alloc_floats(x->tokens * qw);
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, qw, q, x->q, 1) == NSP_OK;
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, qw, dout, x->dout, 1) == NSP_OK;
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, kvw, k, x->k, 1) == NSP_OK;
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, kvw, v, x->v, 1) == NSP_OK;
        x->hold_k = copy_of(x->k, x->tokens * kvw);
        x->hold_v = copy_of(x->v, x->tokens * kvw);
        x->hold_dk = alloc_floats(x->tokens * kvw);
        x->hold_dv = alloc_floats(x->tokens * kvw);
        x->hold_src = i;
        ok &= nsp_ring_attn_fwd_begin(&p, x->tokens, x->o, x->lse) == NSP_OK;
    }

    /* forward: r steps; after each but the last, KV blocks move one rank on */
    for (int t = 0; t < r; ++t) {
        for (int i = 0; i < r; ++i) {
            int src = ((i - t) % r + r) % r;
            ok &= vr[i].hold_src == src;
            ok &= nsp_ring_attn_fwd_step(&p, nseqs, lens, r, i, src, vr[i].q, vr[i].hold_k,
                                    vr[i].hold_v, vr[i].o, vr[i].lse) == NSP_OK;
        }
        if (t < r - 1) {
            rotate(vr, r, kvw, 1, 0);
        }
    }
    for (int i = 0; i < r; ++i) {
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, qw, o, vr[i].o, 0) == NSP_OK;
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, nq, lse, vr[i].lse, 0) == NSP_OK;
    }
    ok &= nsp_attn_fwd(&p, nseqs, off, q, k, v, ro, rlse) == NSP_OK;
    naive_fwd(&s, nseqs, off, q, k, v, no, nl);
    e_ref = fmax(rel_diff_f(o, ro, T * qw, 1e-30), rel_diff_f(lse, rlse, T * nq, 1.0));
    e_naive = fmax(rel_diff_d(o, no, T * qw, 1e-30), rel_diff_d(lse, nl, T * nq, 1.0));
    tap_ok(ok && e_ref <= RING_TOL && e_naive <= FWD_TOL,
           "ring r=%d forward (%s, n_q %d n_kv %d D %d, %d seqs, %lld tokens): o, lse = "
           "reference (rel %.3g) = naive (rel %.3g)", r, causal ? "causal" : "full", nq, nkv,
           D, nseqs, (long long)T, e_ref, e_naive);

    /* backward: back to the owners' blocks, dKV zero, travelling with KV */
    for (int i = 0; i < r; ++i) {
        vrank_t *x = &vr[i];
        free(x->hold_k); free(x->hold_v); free(x->hold_dk); free(x->hold_dv);
        x->hold_k = copy_of(x->k, x->tokens * kvw);
        x->hold_v = copy_of(x->v, x->tokens * kvw);
        x->hold_dk = alloc_floats(x->tokens * kvw);
        x->hold_dv = alloc_floats(x->tokens * kvw);
        x->hold_src = i;
        ok &= nsp_attn_delta(x->tokens * nq, D, x->o, x->dout, x->delta) == NSP_OK;
    }
    for (int t = 0; t < r; ++t) {
        for (int i = 0; i < r; ++i) {
            int src = ((i - t) % r + r) % r;
            ok &= vr[i].hold_src == src;
            ok &= nsp_ring_attn_bwd_step(&p, nseqs, lens, r, i, src, vr[i].q, vr[i].dout,
                                    vr[i].lse, vr[i].delta, vr[i].hold_k, vr[i].hold_v,
                                    vr[i].dq, vr[i].hold_dk, vr[i].hold_dv) == NSP_OK;
        }
        rotate(vr, r, kvw, t < r - 1, 1); /* the last pass carries dKV home only */
    }
    for (int i = 0; i < r; ++i) {
        ok &= vr[i].hold_src == i;
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, qw, dq, vr[i].dq, 0) == NSP_OK;
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, kvw, dk, vr[i].hold_dk, 0) == NSP_OK;
        ok &= nsp_ring_attn_copy(nseqs, off, r, i, kvw, dv, vr[i].hold_dv, 0) == NSP_OK;
    }
    ok &= nsp_attn_bwd(&p, nseqs, off, q, k, v, ro, rlse, dout, rdq, rdk, rdv) == NSP_OK;
    naive_bwd(&s, nseqs, off, q, k, v, dout, ndq, ndk, ndv);
    e_ref = fmax(rel_diff_f(dq, rdq, T * qw, 1e-30),
                 fmax(rel_diff_f(dk, rdk, T * kvw, 1e-30), rel_diff_f(dv, rdv, T * kvw, 1e-30)));
    e_naive = fmax(rel_diff_d(dq, ndq, T * qw, 1e-30),
                   fmax(rel_diff_d(dk, ndk, T * kvw, 1e-30), rel_diff_d(dv, ndv, T * kvw, 1e-30)));
    tap_ok(ok && e_ref <= RING_TOL && e_naive <= BWD_TOL,
           "ring r=%d backward: dq, dk, dv = reference (rel %.3g) = naive (rel %.3g)", r,
           e_ref, e_naive);

    for (int i = 0; i < r; ++i) {
        vrank_t *x = &vr[i];
        free(x->q); free(x->dout); free(x->k); free(x->v); free(x->o); free(x->lse);
        free(x->delta); free(x->dq);
        free(x->hold_k); free(x->hold_v); free(x->hold_dk); free(x->hold_dv);
    }
    free(q); free(k); free(v); free(dout); free(o); free(lse); free(ro); free(rlse);
    free(dq); free(dk); free(dv); free(rdq); free(rdk); free(rdv);
    free(no); free(nl); free(ndq); free(ndk); free(ndv);
}

int main(void)
{
    uint64_t st = 7;

    check_merge(&st);
    check_zigzag();
    for (int i = 0; i < 3; ++i) {
        check_blocks(&st, 1);
    }
    check_blocks(&st, 0);
    for (int r = 1; r <= 8; ++r) {
        check_ring(r, &st);
    }
    check_ring(16, &st);
    return tap_done();
}

/* The double-precision naive attention of the tests; see attn_naive.h. */
#include "attn_naive.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Is key position kp visible to query position qp? */
static int visible(const naive_shape_t *s, int64_t qp, int64_t kp)
{
    return !s->causal || kp <= qp;
}

/* Probabilities p[j] of one (query row, head) over the block; returns lse. */
static double row_probs(const naive_shape_t *s, int64_t qp, const float *qrow,
                        int64_t kv_pos0, int64_t kv_len, const float *k, int g, double *p)
{
    double mx = -INFINITY, sum = 0.0;

    for (int64_t j = 0; j < kv_len; ++j) {
        const float *kr = k + (j * s->nkv + g) * s->D;
        double dot = 0.0;

        if (!visible(s, qp, kv_pos0 + j)) {
            p[j] = -INFINITY;
            continue;
        }
        for (int d = 0; d < s->D; ++d) {
            dot += (double)qrow[d] * (double)kr[d];
        }
        p[j] = s->scale * dot;
        mx = p[j] > mx ? p[j] : mx;
    }
    if (mx == -INFINITY) {
        for (int64_t j = 0; j < kv_len; ++j) {
            p[j] = 0.0;
        }
        return -INFINITY;
    }
    for (int64_t j = 0; j < kv_len; ++j) {
        p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - mx);
        sum += p[j];
    }
    for (int64_t j = 0; j < kv_len; ++j) {
        p[j] /= sum;
    }
    return mx + log(sum);
}

void naive_block_fwd(const naive_shape_t *s, int64_t q_pos0, int64_t q_len, const float *q,
                     int64_t kv_pos0, int64_t kv_len, const float *k, const float *v,
                     double *o, double *lse)
{
    double *p = malloc((size_t)(kv_len + 1) * sizeof(*p));
    const int rep = s->nq / s->nkv;

    for (int64_t i = 0; i < q_len; ++i) {
        for (int h = 0; h < s->nq; ++h) {
            int g = h / rep;
            double *orow = o + (i * s->nq + h) * s->D;

            lse[i * s->nq + h] = row_probs(s, q_pos0 + i, q + (i * s->nq + h) * s->D,
                                           kv_pos0, kv_len, k, g, p);
            for (int d = 0; d < s->D; ++d) {
                orow[d] = 0.0;
            }
            for (int64_t j = 0; j < kv_len; ++j) {
                const float *vr = v + (j * s->nkv + g) * s->D;
                for (int d = 0; d < s->D; ++d) {
                    orow[d] += p[j] * (double)vr[d];
                }
            }
        }
    }
    free(p);
}

void naive_block_bwd(const naive_shape_t *s, int64_t q_pos0, int64_t q_len, const float *q,
                     int64_t kv_pos0, int64_t kv_len, const float *k, const float *v,
                     const float *dout, double *dq, double *dk, double *dv)
{
    double *p = malloc((size_t)(kv_len + 1) * sizeof(*p));
    double *dp = malloc((size_t)(kv_len + 1) * sizeof(*dp));
    const int rep = s->nq / s->nkv;
    const int D = s->D;

    memset(dq, 0, (size_t)(q_len * s->nq * D) * sizeof(*dq));
    memset(dk, 0, (size_t)(kv_len * s->nkv * D) * sizeof(*dk));
    memset(dv, 0, (size_t)(kv_len * s->nkv * D) * sizeof(*dv));
    for (int64_t i = 0; i < q_len; ++i) {
        for (int h = 0; h < s->nq; ++h) {
            int g = h / rep;
            const float *qrow = q + (i * s->nq + h) * D;
            const float *dorow = dout + (i * s->nq + h) * D;
            double pdp = 0.0;

            row_probs(s, q_pos0 + i, qrow, kv_pos0, kv_len, k, g, p);
            /* dP[j] = dout . v_j;  dS[j] = P[j] (dP[j] - sum_l P[l] dP[l]) */
            for (int64_t j = 0; j < kv_len; ++j) {
                const float *vr = v + (j * s->nkv + g) * D;
                dp[j] = 0.0;
                for (int d = 0; d < D; ++d) {
                    dp[j] += (double)dorow[d] * (double)vr[d];
                }
                pdp += p[j] * dp[j];
            }
            for (int64_t j = 0; j < kv_len; ++j) {
                const float *kr = k + (j * s->nkv + g) * D;
                double ds = p[j] * (dp[j] - pdp);

                for (int d = 0; d < D; ++d) {
                    dq[(i * s->nq + h) * D + d] += s->scale * ds * (double)kr[d];
                    dk[(j * s->nkv + g) * D + d] += s->scale * ds * (double)qrow[d];
                    dv[(j * s->nkv + g) * D + d] += p[j] * (double)dorow[d];
                }
            }
        }
    }
    free(dp);
    free(p);
}

void naive_fwd(const naive_shape_t *s, int nseqs, const int64_t *offsets, const float *q,
               const float *k, const float *v, double *o, double *lse)
{
    for (int j = 0; j < nseqs; ++j) {
        int64_t t0 = offsets[j], len = offsets[j + 1] - offsets[j];
        naive_block_fwd(s, 0, len, q + t0 * s->nq * s->D, 0, len, k + t0 * s->nkv * s->D,
                        v + t0 * s->nkv * s->D, o + t0 * s->nq * s->D, lse + t0 * s->nq);
    }
}

void naive_bwd(const naive_shape_t *s, int nseqs, const int64_t *offsets, const float *q,
               const float *k, const float *v, const float *dout, double *dq, double *dk,
               double *dv)
{
    for (int j = 0; j < nseqs; ++j) {
        int64_t t0 = offsets[j], len = offsets[j + 1] - offsets[j];
        int64_t qo = t0 * s->nq * s->D, kvo = t0 * s->nkv * s->D;
        naive_block_bwd(s, 0, len, q + qo, 0, len, k + kvo, v + kvo, dout + qo, dq + qo,
                        dk + kvo, dv + kvo);
    }
}

double naive_rand(uint64_t *state)
{
    /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

void naive_fill(float *x, int64_t n, double lo, double hi, uint64_t *state)
{
    for (int64_t i = 0; i < n; ++i) {
        x[i] = (float)(lo + (hi - lo) * naive_rand(state));
    }
}

int naive_rand_int(uint64_t *state, int lo, int hi)
{
    return lo + (int)(naive_rand(state) * (double)(hi - lo + 1));
}

double naive_max_abs_diff(const float *a, const double *b, int64_t n)
{
    double m = 0.0;

    for (int64_t i = 0; i < n; ++i) {
        double d;
        if (isinf(a[i]) && isinf(b[i]) && (a[i] > 0) == (b[i] > 0)) {
            continue; /* both -inf (rows that see no key) */
        }
        d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) { /* also catches NaN */
            m = isnan(d) ? INFINITY : d;
        }
    }
    return m;
}

double naive_max_abs(const double *b, int64_t n)
{
    double m = 0.0;

    for (int64_t i = 0; i < n; ++i) {
        if (isfinite(b[i]) && fabs(b[i]) > m) {
            m = fabs(b[i]);
        }
    }
    return m;
}

float *alloc_floats(int64_t n)
{
    float *x = calloc((size_t)(n > 0 ? n : 1), sizeof(*x));
    if (x == NULL) {
        abort();
    }
    return x;
}

double *alloc_doubles(int64_t n)
{
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(*x));
    if (x == NULL) {
        abort();
    }
    return x;
}

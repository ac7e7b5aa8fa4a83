/*
 * An independent, deliberately plain attention in double precision: the
 * oracle of the attention tests. O(T^2) per sequence, no tiling, no online
 * softmax; the backward uses dS = P * (dP - rowsum(P * dP)) instead of the
 * kernel's delta = rowsum(dout * o), so the two share no formula beyond the
 * definition of attention.
 */
#ifndef NSP_TESTS_ATTN_NAIVE_H_
#define NSP_TESTS_ATTN_NAIVE_H_

#include <stdint.h>

/** A problem: heads, head_dim, scale (resolved, never 0), causal. */
typedef struct naive_shape {
    int    nq, nkv, D;
    double scale;
    int    causal;
} naive_shape_t;

/**
 * Attention of queries at positions [q_pos0, q_pos0 + q_len) over keys at
 * positions [kv_pos0, kv_pos0 + kv_len) of one sequence (float inputs,
 * q [q_len, nq, D], k/v [kv_len, nkv, D]): o [q_len, nq, D] and lse
 * [q_len, nq] in double. Rows with no visible key: o = 0, lse = -inf.
 */
void naive_block_fwd(const naive_shape_t *s, int64_t q_pos0, int64_t q_len, const float *q,
                     int64_t kv_pos0, int64_t kv_len, const float *k, const float *v,
                     double *o, double *lse);

/** Gradients of sum(dout * o) of the same block seen alone (softmax over
 *  this block's keys only): dq [q_len, nq, D], dk, dv [kv_len, nkv, D]. */
void naive_block_bwd(const naive_shape_t *s, int64_t q_pos0, int64_t q_len, const float *q,
                     int64_t kv_pos0, int64_t kv_len, const float *k, const float *v,
                     const float *dout, double *dq, double *dk, double *dv);

/** Whole packed batch (each sequence from position 0): o, lse over
 *  [offsets[0], offsets[nseqs]). */
void naive_fwd(const naive_shape_t *s, int nseqs, const int64_t *offsets, const float *q,
               const float *k, const float *v, double *o, double *lse);

/** Whole packed batch backward: dq, dk, dv (overwritten). */
void naive_bwd(const naive_shape_t *s, int nseqs, const int64_t *offsets, const float *q,
               const float *k, const float *v, const float *dout, double *dq, double *dk,
               double *dv);

/* ---- helpers shared by the attention tests ---- */

/** Deterministic uniform [lo, hi) floats from a 64-bit state. */
double naive_rand(uint64_t *state);
void   naive_fill(float *x, int64_t n, double lo, double hi, uint64_t *state);
int    naive_rand_int(uint64_t *state, int lo, int hi); /* [lo, hi] */

/** Zeroed arrays of n elements (at least one), freed with free(); abort
 * the test when out of memory. */
float  *alloc_floats(int64_t n);
double *alloc_doubles(int64_t n);

/** max |a[i] - b[i]| and max |b[i]| over n elements (a float, b double). */
double naive_max_abs_diff(const float *a, const double *b, int64_t n);
double naive_max_abs(const double *b, int64_t n);

#endif /* NSP_TESTS_ATTN_NAIVE_H_ */

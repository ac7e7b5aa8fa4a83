/*
 * Ring attention math for one group of r ranks: zigzag local layouts and
 * the per-step forward and backward of the ring schedule. No transport:
 * a step computes with the KV block a rank holds now; the caller moves the
 * blocks (nsp_ring_post in the real ring, array indexing in the simulated
 * ring of tests/attn/test_attn_ring_sim.c). See docs/design/attention.md.
 *
 * Schedule (r ranks, ring index i, KV blocks move to index i+1 each step):
 *   forward:  o, lse = empty (nsp_ring_attn_fwd_begin)
 *             for t in 0..r-1: src = (i - t) mod r; fwd_step(i, src, KV of src)
 *                              then pass the KV block on (not after t = r-1)
 *   backward: dq = 0 on every rank, dk = dv = 0 travelling with each KV block
 *             for t in 0..r-1: src = (i - t) mod r; bwd_step(i, src, KV, dKV of src)
 *                              then pass KV and dKV on; after t = r-1 pass
 *                              only dKV once more: it arrives at its owner.
 */
#ifndef NSP_ATTN_SP_ATTN_RING_MATH_H_
#define NSP_ATTN_SP_ATTN_RING_MATH_H_

#include "nspcomm.h"

/** One zigzag chunk held by a ring index: token positions
 *  [pos0, pos0 + len) of its sequence, stored from token `offset` of the
 *  index's local buffer. */
typedef struct nsp_ring_attn_span {
    int64_t pos0;
    int64_t len;
    int64_t offset;
} nsp_ring_attn_span_t;

/**
 * The local zigzag buffer of ring index `index` of `r` for a group holding
 * `nseqs` sequences of seq_lens[j] tokens: sequence by sequence, chunk
 * `index` then chunk 2r-1-index of each. Writes spans[2 * nseqs] (spans[2j]
 * and spans[2j+1] for sequence j) and *tokens (the buffer's length).
 * Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_ring_attn_layout(int nseqs, const int64_t *seq_lens, int r, int index,
                                  nsp_ring_attn_span_t *spans, int64_t *tokens);

/**
 * Copy between a packed batch of whole sequences (`full`, [T, heads, width]
 * with sequence j at token offsets[j]) and the local zigzag buffer of ring
 * index `index` (`local`, [T_index, heads, width]): to_local = 1 gathers,
 * 0 scatters back (only the index's tokens are written).
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_ring_attn_copy(int nseqs, const int64_t *offsets, int r, int index,
                                int64_t row_floats, float *full, float *local, int to_local);

/** Make (o [tokens, n_q, D], lse [tokens, n_q]) the empty partial: o = 0,
 *  lse = -INFINITY. Errors: NSP_ERR_INVALID_ARG. */
nsp_status_t nsp_ring_attn_fwd_begin(const nsp_attn_params_t *params, int64_t tokens, float *o,
                                     float *lse);

/**
 * One forward step at ring index `index`: attend its local queries q
 * ([T_index, n_q, D]) to the KV block of ring index `src` (k, v
 * [T_src, n_kv, D], src's local zigzag buffer), and merge the partial
 * result into o [T_index, n_q, D] and lse [T_index, n_q] by log-sum-exp.
 * Block pairs that the causal mask hides entirely are skipped.
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_ring_attn_fwd_step(const nsp_attn_params_t *params, int nseqs,
                                    const int64_t *seq_lens, int r, int index, int src,
                                    const float *q, const float *k, const float *v, float *o,
                                    float *lse);

/**
 * One backward step at ring index `index` with the KV block of `src`:
 * given the local q, dout, the FINAL lse and delta = rowsum(dout * o)
 * ([T_index, n_q]), ACCUMULATE dq [T_index, n_q, D] and the travelling
 * gradients dk, dv [T_src, n_kv, D] of src's block.
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_ring_attn_bwd_step(const nsp_attn_params_t *params, int nseqs,
                                    const int64_t *seq_lens, int r, int index, int src,
                                    const float *q, const float *dout, const float *lse,
                                    const float *delta, const float *k, const float *v,
                                    float *dq, float *dk, float *dv);

#endif /* NSP_ATTN_SP_ATTN_RING_MATH_H_ */

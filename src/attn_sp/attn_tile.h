/*
 * The compute core of the host reference attention: one query span of one
 * sequence against one key/value span of the same sequence, forward and
 * backward, in fp32 (see docs/design/attention.md).
 *
 * Internal: the public entry points in attn_ref.c validate arguments and
 * call these; the ring schedule (attn_ring_math.c) calls them per block.
 * Single-threaded and reentrant: scratch memory is allocated per call.
 */
#ifndef NSP_ATTN_SP_ATTN_TILE_H_
#define NSP_ATTN_SP_ATTN_TILE_H_

#include "nspcomm.h"

/** One block of work: heads, scale, mask, and the absolute token positions
 *  of the query span [q_pos0, q_pos0 + q_len) and of the key/value span
 *  [kv_pos0, kv_pos0 + kv_len) within their sequence. */
typedef struct nsp_attn_geom {
    int     q_heads;    /**< n_q */
    int     kv_heads;   /**< n_kv, divides n_q */
    int     head_dim;   /**< D */
    float   scale;      /**< resolved softmax scale (never 0 here) */
    int     causal;     /**< 1: key position <= query position */
    int64_t q_pos0;
    int64_t q_len;
    int64_t kv_pos0;
    int64_t kv_len;
} nsp_attn_geom_t;

/** Fill a geometry from validated params and two spans. */
nsp_attn_geom_t nsp_attn_geom_make(const nsp_attn_params_t *params,
                                   int64_t q_pos0, int64_t q_len,
                                   int64_t kv_pos0, int64_t kv_len);

/** Is every (query, key) pair of the block masked out (nothing to do)? */
int nsp_attn_geom_empty(const nsp_attn_geom_t *geom);

/**
 * Partial forward of one block: o [q_len, n_q, D] and lse [q_len, n_q]
 * (natural log of sum_j exp(scale * q.k_j) over the visible keys of the
 * block). Rows with no visible key get o = 0 and lse = -INFINITY.
 * Overwrites o and lse. Errors: NSP_ERR_NO_MEMORY (scratch).
 */
nsp_status_t nsp_attn_tile_fwd(const nsp_attn_geom_t *geom, const float *q,
                               const float *k, const float *v, float *o,
                               float *lse);

/**
 * Backward of one block given the final lse [q_len, n_q] and
 * delta [q_len, n_q] = rowsum(dout * o) of the query rows. ACCUMULATES:
 * dq [q_len, n_q, D] += ..., dk and dv [kv_len, n_kv, D] += ...
 * Errors: NSP_ERR_NO_MEMORY (scratch).
 */
nsp_status_t nsp_attn_tile_bwd(const nsp_attn_geom_t *geom, const float *q,
                               const float *k, const float *v,
                               const float *dout, const float *lse,
                               const float *delta, float *dq, float *dk,
                               float *dv);

/* ------------------------------------------------------------------------ */
/* Kernel variants (attn_tile_impl.h compiled per instruction set)          */
/* ------------------------------------------------------------------------ */

/* The AVX2+FMA variant is built on x86-64 with GCC or Clang. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NSP_ATTN_HAVE_AVX2 1
#else
#define NSP_ATTN_HAVE_AVX2 0
#endif

typedef enum nsp_attn_isa {
    NSP_ATTN_ISA_AUTO    = 0, /**< AVX2 when built and the CPU has it, else generic */
    NSP_ATTN_ISA_GENERIC = 1, /**< 4-float vectors: every CPU */
    NSP_ATTN_ISA_AVX2    = 2  /**< 8-float vectors with FMA */
} nsp_attn_isa_t;

/** The variant nsp_attn_tile_fwd/bwd use now (never AUTO). */
nsp_attn_isa_t nsp_attn_tile_isa(void);

/**
 * Test hook: force a variant for every later call in this process (AUTO
 * restores the choice by CPU). Not thread-safe: call before any attention
 * runs. Errors: NSP_ERR_UNSUPPORTED (AVX2 not built or not on this CPU;
 * recorded quietly), NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_attn_tile_force_isa(nsp_attn_isa_t isa);

/** Most floats a call may spend on K/V transposed for a whole span (default
 *  4 Mi = 16 MiB); longer spans are transposed tile by tile. */
int64_t nsp_attn_tile_transpose_cache(void);

/** Test hook: set that limit (0: always tile by tile). Not thread-safe.
 *  Errors: NSP_ERR_INVALID_ARG (negative). */
nsp_status_t nsp_attn_tile_set_transpose_cache(int64_t floats);

/* The variants behind nsp_attn_tile_fwd/bwd, same contracts. */
nsp_status_t nsp_attn_tile_fwd_generic(const nsp_attn_geom_t *geom, const float *q,
                                       const float *k, const float *v, float *o,
                                       float *lse);
nsp_status_t nsp_attn_tile_bwd_generic(const nsp_attn_geom_t *geom, const float *q,
                                       const float *k, const float *v,
                                       const float *dout, const float *lse,
                                       const float *delta, float *dq, float *dk,
                                       float *dv);
#if NSP_ATTN_HAVE_AVX2
nsp_status_t nsp_attn_tile_fwd_avx2(const nsp_attn_geom_t *geom, const float *q,
                                    const float *k, const float *v, float *o,
                                    float *lse);
nsp_status_t nsp_attn_tile_bwd_avx2(const nsp_attn_geom_t *geom, const float *q,
                                    const float *k, const float *v,
                                    const float *dout, const float *lse,
                                    const float *delta, float *dq, float *dk,
                                    float *dv);
#endif

#endif /* NSP_ATTN_SP_ATTN_TILE_H_ */

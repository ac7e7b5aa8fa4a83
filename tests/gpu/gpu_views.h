/*
 * Random level views and a checker that runs one pack/unpack operation with
 * the host pack.c (the reference) and with a candidate (the host emulation
 * of the CUDA kernels' maps, or the CUDA kernels), from the same input onto
 * the same background, and compares the bytes. Shared by
 * tests/gpu/test_pack_map.c, tests/gpu/test_pack_cuda.c and perf/gpu_check.c.
 */
#ifndef NSP_TESTS_GPU_VIEWS_H_
#define NSP_TESTS_GPU_VIEWS_H_

#include "attn_sp/pack.h"

#include <stddef.h>
#include <stdint.h>

/** One random case: a level view of some index, a tensor shape, a mode. */
typedef struct gv_case {
    nsp_level_view_t   view;     /**< seq_len points at lens */
    int64_t           *lens;     /**< owned */
    int                heads;    /**< H: a multiple or a divisor of the degree */
    int                head_dim; /**< D */
    size_t             elem;     /**< 2 or 4 bytes */
    nsp_a2a_replicas_t replicas; /**< SUM_F32 only with elem 4, SUM_BF16/FP16 with 2 */
    nsp_pack_self_t    self;
    int                misalign; /**< 1: buffers start `elem` bytes past an aligned address */
} gv_case_t;

typedef enum gv_op {
    GV_PACK_S2H = 0,
    GV_UNPACK_S2H,
    GV_PACK_H2S,
    GV_UNPACK_H2S,
    GV_SELF_S2H,
    GV_SELF_H2S,
    GV_NOPS
} gv_op_t;

/** xorshift64*: deterministic across platforms. */
uint64_t gv_rand(uint64_t *state);

/**
 * Draw a case: degree up to max_degree, up to max_seqs sequences with a
 * long tail (some shorter than the degree: empty chunks), head_dim from
 * `dims` (NULL: small ones). Returns 0, or -1 when out of memory.
 */
int gv_case_random(gv_case_t *c, uint64_t *rng, int max_degree, int max_seqs, int64_t max_len,
                   const int *dims, int ndims);
void gv_case_free(gv_case_t *c);

/** "d=4 i=1 seqs=3 H=8 D=64 elem=2 FIRST skip-self" for messages. */
void gv_case_describe(const gv_case_t *c, char *buf, size_t len);

/** Name of an op. */
const char *gv_op_name(gv_op_t op);

/**
 * A candidate implementation of `op`: read `src` (src_bytes) and write `dst`
 * (dst_bytes, which holds the background on entry), host memory, with the
 * counts/displacements of the op's side (NULL for the self ops). The
 * candidate may copy to a device and back.
 */
typedef nsp_status_t (*gv_impl_fn)(void *ctx, const gv_case_t *c, gv_op_t op,
                                   const size_t *counts, const size_t *displs, const void *src,
                                   size_t src_bytes, void *dst, size_t dst_bytes);

/**
 * Run `op` of case `c` with the host reference and with `impl` and compare
 * every byte of the output buffer. Returns 1 when identical (or when the op
 * has nothing to do for this case), 0 otherwise with the reason in why[].
 * *bytes_moved (may be NULL) gets the output size.
 */
int gv_check(const gv_case_t *c, gv_op_t op, gv_impl_fn impl, void *ctx, uint64_t *rng,
             char *why, size_t why_len, size_t *bytes_moved);

#endif /* NSP_TESTS_GPU_VIEWS_H_ */

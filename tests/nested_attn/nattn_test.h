/*
 * Test support for nested attention: small models and clusters the
 * planners accept at CPU sizes, random long-tailed batches, hand-built
 * nested and ring plans, and the single-process reference of a whole batch
 * (nsp_attn_fwd/bwd over every sequence), with the per-rank gather and
 * compare that follow the layout's chunks.
 */
#ifndef NSP_TESTS_NATTN_TEST_H_
#define NSP_TESTS_NATTN_TEST_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

/** splitmix64: reproducible random numbers. */
uint64_t nt_rand(uint64_t *state);
/** Uniform in [lo, hi]. */
int64_t nt_range(uint64_t *state, int64_t lo, int64_t hi);
/** Uniform float in [-1, 1). */
float nt_uniform(uint64_t *state);

/** A long-tailed length in [1, max_len]: most short, a few near max_len. */
int64_t nt_long_tailed(uint64_t *state, int64_t max_len);

/** A tiny model (1 layer, the given heads and D) and a cluster of `ranks`
 *  ranks on one node whose rates make the planners use several degrees at
 *  lengths of a few hundred tokens. */
void nt_model(int q_heads, int kv_heads, int head_dim, nsp_model_t *model);
void nt_cluster(int ranks, nsp_cluster_t *cluster);

/** One group of a hand-built plan. */
typedef struct nt_group {
    int round, rank0, size, ring;
} nt_group_t;

/**
 * Build a plan from groups[ngroups] and seq_group[nseqs] (the group index of
 * each sequence) with nsp_plan_build (planner name "hand"). NULL on error
 * (the message is nsp_last_error()). Free with nsp_plan_free().
 */
nsp_plan_t *nt_plan(const nsp_model_t *model, const nsp_cluster_t *cluster,
                    const int64_t *lens, int nseqs, const nt_group_t *groups, int ngroups,
                    const int *seq_group);

/**
 * A random nested Ulysses plan over `ranks` (degrees from `degrees`[nd],
 * aligned groups, one or two rounds; sometimes a degree is skipped, so some
 * ranks have empty levels), `nseqs` long-tailed lengths up to max_len (some
 * shorter than their degree). NULL on error.
 */
nsp_plan_t *nt_random_nested(uint64_t *rng, const nsp_model_t *model,
                             const nsp_cluster_t *cluster, const int *degrees, int nd,
                             int nseqs, int64_t max_len);

/** The whole batch and its single-process reference. */
typedef struct nt_ref {
    int      nq, nkv, D;
    int      nseqs;
    int64_t *offsets;                 /**< [nseqs + 1] tokens, plan order */
    float   *q, *k, *v, *dout;        /**< inputs, [T, heads, D] */
    float   *o, *lse, *dq, *dk, *dv;  /**< nsp_attn_fwd / nsp_attn_bwd of the batch */
} nt_ref_t;

/** Random inputs for every sequence of `plan` and the reference. 0 or -1. */
int nt_ref_make(const nsp_plan_t *plan, const nsp_attn_params_t *params, uint64_t seed,
                nt_ref_t *ref);
void nt_ref_free(nt_ref_t *ref);

/**
 * Gather the rank's sequence-sharded buffer [T_local, heads, width] of a
 * global tensor `global` [T, heads, width] following `layout`'s chunks.
 */
void nt_gather(const nt_ref_t *ref, const nsp_layout_t *layout, const float *global,
               int heads, int width, float *local);

/**
 * Largest |local - global| over the rank's chunks, and into *scale the
 * largest |global| there. Returns the difference.
 */
double nt_max_diff(const nt_ref_t *ref, const nsp_layout_t *layout, const float *global,
                   int heads, int width, const float *local, double *scale);

/*
 * bf16 and fp16 (written apart from the library's conversions: bf16 by its
 * bits, fp16 by the compiler's _Float16; round to nearest even).
 */

/** Does this compiler have _Float16 (else fp16 cases are skipped)? */
int nt_have_fp16(void);
/** Bytes per element: 4 for FP32, 2 otherwise. */
size_t nt_elem_size(nsp_attn_dtype_t dtype);
/** In place: n float32 -> n elements of dtype in the buffer's first half
 *  (FP32: nothing), and back (the widening is exact). */
void nt_to_dtype(nsp_attn_dtype_t dtype, void *buf, size_t n);
void nt_from_dtype(nsp_attn_dtype_t dtype, void *buf, size_t n);

/** A kernel for buffers of `dtype`: the inputs widened to float32, the host
 *  reference, the outputs rounded once (lse stays float32). */
typedef struct nt_dtype_kernel {
    nsp_attn_kernel_t ref;
    nsp_attn_dtype_t  dtype;
} nt_dtype_kernel_t;

/** Fill *dk and make *kernel call it (dk borrowed as the kernel's ctx). */
void nt_dtype_kernel(nt_dtype_kernel_t *dk, nsp_attn_dtype_t dtype, nsp_attn_kernel_t *kernel);

#endif /* NSP_TESTS_NATTN_TEST_H_ */

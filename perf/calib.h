/*
 * perf/calib: the measurements perf/nsp_calibrate makes on one rank, shared
 * with the demo (tools/demo/demo_calib.c), which calibrates the same kernel
 * the same way (docs/reference/calibration.md):
 *
 *  - the attention kernel's fit: fwd + bwd of the reference kernel, best
 *    thread CPU time of `reps`, on `tokens` tokens packed as sequences of
 *    each length, fitted to t(s) = a s + b s^2 per sequence (least squares
 *    on the relative error of the time per token, weights 1/y^2);
 *  - the kernel's fixed cost per call (what a launch costs: the time of a
 *    call on one token), for the per-round fixed cost;
 *  - the one-attention-layer model both runs plan for, and the rates a
 *    kernel fit gives the cost model (attn_flops = 7 n_q D / b; without
 *    linear layers gemm_flops = lin_flops_per_token / a);
 *  - the dense weight bytes a micro-batch moves (the cost model's count).
 */
#ifndef NSP_PERF_CALIB_H_
#define NSP_PERF_CALIB_H_

#include "nspcomm.h"

#include <stdint.h>

#define CALIB_MAX_LENS 8

/** A kernel fit. Times in seconds of thread CPU. */
typedef struct calib_fit {
    int     nlens;
    int64_t len[CALIB_MAX_LENS];       /* tokens per sequence */
    double  fwd_bwd_s[CALIB_MAX_LENS]; /* best of reps, for `tokens` tokens */
    int64_t tokens;                    /* tokens per timed call */
    double  a, b;                      /* t(s) = a s + b s^2 per sequence */
} calib_fit_t;

/** Attention buffers of T = n s tokens: q, o, dout, dq [T][n_q][D]; k, v,
 *  dk, dv [T][n_kv][D]; lse [T][n_q]; float32; cu [n + 1] sequence starts. */
typedef struct calib_bufs {
    float   *q, *k, *v, *o, *dout, *dq, *dk, *dv, *lse;
    int64_t *cu;
} calib_bufs_t;

/** n sequences of s tokens for shape `a`, inputs a fixed pattern in
 *  [-0.5, 0.5); owned by *b until calib_bufs_free. Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t calib_bufs_alloc(const nsp_attn_params_t *a, int64_t s, int n, calib_bufs_t *b);
void         calib_bufs_free(calib_bufs_t *b);
/** The reference kernel's forward + backward on the n sequences of *b. */
nsp_status_t calib_kernel_run(const nsp_attn_params_t *a, int n, calib_bufs_t *b);

/**
 * Time the reference kernel (attention shape `a`) on `tokens` tokens in
 * sequences of lens[nlens] (1 <= nlens <= CALIB_MAX_LENS, each dividing
 * `tokens`), best of `reps` per length, and fit *fit. Errors:
 * NSP_ERR_INVALID_ARG (bad counts), NSP_ERR_NO_MEMORY, the kernel's errors,
 * NSP_ERR_INTERNAL when the time per token does not grow with the length
 * (an overloaded machine: the message names both ends).
 */
nsp_status_t calib_kernel_fit(const nsp_attn_params_t *a, const int64_t *lens, int nlens,
                              int64_t tokens, int reps, calib_fit_t *fit);

/* The parts of calib_kernel_fit, for a fit of times measured elsewhere (all
 * ranks at once, nsp_calibrate): calib_fit_init checks the counts (its
 * errors) and sets the lengths; calib_kernel_time is the best thread CPU of
 * `reps` fwd + bwd over `tokens` tokens in sequences of s (NSP_ERR_NO_MEMORY,
 * the kernel's errors); calib_fit_solve fits a, b to f->fwd_bwd_s
 * (NSP_ERR_INTERNAL as above). */
nsp_status_t calib_fit_init(const int64_t *lens, int nlens, int64_t tokens, int reps,
                           calib_fit_t *f);
nsp_status_t calib_kernel_time(const nsp_attn_params_t *a, int64_t s, int64_t tokens, int reps,
                               double *best);
nsp_status_t calib_fit_solve(calib_fit_t *f);

/**
 * The fixed cost of one kernel call: the median wall time of `calls`
 * forward + backward calls on a one-token sequence, halved (two kernels per
 * call), in *launch_s. Errors: NSP_ERR_NO_MEMORY, the kernel's.
 */
nsp_status_t calib_kernel_launch(const nsp_attn_params_t *a, int calls, double *launch_s);

/** Seconds of CPU this process (all its threads) has used. */
double calib_proc_cpu_s(void);

/** The one-attention-layer model of the demo and of nsp_calibrate: the q,
 *  k, v, o projections of one layer of n_q heads x D (hidden = n_q D). */
void calib_attn_model(int q_heads, int kv_heads, int head_dim, nsp_model_t *m);

/** gemm_flops that makes the model's linear term lin_flops(s) / R equal
 *  the kernel's per-token term a (runs with no linear layers); 1e30 when
 *  a <= 0. Errors: nsp_cost_init's (a model that is not valid). */
nsp_status_t calib_gemm_from_kernel(const nsp_model_t *m, double a, double *gemm_flops);

/** Bytes of the dense weights in bf16 (b * P_dense: the experts excluded),
 *  as the cost model counts them for the per-round fixed cost. */
nsp_status_t calib_dense_weight_bytes(const nsp_model_t *m, double *bytes);

/** Accept-anything cluster of `ranks` ranks on one node, to get a model's
 *  cost constants (rates 1e12, bandwidths 1e9, memory 1e18, no round cost). */
void calib_placeholder_cluster(int ranks, nsp_cluster_t *c);

#endif /* NSP_PERF_CALIB_H_ */

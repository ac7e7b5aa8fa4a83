/*
 * The timing model of emulated kernels (internal; docs/design/emulated-device.md):
 * how long an attention kernel call of a rank takes on the emulated
 * device, pure arithmetic (no transport, no threads).
 *
 * An emulated kernel takes the time a named GPU would take for it, from the
 * cost model's rates of a target cluster (a preset such as `h100`, or a
 * cluster file), stretched by the ratio of the target's link to this
 * machine's, so that compute / communication keeps the target's ratio while
 * every byte moves for real over this machine's (slower) wire:
 *
 *   emulated_s = target_s * scale,        scale = B_target / B_here
 *   target_s   = FLOP / R_attn(target)    (attention; R_gemm for linear)
 *
 * B_target and B_here are all-to-all bandwidths per rank in the cost
 * model's unit (bf16 bytes per second, docs/reference/cost-model.md), of the same
 * link: inter-node by default (the shaped wire of the namespace cluster,
 * bw_inter of a calibrated cluster file of this machine; nsp_calibrate's
 * --elem-bytes makes its bw the model's unit whatever the run moves), or
 * intra-node. scale is dimensionless (emulated seconds per target second).
 * A level whose exchange takes X seconds on the target takes X * scale
 * here, so its kernel must take target_s * scale for the ratio to hold.
 *
 * Where the FLOPs of one call come from: the call's own batch
 * (nsp_attn_batch_t), i.e. its cu_seqlens (q_offsets, kv_offsets), the
 * heads it holds (params.heads, the rank's share of the model's n_q),
 * causal or not, and the pass. The cost model's attn_flops(s) (planner/cost.h,
 * causal, forward + backward, all n_q heads) gives the FLOPs per query-key
 * pair: attn_flops(s) counts s^2 / 2 pairs, so a pair costs 2 attn_flops(1);
 * a causal call of equal spans has s^2 / 2 pairs (exactly attn_flops(s)), a
 * causal call with q > kv keys (aligned at the first token) kv^2/2 +
 * (q - kv) kv, q <= kv: q^2/2, a non-causal one q kv. That times
 * heads / n_q, times the pass's share of the cost model's passes
 * (NSP_COST_ATTN_PASSES = 3.5: forward 1 / 3.5, backward 2.5 / 3.5). So the
 * forward and backward calls of one sequence of s tokens at degree d (heads
 * n_q / d) add up to attn_flops(s) / d, the attention part of comp(s, d).
 * The linear layers (which the demo and the attention driver do not run)
 * are nsp_cost_lin_flops(tokens) with NSP_COST_LIN_PASSES (forward 1 / 3,
 * backward 2 / 3), for a caller that emulates them too.
 */
#ifndef NSP_STREAMS_EMU_TIMING_H_
#define NSP_STREAMS_EMU_TIMING_H_

#include "nspcomm.h"
#include "planner/cost.h"

/** Which link's bandwidths set the scale. */
typedef enum nsp_emu_link {
    NSP_EMU_LINK_INTER = 0, /**< bw_inter of both clusters (default) */
    NSP_EMU_LINK_INTRA = 1  /**< bw_intra of both */
} nsp_emu_link_t;

/** The pass of a kernel call. */
typedef enum nsp_emu_pass {
    NSP_EMU_PASS_FWD = 0,
    NSP_EMU_PASS_BWD = 1
} nsp_emu_pass_t;

/** The timing of one (model, target cluster, this machine). Plain data. */
typedef struct nsp_emu_timing {
    nsp_cost_t     target;    /**< the run's model priced on the target cluster */
    nsp_emu_link_t link;
    double         bw_target; /**< bf16 bytes/s per rank of the target's link */
    double         bw_here;   /**< bf16 bytes/s per rank of this machine's link */
    double         scale;     /**< bw_target / bw_here: emulated s per target s */
} nsp_emu_timing_t;

/**
 * Set *t for `model` on `target` (its attn_flops, gemm_flops and the link's
 * bandwidth) against `here` (a cluster description of this machine, e.g.
 * nsp_calibrate's file; only the link's bandwidth is read). Errors:
 * NSP_ERR_INVALID_ARG (NULL; what nsp_cost_init refuses; a non-positive
 * bandwidth of `here`; link not one of nsp_emu_link_t).
 */
nsp_status_t nsp_emu_timing_init(nsp_emu_timing_t *t, const nsp_model_t *model,
                                 const nsp_cluster_t *target, const nsp_cluster_t *here,
                                 nsp_emu_link_t link);

/**
 * FLOPs of one attention kernel call (see the header comment) into *flops.
 * Errors: NSP_ERR_INVALID_ARG (NULL; pass not FWD or BWD; batch heads not
 * in [1, n_q]; head_dim not the model's; nseqs < 0; offsets NULL with
 * sequences, or decreasing).
 */
nsp_status_t nsp_emu_timing_attn_flops(const nsp_emu_timing_t *t, nsp_emu_pass_t pass,
                                       const nsp_attn_batch_t *batch, double *flops);

/** Emulated seconds of that call: FLOP / R_attn(target) * scale. Errors: as
 *  nsp_emu_timing_attn_flops. */
nsp_status_t nsp_emu_timing_attn_s(const nsp_emu_timing_t *t, nsp_emu_pass_t pass,
                                   const nsp_attn_batch_t *batch, double *seconds);

/** Emulated seconds of the linear layers of one layer for `tokens` tokens
 *  of this rank in `pass`: lin_flops(tokens) * share / R_gemm(target) *
 *  scale (0 for tokens <= 0 or an unknown pass). */
double nsp_emu_timing_lin_s(const nsp_emu_timing_t *t, nsp_emu_pass_t pass, double tokens);

#endif /* NSP_STREAMS_EMU_TIMING_H_ */

/*
 * The reference cost model v1 (DESIGN §5.1), as pure functions.
 *
 * Units: every time is seconds PER LAYER PER RANK unless a name says _step;
 * bytes are bytes per layer per rank; s is a sequence length in tokens and
 * d a degree (ranks a sequence is split over). Multiply by model.layers for a
 * step. The planner knows no transport: this file is the only place the
 * formulas live, and tools/plan_check.py re-derives them independently.
 */
#ifndef NSP_PLANNER_COST_H_
#define NSP_PLANNER_COST_H_

#include "nspcomm.h"

/** Activation dtype size b (bf16). */
#define NSP_COST_DTYPE_BYTES 2.0
/** Attention FLOPs factor: fwd + bwd (2.5x fwd) of causal attention = 3.5. */
#define NSP_COST_ATTN_PASSES 3.5
/** Linear FLOPs factor: fwd + bwd (2x fwd) = 3. */
#define NSP_COST_LIN_PASSES 3.0
/** Recomputation adds one forward: compute x 4/3, that level's a2a bytes x 3/2. */
#define NSP_COST_RECOMPUTE_COMP (4.0 / 3.0)
#define NSP_COST_RECOMPUTE_A2A  1.5
/** Collectives per layer per level (2 forward, 2 backward): latency term 4*a(d). */
#define NSP_COST_A2A_PER_LAYER 4.0

/** Constants of one (model, cluster) pair, precomputed once. */
typedef struct nsp_cost {
    nsp_model_t   model;
    nsp_cluster_t cluster;
    double lin_flops_per_token;     /* lin_flops(s) = this * s                      */
    double attn_flops_per_token2;   /* attn_flops(s) = this * s^2                   */
    double comp_per_token;          /* seconds: lin_flops_per_token / R_gemm          */
    double comp_per_token2;         /* seconds: attn_flops_per_token2 / R_attn        */
    double a2a_bytes_per_token;     /* 2 * (2*n_q) * d_h * b; KV part depends on d    */
    double ep_s_per_token;          /* seconds: 4*k*h*b / B_intra (0 if dense)        */
    double act_bytes_keep;          /* a_tok: bytes per token, activations kept       */
    double act_bytes_recompute;     /* L*h*b + a_tok/L: bytes per token, recomputed   */
    double fixed_mem_bytes;         /* 16*P/N + W: model states + workspace per rank  */
    int    max_degree;              /* largest valid Ulysses degree (<= ranks)        */
} nsp_cost_t;

/** Precompute the constants. Errors: NSP_ERR_INVALID_ARG (a non-positive
 *  size, rate or bandwidth; names the field). */
nsp_status_t nsp_cost_init(nsp_cost_t *cost, const nsp_model_t *model,
                           const nsp_cluster_t *cluster);

/** FLOPs of one layer, fwd+bwd, for a whole sequence of s tokens. */
double nsp_cost_lin_flops(const nsp_cost_t *cost, double s);
double nsp_cost_attn_flops(const nsp_cost_t *cost, double s);

/** comp(s, d): seconds per layer on each of the d ranks (no MoE term). */
double nsp_cost_comp(const nsp_cost_t *cost, double s, int d);

/** a2a_bytes(s, d): bytes per layer each rank of the group sends (0 if d=1). */
double nsp_cost_a2a_bytes(const nsp_cost_t *cost, double s, int d);

/** B(d) in bytes/s and a(d) in seconds: intra-node when d <= G. */
double nsp_cost_bw(const nsp_cost_t *cost, int d);
double nsp_cost_lat(const nsp_cost_t *cost, int d);

/** Seconds of a level's exchange for `bytes` per rank: bytes/B(d) + 4*a(d). */
double nsp_cost_a2a_time(const nsp_cost_t *cost, double bytes, int d);

/** MoE dispatch+combine seconds for t tokens on one rank: ep_bytes(t)/B_intra. */
double nsp_cost_ep_time(const nsp_cost_t *cost, double tokens);

/** Activation bytes per token held by a rank (kept or recomputed). */
double nsp_cost_act_bytes(const nsp_cost_t *cost, int recompute);

/** Is d a valid Ulysses degree: 1 <= d <= ranks, d <= n_q and n_q % d == 0. */
int nsp_cost_degree_valid(const nsp_cost_t *cost, int d);

/**
 * Time of one rank in one round (per layer): compute C, pipelined exchange
 * K_pipe and non-pipelined exchange K_seq:
 *   max(C, K_pipe) + (1 - eta) * min(C, K_pipe) + K_seq
 */
double nsp_cost_rank_time(const nsp_cost_t *cost, double comp_s, double k_pipe_s,
                          double k_seq_s);

#endif /* NSP_PLANNER_COST_H_ */

/*
 * The reference cost model v1 (docs/design.md §5.1), as pure functions.
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
/** Ring (docs/reference/cost-model.md): a ring message carries K and V of its tokens. */
#define NSP_COST_RING_KV 2.0
/** KV-block-sized buffers a rank of a ring group holds at peak: the backward
 *  keeps two KV blocks (current, next), two travelling dK/dV sums (current,
 *  incoming) and its own contribution (src/attn_sp/ring_attn.c). */
#define NSP_COST_RING_BUFFERS 5.0

/** The per-round fixed cost derived when cluster.round_fixed_s < 0
 *  (docs/reference/cost-model.md section 8), per micro-batch:
 *    weights: NSP_COST_ROUND_WEIGHT_PASSES * (N-1)/N * b * P_dense bytes per
 *             rank at B(N) (ZeRO-3/FSDP: the dense weights all-gathered for
 *             the forward and again for the backward, their gradients
 *             reduce-scattered; the experts stay where expert parallelism
 *             put them), of which (1 - eta) is not hidden behind compute;
 *    launches: L * NSP_COST_ROUND_LAUNCH_S_PER_LAYER.
 *  P_dense = P - L * E * 3 * h * (f / k) (the experts' gate, up and down
 *  projections; P for a dense model). */
#define NSP_COST_ROUND_WEIGHT_PASSES 3.0
/** Kernel launches of one layer's forward + backward in one micro-batch:
 *  ~100 kernels (attention, norms, router, permutes, grouped GEMMs and their
 *  gradients) at ~4 us of launch overhead each. Seconds per layer. */
#define NSP_COST_ROUND_LAUNCH_S_PER_LAYER 4e-4

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
    double round_s;                 /* seconds per step each round adds: cluster
                                       round_fixed_s, or derived when it is < 0     */
} nsp_cost_t;

/** Precompute the constants. Errors: NSP_ERR_INVALID_ARG (a non-positive
 *  size, rate or bandwidth; names the field). */
nsp_status_t nsp_cost_init(nsp_cost_t *cost, const nsp_model_t *model,
                           const nsp_cluster_t *cluster);

/** The derived per-round cost (seconds per round per step) of a model and
 *  cluster, whatever cluster.round_fixed_s says (see above). */
double nsp_cost_round_derived(const nsp_cost_t *cost);

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

/** Seconds of rank CPU an exchange at degree x costs where the CPU moves the
 *  bytes (docs/reference/cost-model.md section 9): cpu_byte(x) * 2 * bytes + calls *
 *  cpu_call(x), `bytes` sent by the rank (it receives as many), cpu_byte and
 *  cpu_call the cluster's intra-node values when x <= G, else inter-node.
 *  0 with the presets (all four 0). Per layer, like bytes and calls. */
double nsp_cost_xfer_cpu(const nsp_cost_t *cost, double bytes, int x, double calls);

/** The exchange CPU of a (d, ring) group per rank and layer, added to the
 *  rank's compute C (not hidden by eta): its subgroups' all-to-all
 *  (a2a_bytes per rank at degree u = d / ring, 4 calls when u > 1) and its
 *  ring (ring_bytes per rank at degree d, nsp_cost_ring_messages calls). */
double nsp_cost_group_xfer_cpu(const nsp_cost_t *cost, double a2a_bytes, double ring_bytes,
                               int d, int ring, int recompute);

/** MoE dispatch+combine seconds for t tokens on one rank: ep_bytes(t)/B_intra. */
double nsp_cost_ep_time(const nsp_cost_t *cost, double tokens);

/** Activation bytes per token held by a rank (kept or recomputed). */
double nsp_cost_act_bytes(const nsp_cost_t *cost, int recompute);

/** Is d a valid Ulysses degree: 1 <= d <= ranks, d <= n_q, n_q % d == 0, and
 *  the KV heads shard over d ranks (n_kv % d == 0 or d % n_kv == 0). */
int nsp_cost_degree_valid(const nsp_cost_t *cost, int d);

/* ---- Ulysses x ring groups (docs/reference/cost-model.md) ---------------------------
 * A group of d = u * r ranks with ring degree r runs the all-to-all inside
 * r subgroups of u consecutive ranks and passes KV blocks around rings of r
 * ranks (u apart). ring = 1 is the plain Ulysses group of cost model v1 and
 * every function below then gives exactly the v1 numbers. */

/** Is (d, ring) a valid group shape: 1 <= d <= ranks, ring >= 1, d % ring
 *  == 0 and u = d / ring a valid Ulysses degree. */
int nsp_cost_group_valid(const nsp_cost_t *cost, int d, int ring);

/** The ring degree the planners give a group of d ranks when rings are
 *  enabled: 1 if d is a valid Ulysses degree, else d / u with u the largest
 *  valid Ulysses degree that divides d and is at most the ranks per node
 *  (so the all-to-all stays inside a node; u = 1 always qualifies). */
int nsp_cost_ring_for_degree(const nsp_cost_t *cost, int d);

/** The largest group degree a planner may use: max_degree without rings,
 *  the ranks with them (any d <= N is u x r with u = 1 at least). */
int nsp_cost_top_degree(const nsp_cost_t *cost, int enable_ring);

/** a2a bytes per layer each rank of a (d, ring) group sends for a sequence
 *  of s tokens: a2a_bytes(s / ring, u) -- the subgroup holds s/r tokens,
 *  each rank s/d of them. Equals nsp_cost_a2a_bytes(s, d) for ring = 1. */
double nsp_cost_group_a2a_bytes(const nsp_cost_t *cost, double s, int d, int ring);

/** Seconds of a group's all-to-all for `bytes` per rank: at B(u), 4*a(u)
 *  (0 if u = 1: a local copy). Equals nsp_cost_a2a_time(bytes, d) for ring 1. */
double nsp_cost_group_a2a_time(const nsp_cost_t *cost, double bytes, int d, int ring);

/** KV block messages per rank per layer: forward r-1, backward r-1 KV and
 *  r dK/dV, one more forward (r-1) when recomputed; 0 for ring 1. */
int nsp_cost_ring_messages(int ring, int recompute);

/** KV heads per rank after the subgroup's all-to-all: max(n_kv, u) / u. */
double nsp_cost_kv_heads_per_rank(const nsp_cost_t *cost, int u);

/** Ring bytes per layer each rank sends for a sequence of s tokens in a
 *  (d, ring) group: messages * (s / ring) * 2 * kvh(u) * d_h * b. */
double nsp_cost_ring_bytes(const nsp_cost_t *cost, double s, int d, int ring, int recompute);

/** Seconds of a group's ring exchange for `bytes` per rank: bytes / B(d) +
 *  messages * a(d) (0 for ring 1). */
double nsp_cost_ring_time(const nsp_cost_t *cost, double bytes, int d, int ring,
                          int recompute);

/** Transient ring buffers in bytes per token a rank holds in a (d, ring)
 *  group: NSP_COST_RING_BUFFERS blocks of s/r = u * (s/d) tokens, i.e.
 *  5 * u * 2 * kvh(u) * d_h * b (0 for ring 1). */
double nsp_cost_ring_mem_per_token(const nsp_cost_t *cost, int d, int ring);

/**
 * Time of one rank in one round (per layer): compute C, pipelined exchange
 * K_pipe and non-pipelined exchange K_seq:
 *   max(C, K_pipe) + (1 - eta) * min(C, K_pipe) + K_seq
 */
double nsp_cost_rank_time(const nsp_cost_t *cost, double comp_s, double k_pipe_s,
                          double k_seq_s);

#endif /* NSP_PLANNER_COST_H_ */

/* The reference cost model v1 (docs/design.md §5.1); see cost.h for units. */
#include "planner/cost.h"
#include "common/log.h"

#include <math.h>
#include <string.h>

static nsp_status_t check_positive(double value, const char *what)
{
    if (!(value > 0.0) || !isfinite(value)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s must be a positive number, got %g",
                         what, value);
    }
    return NSP_OK;
}

static nsp_status_t check_inputs(const nsp_model_t *m, const nsp_cluster_t *c)
{
    NSP_CHECK(check_positive(m->layers, "model.layers"));
    NSP_CHECK(check_positive(m->hidden, "model.hidden"));
    NSP_CHECK(check_positive(m->q_heads, "model.q_heads"));
    NSP_CHECK(check_positive(m->kv_heads, "model.kv_heads"));
    NSP_CHECK(check_positive(m->head_dim, "model.head_dim"));
    NSP_CHECK(check_positive(m->ffn, "model.ffn"));
    NSP_CHECK(check_positive(m->params, "model.params"));
    if (m->experts < 0 || m->topk < 0 || m->topk > m->experts) {
        return nsp_error(NSP_ERR_INVALID_ARG, "model.experts=%d and model.topk=%d must "
                         "satisfy 0 <= topk <= experts", m->experts, m->topk);
    }
    if (m->q_heads % m->kv_heads != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "model.q_heads=%d is not a multiple of "
                         "model.kv_heads=%d", m->q_heads, m->kv_heads);
    }
    NSP_CHECK(check_positive(c->ranks, "cluster.ranks"));
    NSP_CHECK(check_positive(c->ranks_per_node, "cluster.ranks_per_node"));
    if (c->ranks % c->ranks_per_node != 0 && c->ranks > c->ranks_per_node) {
        return nsp_error(NSP_ERR_INVALID_ARG, "cluster.ranks=%d is not a multiple of "
                         "cluster.ranks_per_node=%d", c->ranks, c->ranks_per_node);
    }
    NSP_CHECK(check_positive(c->mem_bytes, "cluster.mem_bytes"));
    NSP_CHECK(check_positive(c->gemm_flops, "cluster.gemm_flops"));
    NSP_CHECK(check_positive(c->attn_flops, "cluster.attn_flops"));
    NSP_CHECK(check_positive(c->bw_intra, "cluster.bw_intra"));
    NSP_CHECK(check_positive(c->bw_inter, "cluster.bw_inter"));
    if (c->workspace_bytes < 0 || c->lat_intra < 0 || c->lat_inter < 0 ||
        !(c->overlap >= 0.0 && c->overlap <= 1.0) || !isfinite(c->round_fixed_s)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "cluster.workspace_bytes, lat_intra and "
                         "lat_inter must be >= 0, overlap in [0, 1] and round_fixed_s "
                         "finite (got %g, %g, %g, %g, %g)", c->workspace_bytes, c->lat_intra,
                         c->lat_inter, c->overlap, c->round_fixed_s);
    }
    if (!(c->cpu_byte_intra >= 0.0) || !(c->cpu_byte_inter >= 0.0) ||
        !(c->cpu_call_intra >= 0.0) || !(c->cpu_call_inter >= 0.0) ||
        !isfinite(c->cpu_byte_intra + c->cpu_byte_inter + c->cpu_call_intra +
                  c->cpu_call_inter)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "cluster.cpu_byte_intra, cpu_byte_inter, "
                         "cpu_call_intra and cpu_call_inter must be finite and >= 0 (got %g, "
                         "%g, %g, %g)", c->cpu_byte_intra, c->cpu_byte_inter, c->cpu_call_intra,
                         c->cpu_call_inter);
    }
    return NSP_OK;
}

nsp_status_t nsp_cost_init(nsp_cost_t *cost, const nsp_model_t *m, const nsp_cluster_t *c)
{
    const double b = NSP_COST_DTYPE_BYTES;
    double       h, qd, kvd;

    if (cost == NULL || m == NULL || c == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cost_init: NULL argument");
    }
    NSP_CHECK(check_inputs(m, c));

    memset(cost, 0, sizeof(*cost));
    cost->model   = *m;
    cost->cluster = *c;
    h   = m->hidden;
    qd  = (double)m->q_heads * m->head_dim;
    kvd = (double)m->kv_heads * m->head_dim;

    /* lin_flops(s) = 3 * s * (2h*(2*n_q*d_h + 2*n_kv*d_h) + 6*h*f + 2*h*E) */
    cost->lin_flops_per_token = NSP_COST_LIN_PASSES *
        (2.0 * h * (2.0 * qd + 2.0 * kvd) + 6.0 * h * m->ffn + 2.0 * h * m->experts);
    /* attn_flops(s) = 3.5 * 2 * s^2 * n_q * d_h (causal) */
    cost->attn_flops_per_token2 = NSP_COST_ATTN_PASSES * 2.0 * qd;
    cost->comp_per_token  = cost->lin_flops_per_token / c->gemm_flops;
    cost->comp_per_token2 = cost->attn_flops_per_token2 / c->attn_flops;
    /* ep_bytes(t) = t * 4 * k * h * b, sent at B_intra */
    cost->ep_s_per_token = 4.0 * m->topk * h * b / c->bw_intra;
    /* a_tok = L * 2 * (5h + (n_q + 2*n_kv)*d_h + 3f) */
    cost->act_bytes_keep = m->layers * 2.0 *
        (5.0 * h + ((double)m->q_heads + 2.0 * m->kv_heads) * m->head_dim + 3.0 * m->ffn);
    /* recomputed: every layer's input (L*h*b) plus one layer's working set */
    cost->act_bytes_recompute = m->layers * h * b + cost->act_bytes_keep / m->layers;
    cost->fixed_mem_bytes = 16.0 * m->params / c->ranks + c->workspace_bytes;
    cost->max_degree = 1;
    for (int d = 1; d <= c->ranks && d <= m->q_heads; ++d) {
        if (nsp_cost_degree_valid(cost, d)) {
            cost->max_degree = d;
        }
    }
    cost->round_s = c->round_fixed_s >= 0.0 ? c->round_fixed_s : nsp_cost_round_derived(cost);
    return NSP_OK;
}

double nsp_cost_round_derived(const nsp_cost_t *cost)
{
    const nsp_model_t   *m = &cost->model;
    const nsp_cluster_t *c = &cost->cluster;
    const int            N = c->ranks;
    double               dense = m->params, bytes;

    if (m->experts > 0 && m->topk > 0) {
        /* the experts' gate, up and down projections: E * 3 * h * (f / k) a layer */
        dense -= (double)m->layers * m->experts * 3.0 * m->hidden * (m->ffn / m->topk);
    }
    if (dense < 0.0) {
        dense = 0.0;
    }
    /* bytes per rank per micro-batch: all-gather (forward), all-gather
     * (backward), reduce-scatter (gradients), each (N-1)/N of the dense
     * weights in bf16 */
    bytes = NSP_COST_ROUND_WEIGHT_PASSES * (N - 1.0) / N * NSP_COST_DTYPE_BYTES * dense;
    return (1.0 - c->overlap) * bytes / nsp_cost_bw(cost, N) +
           m->layers * NSP_COST_ROUND_LAUNCH_S_PER_LAYER;
}

double nsp_cost_lin_flops(const nsp_cost_t *cost, double s)
{
    return cost->lin_flops_per_token * s;
}

double nsp_cost_attn_flops(const nsp_cost_t *cost, double s)
{
    return cost->attn_flops_per_token2 * s * s;
}

double nsp_cost_comp(const nsp_cost_t *cost, double s, int d)
{
    return (cost->comp_per_token * s + cost->comp_per_token2 * s * s) / d;
}

double nsp_cost_a2a_bytes(const nsp_cost_t *cost, double s, int d)
{
    const nsp_model_t *m = &cost->model;
    double             heads;

    if (d <= 1) {
        return 0.0;
    }
    /* 2 * (d-1)/d * (s/d) * (2*n_q + 2*max(n_kv, d)) * d_h * b: q and its
     * output, k and v (replicated above n_kv), there and back. */
    heads = 2.0 * m->q_heads + 2.0 * (m->kv_heads > d ? m->kv_heads : d);
    return 2.0 * (d - 1.0) / d * (s / d) * heads * m->head_dim * NSP_COST_DTYPE_BYTES;
}

double nsp_cost_bw(const nsp_cost_t *cost, int d)
{
    return d <= cost->cluster.ranks_per_node ? cost->cluster.bw_intra : cost->cluster.bw_inter;
}

double nsp_cost_lat(const nsp_cost_t *cost, int d)
{
    return d <= cost->cluster.ranks_per_node ? cost->cluster.lat_intra : cost->cluster.lat_inter;
}

double nsp_cost_a2a_time(const nsp_cost_t *cost, double bytes, int d)
{
    if (d <= 1) {
        return 0.0;
    }
    return bytes / nsp_cost_bw(cost, d) + NSP_COST_A2A_PER_LAYER * nsp_cost_lat(cost, d);
}

double nsp_cost_xfer_cpu(const nsp_cost_t *cost, double bytes, int x, double calls)
{
    const nsp_cluster_t *c = &cost->cluster;
    const int            in = x <= c->ranks_per_node;

    /* bytes sent by the rank; an all-to-all or a ring step receives as many
     * as it sends: 2 x bytes pass through the rank's CPU */
    return (in ? c->cpu_byte_intra : c->cpu_byte_inter) * 2.0 * bytes +
           calls * (in ? c->cpu_call_intra : c->cpu_call_inter);
}

double nsp_cost_group_xfer_cpu(const nsp_cost_t *cost, double a2a_bytes, double ring_bytes,
                               int d, int ring, int recompute)
{
    const int u = d / ring;

    /* the subgroup's all-to-all at degree u (4 calls a layer, as its
     * latency), the ring's messages at degree d */
    return nsp_cost_xfer_cpu(cost, a2a_bytes, u, u > 1 ? NSP_COST_A2A_PER_LAYER : 0.0) +
           nsp_cost_xfer_cpu(cost, ring_bytes, d, nsp_cost_ring_messages(ring, recompute));
}

double nsp_cost_ep_time(const nsp_cost_t *cost, double tokens)
{
    return cost->ep_s_per_token * tokens;
}

double nsp_cost_act_bytes(const nsp_cost_t *cost, int recompute)
{
    return recompute ? cost->act_bytes_recompute : cost->act_bytes_keep;
}

int nsp_cost_degree_valid(const nsp_cost_t *cost, int d)
{
    const int nq = cost->model.q_heads, nkv = cost->model.kv_heads;

    /* The executor shards the KV heads over the d ranks as well: n_kv a
     * multiple of d, or d a multiple of n_kv (KV heads replicated: the
     * max(n_kv, d) of the all-to-all bytes). */
    return d >= 1 && d <= cost->cluster.ranks && d <= nq && nq % d == 0 &&
           (nkv % d == 0 || d % nkv == 0);
}

double nsp_cost_rank_time(const nsp_cost_t *cost, double comp_s, double k_pipe_s,
                          double k_seq_s)
{
    double hi  = comp_s > k_pipe_s ? comp_s : k_pipe_s;
    double lo  = comp_s > k_pipe_s ? k_pipe_s : comp_s;

    return hi + (1.0 - cost->cluster.overlap) * lo + k_seq_s;
}

/* ---- Ulysses x ring groups (docs/reference/cost-model.md) -------------------------- */

int nsp_cost_group_valid(const nsp_cost_t *cost, int d, int ring)
{
    return d >= 1 && d <= cost->cluster.ranks && ring >= 1 && d % ring == 0 &&
           nsp_cost_degree_valid(cost, d / ring);
}

int nsp_cost_ring_for_degree(const nsp_cost_t *cost, int d)
{
    int u = 1;

    if (nsp_cost_degree_valid(cost, d)) {
        return 1;
    }
    for (int v = 1; v <= d && v <= cost->cluster.ranks_per_node; ++v) {
        if (d % v == 0 && nsp_cost_degree_valid(cost, v)) {
            u = v;
        }
    }
    return d / u;
}

int nsp_cost_top_degree(const nsp_cost_t *cost, int enable_ring)
{
    return enable_ring ? cost->cluster.ranks : cost->max_degree;
}

double nsp_cost_group_a2a_bytes(const nsp_cost_t *cost, double s, int d, int ring)
{
    /* The subgroup of u ranks holds s/r tokens (two zigzag spans), s/d per
     * rank: the v1 formula at degree u for a sequence of s/r tokens. */
    return nsp_cost_a2a_bytes(cost, s / ring, d / ring);
}

double nsp_cost_group_a2a_time(const nsp_cost_t *cost, double bytes, int d, int ring)
{
    return nsp_cost_a2a_time(cost, bytes, d / ring);
}

int nsp_cost_ring_messages(int ring, int recompute)
{
    if (ring <= 1) {
        return 0;
    }
    /* forward (r-1) KV [+ (r-1) for the recomputed forward], backward
     * (r-1) KV and r dK/dV (the last hop returns the finished gradient of
     * the rank's own block) */
    return (ring - 1) * (recompute ? 2 : 1) + (ring - 1) + ring;
}

double nsp_cost_kv_heads_per_rank(const nsp_cost_t *cost, int u)
{
    const int kv = cost->model.kv_heads;

    return (double)(kv > u ? kv : u) / u;
}

double nsp_cost_ring_bytes(const nsp_cost_t *cost, double s, int d, int ring, int recompute)
{
    const int u = d / ring;

    /* one message: the rank's KV block of s/r tokens, its kvh(u) KV heads */
    return nsp_cost_ring_messages(ring, recompute) * (s / ring) * NSP_COST_RING_KV *
           nsp_cost_kv_heads_per_rank(cost, u) * cost->model.head_dim * NSP_COST_DTYPE_BYTES;
}

double nsp_cost_ring_time(const nsp_cost_t *cost, double bytes, int d, int ring,
                          int recompute)
{
    const int msgs = nsp_cost_ring_messages(ring, recompute);

    if (msgs == 0) {
        return 0.0;
    }
    /* ring neighbours are u ranks apart inside the group: the ring spans d
     * ranks, so it crosses nodes when d > G */
    return bytes / nsp_cost_bw(cost, d) + msgs * nsp_cost_lat(cost, d);
}

double nsp_cost_ring_mem_per_token(const nsp_cost_t *cost, int d, int ring)
{
    const int u = d / ring;

    if (ring <= 1) {
        return 0.0;
    }
    /* a block holds s/r = u * (s/d) tokens per token the rank holds */
    return NSP_COST_RING_BUFFERS * u * NSP_COST_RING_KV * nsp_cost_kv_heads_per_rank(cost, u) *
           cost->model.head_dim * NSP_COST_DTYPE_BYTES;
}

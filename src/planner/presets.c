/*
 * Built-in model and cluster presets of docs/design.md §5.1: one table each, every
 * number with its source. Infra teams replace them with measured numbers via
 * nsp_model_load() / nsp_cluster_load().
 */
#include "common/log.h"
#include "nspcomm.h"

#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/*
 * Models: HF config.json of each model.
 *  - qwen3-30b-a3b:   Qwen/Qwen3-30B-A3B config.json (48 layers, hidden 2048,
 *    32 q / 4 kv heads, head_dim 128, moe_intermediate_size 768, 128 experts,
 *    8 per token); 30.5e9 parameters (model card).
 *  - qwen3-235b-a22b: Qwen/Qwen3-235B-A22B config.json (94 layers, hidden 4096,
 *    64 q / 4 kv heads, head_dim 128, moe_intermediate_size 1536, 128 experts,
 *    8 per token); 235e9 parameters (model card).
 *  - llama3-8b:       meta-llama/Meta-Llama-3-8B config.json (32 layers, hidden
 *    4096, 32 q / 8 kv heads, head_dim 128, intermediate_size 14336, dense);
 *    8.0e9 parameters.
 * ffn is the active FFN width per token: MoE = topk x expert width.
 */
static const nsp_model_t model_presets[] = {
    /* name              L   h     n_q n_kv d_h  f          E    k  P      */
    {"qwen3-30b-a3b",   48, 2048, 32,  4, 128, 8 * 768.0,  128, 8, 30.5e9},
    {"qwen3-235b-a22b", 94, 4096, 64,  4, 128, 8 * 1536.0, 128, 8, 235e9},
    {"llama3-8b",       32, 4096, 32,  8, 128, 14336.0,    0,   0, 8.0e9},
};

/*
 * Clusters (per rank = per GPU), the table of docs/design.md §5.1:
 *  - R_gemm 450e12: the team's effective rate, a bit under half of the H100
 *    SXM dense bf16 peak of 989 TFLOP/s. R_attn 550e12: FlashAttention-3
 *    reaches 550-620 TFLOP/s on H100 at long lengths (low end taken).
 *  - B_intra: NCCL states ~370 GB/s effective NVLink bandwidth for
 *    non-allreduce collectives on H100 (300e9 taken for all-to-all); H800
 *    NVLink is 400 GB/s bidirectional, 150e9 taken.
 *  - B_inter 45e9: ~48 GB/s per 400 Gb/s NIC, one NIC per GPU.
 *  - a_intra 20 us, a_inter 40 us: the team's per-collective latency estimates;
 *    measure them with perf/nsp_a2a_perf and override them in a cluster file.
 *  - M 80 GiB HBM; W 4 GiB workspace (CUDA context, NCCL buffers, allocator).
 *  - eta 0.8: the team's estimate of comm/compute overlap efficiency.
 */
static const nsp_cluster_t cluster_presets[] = {
    /* name   N  G  M          W         R_gemm   R_attn   B_intra B_inter a_intra a_inter eta
     *  round: derived from the model (docs/reference/cost-model.md section 8); exchange
     *  CPU 0: NICs, DMA and NVLink move the bytes (section 9) */
    {"h100", 0, 8, 80 * GIB, 4 * GIB, 450e12, 550e12, 300e9, 45e9, 20e-6, 40e-6, 0.8,
     NSP_ROUND_FIXED_DERIVED, 0.0, 0.0, 0.0, 0.0},
    {"h800", 0, 8, 80 * GIB, 4 * GIB, 450e12, 550e12, 150e9, 45e9, 20e-6, 40e-6, 0.8,
     NSP_ROUND_FIXED_DERIVED, 0.0, 0.0, 0.0, 0.0},
};

#define NSP_NELEMS(a) (sizeof(a) / sizeof((a)[0]))

nsp_status_t nsp_model_preset(const char *name, nsp_model_t *model)
{
    if (name == NULL || model == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_model_preset: NULL argument");
    }
    for (size_t i = 0; i < NSP_NELEMS(model_presets); ++i) {
        if (strcmp(model_presets[i].name, name) == 0) {
            *model = model_presets[i];
            return NSP_OK;
        }
    }
    return nsp_error(NSP_ERR_NOT_FOUND, "unknown model preset '%s'; known presets: "
                     "qwen3-30b-a3b, qwen3-235b-a22b, llama3-8b (or load a JSON file "
                     "with nsp_model_load)", name);
}

nsp_status_t nsp_cluster_preset(const char *name, int ranks, nsp_cluster_t *cluster)
{
    if (name == NULL || cluster == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cluster_preset: NULL argument");
    }
    for (size_t i = 0; i < NSP_NELEMS(cluster_presets); ++i) {
        const nsp_cluster_t *p = &cluster_presets[i];
        if (strcmp(p->name, name) != 0) {
            continue;
        }
        if (ranks < 1 || ranks > NSP_MAX_RANKS || ranks % p->ranks_per_node != 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "cluster '%s' has %d ranks per node: "
                             "ranks=%d must be a positive multiple of it, at most %d", name,
                             p->ranks_per_node, ranks, NSP_MAX_RANKS);
        }
        *cluster       = *p;
        cluster->ranks = ranks;
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_NOT_FOUND, "unknown cluster preset '%s'; known presets: "
                     "h100, h800 (or load a JSON file with nsp_cluster_load)", name);
}

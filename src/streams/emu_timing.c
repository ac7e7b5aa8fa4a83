/* The timing model of emulated kernels (emu_timing.h): units and formulas there. */
#include "streams/emu_timing.h"

#include "common/log.h"

#include <math.h>
#include <string.h>

#define EMU_TIMING_WHAT "emulated kernel timing"

nsp_status_t nsp_emu_timing_init(nsp_emu_timing_t *t, const nsp_model_t *model,
                                 const nsp_cluster_t *target, const nsp_cluster_t *here,
                                 nsp_emu_link_t link)
{
    nsp_emu_timing_t out;
    double           bw_here;

    if (t == NULL || model == NULL || target == NULL || here == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_timing_init: NULL argument");
    }
    if (link != NSP_EMU_LINK_INTER && link != NSP_EMU_LINK_INTRA) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: link %d (inter %d or intra %d)",
                         EMU_TIMING_WHAT, (int)link, NSP_EMU_LINK_INTER, NSP_EMU_LINK_INTRA);
    }
    bw_here = link == NSP_EMU_LINK_INTER ? here->bw_inter : here->bw_intra;
    if (!(bw_here > 0) || !isfinite(bw_here)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: this machine's %s bandwidth is %g (need a "
                         "positive bf16 bytes/s per rank, e.g. from nsp_calibrate)",
                         EMU_TIMING_WHAT, link == NSP_EMU_LINK_INTER ? "bw_inter" : "bw_intra",
                         bw_here);
    }
    memset(&out, 0, sizeof(out));
    NSP_CHECK(nsp_cost_init(&out.target, model, target));
    out.link      = link;
    out.bw_target = link == NSP_EMU_LINK_INTER ? target->bw_inter : target->bw_intra;
    out.bw_here   = bw_here;
    out.scale     = out.bw_target / out.bw_here;
    *t            = out;
    return NSP_OK;
}

/* Query-key pairs of one sequence's call (see emu_timing.h). */
static double emu_pairs(double q, double kv, int causal)
{
    if (!causal) {
        return q * kv;
    }
    if (q <= kv) {
        return q * q / 2;
    }
    return kv * kv / 2 + (q - kv) * kv;
}

/* The pass's share of the cost model's forward + backward. */
static double emu_attn_share(nsp_emu_pass_t pass)
{
    return pass == NSP_EMU_PASS_FWD ? 1.0 / NSP_COST_ATTN_PASSES
                                    : (NSP_COST_ATTN_PASSES - 1.0) / NSP_COST_ATTN_PASSES;
}

static nsp_status_t emu_check_batch(const nsp_emu_timing_t *t, nsp_emu_pass_t pass,
                                    const nsp_attn_batch_t *b)
{
    const nsp_model_t *m = &t->target.model;

    if (pass != NSP_EMU_PASS_FWD && pass != NSP_EMU_PASS_BWD) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: pass %d (forward %d or backward %d)",
                         EMU_TIMING_WHAT, (int)pass, NSP_EMU_PASS_FWD, NSP_EMU_PASS_BWD);
    }
    if (b->params.q_heads < 1 || b->params.q_heads > m->q_heads ||
        b->params.head_dim != m->head_dim || b->nseqs < 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: a call of %d heads of dimension %d over %d "
                         "sequences for a model of %d heads of dimension %d", EMU_TIMING_WHAT,
                         b->params.q_heads, b->params.head_dim, b->nseqs, m->q_heads,
                         m->head_dim);
    }
    if (b->nseqs > 0 && (b->q_offsets == NULL || b->kv_offsets == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: NULL offsets for %d sequences",
                         EMU_TIMING_WHAT, b->nseqs);
    }
    return NSP_OK;
}

nsp_status_t nsp_emu_timing_attn_flops(const nsp_emu_timing_t *t, nsp_emu_pass_t pass,
                                       const nsp_attn_batch_t *b, double *flops)
{
    double pairs = 0;

    if (t == NULL || b == NULL || flops == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_timing_attn_flops: NULL argument");
    }
    NSP_CHECK(emu_check_batch(t, pass, b));
    for (int i = 0; i < b->nseqs; ++i) {
        int64_t q  = b->q_offsets[i + 1] - b->q_offsets[i];
        int64_t kv = b->kv_offsets[i + 1] - b->kv_offsets[i];
        if (q < 0 || kv < 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s: offsets decrease at sequence %d",
                             EMU_TIMING_WHAT, i);
        }
        pairs += emu_pairs((double)q, (double)kv, b->params.causal);
    }
    /* attn_flops(1) is the FLOPs of 1/2 pair, all heads, forward + backward */
    *flops = pairs * 2.0 * nsp_cost_attn_flops(&t->target, 1.0) *
             ((double)b->params.q_heads / t->target.model.q_heads) * emu_attn_share(pass);
    return NSP_OK;
}

nsp_status_t nsp_emu_timing_attn_s(const nsp_emu_timing_t *t, nsp_emu_pass_t pass,
                                   const nsp_attn_batch_t *b, double *seconds)
{
    double flops;

    if (seconds == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_timing_attn_s: NULL seconds");
    }
    NSP_CHECK(nsp_emu_timing_attn_flops(t, pass, b, &flops));
    *seconds = flops / t->target.cluster.attn_flops * t->scale;
    return NSP_OK;
}

double nsp_emu_timing_lin_s(const nsp_emu_timing_t *t, nsp_emu_pass_t pass, double tokens)
{
    double share;

    if (t == NULL || !(tokens > 0) || (pass != NSP_EMU_PASS_FWD && pass != NSP_EMU_PASS_BWD)) {
        return 0.0;
    }
    share = pass == NSP_EMU_PASS_FWD ? 1.0 / NSP_COST_LIN_PASSES
                                     : (NSP_COST_LIN_PASSES - 1.0) / NSP_COST_LIN_PASSES;
    return nsp_cost_lin_flops(&t->target, tokens) * share / t->target.cluster.gemm_flops *
           t->scale;
}

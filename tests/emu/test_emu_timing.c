/*
 * The timing model of emulated kernels (src/streams/emu_timing.h) against
 * values computed by hand (below, in the comments), and its consistency
 * with the cost model: a sequence's forward + backward calls at degree d
 * take the attention part of comp(s, d), stretched by the scale.
 *
 * Model: 1 layer, h 512, n_q 8, n_kv 2, D 64, f 1024, dense, P 1e6.
 * Target: the h100 preset (R_attn 550e12, R_gemm 450e12 FLOP/s, B_inter
 * 45e9, B_intra 300e9 bf16 B/s per rank). Here: B_inter 2e7, B_intra 1e9.
 * So scale = 45e9 / 2e7 = 2250 (inter), 300e9 / 1e9 = 300 (intra).
 * attn_flops(1) = 3.5 * 2 * n_q * D = 3584 FLOP (the cost model's, causal,
 * fwd + bwd, all heads); a query-key pair costs 2 * 3584 fwd + bwd.
 */
#include "streams/emu_timing.h"

#include "../tap.h"

#include <string.h>

static nsp_model_t test_model(void)
{
    nsp_model_t m;

    memset(&m, 0, sizeof(m));
    strcpy(m.name, "emu-test");
    m.layers   = 1;
    m.hidden   = 512;
    m.q_heads  = 8;
    m.kv_heads = 2;
    m.head_dim = 64;
    m.ffn      = 1024;
    m.params   = 1e6;
    return m;
}

static nsp_attn_batch_t batch_of(int heads, int causal, int nseqs, const int64_t *qo,
                                 const int64_t *ko)
{
    nsp_attn_batch_t b;

    memset(&b, 0, sizeof(b));
    b.params     = (nsp_attn_params_t)NSP_ATTN_PARAMS_INIT(heads, 1, 64);
    b.params.causal = causal;
    b.nseqs      = nseqs;
    b.q_offsets  = qo;
    b.kv_offsets = ko;
    return b;
}

static void test_hand_values(const nsp_emu_timing_t *t)
{
    /* causal, 4 of 8 heads, sequences 1024 and 512:
     * pairs 1024^2/2 + 512^2/2 = 655360; fwd FLOP = 655360 * 2 * 3584 * 4/8 / 3.5
     * = 671088640 (= 2 * (1024^2 + 512^2) * 4 heads * 64); seconds = 671088640 /
     * 550e12 * 2250 = 2.745362618e-3; backward 2.5x. */
    const int64_t    off[3] = {0, 1024, 1536};
    nsp_attn_batch_t b      = batch_of(4, 1, 2, off, off);
    double           flops = 0, s = 0;

    tap_is_int(nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_FWD, &b, &flops), NSP_OK, "flops");
    tap_is_double(flops, 671088640.0, 1e-12, 0, "causal fwd, 4 heads, 1024 + 512 tokens: "
                  "671088640 FLOP");
    nsp_emu_timing_attn_s(t, NSP_EMU_PASS_FWD, &b, &s);
    tap_is_double(s, 2.745362618e-3, 1e-9, 0, "... 2.745 ms emulated (1.22 us on an H100 x "
                  "2250)");
    nsp_emu_timing_attn_s(t, NSP_EMU_PASS_BWD, &b, &s);
    tap_is_double(s, 2.5 * 2.745362618e-3, 1e-9, 0, "backward 2.5x the forward");
}

static void test_blocks(const nsp_emu_timing_t *t)
{
    /* non-causal ring block, q 100 x kv 300, 8 heads, fwd: 4 * 100 * 300 * 8 * 64
     * = 61440000 FLOP; causal q 300 over kv 100 (aligned): pairs 100^2/2 + 200 * 100
     * = 25000, 25000 * 4 * 8 * 64 = 51200000; causal q 100 over kv 300: 100^2/2 =
     * 5000 pairs, 10240000 */
    const int64_t    q1[2] = {0, 100}, k1[2] = {0, 300}, q2[2] = {0, 300}, k2[2] = {0, 100};
    nsp_attn_batch_t b = batch_of(8, 0, 1, q1, k1);
    double           flops = 0;

    nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_FWD, &b, &flops);
    tap_is_double(flops, 61440000.0, 1e-12, 0, "non-causal block 100 x 300: 61440000 FLOP");
    b = batch_of(8, 1, 1, q2, k2);
    nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_FWD, &b, &flops);
    tap_is_double(flops, 51200000.0, 1e-12, 0, "causal 300 queries over 100 keys: 51200000");
    b = batch_of(8, 1, 1, q1, k1);
    nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_FWD, &b, &flops);
    tap_is_double(flops, 10240000.0, 1e-12, 0, "causal 100 queries over 300 keys: 10240000");
    b = batch_of(8, 1, 0, NULL, NULL);
    nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_BWD, &b, &flops);
    tap_is_double(flops, 0.0, 0, 0, "no sequences: 0");
}

static void test_cost_model(const nsp_emu_timing_t *t)
{
    /* s = 2048 at degree 4 (2 heads of 8 per rank): fwd + bwd = attn_flops(s) / 4,
     * the attention part of comp(s, 4), i.e. comp - lin_flops(s) / R_gemm / 4. */
    const int64_t    off[2] = {0, 2048};
    nsp_attn_batch_t b      = batch_of(2, 1, 1, off, off);
    double           f = 0, w = 0, attn_part;

    nsp_emu_timing_attn_s(t, NSP_EMU_PASS_FWD, &b, &f);
    nsp_emu_timing_attn_s(t, NSP_EMU_PASS_BWD, &b, &w);
    attn_part = nsp_cost_comp(&t->target, 2048, 4) -
                nsp_cost_lin_flops(&t->target, 2048) / t->target.cluster.gemm_flops / 4;
    tap_is_double(f + w, attn_part * 2250, 1e-9, 0, "fwd + bwd of a sequence at degree 4 = "
                  "the attention part of the cost model's comp(s, 4) x scale");
    /* linear: lin_flops per token = 3 * (2*512*(2*8*64 + 2*2*64) + 6*512*1024) =
     * 13369344; fwd 1/3 of 1000 tokens = 4.456448e9 FLOP / 450e12 * 2250 */
    tap_is_double(nsp_emu_timing_lin_s(t, NSP_EMU_PASS_FWD, 1000), 2.228224e-2, 1e-9, 0,
                  "linear layers, 1000 tokens fwd: 22.28 ms emulated");
    tap_is_double(nsp_emu_timing_lin_s(t, NSP_EMU_PASS_BWD, 1000), 2 * 2.228224e-2, 1e-9, 0,
                  "backward 2x");
    tap_is_double(nsp_emu_timing_lin_s(t, NSP_EMU_PASS_FWD, 0), 0, 0, 0, "no tokens: 0");
}

static void test_errors(const nsp_model_t *m, const nsp_cluster_t *target, nsp_cluster_t here,
                        const nsp_emu_timing_t *t)
{
    const int64_t    off[2] = {0, 16}, bad[3] = {0, 16, 8};
    nsp_attn_batch_t b = batch_of(3, 1, 1, off, off);
    nsp_emu_timing_t u;
    double           f;

    b.params.head_dim = 32;
    tap_is_int(nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_FWD, &b, &f), NSP_ERR_INVALID_ARG,
               "a head dimension other than the model's is refused");
    b = batch_of(9, 1, 1, off, off);
    tap_is_int(nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_FWD, &b, &f), NSP_ERR_INVALID_ARG,
               "more heads than the model's");
    b = batch_of(8, 1, 2, bad, bad);
    tap_is_int(nsp_emu_timing_attn_flops(t, NSP_EMU_PASS_FWD, &b, &f), NSP_ERR_INVALID_ARG,
               "decreasing offsets");
    b = batch_of(8, 1, 1, off, off);
    tap_is_int(nsp_emu_timing_attn_flops(t, (nsp_emu_pass_t)7, &b, &f), NSP_ERR_INVALID_ARG,
               "an unknown pass");
    here.bw_inter = 0;
    tap_is_int(nsp_emu_timing_init(&u, m, target, &here, NSP_EMU_LINK_INTER),
               NSP_ERR_INVALID_ARG, "a machine without a measured link bandwidth is refused");
    tap_is_int(nsp_emu_timing_init(&u, m, target, &here, (nsp_emu_link_t)5),
               NSP_ERR_INVALID_ARG, "an unknown link");
}

int main(void)
{
    nsp_model_t      m = test_model();
    nsp_cluster_t    target, here;
    nsp_emu_timing_t t, intra;

    if (nsp_cluster_preset("h100", 8, &target) != NSP_OK) {
        tap_ok(0, "h100 preset: %s", nsp_last_error());
        return tap_done();
    }
    here          = target;
    here.bw_inter = 2e7;
    here.bw_intra = 1e9;
    tap_is_int(nsp_emu_timing_init(&t, &m, &target, &here, NSP_EMU_LINK_INTER), NSP_OK,
               "timing: the model on h100, this machine's inter-node link");
    tap_is_double(t.scale, 2250.0, 1e-12, 0, "scale = 45e9 / 2e7 = 2250");
    tap_is_int(nsp_emu_timing_init(&intra, &m, &target, &here, NSP_EMU_LINK_INTRA), NSP_OK,
               "timing on the intra-node link");
    tap_is_double(intra.scale, 300.0, 1e-12, 0, "scale = 300e9 / 1e9 = 300");
    test_hand_values(&t);
    test_blocks(&t);
    test_cost_model(&t);
    test_errors(&m, &target, here, &t);
    return tap_done();
}

/*
 * Nested attention with 2, 4 and 8 real processes over UCX on loopback,
 * against the single-process reference of the whole batch (nsp_attn_fwd /
 * nsp_attn_bwd computed in the parent before the fork).
 *
 * Every rank of a case, for every round of every plan:
 *  - gathers its sequence-sharded q, k, v, dout from the global tensors by
 *    its layout;
 *  - run A: pipelined forward keeping the saved state, backward from it;
 *  - run B: serial forward, backward from the sequence-sharded tensors
 *    (stateless), so every exchange runs again;
 *  - compares A's o, lse, dq, dk, dv with the reference over its chunks
 *    (relative to the largest reference value; lse to max(1, |lse|)), and B
 *    with A bit for bit.
 * Cases: random nested plans (GQA 8/2: KV heads replicated above degree 2,
 * uneven lengths, sequences shorter than their degree, skipped levels, one
 * or two rounds); plans of the three planners with a framework kernel
 * callback (the reference behind a wrapper that checks what it is given);
 * plans of the static and nested planners with rings allowed (enable_ring),
 * each batch with a sequence only a degree-8 u 4 x r 2 group can hold;
 * ring and Ulysses x ring groups (u = 1, 2, 4; r = 2, 4, 8) with replicated
 * KV heads, causal and without a mask; rings and all-to-alls on a tree that
 * lacks their degrees (over the world); a level that cannot shard the heads
 * (every rank fails, none hangs) and a NULL buffer on one rank (likewise).
 */
#include "nattn_test.h"
#include "../mp.h"
#include "../tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fp32 tolerance on |nested - reference| / max |reference| (lse: / max(1, |lse|)).
 * Measured worst: see docs/results.md, "Accuracy". */
#define NT_TOL 2e-5
/* bf16 / fp16 against the same float32 reference (of the unrounded inputs),
 * in units of the unit roundoff u = 2^-p of p significant bits: bf16 keeps
 * 8 (u = 2^-8 = 3.9e-3), fp16 11 (u = 2^-11 = 4.9e-4). First-order budget,
 * relative to the scale of compare_one(): q and k rounded to the dtype (u
 * each, moving a softmax weight by about 2u of itself), v rounded (u), the
 * kernel's output rounded (u), and where partials are added (ring steps,
 * replicated dK/dV) each partial rounded by the kernel before the float32
 * merge or sum (u; the sum is rounded once more at the end: the output's u).
 * Errors of different terms mostly cancel: 4u as the tolerance, measured
 * worst below 2u (docs/reference/attention.md §8). */
#define NT_TOL_BF16 (4.0 / 256.0)
#define NT_TOL_FP16 (4.0 / 2048.0)

#define NT_MAX_PLANS 6

enum { V_ERR_O = 0, V_ERR_LSE, V_ERR_DQ, V_ERR_DK, V_ERR_DV, V_DIFF_AB, V_ROUNDS, V_KCALLS,
       V_KBAD, V_RING_BYTES, V_RING_LEVELS, V_RING_TOP };

typedef struct nt_case {
    nsp_unique_id_t   id;
    int               nplans;
    nsp_plan_t       *plans[NT_MAX_PLANS];
    nt_ref_t          refs[NT_MAX_PLANS];
    nsp_attn_params_t attn[NT_MAX_PLANS];
    int               sparse_tree;   /* tree {1, N}: other degrees run over the world */
    int               custom_kernel; /* wrap the reference in a checking kernel */
    int               error_case;    /* expect create to fail on every rank */
    double            timeout_s;
    double            ring_bytes;    /* out: bytes all ranks sent around rings */
    double            ring_levels;   /* out: (rank, round, level)s run with ring > 1 */
    double            ring_top;      /* out: largest degree of those levels */
    nsp_attn_dtype_t  dtype;         /* of q, k, v, ... (the kernel: nt_dtype_kernel) */
    int               dkv_f32;       /* params.dkv_f32: replicated dK/dV summed in float32 */
} nt_case_t;

static double tol_of(nsp_attn_dtype_t dtype)
{
    return dtype == NSP_ATTN_BF16 ? NT_TOL_BF16 : dtype == NSP_ATTN_FP16 ? NT_TOL_FP16 : NT_TOL;
}

static const char *dtype_name(nsp_attn_dtype_t dtype)
{
    return dtype == NSP_ATTN_BF16 ? "bf16" : dtype == NSP_ATTN_FP16 ? "fp16" : "fp32";
}

/* ---- a framework's kernel: the reference behind checks ------------------ */

typedef struct check_kernel {
    nsp_attn_kernel_t ref;
    nsp_attn_dtype_t  dtype;
    int               nq, nkv;
    int               calls, bad;
} check_kernel_t;

static int batch_ok(const check_kernel_t *ck, const nsp_attn_batch_t *b)
{
    int hq = b->params.q_heads, hkv = b->params.kv_heads;

    if (b->dtype != ck->dtype || b->stream != NULL || hq < 1 || hkv < 1 || hq % hkv ||
        b->params.scale <= 0.0f || b->nseqs < 1 || b->level < 0) {
        return 0;
    }
    if (b->q_head0 % hq != 0 || b->q_head0 + hq > ck->nq || b->kv_head0 + hkv > ck->nkv ||
        b->kv_head0 != b->q_head0 / (ck->nq / ck->nkv)) { /* GQA: the right KV head */
        return 0;
    }
    if (b->q_offsets[0] != 0 || b->kv_offsets[0] != 0) {
        return 0;
    }
    for (int s = 0; s < b->nseqs; ++s) {
        if (b->q_offsets[s + 1] - b->q_offsets[s] > b->max_q_len ||
            b->kv_offsets[s + 1] - b->kv_offsets[s] > b->max_kv_len) {
            return 0;
        }
        /* A causal call aligns both starts: the driver passes equal spans. */
        if (b->params.causal && b->q_offsets[s + 1] - b->q_offsets[s] !=
                                    b->kv_offsets[s + 1] - b->kv_offsets[s]) {
            return 0;
        }
    }
    return 1;
}

static nsp_status_t check_fwd(void *ctx, const nsp_attn_batch_t *b, const void *q,
                              const void *k, const void *v, void *o, float *lse)
{
    check_kernel_t *ck = ctx;

    ck->calls++;
    ck->bad += !batch_ok(ck, b);
    return ck->ref.fwd(ck->ref.ctx, b, q, k, v, o, lse);
}

static nsp_status_t check_bwd(void *ctx, const nsp_attn_batch_t *b, const void *q,
                              const void *k, const void *v, const void *o, const float *lse,
                              const void *dout, void *dq, void *dk, void *dv)
{
    check_kernel_t *ck = ctx;

    ck->calls++;
    ck->bad += !batch_ok(ck, b);
    return ck->ref.bwd(ck->ref.ctx, b, q, k, v, o, lse, dout, dq, dk, dv);
}

/* ---- one rank ------------------------------------------------------------ */

typedef struct rank_ctx {
    nsp_comm_t *comm;
    nsp_tree_t *tree;
    int         rank, nranks;
    double      err[5];
    double      diff_ab, rounds, ring_bytes;
    double      ring_levels, ring_top; /* levels run with ring > 1; their largest degree */
    check_kernel_t ck;
    nt_dtype_kernel_t dk; /* the kernel of a bf16 / fp16 case */
} rank_ctx_t;

/* The rank's tensors of one round: inputs and two runs' outputs. */
typedef struct round_bufs {
    float *q, *k, *v, *dout;
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
} round_bufs_t;

static void bufs_free(round_bufs_t *b)
{
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->dout);
    for (int x = 0; x < 2; ++x) {
        free(b->o[x]);
        free(b->lse[x]);
        free(b->dq[x]);
        free(b->dk[x]);
        free(b->dv[x]);
    }
    memset(b, 0, sizeof(*b));
}

static int bufs_alloc(round_bufs_t *b, int64_t T, const nsp_attn_params_t *p)
{
    size_t qf = (size_t)T * (size_t)p->q_heads * (size_t)p->head_dim + 1;
    size_t kf = (size_t)T * (size_t)p->kv_heads * (size_t)p->head_dim + 1;
    size_t lf = (size_t)T * (size_t)p->q_heads + 1;
    int    bad;

    memset(b, 0, sizeof(*b));
    b->q = malloc(qf * 4), b->dout = malloc(qf * 4), b->k = malloc(kf * 4), b->v = malloc(kf * 4);
    bad = !b->q || !b->dout || !b->k || !b->v;
    for (int x = 0; x < 2; ++x) {
        /* Poisoned outputs: a row the driver forgets shows up as NaN. */
        b->o[x] = malloc(qf * 4), b->dq[x] = malloc(qf * 4), b->lse[x] = malloc(lf * 4);
        b->dk[x] = malloc(kf * 4), b->dv[x] = malloc(kf * 4);
        bad |= !b->o[x] || !b->dq[x] || !b->lse[x] || !b->dk[x] || !b->dv[x];
        if (!bad) {
            memset(b->o[x], 0xff, qf * 4), memset(b->dq[x], 0xff, qf * 4);
            memset(b->lse[x], 0xff, lf * 4), memset(b->dk[x], 0xff, kf * 4);
            memset(b->dv[x], 0xff, kf * 4);
        }
    }
    return bad ? -1 : 0;
}

static nsp_status_t make_attn(rank_ctx_t *c, const nt_case_t *mc, const nsp_layout_t *lay,
                              const nsp_attn_params_t *p, int serial, nsp_nested_attn_t **attn)
{
    nsp_nested_attn_params_t ap;

    memset(&ap, 0, sizeof(ap));
    ap.attn       = *p;
    ap.field_mask = NSP_NESTED_ATTN_FIELD_SERIAL | NSP_NESTED_ATTN_FIELD_SLICES;
    ap.serial     = serial;
    ap.max_slices = serial ? 1 : 3; /* different slicing, same numbers */
    if (mc->dtype != NSP_ATTN_FP32) {
        ap.field_mask |= NSP_NESTED_ATTN_FIELD_DTYPE | NSP_NESTED_ATTN_FIELD_KERNEL;
        ap.dtype = mc->dtype;
        nt_dtype_kernel(&c->dk, mc->dtype, &ap.kernel);
    }
    if (mc->dkv_f32) {
        ap.field_mask |= NSP_NESTED_ATTN_FIELD_DKV_F32;
        ap.dkv_f32 = 1;
    }
    if (mc->custom_kernel) {
        c->ck.nq    = p->q_heads;
        c->ck.nkv   = p->kv_heads;
        c->ck.dtype = mc->dtype;
        if (mc->dtype != NSP_ATTN_FP32) {
            c->ck.ref = ap.kernel;
        } else {
            nsp_attn_kernel_reference(&c->ck.ref);
        }
        ap.field_mask |= NSP_NESTED_ATTN_FIELD_KERNEL;
        ap.kernel = (nsp_attn_kernel_t){.fwd = check_fwd, .bwd = check_bwd, .ctx = &c->ck};
    }
    return nsp_nested_attn_create(c->tree, lay, &ap, attn);
}

static void note_err(rank_ctx_t *c, int which, double diff, double scale, int lse)
{
    double rel = diff / (lse ? (scale > 1.0 ? scale : 1.0) : (scale > 0.0 ? scale : 1.0));

    c->err[which] = rel > c->err[which] || isnan(rel) ? rel : c->err[which];
}

/* Largest |x| of a reference tensor of `heads` rows of `width` per token. */
static double global_max(const nt_ref_t *ref, const float *x, int heads, int width)
{
    size_t n = (size_t)ref->offsets[ref->nseqs] * (size_t)heads * (size_t)width;
    double m = 0.0;

    for (size_t i = 0; i < n; ++i) {
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    }
    return m;
}

/* The error of one tensor against the reference. fp32: relative to the
 * largest reference value of the rank's chunks. bf16 / fp16: relative to
 * the larger of 1 and the largest value of the whole tensor (atol = rtol):
 * dq and dk are sums of O(1) terms (inputs in [-2, 2)) that cancel to 0 in
 * exact arithmetic for one-token sequences, and a plan of short sequences
 * only has a reference near 0 whose bf16 residue is not. */
static void compare_one(rank_ctx_t *c, const nt_ref_t *ref, const nsp_layout_t *lay, int which,
                        const float *global, int heads, int width, const float *local,
                        int dtype_case)
{
    double s, d = nt_max_diff(ref, lay, global, heads, width, local, &s);

    if (dtype_case) {
        double g = global_max(ref, global, heads, width);
        s = g > s ? g : s;
        s = s > 1.0 ? s : 1.0;
    }
    note_err(c, which, d, s, which == V_ERR_LSE);
}

static int compare_ref(rank_ctx_t *c, const nt_ref_t *ref, const nsp_layout_t *lay,
                       const round_bufs_t *b, double tol)
{
    int dc = tol > NT_TOL;

    compare_one(c, ref, lay, V_ERR_O, ref->o, ref->nq, ref->D, b->o[0], dc);
    compare_one(c, ref, lay, V_ERR_LSE, ref->lse, ref->nq, 1, b->lse[0], dc);
    compare_one(c, ref, lay, V_ERR_DQ, ref->dq, ref->nq, ref->D, b->dq[0], dc);
    compare_one(c, ref, lay, V_ERR_DK, ref->dk, ref->nkv, ref->D, b->dk[0], dc);
    compare_one(c, ref, lay, V_ERR_DV, ref->dv, ref->nkv, ref->D, b->dv[0], dc);
    for (int x = 0; x < 5; ++x) {
        if (!(c->err[x] <= tol)) {
            return -1;
        }
    }
    return 0;
}

/* Runs A (pipelined, saved) and B (serial, stateless) must agree bit for
 * bit, in the dtype of the case (es bytes per element; lse float32). */
static double diff_ab(const round_bufs_t *b, int64_t T, const nsp_attn_params_t *p, size_t es)
{
    size_t qf = (size_t)T * (size_t)p->q_heads * (size_t)p->head_dim;
    size_t kf = (size_t)T * (size_t)p->kv_heads * (size_t)p->head_dim;
    size_t lf = (size_t)T * (size_t)p->q_heads;

    return (double)((memcmp(b->o[0], b->o[1], qf * es) != 0) +
                    (memcmp(b->lse[0], b->lse[1], lf * 4) != 0) +
                    (memcmp(b->dq[0], b->dq[1], qf * es) != 0) +
                    (memcmp(b->dk[0], b->dk[1], kf * es) != 0) +
                    (memcmp(b->dv[0], b->dv[1], kf * es) != 0));
}

/* The rank's inputs in the case's dtype (in place), or its outputs back in
 * float32 for the comparison (to = 0). */
static void bufs_convert(round_bufs_t *b, int64_t T, const nsp_attn_params_t *p,
                         nsp_attn_dtype_t dt, int to)
{
    size_t qf = (size_t)T * (size_t)p->q_heads * (size_t)p->head_dim;
    size_t kf = (size_t)T * (size_t)p->kv_heads * (size_t)p->head_dim;

    if (to) {
        nt_to_dtype(dt, b->q, qf), nt_to_dtype(dt, b->dout, qf);
        nt_to_dtype(dt, b->k, kf), nt_to_dtype(dt, b->v, kf);
        return;
    }
    for (int x = 0; x < 2; ++x) {
        nt_from_dtype(dt, b->o[x], qf), nt_from_dtype(dt, b->dq[x], qf);
        nt_from_dtype(dt, b->dk[x], kf), nt_from_dtype(dt, b->dv[x], kf);
    }
}

static int run_round(rank_ctx_t *c, const nt_case_t *mc, int p, int round)
{
    const nsp_attn_params_t *ap = &mc->attn[p];
    const nt_ref_t          *ref = &mc->refs[p];
    nsp_layout_t            *lay = NULL;
    nsp_layout_info_t        info;
    nsp_nested_attn_t       *attn[2] = {NULL, NULL};
    nsp_nested_attn_saved_t *saved = NULL;
    nsp_nested_attn_stats_t  st;
    round_bufs_t             b;
    int                      rc = 1;

    memset(&b, 0, sizeof(b));
    if (nsp_layout_create(mc->plans[p], round, c->rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK) {
        FAIL("plan %d round %d: layout: %s", p, round, nsp_last_error());
    }
    if (bufs_alloc(&b, info.local_tokens, ap) != 0) {
        FAIL("plan %d round %d: no memory", p, round);
    }
    nt_gather(ref, lay, ref->q, ap->q_heads, ap->head_dim, b.q);
    nt_gather(ref, lay, ref->k, ap->kv_heads, ap->head_dim, b.k);
    nt_gather(ref, lay, ref->v, ap->kv_heads, ap->head_dim, b.v);
    nt_gather(ref, lay, ref->dout, ap->q_heads, ap->head_dim, b.dout);
    bufs_convert(&b, info.local_tokens, ap, mc->dtype, 1);
    for (int x = 0; x < 2; ++x) {
        if (make_attn(c, mc, lay, ap, x, &attn[x]) != NSP_OK) {
            FAIL("plan %d round %d: create (%s): %s", p, round, x ? "serial" : "pipelined",
                 nsp_last_error());
        }
    }
    if (nsp_nested_attn_fwd(attn[0], b.q, b.k, b.v, b.o[0], b.lse[0], &saved, &st) != NSP_OK ||
        nsp_nested_attn_bwd(attn[0], saved, NULL, NULL, NULL, NULL, NULL, b.dout, b.dq[0],
                            b.dk[0], b.dv[0], NULL) != NSP_OK) {
        FAIL("plan %d round %d: pipelined: %s", p, round, nsp_last_error());
    }
    for (int l = 0; l < st.nlevels; ++l) {
        c->ring_bytes += (double)st.level[l].ring_bytes;
        if (st.level[l].ring > 1) {
            c->ring_levels += 1;
            c->ring_top = st.level[l].degree > c->ring_top ? st.level[l].degree : c->ring_top;
        }
    }
    if (nsp_nested_attn_fwd(attn[1], b.q, b.k, b.v, b.o[1], b.lse[1], NULL, NULL) != NSP_OK ||
        nsp_nested_attn_bwd(attn[1], NULL, b.q, b.k, b.v, b.o[1], b.lse[1], b.dout, b.dq[1],
                            b.dk[1], b.dv[1], NULL) != NSP_OK) {
        FAIL("plan %d round %d: serial: %s", p, round, nsp_last_error());
    }
    c->diff_ab += diff_ab(&b, info.local_tokens, ap, nt_elem_size(mc->dtype));
    bufs_convert(&b, info.local_tokens, ap, mc->dtype, 0);
    if (compare_ref(c, ref, lay, &b, tol_of(mc->dtype)) != 0) {
        FAIL("plan %d round %d (%d levels): error vs reference o %.2e lse %.2e dq %.2e dk %.2e "
             "dv %.2e", p, round, info.nlevels, c->err[0], c->err[1], c->err[2], c->err[3],
             c->err[4]);
    }
    c->rounds += 1;
    rc = 0;
out:
    nsp_nested_attn_saved_free(saved);
    nsp_nested_attn_destroy(attn[0]);
    nsp_nested_attn_destroy(attn[1]);
    nsp_layout_free(lay);
    bufs_free(&b);
    return rc;
}

static int setup(rank_ctx_t *c, const nt_case_t *mc, int rank, int nranks)
{
    memset(c, 0, sizeof(*c));
    c->rank   = rank;
    c->nranks = nranks;
    return mp_comm_tree(&mc->id, rank, nranks, mc->timeout_s, mc->sparse_tree, &c->comm,
                        &c->tree);
}

static void teardown(rank_ctx_t *c)
{
    mp_comm_tree_free(c->comm, c->tree);
}

static int rank_main(int rank, int nranks, void *arg)
{
    const nt_case_t *mc = arg;
    rank_ctx_t       c;
    int              rc = 1;

    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    for (int p = 0; p < mc->nplans; ++p) {
        for (int r = 0; r < mc->plans[p]->nrounds; ++r) {
            if (run_round(&c, mc, p, r) != 0) {
                goto out;
            }
        }
    }
    rc = 0;
out:
    for (int x = 0; x < 5; ++x) {
        mp_set_value(V_ERR_O + x, c.err[x]);
    }
    mp_set_value(V_DIFF_AB, c.diff_ab);
    mp_set_value(V_ROUNDS, c.rounds);
    mp_set_value(V_KCALLS, c.ck.calls);
    mp_set_value(V_KBAD, c.ck.bad);
    mp_set_value(V_RING_BYTES, c.ring_bytes);
    mp_set_value(V_RING_LEVELS, c.ring_levels);
    mp_set_value(V_RING_TOP, c.ring_top);
    teardown(&c);
    return rc;
}

/*
 * Error case (plan 0 has a level on some ranks whose Ulysses degree does not
 * divide the heads): create fails on every rank with NSP_ERR_INVALID_ARG;
 * then with valid heads (plan 1's params), rank 1 passes a NULL q and every
 * rank's forward fails likewise; a correct forward still works afterwards.
 */
/* Sizes given at create (params.attn.bytes, NSP_ATTN_FIELD_BYTES) for the
 * sequence-sharded buffers of T tokens: with `short_o`, o is said to be one
 * token short, and the forward must fail on every rank (the rank with the
 * short o names it). 0, or -1 with a note. */
static int rank_short_o(rank_ctx_t *c, const nt_case_t *mc, const nsp_layout_t *lay, int64_t T,
                        int short_o, const round_bufs_t *b, nsp_nested_attn_t **attn)
{
    nsp_attn_params_t p = mc->attn[1];
    const size_t      q = (size_t)T * p.q_heads * p.head_dim * 4;
    const size_t      kv = (size_t)T * p.kv_heads * p.head_dim * 4;
    nsp_status_t      st;

    p.field_mask = NSP_ATTN_FIELD_BYTES;
    p.bytes.q = q, p.bytes.k = kv, p.bytes.v = kv, p.bytes.lse = (size_t)T * p.q_heads * 4;
    p.bytes.o = short_o ? q - (size_t)p.q_heads * p.head_dim * 4 : q;
    if (make_attn(c, mc, lay, &p, 0, attn) != NSP_OK) {
        mp_note("create with buffer sizes: %s", nsp_last_error());
        return -1;
    }
    st = nsp_nested_attn_fwd(*attn, b->q, b->k, b->v, b->o[0], b->lse[0], NULL, NULL);
    if (st != NSP_ERR_INVALID_ARG || (short_o && strstr(nsp_last_error(), "buffer o ") == NULL)) {
        mp_note("forward with o one token short on rank 1 gave %s: %s", nsp_status_string(st),
                nsp_last_error());
        return -1;
    }
    return 0;
}

static int rank_errors(int rank, int nranks, void *arg)
{
    const nt_case_t  *mc = arg;
    rank_ctx_t        c;
    nsp_layout_t     *lay = NULL;
    nsp_layout_info_t info;
    nsp_nested_attn_t *attn = NULL;
    round_bufs_t      b;
    nsp_status_t      st;
    int               rc = 1;

    memset(&b, 0, sizeof(b));
    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    if (nsp_layout_create(mc->plans[0], 0, rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK ||
        bufs_alloc(&b, info.local_tokens, &mc->attn[1]) != 0) {
        FAIL("setup: %s", nsp_last_error());
    }
    st = make_attn(&c, mc, lay, &mc->attn[0], 0, &attn);
    if (st != NSP_ERR_INVALID_ARG || attn != NULL) {
        FAIL("create with heads %d over a degree-%d level gave %s", mc->attn[0].q_heads,
             nranks / 2, nsp_status_string(st));
    }
    mp_note("create: %s", nsp_last_error());
    if (make_attn(&c, mc, lay, &mc->attn[1], 0, &attn) != NSP_OK) {
        FAIL("create with valid heads: %s", nsp_last_error());
    }
    nt_gather(&mc->refs[1], lay, mc->refs[1].q, mc->attn[1].q_heads, mc->attn[1].head_dim, b.q);
    nt_gather(&mc->refs[1], lay, mc->refs[1].k, mc->attn[1].kv_heads, mc->attn[1].head_dim, b.k);
    nt_gather(&mc->refs[1], lay, mc->refs[1].v, mc->attn[1].kv_heads, mc->attn[1].head_dim, b.v);
    st = nsp_nested_attn_fwd(attn, rank == 1 ? NULL : b.q, b.k, b.v, b.o[0], b.lse[0], NULL,
                             NULL);
    if (st != NSP_ERR_INVALID_ARG) {
        FAIL("forward with a NULL q on rank 1 gave %s", nsp_status_string(st));
    }
    st = nsp_nested_attn_fwd(attn, b.q, b.k, b.v, b.o[0], b.lse[0], NULL, NULL);
    if (st != NSP_OK) {
        FAIL("forward after the failed one: %s", nsp_last_error());
    }
    nsp_nested_attn_destroy(attn);
    attn = NULL;
    if (rank_short_o(&c, mc, lay, info.local_tokens, rank == 1, &b, &attn) != 0) {
        goto out;
    }
    c.rounds = 1;
    rc = 0;
out:
    mp_set_value(V_ROUNDS, c.rounds);
    nsp_nested_attn_destroy(attn);
    nsp_layout_free(lay);
    bufs_free(&b);
    teardown(&c);
    return rc;
}

/* ---- cases ----------------------------------------------------------------- */

static void case_free(nt_case_t *mc)
{
    for (int p = 0; p < mc->nplans; ++p) {
        nsp_plan_free(mc->plans[p]);
        nt_ref_free(&mc->refs[p]);
    }
    memset(mc, 0, sizeof(*mc));
}

/* Add a plan (owned by the case from now) with its attention shape. */
static int case_add_mask(nt_case_t *mc, nsp_plan_t *plan, int nq, int nkv, int D, int causal,
                         uint64_t seed)
{
    nsp_attn_params_t p = NSP_ATTN_PARAMS_INIT(nq, nkv, D);

    p.causal = causal;
    if (plan == NULL) {
        tap_diag("plan: %s", nsp_last_error());
        return -1;
    }
    mc->plans[mc->nplans] = plan;
    mc->attn[mc->nplans]  = p;
    if (nt_ref_make(plan, &p, seed, &mc->refs[mc->nplans]) != 0) {
        return -1;
    }
    mc->nplans++;
    return 0;
}

static int case_add(nt_case_t *mc, nsp_plan_t *plan, int nq, int nkv, int D, uint64_t seed)
{
    return case_add_mask(mc, plan, nq, nkv, D, 1, seed);
}

static void run_case(int nranks, nt_case_t *mc, const char *what)
{
    mp_result_t res;
    double      err[5] = {0}, ab = 0, rounds = 0, kcalls = 0, kbad = 0, ring = 0;
    double      ring_levels = 0, ring_top = 0, tol;

    mc->timeout_s = 30.0;
    fflush(stdout);
    /* res notes a failed unique id */
    mp_run_uid(nranks, 55.0, mc->error_case ? rank_errors : rank_main, mc, &mc->id, &res);
    for (int r = 0; r < nranks; ++r) {
        for (int x = 0; x < 5; ++x) {
            err[x] = res.rank[r].value[x] > err[x] ? res.rank[r].value[x] : err[x];
        }
        ab += res.rank[r].value[V_DIFF_AB];
        rounds += res.rank[r].value[V_ROUNDS];
        kcalls += res.rank[r].value[V_KCALLS];
        kbad += res.rank[r].value[V_KBAD];
        ring += res.rank[r].value[V_RING_BYTES];
        ring_levels += res.rank[r].value[V_RING_LEVELS];
        ring_top = res.rank[r].value[V_RING_TOP] > ring_top ? res.rank[r].value[V_RING_TOP]
                                                             : ring_top;
    }
    if (!tap_ok(mp_all_ok(&res), "%d ranks, %s (%.1f s)", nranks, what, res.elapsed_s)) {
        mp_diag(&res);
        return;
    }
    if (mc->error_case) {
        tap_diag("rank %d saw: %s", nranks - 1, res.rank[nranks - 1].note);
        tap_ok(rounds == nranks, "%d ranks: every rank failed together and recovered (a NULL q, "
               "then o one token short by params.attn.bytes)",
               nranks);
        return;
    }
    tol = tol_of(mc->dtype);
    tap_ok(rounds > 0 && err[0] <= tol && err[1] <= tol && err[2] <= tol && err[3] <= tol &&
               err[4] <= tol,
           "%d ranks, %s%s%s: %.0f rank-rounds within %.1e of the %sreference (worst o %.1e lse "
           "%.1e dq %.1e dk %.1e dv %.1e)", nranks, what, mc->dtype ? ", " : "",
           mc->dtype ? dtype_name(mc->dtype) : "", rounds, tol, mc->dtype ? "fp32 " : "",
           err[0], err[1], err[2], err[3], err[4]);
    tap_ok(ab == 0, "%d ranks, %s%s%s: serial + stateless backward equal pipelined + saved bit "
           "for bit (%.0f differing tensors)", nranks, what, mc->dtype ? ", " : "",
           mc->dtype ? dtype_name(mc->dtype) : "", ab);
    if (mc->custom_kernel) {
        tap_ok(kcalls > 0 && kbad == 0, "%d ranks, %s: the framework kernel was called %.0f "
               "times, every batch well formed (%.0f bad)", nranks, what, kcalls, kbad);
    }
    mc->ring_bytes  = ring;
    mc->ring_levels = ring_levels;
    mc->ring_top    = ring_top;
}

static uint64_t case_seed(int nranks, int kind)
{
    return 0x5eed0000u + 100u * (uint64_t)nranks + (uint64_t)kind;
}

static int degree_list(int nranks, int *deg)
{
    int nd = 0;

    for (int d = 1; d <= nranks; d *= 2) {
        deg[nd++] = d;
    }
    return nd;
}

/* Random nested Ulysses plans: GQA 8 / 2, D 16. */
static void case_nested(int nranks, nsp_attn_dtype_t dtype, int dkv_f32)
{
    nt_case_t     mc;
    nsp_model_t   model;
    nsp_cluster_t cluster;
    int           deg[8], nd = degree_list(nranks, deg);
    uint64_t      rng = case_seed(nranks, 1);

    memset(&mc, 0, sizeof(mc));
    mc.dtype   = dtype;
    mc.dkv_f32 = dkv_f32;
    nt_model(8, 2, 16, &model);
    nt_cluster(nranks, &cluster);
    for (int p = 0; p < 4; ++p) {
        nsp_plan_t *plan = nt_random_nested(&rng, &model, &cluster, deg, nd,
                                            4 + (int)nt_range(&rng, 0, 10), 96 * nranks);
        if (case_add(&mc, plan, 8, 2, 16, nt_rand(&rng)) != 0) {
            tap_ok(0, "%d ranks: random nested plans: setup", nranks);
            case_free(&mc);
            return;
        }
    }
    run_case(nranks, &mc, dkv_f32 ? "random nested plans, GQA 8/2, replicated dK/dV summed "
                                    "in float32 (dkv_f32)"
                                  : "random nested plans, GQA 8/2 (KV replicated above "
                                    "degree 2)");
    case_free(&mc);
}

/* The three planners on one long-tailed batch, a framework kernel. */
static void case_planners(int nranks)
{
    nt_case_t     mc;
    nsp_model_t   model;
    nsp_cluster_t cluster;
    uint64_t      rng = case_seed(nranks, 2);
    int64_t       lens[24];
    int           n = 10 + nranks;

    memset(&mc, 0, sizeof(mc));
    nt_model(8, 2, 16, &model);
    nt_cluster(nranks, &cluster);
    for (int i = 0; i < n; ++i) {
        lens[i] = nt_long_tailed(&rng, 120 * nranks);
    }
    for (int k = 0; k < 3; ++k) {
        nsp_planner_params_t pp;
        nsp_plan_t          *plan = NULL;
        memset(&pp, 0, sizeof(pp));
        pp.kind = (nsp_planner_kind_t)k;
        pp.field_mask   = NSP_PLANNER_FIELD_TIME_LIMIT;
        pp.time_limit_s = 0.2;
        if (nsp_plan_create(&model, &cluster, lens, n, &pp, &plan) != NSP_OK) {
            tap_diag("planner %d: %s", k, nsp_last_error());
            plan = NULL;
        }
        if (case_add(&mc, plan, 8, 2, 16, nt_rand(&rng)) != 0) {
            tap_ok(0, "%d ranks: planners: setup", nranks);
            case_free(&mc);
            return;
        }
    }
    mc.custom_kernel = 1;
    run_case(nranks, &mc, "plans of the static, disjoint and nested planners, framework kernel");
    case_free(&mc);
}

/* Hand-built plans with ring groups; n_q = 4 so degree 8 needs a ring. */
static int ring_plans(int nranks, uint64_t *rng, nt_case_t *mc, int sparse)
{
    nsp_model_t   model;
    nsp_cluster_t cluster;
    /* Per plan: groups (round, rank0, size, ring) and which group each
     * sequence goes to (cycled), for 2, 4 and 8 ranks. */
    static const nt_group_t g2[][4] = {
        {{0, 0, 2, 2}, {0, 0, 1, 1}, {0, 1, 1, 1}},
        {{0, 0, 2, 2}, {1, 0, 2, 1}, {1, 1, 1, 1}}};
    static const nt_group_t g4[][6] = {
        {{0, 0, 4, 2}, {0, 0, 2, 1}, {0, 2, 2, 2}, {0, 1, 1, 1}, {0, 3, 1, 1}},
        {{0, 0, 4, 4}, {0, 2, 2, 2}, {0, 0, 1, 1}, {1, 0, 4, 2}, {1, 2, 1, 1}}};
    static const nt_group_t g8[][6] = {
        {{0, 0, 8, 2}, {0, 4, 4, 1}, {0, 0, 2, 1}, {0, 2, 2, 2}, {0, 5, 1, 1}, {0, 6, 1, 1}},
        {{0, 0, 8, 8}, {0, 0, 4, 4}, {0, 4, 2, 2}, {0, 7, 1, 1}},
        {{0, 0, 8, 4}, {0, 4, 4, 2}, {0, 2, 2, 1}, {0, 0, 1, 1}, {1, 0, 8, 2}}};
    static const nt_group_t s8[][3] = { /* tree {1, 8}: degrees 2 and 4 over the world */
        {{0, 4, 4, 2}, {0, 0, 2, 2}, {0, 2, 2, 1}},
        {{0, 0, 4, 4}, {0, 4, 2, 2}, {0, 6, 2, 1}}};
    const nt_group_t *gs;
    int               ngroups, nplans, stride;

    nt_cluster(nranks, &cluster);
    if (sparse) {
        gs = &s8[0][0], stride = 3, nplans = 2;
    } else if (nranks == 2) {
        gs = &g2[0][0], stride = 4, nplans = 2;
    } else if (nranks == 4) {
        gs = &g4[0][0], stride = 6, nplans = 2;
    } else {
        gs = &g8[0][0], stride = 6, nplans = 3;
    }
    for (int p = 0; p < nplans; ++p) {
        const nt_group_t *g = gs + p * stride;
        int64_t           lens[16];
        int               sg[16], n = 6 + (int)nt_range(rng, 0, 6);
        int               nkv = p % 2 == 0 ? 2 : 1; /* u = 2, 4 above n_kv: replicated */
        for (ngroups = 0; ngroups < stride && g[ngroups].size > 0; ++ngroups) {
        }
        for (int i = 0; i < n; ++i) {
            sg[i]   = i % ngroups;
            lens[i] = g[sg[i]].ring > 1 ? 2 * g[sg[i]].size + nt_long_tailed(rng, 80 * nranks)
                                        : nt_long_tailed(rng, 40 * nranks);
            if (i == ngroups) {
                lens[i] = nt_range(rng, 1, 2 * g[sg[i]].ring - 1); /* empty zigzag chunks */
            }
        }
        nt_model(4, nkv, 16, &model);
        /* The last plan without the causal mask: every ring step is full. */
        if (case_add_mask(mc, nt_plan(&model, &cluster, lens, n, g, ngroups, sg), 4, nkv, 16,
                          p + 1 < nplans, nt_rand(rng)) != 0) {
            return -1;
        }
    }
    return 0;
}

static void case_ring(int nranks, int sparse, nsp_attn_dtype_t dtype)
{
    nt_case_t mc;
    uint64_t  rng = case_seed(nranks, sparse ? 4 : 3);
    double    ring_bytes;

    memset(&mc, 0, sizeof(mc));
    mc.dtype = dtype;
    if (ring_plans(nranks, &rng, &mc, sparse) != 0) {
        tap_ok(0, "%d ranks: ring plans: setup", nranks);
        case_free(&mc);
        return;
    }
    mc.sparse_tree = sparse;
    run_case(nranks, &mc, sparse ? "ring and Ulysses x ring groups on a tree {1, N} (rings and "
                                   "all-to-alls over the world)"
                                 : "ring (u = 1) and Ulysses x ring groups, n_q 4, KV "
                                   "replicated, causal and full");
    ring_bytes = mc.ring_bytes;
    tap_ok(ring_bytes > 0, "%d ranks, ring groups%s%s: KV blocks went around the rings (%.0f "
           "bytes)", nranks, dtype ? ", " : "", dtype ? dtype_name(dtype) : "", ring_bytes);
    case_free(&mc);
}

/*
 * The static and nested planners with rings allowed (enable_ring) on 8
 * ranks: n_q 4 caps Ulysses at degree 4, and the memory per rank holds the
 * long sequence of each batch only at degree 8 = u 4 x r 2. Per token a rank
 * holds (docs/reference/cost-model.md; L 4, h 64, f 128, b 2): kept a_tok = 4 * 2 *
 * (5h + (n_q + 2 n_kv) d_h + 3f) = 6656 B; recomputed L h b + a_tok / L =
 * 2176 B; ring buffers at u 4 add 5 u 2 kvh(4) d_h b = 1280 B. So
 * RP_LONG tokens need 870400 B at degree 4 (recomputed), 691200 B at degree
 * 8 (recomputed, with the ring buffers): RP_ACT_BYTES lies between, with
 * room beside it for the short sequences. ranks_per_node 4 and a slower
 * inter-node rate keep those below degree 8 in the nested plans, so a ring
 * level runs in one round with Ulysses levels and level 0.
 */
#define RP_LONG      1600
#define RP_ACT_BYTES 830000.0
#define RP_TAIL      600 /* the other sequences: long-tailed up to this */
#define RP_BATCHES   2

static void ring_planner_inputs(nsp_model_t *model, nsp_cluster_t *cluster)
{
    nt_model(4, 2, 16, model);
    model->layers = 4;
    nt_cluster(8, cluster);
    cluster->ranks_per_node  = 4;
    cluster->workspace_bytes = 1e6;
    cluster->mem_bytes  = 16.0 * model->params / 8 + cluster->workspace_bytes + RP_ACT_BYTES;
    cluster->gemm_flops = 2e11;
    cluster->attn_flops = 2e11;
    cluster->bw_inter   = 2e9;
    cluster->lat_inter  = 1e-4;
}

/* The group holding sequence `seq` in `plan` has degree 8 and ring 2. */
static int long_at_ring_8(const nsp_plan_t *plan, int seq)
{
    for (int r = 0; r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            const nsp_plan_group_t *grp = &plan->rounds[r].groups[g];
            for (int i = 0; i < grp->nseqs; ++i) {
                if (grp->seqs[i] == seq) {
                    return grp->size == 8 && grp->ring == 2;
                }
            }
        }
    }
    return 0;
}

static void case_ring_planners(void)
{
    nt_case_t     mc;
    nsp_model_t   model;
    nsp_cluster_t cluster;
    uint64_t      rng = case_seed(8, 5);
    int           shaped = 0;

    memset(&mc, 0, sizeof(mc));
    ring_planner_inputs(&model, &cluster);
    for (int b = 0; b < RP_BATCHES; ++b) {
        int64_t lens[14];
        int     n = 14, longest = (int)nt_range(&rng, 0, n - 1);
        for (int i = 0; i < n; ++i) {
            lens[i] = i == longest ? RP_LONG : nt_long_tailed(&rng, RP_TAIL);
        }
        for (int k = 0; k < 2; ++k) {
            nsp_planner_params_t pp;
            nsp_plan_t          *plan = NULL;
            memset(&pp, 0, sizeof(pp));
            pp.kind        = k == 0 ? NSP_PLANNER_STATIC : NSP_PLANNER_NESTED;
            pp.field_mask  = NSP_PLANNER_FIELD_ENABLE_RING;
            pp.enable_ring = 1;
            if (nsp_plan_create(&model, &cluster, lens, n, &pp, &plan) != NSP_OK) {
                tap_diag("batch %d, %s planner: %s", b, k ? "nested" : "static",
                         nsp_last_error());
                plan = NULL;
            }
            shaped += plan != NULL && long_at_ring_8(plan, longest);
            if (case_add(&mc, plan, 4, 2, 16, nt_rand(&rng)) != 0) {
                tap_ok(0, "8 ranks: planners with rings: setup");
                case_free(&mc);
                return;
            }
        }
    }
    tap_ok(shaped == 2 * RP_BATCHES, "8 ranks, planners with rings: the long sequence of "
           "every batch planned at degree 8 = u 4 x r 2 (%d of %d plans)", shaped,
           2 * RP_BATCHES);
    run_case(8, &mc, "static and nested plans with rings (enable_ring), n_q 4, long-tailed "
             "batches");
    tap_ok(mc.ring_levels > 0 && mc.ring_top == 8 && mc.ring_bytes > 0,
           "8 ranks, planners with rings: %.0f rank-levels ran a ring group (largest degree "
           "%.0f), %.0f bytes around the rings", mc.ring_levels, mc.ring_top, mc.ring_bytes);
    case_free(&mc);
}

static void case_errors(int nranks)
{
    nt_case_t     mc;
    nsp_model_t   model;
    nsp_cluster_t cluster;
    /* A degree nranks/2 group on the first half, level 0 on the others. */
    nt_group_t g[3] = {{0, 0, nranks / 2, 1}, {0, nranks / 2, 1, 1}, {0, nranks - 1, 1, 1}};
    int64_t    lens[3] = {37, 11, 5};
    int        sg[3] = {0, 1, 2};

    memset(&mc, 0, sizeof(mc));
    nt_model(8, 2, 16, &model);
    nt_cluster(nranks, &cluster);
    if (case_add(&mc, nt_plan(&model, &cluster, lens, 3, g, 3, sg), 8, 2, 16, 7) != 0 ||
        case_add(&mc, nt_plan(&model, &cluster, lens, 3, g, 3, sg), 8, 2, 16, 7) != 0) {
        tap_ok(0, "%d ranks: error case setup", nranks);
        case_free(&mc);
        return;
    }
    /* Plan 0's heads: nranks/2 does not divide them. */
    mc.attn[0] = (nsp_attn_params_t)NSP_ATTN_PARAMS_INIT(nranks / 2 - 1, 1, 16);
    mc.error_case = 1;
    run_case(nranks, &mc, "a level that cannot shard the heads, then a NULL buffer on one "
             "rank: all ranks fail, none hangs");
    case_free(&mc);
}

int main(int argc, char **argv)
{
    int only = argc > 1 ? atoi(argv[1]) : 0; /* argv[1]: one rank count (debugging) */
    int sizes[] = {2, 4, 8};

    for (int k = 0; k < 3; ++k) {
        int n = sizes[k];
        if (only && n != only) {
            continue;
        }
        case_nested(n, NSP_ATTN_FP32, 0);
        case_planners(n);
        case_ring(n, 0, NSP_ATTN_FP32);
        if (n == 8) {
            case_ring(n, 1, NSP_ATTN_FP32);
            case_ring_planners();
        }
        /* bf16 and fp16: replicated KV heads and ring levels, forward and
         * backward, against the fp32 reference; serial == pipelined */
        for (int t = 1; t <= 2; ++t) {
            nsp_attn_dtype_t dt = (nsp_attn_dtype_t)t;
            if (dt == NSP_ATTN_FP16 && !nt_have_fp16()) {
                tap_skip(6, "%d ranks: fp16 cases need the compiler's _Float16", n);
                continue;
            }
            case_nested(n, dt, 0);
            case_ring(n, 0, dt);
        }
        if (n >= 4) { /* the float32 sums of replicated dK/dV, opt-in */
            case_nested(n, NSP_ATTN_BF16, 1);
        }
        if (n >= 4) {
            case_errors(n);
        }
    }
    return tap_done();
}

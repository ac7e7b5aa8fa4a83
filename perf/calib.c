/*
 * perf/calib: kernel fit, kernel launch cost, the one-layer model and the
 * rates they give the cost model (see calib.h).
 */
#include "calib.h"
#include "common.h"

#include "attn_sp/ring_attn.h" /* nsp_thread_cpu_s */
#include "common/log.h"
#include "planner/cost.h"
#include "transport/request.h" /* nsp_now_s */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CALIB_LAUNCH_MAX_CALLS 4096

void calib_bufs_free(calib_bufs_t *b)
{
    free(b->q), free(b->k), free(b->v), free(b->o), free(b->dout);
    free(b->dq), free(b->dk), free(b->dv), free(b->lse), free(b->cu);
    memset(b, 0, sizeof(*b));
}

nsp_status_t calib_bufs_alloc(const nsp_attn_params_t *a, int64_t s, int n, calib_bufs_t *b)
{
    size_t T = (size_t)n * (size_t)s, wq = T * (size_t)a->q_heads * (size_t)a->head_dim;
    size_t wk = T * (size_t)a->kv_heads * (size_t)a->head_dim;

    memset(b, 0, sizeof(*b));
    b->q = calloc(wq, 4), b->o = calloc(wq, 4), b->dout = calloc(wq, 4), b->dq = calloc(wq, 4);
    b->k = calloc(wk, 4), b->v = calloc(wk, 4), b->dk = calloc(wk, 4), b->dv = calloc(wk, 4);
    b->lse = calloc(T * (size_t)a->q_heads, 4);
    b->cu  = calloc((size_t)n + 1, sizeof(int64_t));
    if (!b->q || !b->o || !b->dout || !b->dq || !b->k || !b->v || !b->dk || !b->dv || !b->lse ||
        !b->cu) {
        calib_bufs_free(b);
        return nsp_error(NSP_ERR_NO_MEMORY, "calibrate: no memory for %zu tokens", T);
    }
    for (size_t i = 0; i < wq; ++i) {
        b->q[i] = b->dout[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    }
    for (size_t i = 0; i < wk; ++i) {
        b->k[i] = b->v[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    }
    for (int i = 0; i <= n; ++i) {
        b->cu[i] = (int64_t)i * s;
    }
    return NSP_OK;
}

nsp_status_t calib_kernel_run(const nsp_attn_params_t *a, int n, calib_bufs_t *b)
{
    NSP_CHECK(nsp_attn_fwd(a, n, b->cu, b->q, b->k, b->v, b->o, b->lse));
    return nsp_attn_bwd(a, n, b->cu, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk,
                        b->dv);
}

nsp_status_t calib_kernel_time(const nsp_attn_params_t *a, int64_t s, int64_t tokens, int reps,
                               double *best)
{
    int          n = (int)(tokens / s);
    calib_bufs_t b;
    nsp_status_t status = NSP_OK;

    NSP_CHECK(calib_bufs_alloc(a, s, n, &b));
    *best = INFINITY;
    for (int rep = 0; rep < reps && status == NSP_OK; ++rep) {
        double t0 = nsp_thread_cpu_s();
        status    = calib_kernel_run(a, n, &b);
        *best     = fmin(*best, nsp_thread_cpu_s() - t0);
    }
    calib_bufs_free(&b);
    return status;
}

/* Weighted least squares of y = a + b s (weights 1 / y^2) over the fit's
 * lengths, y = seconds per token. */
static void fit_line(calib_fit_t *f)
{
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, det;

    for (int i = 0; i < f->nlens; ++i) {
        double x = (double)f->len[i], y = f->fwd_bwd_s[i] / (double)f->tokens, w = 1.0 / (y * y);
        sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
    }
    det  = sw * sxx - sx * sx;
    f->b = det > 0 ? (sw * sxy - sx * sy) / det : 0.0;
    f->a = fmax(0.0, (sy - f->b * sx) / sw);
}

nsp_status_t calib_fit_init(const int64_t *lens, int nlens, int64_t tokens, int reps,
                           calib_fit_t *f)
{
    if (nlens < 1 || nlens > CALIB_MAX_LENS || reps < 1 || tokens < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "calibrate: %d lengths, %d reps, %lld tokens",
                         nlens, reps, (long long)tokens);
    }
    memset(f, 0, sizeof(*f));
    f->nlens  = nlens;
    f->tokens = tokens;
    for (int i = 0; i < nlens; ++i) {
        if (lens[i] < 1 || tokens % lens[i] != 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "calibrate: length %lld does not divide %lld "
                             "tokens", (long long)lens[i], (long long)tokens);
        }
        f->len[i] = lens[i];
    }
    return NSP_OK;
}

nsp_status_t calib_fit_solve(calib_fit_t *f)
{
    fit_line(f);
    if (!(f->b > 0)) {
        return nsp_error(NSP_ERR_INTERNAL, "calibrate: the kernel's time per token does not grow "
                         "with the length (%.3g s for %lld tokens at length %lld, %.3g s at "
                         "%lld): overloaded machine?", f->fwd_bwd_s[0], (long long)f->tokens,
                         (long long)f->len[0], f->fwd_bwd_s[f->nlens - 1],
                         (long long)f->len[f->nlens - 1]);
    }
    return NSP_OK;
}

nsp_status_t calib_kernel_fit(const nsp_attn_params_t *a, const int64_t *lens, int nlens,
                              int64_t tokens, int reps, calib_fit_t *fit)
{
    calib_fit_t f;

    NSP_CHECK(calib_fit_init(lens, nlens, tokens, reps, &f));
    for (int i = 0; i < nlens; ++i) {
        NSP_CHECK(calib_kernel_time(a, lens[i], tokens, reps, &f.fwd_bwd_s[i]));
    }
    NSP_CHECK(calib_fit_solve(&f));
    *fit = f;
    return NSP_OK;
}

nsp_status_t calib_kernel_launch(const nsp_attn_params_t *a, int calls, double *launch_s)
{
    double      *t;
    calib_bufs_t b;
    nsp_status_t status = NSP_OK;

    calls = calls < 1 ? 1 : calls > CALIB_LAUNCH_MAX_CALLS ? CALIB_LAUNCH_MAX_CALLS : calls;
    t     = malloc(sizeof(double) * (size_t)calls);
    if (t == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "calibrate: no memory for %d timings", calls);
    }
    NSP_CHECK_GOTO(calib_bufs_alloc(a, 1, 1, &b), status, out_t);
    for (int i = 0; i < calls && status == NSP_OK; ++i) {
        double t0 = nsp_now_s();
        status    = calib_kernel_run(a, 1, &b);
        t[i]      = nsp_now_s() - t0;
    }
    if (status == NSP_OK) {
        *launch_s = 0.5 * perf_median(t, calls); /* a forward and a backward kernel */
    }
    calib_bufs_free(&b);
out_t:
    free(t);
    return status;
}

double calib_proc_cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void calib_attn_model(int q_heads, int kv_heads, int head_dim, nsp_model_t *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "attn-%d-%d-%d", q_heads, kv_heads, head_dim);
    /* One attention layer. hidden, ffn and params only scale the memory per
     * token and the linear term; a calibration sets both from measurements. */
    m->layers   = 1;
    m->hidden   = q_heads * head_dim;
    m->ffn      = m->hidden;
    m->q_heads  = q_heads;
    m->kv_heads = kv_heads;
    m->head_dim = head_dim;
    /* the q, k, v, o projections of one layer */
    m->params = (double)m->hidden * (2.0 * q_heads + 2.0 * kv_heads) * head_dim;
}

void calib_placeholder_cluster(int ranks, nsp_cluster_t *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "calib-placeholder");
    c->ranks = c->ranks_per_node = ranks;
    c->mem_bytes  = 1e18;
    c->gemm_flops = c->attn_flops = 1e12;
    c->bw_intra = c->bw_inter = 1e9;
    c->overlap       = 0.0;
    c->round_fixed_s = 0.0;
}

nsp_status_t calib_gemm_from_kernel(const nsp_model_t *m, double a, double *gemm_flops)
{
    nsp_cluster_t c;
    nsp_cost_t    cost;

    calib_placeholder_cluster(1, &c);
    NSP_CHECK(nsp_cost_init(&cost, m, &c));
    *gemm_flops = a > 0 ? cost.lin_flops_per_token / a : 1e30;
    return NSP_OK;
}

nsp_status_t calib_dense_weight_bytes(const nsp_model_t *m, double *bytes)
{
    nsp_cluster_t c;
    nsp_cost_t    cost;

    /* The cost model's own count, read back from its derived round cost on
     * 2 ranks at 1 byte/s with no overlap: NSP_COST_ROUND_WEIGHT_PASSES x
     * (1/2) x b P_dense seconds, plus the launches. */
    calib_placeholder_cluster(2, &c);
    c.bw_intra = c.bw_inter = 1.0;
    NSP_CHECK(nsp_cost_init(&cost, m, &c));
    *bytes = (nsp_cost_round_derived(&cost) - m->layers * NSP_COST_ROUND_LAUNCH_S_PER_LAYER) /
             (0.5 * NSP_COST_ROUND_WEIGHT_PASSES);
    *bytes = fmax(0.0, *bytes);
    return NSP_OK;
}

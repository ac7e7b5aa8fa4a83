/*
 * The emulated device under nested attention over UCX (the "emu" memory
 * type, NSPCOMM_DEVICE=emu:FILE): real processes on loopback, each with its
 * own emulated device, the device engine's orchestration (a stream per
 * level, the level's stream waiting on the caller's, gated opens, done
 * events completing the requests, serial mode chaining levels) moving every
 * byte over UCX:
 *
 *   selection     NSPCOMM_DEVICE values and FILEs that are refused, with the
 *                 key named (one process, no ranks); a world with it set
 *                 runs the "emu" memory type, one without it the host one
 *   data (math)   2 and 4 ranks, random nested plans (GQA 8/2), math mode:
 *                 pipelined + saved and serial + stateless against the
 *                 single-process reference of the batch, and A = B bit for
 *                 bit
 *   ordering      from each rank's trace: a level's kernel never starts
 *                 before every op its level's stream ran before it was
 *                 enqueued ended (the exchange's unpack, enqueued once the
 *                 bytes landed), and there is such an unpack (levels > 0)
 *   completion    timing mode (no math): every call completes, every kernel
 *                 held the compute at least the time asked, the kernels'
 *                 busy time is what the timing model asked
 *   dropped peer  2 ranks: rank 1 leaves after create; rank 0's forward
 *                 fails with NSP_ERR_TIMEOUT or NSP_ERR_PEER_FAILED within
 *                 the world's timeout, its teardown returns: no hang
 */
#include "config.h"

#include "attn_sp/memtype.h"
#include "attn_sp/memtype_emu.h"
#include "streams/emu_config.h"
#include "../nested_attn/nattn_test.h"
#include "../mp.h"
#include "../tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL 2e-5 /* as tests/nested_attn: fp32 against the reference */
#define TRACE_OPS 200000

enum { V_ERR = 0, V_AB, V_ROUNDS, V_KERNELS, V_ORDER_BAD, V_ORDER_CHECKED, V_LANDED,
       V_SHORT, V_BUSY, V_ASKED, V_FAIL_STATUS, V_FAIL_S, V_TEARDOWN_S, V_EMU };

#define MAX_PLANS 3

typedef struct emu_case {
    nsp_unique_id_t   id;
    char              file[512];
    int               nplans;
    nsp_plan_t       *plans[MAX_PLANS];
    nt_ref_t          refs[MAX_PLANS];
    nsp_attn_params_t attn;
    int               math;
    int               drop; /* the dropped-peer case */
    double            timeout_s;
} emu_case_t;

typedef struct rank_ctx {
    nsp_comm_t *comm;
    nsp_tree_t *tree;
    int         rank;
    double      err, ab, rounds;
} rank_ctx_t;

/* ---- files ------------------------------------------------------------------- */

static char tmpdir[256];

static int write_file(const char *name, const char *text, char *path, size_t len)
{
    FILE *f;

    snprintf(path, len, "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    if (f == NULL) {
        return -1;
    }
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

/* This machine as the emulation sees it: a link of 4.5e5 bf16 B/s, so the
 * scale against h100 (45e9) is 1e5 (kernels of these sizes: a few ms). */
static const char *here_json =
    "{\"name\": \"emu-test-here\", \"ranks\": 4, \"ranks_per_node\": 4,\n"
    " \"mem_bytes\": 8589934592, \"workspace_bytes\": 536870912,\n"
    " \"gemm_flops\": 5e10, \"attn_flops\": 2e10, \"bw_intra\": 4.5e5, \"bw_inter\": 4.5e5,\n"
    " \"lat_intra\": 5e-6, \"lat_inter\": 5e-5, \"overlap\": 0.5}\n";

static int emu_file(const char *name, int math, char *path, size_t len)
{
    char text[512], here[512];

    if (write_file("here.json", here_json, here, sizeof(here)) != 0) {
        return -1;
    }
    snprintf(text, sizeof(text), "{\"target\": \"h100\", \"here\": \"here.json\", \"link\": "
             "\"inter\", \"math\": %s, \"trace\": %d}\n", math ? "true" : "false", TRACE_OPS);
    return write_file(name, text, path, len);
}

/* ---- selection ----------------------------------------------------------------- */

static void refused(const char *name, const char *text, nsp_status_t want, const char *key)
{
    char             path[512], env[600];
    nsp_emu_config_t cfg;
    int              on = 0;
    nsp_status_t     st;

    write_file(name, text, path, sizeof(path));
    snprintf(env, sizeof(env), "emu:%s", path);
    st = nsp_emu_config_from_env(env, &on, &cfg);
    tap_ok(st == want && strstr(nsp_last_error(), key) != NULL,
           "FILE %s refused (%s), the message names \"%s\": %s", name, nsp_status_string(st),
           key, nsp_last_error());
}

static void case_selection(void)
{
    nsp_emu_config_t cfg;
    char             path[512], env[600];
    int              on = 1;

    tap_ok(nsp_emu_config_from_env(NULL, &on, &cfg) == NSP_OK && on == 0,
           "NSPCOMM_DEVICE unset: not emulated (never the default)");
    tap_is_int(nsp_emu_config_from_env("cuda", &on, &cfg), NSP_ERR_INVALID_ARG,
               "NSPCOMM_DEVICE=cuda refused: %s", nsp_last_error());
    tap_is_int(nsp_emu_config_from_env("emu:", &on, &cfg), NSP_ERR_INVALID_ARG,
               "NSPCOMM_DEVICE=emu: without FILE refused");
    tap_is_int(nsp_emu_config_from_env("emu:/nonexistent/emu.json", &on, &cfg), NSP_ERR_IO,
               "an unreadable FILE: %s", nsp_last_error());
    refused("bad-json.json", "{\"target\": \"h100\",, }", NSP_ERR_PARSE, "bad-json.json");
    refused("no-here.json", "{\"target\": \"h100\"}", NSP_ERR_PARSE, "here");
    refused("typo.json", "{\"target\": \"h100\", \"here\": \"h.json\", \"maths\": true}",
            NSP_ERR_INVALID_ARG, "maths");
    refused("link.json", "{\"target\": \"h100\", \"here\": \"h.json\", \"link\": \"nvlink\"}",
            NSP_ERR_INVALID_ARG, "nvlink");
    refused("math.json", "{\"target\": \"h100\", \"here\": \"h.json\", \"math\": 2}",
            NSP_ERR_PARSE, "math");
    if (emu_file("ok.json", 1, path, sizeof(path)) == 0) {
        snprintf(env, sizeof(env), "emu:%s", path);
        tap_ok(nsp_emu_config_from_env(env, &on, &cfg) == NSP_OK && on == 1 && cfg.math == 1 &&
                   !cfg.target_is_file && strcmp(cfg.target, "h100") == 0 &&
                   strstr(cfg.here, tmpdir) == cfg.here && cfg.link == NSP_EMU_LINK_INTER,
               "a good FILE: target h100, here relative to FILE's directory (%s), math", cfg.here);
        {
            nsp_emu_timing_t t;
            nsp_status_t     st = nsp_emu_config_timing(&cfg, 8, 2, 16, &t);
            tap_ok(st == NSP_OK && fabs(t.scale - 1e5) < 1e-6,
                   "its timing: scale h100 / here = 45e9 / 4.5e5 = %.1f", st == NSP_OK ? t.scale : 0.0);
        }
    } else {
        tap_ok(0, "cannot write the test's FILE in %s", tmpdir);
    }
}

/* ---- the trace checks ------------------------------------------------------------ */

/* Level l's stream on the device: the device engine makes the level streams
 * first, in level order, after the default stream (number 0). */
static int level_stream(int level)
{
    return level + 1;
}

static int is_kernel(const nsp_emu_trace_entry_t *e, int *level)
{
    if (e->kind != NSP_EMU_OP_KERNEL ||
        (e->tag & NSP_EMU_KERNEL_TAG_MASK) != (NSP_EMU_KERNEL_TAG(0, 0) & NSP_EMU_KERNEL_TAG_MASK)) {
        return 0;
    }
    *level = (int)(e->tag & 0xffffu);
    return 1;
}

/* Every kernel against the ops of its level's stream enqueued before it:
 * they all ended before it started (*bad counts those that did not); there
 * is a host op among them (the landing's unpack; *landed counts kernels of
 * levels > 0 that have one, *checked those kernels). Kernels that ran
 * shorter than asked: *short_n. */
static void check_trace(const nsp_emu_trace_entry_t *t, size_t n, double *bad, double *checked,
                        double *landed, double *short_n, double *busy, double *asked)
{
    for (size_t i = 0; i < n; ++i) {
        int level, host = 0;
        if (!is_kernel(&t[i], &level)) {
            continue;
        }
        *busy += t[i].t_end - t[i].t_start;
        *asked += t[i].seconds;
        *short_n += t[i].t_end - t[i].t_start < t[i].seconds - 1e-6;
        for (size_t j = 0; j < n; ++j) {
            const nsp_emu_trace_entry_t *o = &t[j];
            if (o->stream != level_stream(level) || o->t_enqueue >= t[i].t_enqueue) {
                continue;
            }
            *bad += o->t_end > t[i].t_start;
            host |= o->kind == NSP_EMU_OP_HOST;
        }
        if (level > 0) {
            *checked += 1;
            *landed += host;
        }
    }
}

static int rank_trace(rank_ctx_t *c)
{
    nsp_emu_device_t      *dev = NULL;
    nsp_emu_trace_entry_t *t = NULL;
    nsp_emu_stats_t        st;
    size_t                 n = 0;
    double                 v[6] = {0};

    if (nsp_memtype_emu_get(c->comm, &dev, NULL) != NSP_OK ||
        nsp_emu_stream_sync(nsp_emu_default_stream(dev)) != NSP_OK ||
        nsp_emu_device_stats(dev, &st) != NSP_OK) {
        mp_note("rank %d: the emulated device: %s", c->rank, nsp_last_error());
        return -1;
    }
    t = malloc(TRACE_OPS * sizeof(*t));
    if (t == NULL || nsp_emu_trace_read(dev, 0, t, TRACE_OPS, &n) != NSP_OK) {
        free(t);
        mp_note("rank %d: trace: %s", c->rank, nsp_last_error());
        return -1;
    }
    check_trace(t, n, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
    mp_set_value(V_KERNELS, (double)st.kernels);
    mp_set_value(V_ORDER_BAD, v[0]);
    mp_set_value(V_ORDER_CHECKED, v[1]);
    mp_set_value(V_LANDED, v[2]);
    mp_set_value(V_SHORT, v[3] + (st.trace_dropped > 0 ? 1e6 : 0)); /* a full trace fails */
    mp_set_value(V_BUSY, v[4]);
    mp_set_value(V_ASKED, v[5]);
    free(t);
    return 0;
}

/* ---- data ------------------------------------------------------------------------ */

typedef struct bufs {
    float *q, *k, *v, *dout;
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
} bufs_t;

static void bufs_free(bufs_t *b)
{
    free(b->q), free(b->k), free(b->v), free(b->dout);
    for (int x = 0; x < 2; ++x) {
        free(b->o[x]), free(b->lse[x]), free(b->dq[x]), free(b->dk[x]), free(b->dv[x]);
    }
}

static int bufs_alloc(bufs_t *b, int64_t T, const nsp_attn_params_t *p)
{
    size_t qf = (size_t)(T + 1) * (size_t)p->q_heads * (size_t)p->head_dim * 4;
    size_t kf = (size_t)(T + 1) * (size_t)p->kv_heads * (size_t)p->head_dim * 4;
    size_t lf = (size_t)(T + 1) * (size_t)p->q_heads * 4;

    memset(b, 0, sizeof(*b));
    b->q = malloc(qf), b->dout = malloc(qf), b->k = malloc(kf), b->v = malloc(kf);
    for (int x = 0; x < 2; ++x) {
        b->o[x] = calloc(1, qf), b->dq[x] = calloc(1, qf), b->lse[x] = calloc(1, lf);
        b->dk[x] = calloc(1, kf), b->dv[x] = calloc(1, kf);
        if (!b->o[x] || !b->dq[x] || !b->lse[x] || !b->dk[x] || !b->dv[x]) {
            return -1;
        }
    }
    return b->q && b->dout && b->k && b->v ? 0 : -1;
}

static nsp_status_t make_attn(rank_ctx_t *c, const nsp_layout_t *lay, const nsp_attn_params_t *p,
                              int serial, nsp_nested_attn_t **attn)
{
    nsp_nested_attn_params_t ap;

    memset(&ap, 0, sizeof(ap));
    ap.attn       = *p;
    ap.field_mask = NSP_NESTED_ATTN_FIELD_SERIAL;
    ap.serial     = serial;
    return nsp_nested_attn_create(c->tree, lay, &ap, attn);
}

static double max_err(const nt_ref_t *ref, const nsp_layout_t *lay, const bufs_t *b)
{
    const float *g[5] = {ref->o, ref->lse, ref->dq, ref->dk, ref->dv};
    const float *l[5] = {b->o[0], b->lse[0], b->dq[0], b->dk[0], b->dv[0]};
    const int    h[5] = {ref->nq, ref->nq, ref->nq, ref->nkv, ref->nkv};
    const int    w[5] = {ref->D, 1, ref->D, ref->D, ref->D};
    double       worst = 0;

    for (int x = 0; x < 5; ++x) {
        double s, d = nt_max_diff(ref, lay, g[x], h[x], w[x], l[x], &s);
        s = x == 1 ? (s > 1.0 ? s : 1.0) : (s > 0 ? s : 1.0);
        worst = d / s > worst ? d / s : worst;
    }
    return worst;
}

static double diff_ab(const bufs_t *b, int64_t T, const nsp_attn_params_t *p)
{
    size_t qf = (size_t)T * (size_t)p->q_heads * (size_t)p->head_dim * 4;
    size_t kf = (size_t)T * (size_t)p->kv_heads * (size_t)p->head_dim * 4;
    size_t lf = (size_t)T * (size_t)p->q_heads * 4;

    return (double)((memcmp(b->o[0], b->o[1], qf) != 0) + (memcmp(b->lse[0], b->lse[1], lf) != 0) +
                    (memcmp(b->dq[0], b->dq[1], qf) != 0) + (memcmp(b->dk[0], b->dk[1], kf) != 0) +
                    (memcmp(b->dv[0], b->dv[1], kf) != 0));
}

/* Both runs of one round (A pipelined + saved, B serial + stateless). */
static int run_pair(rank_ctx_t *c, nsp_nested_attn_t **attn, bufs_t *b)
{
    nsp_nested_attn_saved_t *saved = NULL;
    nsp_status_t             st;

    st = nsp_nested_attn_fwd(attn[0], b->q, b->k, b->v, b->o[0], b->lse[0], &saved, NULL);
    if (st == NSP_OK) {
        st = nsp_nested_attn_bwd(attn[0], saved, NULL, NULL, NULL, NULL, NULL, b->dout, b->dq[0],
                                 b->dk[0], b->dv[0], NULL);
    }
    nsp_nested_attn_saved_free(saved);
    if (st == NSP_OK) {
        st = nsp_nested_attn_fwd(attn[1], b->q, b->k, b->v, b->o[1], b->lse[1], NULL, NULL);
    }
    if (st == NSP_OK) {
        st = nsp_nested_attn_bwd(attn[1], NULL, b->q, b->k, b->v, b->o[1], b->lse[1], b->dout,
                                 b->dq[1], b->dk[1], b->dv[1], NULL);
    }
    if (st != NSP_OK) {
        mp_note("rank %d: %s", c->rank, nsp_last_error());
        return -1;
    }
    return 0;
}

static int run_round(rank_ctx_t *c, const emu_case_t *mc, int p, int round)
{
    const nt_ref_t    *ref = &mc->refs[p];
    nsp_layout_t      *lay = NULL;
    nsp_layout_info_t  info;
    nsp_nested_attn_t *attn[2] = {NULL, NULL};
    bufs_t             b;
    int                rc = -1;

    memset(&b, 0, sizeof(b));
    if (nsp_layout_create(mc->plans[p], round, c->rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK || bufs_alloc(&b, info.local_tokens, &mc->attn)) {
        mp_note("rank %d: plan %d round %d: setup: %s", c->rank, p, round, nsp_last_error());
        goto out;
    }
    nt_gather(ref, lay, ref->q, mc->attn.q_heads, mc->attn.head_dim, b.q);
    nt_gather(ref, lay, ref->k, mc->attn.kv_heads, mc->attn.head_dim, b.k);
    nt_gather(ref, lay, ref->v, mc->attn.kv_heads, mc->attn.head_dim, b.v);
    nt_gather(ref, lay, ref->dout, mc->attn.q_heads, mc->attn.head_dim, b.dout);
    for (int x = 0; x < 2; ++x) {
        if (make_attn(c, lay, &mc->attn, x, &attn[x]) != NSP_OK) {
            mp_note("rank %d: create: %s", c->rank, nsp_last_error());
            goto out;
        }
    }
    if (run_pair(c, attn, &b) != 0) {
        goto out;
    }
    if (mc->math) {
        double e = max_err(ref, lay, &b);
        c->err = e > c->err ? e : c->err;
        c->ab += diff_ab(&b, info.local_tokens, &mc->attn);
    }
    c->rounds += 1;
    rc = 0;
out:
    nsp_nested_attn_destroy(attn[0]);
    nsp_nested_attn_destroy(attn[1]);
    nsp_layout_free(lay);
    bufs_free(&b);
    return rc;
}

static int join(rank_ctx_t *c, const emu_case_t *mc, int rank, int nranks)
{
    char env[600];

    memset(c, 0, sizeof(*c));
    c->rank = rank;
    snprintf(env, sizeof(env), "emu:%s", mc->file);
    setenv("NSPCOMM_DEVICE", env, 1);
    return mp_comm_tree(&mc->id, rank, nranks, mc->timeout_s, 0, &c->comm, &c->tree);
}

static int rank_main(int rank, int nranks, void *arg)
{
    const emu_case_t    *mc = arg;
    const nsp_memtype_t *mt = NULL;
    rank_ctx_t           c;
    int                  rc = 1;

    if (join(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    if (nsp_memtype_of(c.comm, &mt) != NSP_OK) {
        mp_note("rank %d: memory type: %s", rank, nsp_last_error());
        goto out;
    }
    mp_set_value(V_EMU, mt == &nsp_memtype_emu);
    for (int p = 0; p < mc->nplans; ++p) {
        for (int r = 0; r < mc->plans[p]->nrounds; ++r) {
            if (run_round(&c, mc, p, r) != 0) {
                goto out;
            }
        }
    }
    rc = rank_trace(&c) == 0 ? 0 : 1;
out:
    mp_set_value(V_ERR, c.err);
    mp_set_value(V_AB, c.ab);
    mp_set_value(V_ROUNDS, c.rounds);
    mp_comm_tree_free(c.comm, c.tree);
    return rc;
}

/* ---- dropped peer ------------------------------------------------------------------ */

static int rank_drop(int rank, int nranks, void *arg)
{
    const emu_case_t  *mc = arg;
    rank_ctx_t         c;
    nsp_layout_t      *lay = NULL;
    nsp_layout_info_t  info;
    nsp_nested_attn_t *attn = NULL;
    bufs_t             b;
    double             t0;
    nsp_status_t       st;

    memset(&b, 0, sizeof(b));
    if (join(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    if (nsp_layout_create(mc->plans[0], 0, rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK || bufs_alloc(&b, info.local_tokens, &mc->attn) ||
        make_attn(&c, lay, &mc->attn, 0, &attn) != NSP_OK) {
        mp_note("rank %d: setup: %s", rank, nsp_last_error());
        return 1;
    }
    if (rank == 1) {
        _exit(0); /* the peer drops: no teardown, no goodbye */
    }
    t0 = nsp_emu_now();
    st = nsp_nested_attn_fwd(attn, b.q, b.k, b.v, b.o[0], b.lse[0], NULL, NULL);
    mp_set_value(V_FAIL_STATUS, st);
    mp_set_value(V_FAIL_S, nsp_emu_now() - t0);
    mp_note("rank 0: %s", st != NSP_OK ? nsp_last_error() : "the forward succeeded");
    t0 = nsp_emu_now();
    nsp_nested_attn_destroy(attn);
    nsp_layout_free(lay);
    mp_comm_tree_free(c.comm, c.tree);
    mp_set_value(V_TEARDOWN_S, nsp_emu_now() - t0);
    bufs_free(&b); /* only now: a failed exchange may write them until the world is gone */
    return 0;
}

/* ---- cases ------------------------------------------------------------------------- */

static void case_free(emu_case_t *mc)
{
    for (int p = 0; p < mc->nplans; ++p) {
        nsp_plan_free(mc->plans[p]);
        nt_ref_free(&mc->refs[p]);
    }
    mc->nplans = 0;
}

static int case_make(emu_case_t *mc, int nranks, int nplans, int math, uint64_t seed)
{
    nsp_model_t   model;
    nsp_cluster_t cluster;
    int           deg[8], nd = 0;
    uint64_t      rng = seed;

    memset(mc, 0, sizeof(*mc));
    mc->math      = math;
    mc->timeout_s = 30.0;
    for (int d = 1; d <= nranks; d *= 2) {
        deg[nd++] = d;
    }
    memset(&mc->attn, 0, sizeof(mc->attn));
    mc->attn.q_heads  = 8;
    mc->attn.kv_heads = 2;
    mc->attn.head_dim = 16;
    mc->attn.causal   = 1;
    nt_model(8, 2, 16, &model);
    nt_cluster(nranks, &cluster);
    if (emu_file(math ? "math.json" : "timing.json", math, mc->file, sizeof(mc->file)) != 0) {
        return -1;
    }
    for (int p = 0; p < nplans; ++p) {
        nsp_plan_t *plan = nt_random_nested(&rng, &model, &cluster, deg, nd,
                                            4 + (int)nt_range(&rng, 0, 8), 96 * nranks);
        mc->plans[mc->nplans] = plan;
        if (plan == NULL || nt_ref_make(plan, &mc->attn, nt_rand(&rng), &mc->refs[mc->nplans])) {
            return -1;
        }
        mc->nplans++;
    }
    return 0;
}

static double sum_value(const mp_result_t *res, int v)
{
    double s = 0;

    for (int r = 0; r < res->nranks; ++r) {
        s += res->rank[r].value[v];
    }
    return s;
}

static double max_value(const mp_result_t *res, int v)
{
    double m = 0;

    for (int r = 0; r < res->nranks; ++r) {
        m = res->rank[r].value[v] > m ? res->rank[r].value[v] : m;
    }
    return m;
}

static void case_run(int nranks, int math)
{
    emu_case_t  mc;
    mp_result_t res;
    const char *mode = math ? "math mode" : "timing mode";

    if (case_make(&mc, nranks, math ? 3 : 2, math, 0xe4a0u + 10u * (uint64_t)nranks + math)) {
        tap_ok(0, "%d ranks, %s: setup: %s", nranks, mode, nsp_last_error());
        case_free(&mc);
        return;
    }
    fflush(stdout);
    mp_run_uid(nranks, 90.0, rank_main, &mc, &mc.id, &res);
    if (!tap_ok(mp_all_ok(&res), "%d ranks, %s: every call completed over UCX on the emulated "
                "devices (%.1f s)", nranks, mode, res.elapsed_s)) {
        mp_diag(&res);
        case_free(&mc);
        return;
    }
    tap_ok(sum_value(&res, V_EMU) == nranks, "%d ranks, %s: every world ran the \"emu\" memory "
           "type", nranks, mode);
    if (math) {
        tap_ok(sum_value(&res, V_ROUNDS) > 0 && max_value(&res, V_ERR) <= TOL,
               "%d ranks, math mode: %.0f rank-rounds within %.0e of the single-process "
               "reference (worst %.2e)", nranks, sum_value(&res, V_ROUNDS), TOL,
               max_value(&res, V_ERR));
        tap_ok(sum_value(&res, V_AB) == 0, "%d ranks, math mode: serial + stateless equal "
               "pipelined + saved bit for bit", nranks);
    }
    tap_ok(sum_value(&res, V_KERNELS) > 0 && sum_value(&res, V_ORDER_CHECKED) > 0 &&
               sum_value(&res, V_ORDER_BAD) == 0,
           "%d ranks, %s: ordering: %.0f kernels of levels > 0 checked, none started before an "
           "op of its level's stream enqueued before it ended (%.0f did)", nranks, mode,
           sum_value(&res, V_ORDER_CHECKED), sum_value(&res, V_ORDER_BAD));
    tap_ok(sum_value(&res, V_LANDED) == sum_value(&res, V_ORDER_CHECKED),
           "%d ranks, %s: each of them came after its level's landing (a host op of the "
           "level's stream: the unpack enqueued once the bytes landed): %.0f of %.0f", nranks,
           mode, sum_value(&res, V_LANDED), sum_value(&res, V_ORDER_CHECKED));
    tap_ok(sum_value(&res, V_SHORT) == 0 &&
               sum_value(&res, V_BUSY) >= sum_value(&res, V_ASKED) - 1e-6 * sum_value(&res, V_KERNELS),
           "%d ranks, %s: completion: %.0f kernels, none shorter than asked, busy %.3f s for "
           "%.3f s asked by the timing model (trace not full)", nranks, mode,
           sum_value(&res, V_KERNELS), sum_value(&res, V_BUSY), sum_value(&res, V_ASKED));
    case_free(&mc);
}

static void case_drop(void)
{
    emu_case_t  mc;
    mp_result_t res;
    double      fail_s, st;

    if (case_make(&mc, 2, 1, 0, 0xd40bu)) {
        tap_ok(0, "dropped peer: setup: %s", nsp_last_error());
        case_free(&mc);
        return;
    }
    mc.timeout_s = 3.0;
    fflush(stdout);
    mp_run_uid(2, 40.0, rank_drop, &mc, &mc.id, &res);
    st     = res.rank[0].value[V_FAIL_STATUS];
    fail_s = res.rank[0].value[V_FAIL_S];
    tap_ok(res.rank[0].exited && res.rank[0].exit_code == 0 && !res.rank[0].timed_out,
           "dropped peer: rank 0 returned (no hang; %.1f s)", res.elapsed_s);
    tap_diag("rank 0 saw: %s", res.rank[0].note);
    tap_ok(st == NSP_ERR_TIMEOUT || st == NSP_ERR_PEER_FAILED,
           "dropped peer: the forward failed with %s", nsp_status_string((nsp_status_t)st));
    tap_ok(fail_s < mc.timeout_s + 5.0 && res.rank[0].value[V_TEARDOWN_S] < 35.0,
           "dropped peer: within the world's timeout (%.1f s, timeout %.0f s), teardown %.1f s",
           fail_s, mc.timeout_s, res.rank[0].value[V_TEARDOWN_S]);
    case_free(&mc);
}

int main(void)
{
    const char *base = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";

    snprintf(tmpdir, sizeof(tmpdir), "%s/nsp-emu-attn-XXXXXX", base);
    if (mkdtemp(tmpdir) == NULL) {
        printf("Bail out! cannot make a directory under %s\n", base);
        return 1;
    }
    unsetenv("NSPCOMM_DEVICE");
    case_selection();
    case_run(2, 1);
    case_run(4, 1);
    case_run(4, 0);
    case_drop();
    {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) {
            tap_diag("could not remove %s", tmpdir);
        }
    }
    return tap_done();
}

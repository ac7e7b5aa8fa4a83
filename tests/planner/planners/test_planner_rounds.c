/*
 * Rounds cost what micro-batches cost (docs/reference/cost-model.md section 8):
 *
 *  - the derived per-round cost against numbers computed by hand (MoE and
 *    dense presets, inside one node and across nodes) and an explicit
 *    cluster round_fixed_s taken as given;
 *  - a plan's step is the sum over rounds of L x the slowest rank plus one
 *    fixed cost per round, rank_s and the lower bound include it (the
 *    reference example plan: 17.22620365 s + 1 round);
 *  - the cluster file key: read, range-checked, absent = derived; the plan
 *    JSON keeps it and reads back to the same prediction bit for bit;
 *  - the planners stop adding rounds that do not pay: a 297-token batch on
 *    one rank is one round for every planner; with a round cost of 10 s no
 *    planner uses more rounds than without it; every plan stays above the
 *    bound, which counts one round.
 */
#include "check.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef NSP_TEST_SRCDIR
#define NSP_TEST_SRCDIR "."
#endif

static const nsp_planner_kind_t kinds[4] = {NSP_PLANNER_STATIC, NSP_PLANNER_DISJOINT,
                                            NSP_PLANNER_NESTED, NSP_PLANNER_MEGATRON};
static const char *const kind_names[4] = {"static", "disjoint", "nested", "megatron"};

static double derived_round(const char *model_name, const char *cluster_name, int ranks)
{
    nsp_model_t          m;
    nsp_cluster_t        c;
    nsp_plan_t          *plan = NULL;
    nsp_planner_params_t p;
    const int64_t        lens[1] = {1024};
    double               r = -1.0;

    memset(&p, 0, sizeof(p));
    p.kind = NSP_PLANNER_STATIC;
    nsp_model_preset(model_name, &m);
    nsp_cluster_preset(cluster_name, ranks, &c);
    if (nsp_plan_create(&m, &c, lens, 1, &p, &plan) == NSP_OK) {
        r = plan->predicted.round_s;
    }
    nsp_plan_free(plan);
    return r;
}

/* By hand: (1 - eta) * 3 * (N-1)/N * 2 * P_dense / B(N) + L * 100 * 4e-6 with
 * P_dense = 30.5e9 - 48*128*3*2048*768 = 1,508,970,752 for qwen3-30b-a3b. */
static void derived_values(void)
{
    tap_is_double(derived_round("qwen3-30b-a3b", "h100", 64),
                  0.2 * 3 * 63.0 / 64 * 2 * 1508970752.0 / 45e9 + 48 * 4e-4, 1e-12, 0,
                  "qwen3-30b-a3b on 64 h100: 0.0588105 s per round");
    tap_is_double(derived_round("qwen3-30b-a3b", "h100", 8),
                  0.2 * 3 * 7.0 / 8 * 2 * 1508970752.0 / 300e9 + 48 * 4e-4, 1e-12, 0,
                  "inside one node the weights move at B_intra: 0.0244814 s");
    tap_is_double(derived_round("llama3-8b", "h100", 64), 0.2 * 3 * 63.0 / 64 * 16e9 / 45e9 +
                  32 * 4e-4, 1e-12, 0, "llama3-8b (dense) on 64 h100: 0.2228 s");
}

static nsp_plan_t *example_plan(double round_fixed)
{
    char        path[4096];
    nsp_plan_t *plan = NULL;
    FILE       *f;
    char       *text;
    long        n;

    snprintf(path, sizeof(path), "%s/tests/planner/data/design-example-plan.json",
             NSP_TEST_SRCDIR);
    f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc((size_t)n + 1, 1);
    if (text != NULL && fread(text, 1, (size_t)n, f) == (size_t)n &&
        nsp_plan_read_json(text, &plan) == NSP_OK) {
        plan->cluster.round_fixed_s = round_fixed;
        if (nsp_plan_evaluate(plan) != NSP_OK) {
            nsp_plan_free(plan);
            plan = NULL;
        }
    }
    free(text);
    fclose(f);
    return plan;
}

static void example_step(void)
{
    nsp_plan_t  *zero = example_plan(0.0), *der = example_plan(NSP_ROUND_FIXED_DERIVED);
    nsp_plan_t  *fix = example_plan(0.5);
    const double r64 = 0.2 * 3 * 63.0 / 64 * 2 * 1508970752.0 / 45e9 + 48 * 4e-4;
    int          ranks_ok = 1;

    if (zero == NULL || der == NULL || fix == NULL) {
        tap_ok(0, "the reference example plan reads and evaluates");
        tap_skip(5, "no example plan");
    } else {
        tap_is_double(zero->predicted.step_s, 17.22620364515514, 1e-12, 0,
                      "round_fixed_s 0: the reference step 17.22620365 s");
        tap_is_double(der->predicted.step_s, 17.22620364515514 + r64, 1e-12, 0,
                      "derived: + one round's 0.0588105 s (the plan has %d round)", der->nrounds);
        tap_is_double(fix->predicted.step_s, 17.22620364515514 + 0.5, 1e-12, 0,
                      "round_fixed_s 0.5 is taken as given");
        tap_is_double(der->predicted.lower_bound_s, 12.795691512746357 + r64, 1e-12, 0,
                      "the lower bound counts the one round every plan has");
        for (int g = 0; g < der->cluster.ranks; ++g) {
            ranks_ok &= fabs(der->predicted.rank_s[g] - zero->predicted.rank_s[g] - r64) <
                        1e-9;
        }
        tap_ok(ranks_ok, "every rank's rank_s pays the round's fixed cost");
        tap_is_double(der->predicted.round_s, r64, 1e-12, 0, "predicted.round_s");
    }
    nsp_plan_free(zero);
    nsp_plan_free(der);
    nsp_plan_free(fix);
}

/* Write a plan to JSON and read it back: the same prediction bit for bit. */
static void json_roundtrip(void)
{
    nsp_plan_t *plan = example_plan(0.125), *back = NULL;
    char       *buf = NULL;
    size_t      len = 0;
    FILE       *mem = open_memstream(&buf, &len);
    int         ok = plan != NULL && mem != NULL && nsp_plan_write_json(plan, mem) == NSP_OK;

    if (mem != NULL) {
        fclose(mem);
    }
    ok = ok && strstr(buf, "\"round_fixed_s\": 0.125") != NULL &&
         nsp_plan_read_json(buf, &back) == NSP_OK && nsp_plan_evaluate(back) == NSP_OK;
    tap_ok(ok && back->cluster.round_fixed_s == 0.125 &&
           back->predicted.step_s == plan->predicted.step_s,
           "the plan JSON keeps round_fixed_s and reads back to the same step");
    nsp_plan_free(back);
    nsp_plan_free(plan);
    free(buf);
}

static nsp_status_t load_cluster_text(const char *text, nsp_cluster_t *c)
{
    char         path[] = "/tmp/nsp_test_roundsXXXXXX";
    const int    fd = mkstemp(path);
    nsp_status_t st = NSP_ERR_IO;
    FILE        *f;

    if (fd < 0) {
        return st;
    }
    f = fdopen(fd, "w");
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
        st = nsp_cluster_load(path, c);
    }
    unlink(path);
    return st;
}

static void cluster_key(void)
{
    nsp_cluster_t c;

    tap_ok(load_cluster_text("{\"base\": \"h100\", \"ranks\": 64, \"round_fixed_s\": 0.03}",
                             &c) == NSP_OK && c.round_fixed_s == 0.03,
           "cluster file: round_fixed_s 0.03 is read");
    tap_ok(load_cluster_text("{\"base\": \"h100\", \"ranks\": 64}", &c) == NSP_OK &&
           c.round_fixed_s < 0, "absent: derived (negative)");
    tap_ok(load_cluster_text("{\"base\": \"h100\", \"ranks\": 64, \"round_fixed_s\": -2}", &c) ==
           NSP_ERR_INVALID_ARG && strstr(nsp_last_error(), "round_fixed_s") != NULL,
           "round_fixed_s -2 is rejected: %s", nsp_last_error());
}

static int plan_kind(const nsp_model_t *m, const nsp_cluster_t *c, const int64_t *lens, int n,
                     int k, nsp_plan_t **plan)
{
    nsp_planner_params_t p;

    memset(&p, 0, sizeof(p));
    p.kind = kinds[k];
    p.field_mask = NSP_PLANNER_FIELD_TIME_LIMIT;
    p.time_limit_s = 0.2;
    return nsp_plan_create(m, c, lens, n, &p, plan) == NSP_OK;
}

/* A new user's first batch: 297 tokens, a model that fits one rank. */
static void tiny_batch(void)
{
    const int64_t lens[3] = {200, 60, 37};
    nsp_model_t   m;
    nsp_cluster_t c;

    nsp_model_preset("llama3-8b", &m);
    m.params = 1e9;
    nsp_cluster_preset("h100", 8, &c);
    c.ranks = 1;
    for (int k = 0; k < 4; ++k) {
        nsp_plan_t *plan = NULL;
        const int   ok = plan_kind(&m, &c, lens, 3, k, &plan);
        tap_ok(ok && plan->nrounds == 1, "%s: a 297-token batch on one rank is one round (%d)%s",
               kind_names[k], ok ? plan->nrounds : -1, ok ? "" : nsp_last_error());
        nsp_plan_free(plan);
    }
}

/* Random memory-tight batches: a costly round never adds rounds, every plan
 * stays above the bound. */
static void costly_rounds(void)
{
    int fewer = 0, tried = 0, above = 0, plans = 0;

    setenv("NSPCOMM_MILP", "none", 1);   /* the disjoint greedy: quick and repeatable */
    for (int seed = 0; seed < 12; ++seed) {
        uint64_t      state = 0x7011d000ull + (uint64_t)seed;
        const int     ranks = 16 << (seed % 3);
        nsp_model_t   m;
        nsp_cluster_t c;
        int64_t      *lens = NULL;
        const int     n = pc_batch(&state, ranks, 24576 + 8192 * (seed % 3), 393216, &lens);
        nsp_model_preset("qwen3-30b-a3b", &m);
        nsp_cluster_preset("h100", ranks, &c);
        for (int k = 0; k < 4; ++k) {
            nsp_plan_t *free_r = NULL, *dear = NULL;
            c.round_fixed_s = 0.0;
            if (plan_kind(&m, &c, lens, n, k, &free_r)) {
                c.round_fixed_s = 10.0;
                if (plan_kind(&m, &c, lens, n, k, &dear)) {
                    ++tried;
                    fewer += dear->nrounds <= free_r->nrounds;
                    if (dear->nrounds > free_r->nrounds) {
                        tap_diag("seed %d %s: %d rounds at 10 s a round, %d when free", seed,
                                 kind_names[k], dear->nrounds, free_r->nrounds);
                    }
                    plans += 2;
                    above += free_r->predicted.step_s >= free_r->predicted.lower_bound_s;
                    above += dear->predicted.step_s >= dear->predicted.lower_bound_s;
                }
            }
            nsp_plan_free(free_r);
            nsp_plan_free(dear);
        }
        free(lens);
    }
    unsetenv("NSPCOMM_MILP");
    tap_ok(tried >= 40 && fewer == tried, "a 10 s round never adds rounds (%d of %d plans)",
           fewer, tried);
    tap_ok(plans > 0 && above == plans, "every plan is above its bound (%d of %d)", above,
           plans);
}

int main(void)
{
    tap_plan(19);
    derived_values();
    example_step();
    json_roundtrip();
    cluster_key();
    tiny_batch();
    costly_rounds();
    return tap_done();
}

/*
 * gen_plans OUTDIR [BATCHES] [SEED]: write random valid plans, built with
 * nsp_plan_build() the way the planners build theirs, for the independent
 * checker tools/plan_check.py:
 *   OUTDIR/plan-<model>-<kind>-<i>.json   single nspcomm-plan-v1 plans
 *   OUTDIR/sim.json                       an nspcomm-sim-v1 file (per batch the
 *                                         same lengths planned three ways)
 *   OUTDIR/ring-<model>-<kind>-<i>.json   plans with Ulysses x ring groups up to
 *                                         the ranks and the ring flag
 *                                         (docs/reference/cost-model.md)
 * Every plan is checked with nsp_plan_validate() first. Exit 0 on success.
 *
 * gen_plans --layout: print the sizes and offsets of the public structs as
 * JSON, for the ctypes test (tests/planner/test_ctypes.py).
 */
#include "common/json.h"
#include "common/log.h"
#include "planner/planner_io.h"
#include "random_plan.h"
#include "nsp_opt.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kinds[] = {"nested", "static", "disjoint"};

static int write_plan_file(const char *dir, const char *prefix, const char *tag, int i,
                           const nsp_plan_t *plan)
{
    char  path[4096];
    FILE *f;
    int   rc;

    snprintf(path, sizeof(path), "%s/%s-%s-%s-%d.json", dir, prefix, tag, plan->planner, i);
    f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    rc = nsp_plan_write_json(plan, f) != NSP_OK;
    fclose(f);
    return rc;
}

/* Single plans over three models and cluster sizes, including small clusters. */
static int write_single_plans(const char *dir, uint64_t seed)
{
    static const struct {
        const char *model, *cluster;
        int         ranks, nseqs;
        int64_t     max_len;
    } setups[] = {
        {"qwen3-30b-a3b", "h100", 64, 400, 393216},
        {"llama3-8b", "h800", 8, 40, 65536},
        {"qwen3-235b-a22b", "h100", 256, 800, 262144},
    };
    uint64_t st = seed;

    for (int k = 0; k < 3; ++k) {
        nsp_model_t   m;
        nsp_cluster_t c;

        nsp_model_preset(setups[k].model, &m);
        nsp_cluster_preset(setups[k].cluster, setups[k].ranks, &c);
        for (int kind = 0; kind < 3; ++kind) {
            nsp_plan_t *plan = NULL;
            if (rp_make(&st, (rp_kind_t)kind, &m, &c, setups[k].nseqs, setups[k].max_len,
                        &plan) != NSP_OK || nsp_plan_validate(plan) != NSP_OK) {
                fprintf(stderr, "gen_plans: %s\n", nsp_last_error());
                nsp_plan_free(plan);
                return 1;
            }
            plan->predicted.plan_ms = 0.25 * (kind + 1);
            if (write_plan_file(dir, "plan", setups[k].model, k, plan) != 0) {
                nsp_plan_free(plan);
                return 1;
            }
            nsp_plan_free(plan);
        }
    }
    return 0;
}

/* Plans with rings: more ranks than query heads, sequences up to 2M tokens. */
static int write_ring_plans(const char *dir, uint64_t seed)
{
    static const struct {
        const char *model, *cluster;
        int         ranks, nseqs;
        int64_t     max_len;
    } setups[] = {
        {"qwen3-30b-a3b", "h100", 128, 300, 2097152},
        {"llama3-8b", "h800", 64, 200, 1048576},
        {"qwen3-235b-a22b", "h100", 256, 400, 2097152},
    };
    uint64_t st = seed + 777;

    for (int k = 0; k < 9; ++k) {   /* each setup three times */
        nsp_model_t   m;
        nsp_cluster_t c;

        nsp_model_preset(setups[k % 3].model, &m);
        nsp_cluster_preset(setups[k % 3].cluster, setups[k % 3].ranks, &c);
        for (int kind = 0; kind < 3; ++kind) {
            nsp_plan_t *plan = NULL;
            if (rp_make_ring(&st, (rp_kind_t)kind, &m, &c, setups[k % 3].nseqs,
                             setups[k % 3].max_len, &plan) != NSP_OK ||
                nsp_plan_validate(plan) != NSP_OK) {
                fprintf(stderr, "gen_plans: %s\n", nsp_last_error());
                nsp_plan_free(plan);
                return 1;
            }
            if (write_plan_file(dir, "ring", setups[k % 3].model, k, plan) != 0) {
                nsp_plan_free(plan);
                return 1;
            }
            nsp_plan_free(plan);
        }
    }
    return 0;
}

static int write_sim_file(const char *dir, int batches, uint64_t seed)
{
    nsp_model_t       m;
    nsp_cluster_t     c;
    nsp_json_writer_t w;
    char              path[4096];
    double            step_sum[3] = {0}, gap_sum[3] = {0};
    FILE             *f;
    int               rc = 0;

    nsp_model_preset("qwen3-30b-a3b", &m);
    nsp_cluster_preset("h100", 32, &c);
    snprintf(path, sizeof(path), "%s/sim.json", dir);
    f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    nsp_json_writer_init(&w, f, 2);
    nsp_json_begin_object(&w, NULL, 0);
    nsp_json_string(&w, "format", "nspcomm-sim-v1");
    nsp_json_begin_object(&w, "config", 0);
    nsp_json_string(&w, "workload", "random (tests/planner/gen_plans)");
    nsp_json_int(&w, "batches", batches);
    nsp_json_end(&w);
    nsp_json_begin_array(&w, "batches", 0);
    for (int b = 0; b < batches && rc == 0; ++b) {
        nsp_json_begin_object(&w, NULL, 0);
        for (int kind = 0; kind < 3 && rc == 0; ++kind) {
            uint64_t    st = seed * 1000 + (uint64_t)b;   /* same lengths for every kind */
            nsp_plan_t *plan = NULL;
            if (rp_make(&st, (rp_kind_t)kind, &m, &c, 300, 393216, &plan) != NSP_OK ||
                nsp_plan_validate(plan) != NSP_OK) {
                fprintf(stderr, "gen_plans: %s\n", nsp_last_error());
                rc = 1;
            } else {
                if (kind == 0) {
                    nsp_json_double(&w, "lower_bound_s", plan->predicted.lower_bound_s);
                    nsp_json_begin_object(&w, "plans", 0);
                }
                nsp_plan_write_json_to(plan, &w, kinds[kind]);
                step_sum[kind] += plan->predicted.step_s;
                gap_sum[kind] += plan->predicted.step_s / plan->predicted.lower_bound_s;
            }
            nsp_plan_free(plan);
        }
        nsp_json_end(&w);   /* plans */
        nsp_json_end(&w);   /* batch */
    }
    nsp_json_end(&w);
    nsp_json_begin_object(&w, "summary", 0);
    nsp_json_begin_object(&w, "planners", 0);
    for (int kind = 0; kind < 3; ++kind) {
        nsp_json_begin_object(&w, kinds[kind], 1);
        nsp_json_double(&w, "mean_step_s", step_sum[kind] / batches);
        nsp_json_double(&w, "mean_gap", gap_sum[kind] / batches);
        nsp_json_end(&w);
    }
    nsp_json_end(&w);
    nsp_json_end(&w);
    nsp_json_end(&w);
    if (nsp_json_writer_finish(&w) != NSP_OK) {
        rc = 1;
    }
    fputc('\n', f);
    fclose(f);
    return rc;
}

#define FIELD(type, f) printf(", \"%s.%s\": %zu", #type, #f, offsetof(type, f))

static int print_layout(void)
{
    printf("{\"nsp_model_t\": %zu, \"nsp_cluster_t\": %zu, \"nsp_plan_group_t\": %zu, "
           "\"nsp_plan_round_t\": %zu, \"nsp_plan_prediction_t\": %zu, \"nsp_plan_t\": %zu, "
           "\"nsp_planner_params_t\": %zu", sizeof(nsp_model_t), sizeof(nsp_cluster_t),
           sizeof(nsp_plan_group_t), sizeof(nsp_plan_round_t), sizeof(nsp_plan_prediction_t),
           sizeof(nsp_plan_t), sizeof(nsp_planner_params_t));
    FIELD(nsp_model_t, ffn);
    FIELD(nsp_model_t, experts);
    FIELD(nsp_model_t, params);
    FIELD(nsp_cluster_t, mem_bytes);
    FIELD(nsp_cluster_t, overlap);
    FIELD(nsp_plan_group_t, seqs);
    FIELD(nsp_plan_group_t, ring);
    FIELD(nsp_plan_t, model);
    FIELD(nsp_plan_t, cluster);
    FIELD(nsp_plan_t, seq_lens);
    FIELD(nsp_plan_t, rounds);
    FIELD(nsp_plan_t, flags);
    FIELD(nsp_plan_t, predicted);
    FIELD(nsp_planner_params_t, kind);
    FIELD(nsp_planner_params_t, time_limit_s);
    FIELD(nsp_planner_params_t, level_degrees);
    FIELD(nsp_planner_params_t, enable_ring);
    printf("}\n");
    return 0;
}

int main(int argc, char **argv)
{
    int      batches = 3;
    uint64_t seed    = 1;

    if (argc == 2 && strcmp(argv[1], "--layout") == 0) {
        return print_layout();
    }
    if ((argc > 2 && nsp_opt_int("gen_plans", "BATCHES", argv[2], 1, 100000, &batches) != NSP_OK) ||
        (argc > 3 && nsp_opt_u64("gen_plans", "SEED", argv[3], 0, UINT64_MAX, &seed) != NSP_OK)) {
        return NSP_OPT_EXIT_USAGE;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUTDIR [BATCHES] [SEED]\n", argv[0]);
        return 2;
    }
    if (write_single_plans(argv[1], seed) != 0 || write_sim_file(argv[1], batches, seed) != 0 ||
        write_ring_plans(argv[1], seed) != 0) {
        return 1;
    }
    return 0;
}

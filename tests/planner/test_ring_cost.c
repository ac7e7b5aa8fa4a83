/*
 * Cost model v1 with ring groups (docs/reference/cost-model.md):
 *  - ring = 1 gives the v1 numbers bit for bit: plans evaluated before rings
 *    existed (tests/planner/data/v1-ring1-plans.json, random nested, static
 *    and disjoint plans on four model/cluster pairs) re-evaluate to the same
 *    doubles, and every ring-aware function equals its v1 counterpart;
 *  - two ring groups computed by hand from the formulas of the doc (the
 *    worked example, and a recomputed pipelined Ulysses x ring group with KV
 *    replication beside a leaf), the lower bound with rings, the message
 *    count, the planners' (u, r) per degree, and validation of ring shapes.
 */
#include "common/json.h"
#include "common/log.h"
#include "planner/cost.h"
#include "planner/planner_io.h"
#include "random_plan.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-12

/* Every plan of the fixture re-evaluates to its stored numbers exactly. */
static void test_v1_fixture(void)
{
    const char *path = rp_srcdir_path("tests/planner/data/v1-ring1-plans.json");
    nsp_json_t *root = NULL;
    int         plans = 0, same = 0;

    if (!tap_ok(nsp_json_parse_file(path, &root) == NSP_OK, "the v1 fixture reads")) {
        tap_diag("%s", nsp_last_error());
        return;
    }
    {
    const nsp_json_t *batches = nsp_json_get(root, "batches");

    for (size_t bi = 0; batches != NULL && bi < batches->count; ++bi) {
        const nsp_json_t *pl = nsp_json_get(&batches->items[bi], "plans");
        for (size_t pi = 0; pl != NULL && pi < pl->count; ++pi) {
            const nsp_json_t *pj = &pl->items[pi];
            nsp_plan_t       *plan = NULL;
            double     *rs, *rm, step, lb;
            int         n, eq;
            if (nsp_plan_from_json(pj, &plan) != NSP_OK) {
                tap_diag("%s", nsp_last_error());
                continue;
            }
            ++plans;
            n  = plan->cluster.ranks;
            rs = malloc(sizeof(double) * (size_t)n);
            rm = malloc(sizeof(double) * (size_t)n);
            memcpy(rs, plan->predicted.rank_s, sizeof(double) * (size_t)n);
            memcpy(rm, plan->predicted.rank_mem_bytes, sizeof(double) * (size_t)n);
            step = plan->predicted.step_s;
            lb   = plan->predicted.lower_bound_s;
            eq   = nsp_plan_evaluate(plan) == NSP_OK && plan->predicted.step_s == step &&
                   plan->predicted.lower_bound_s == lb &&
                   memcmp(rs, plan->predicted.rank_s, sizeof(double) * (size_t)n) == 0 &&
                   memcmp(rm, plan->predicted.rank_mem_bytes, sizeof(double) * (size_t)n) == 0;
            if (!eq) {
                tap_diag("%s plan on %d ranks: step %.17g -> %.17g", plan->planner, n, step,
                         plan->predicted.step_s);
            }
            same += eq;
            free(rs);
            free(rm);
            nsp_plan_free(plan);
        }
    }
    }
    nsp_json_free(root);
    tap_ok(plans == 12 && same == plans, "%d of %d plans evaluated by v1 before rings existed "
           "re-evaluate bit for bit (step, bound, every rank's time and memory)", same, plans);
}

/* The ring-aware functions at ring 1 are the v1 functions, exactly. */
static void test_ring1_functions(void)
{
    static const char *models[] = {"qwen3-30b-a3b", "qwen3-235b-a22b", "llama3-8b"};
    int                checked = 0, equal = 0;

    for (int mi = 0; mi < 3; ++mi) {
        nsp_model_t   m;
        nsp_cluster_t c;
        nsp_cost_t    cost;
        nsp_model_preset(models[mi], &m);
        nsp_cluster_preset("h100", 128, &c);
        nsp_cost_init(&cost, &m, &c);
        for (int d = 1; d <= cost.max_degree; d *= 2) {
            for (double s = 1.0; s < 3e6; s = s * 3.7 + 11.0) {
                for (int rc = 0; rc <= 1; ++rc) {
                    const double bytes = nsp_cost_a2a_bytes(&cost, s, d);
                    ++checked;
                    equal += nsp_cost_group_a2a_bytes(&cost, s, d, 1) == bytes &&
                             nsp_cost_group_a2a_time(&cost, bytes, d, 1) ==
                                 nsp_cost_a2a_time(&cost, bytes, d) &&
                             nsp_cost_ring_bytes(&cost, s, d, 1, rc) == 0.0 &&
                             nsp_cost_ring_time(&cost, 123.0, d, 1, rc) == 0.0 &&
                             nsp_cost_ring_mem_per_token(&cost, d, 1) == 0.0 &&
                             nsp_cost_ring_messages(1, rc) == 0 &&
                             nsp_cost_group_valid(&cost, d, 1) == nsp_cost_degree_valid(&cost, d);
                }
            }
        }
    }
    tap_ok(checked > 0 && equal == checked, "ring 1: group a2a bytes and time equal v1's, no "
           "ring bytes, time or memory (%d of %d cases)", equal, checked);
}

/* A plan from hand-written JSON, evaluated. */
static nsp_plan_t *hand_plan(const char *ranks_and_rounds)
{
    char        text[4096];
    nsp_plan_t *plan = NULL;

    snprintf(text, sizeof(text),
             "{\"format\": \"nspcomm-plan-v1\", \"planner\": \"hand\", %s}", ranks_and_rounds);
    if (nsp_plan_read_json(text, &plan) != NSP_OK || nsp_plan_evaluate(plan) != NSP_OK) {
        tap_diag("hand plan: %s", nsp_last_error());
        nsp_plan_free(plan);
        return NULL;
    }
    return plan;
}

/* round_fixed_s 0: the hand-computed figures are per-layer times (the
 * per-round cost is tested in test_round_cost) */
#define QWEN_H100(ranks)                                                                    \
    "\"model\": {\"base\": \"qwen3-30b-a3b\"}, \"cluster\": {\"base\": \"h100\", \"ranks\": " \
    #ranks ", \"round_fixed_s\": 0}"

/* docs/reference/cost-model.md section 2, the worked example: s = 2^20 on d = 128 =
 * 8 x 16, kept, alone, on 128 H100. By hand:
 *   a2a  = 2 * 7/8 * 8192 * (64 + 16) * 128 * 2      = 293,601,280 B
 *   A    = a2a / 300e9 + 4 * 20e-6                    = 1.0586709333e-3 s
 *   ring = 46 * 65536 * 2 * 1 * 128 * 2               = 1,543,503,872 B
 *   R    = ring / 45e9 + 46 * 40e-6                   = 3.6140086044e-2 s
 *   C    = comp(s, 128) + 8192 * 4*8*2048*2 / 300e9   = 0.45759362474728720 s
 *   t    = C + 0.2 R + A (not pipelined)              = 0.46588031288950943 s
 *   mem  = 16*30.5e9/128 + 4 GiB + 8192 * (3,244,032 + 20,480) = 34,850,349,600 B */
static void test_worked_example(void)
{
    nsp_model_t   m;
    nsp_cluster_t c;
    nsp_cost_t    cost;
    nsp_plan_t   *plan;
    const double  s = 1048576.0;

    nsp_model_preset("qwen3-30b-a3b", &m);
    nsp_cluster_preset("h100", 128, &c);
    nsp_cost_init(&cost, &m, &c);
    tap_is_double(nsp_cost_group_a2a_bytes(&cost, s, 128, 16), 293601280.0, 0, 0,
                  "worked example: a2a bytes in the 8-rank subgroup");
    tap_is_int(nsp_cost_ring_messages(16, 0), 46, "ring 16, kept: 3r-2 = 46 messages");
    tap_is_double(nsp_cost_ring_bytes(&cost, s, 128, 16, 0), 1543503872.0, 0, 0,
                  "worked example: ring bytes");
    tap_is_double(nsp_cost_ring_time(&cost, 1543503872.0, 128, 16, 0), 3.6140086044444444e-2,
                  REL_TOL, 0, "worked example: ring time at B_inter");
    tap_is_double(nsp_cost_ring_mem_per_token(&cost, 128, 16), 20480.0, 0, 0,
                  "ring buffers: 5 blocks x 8 x 512 B per token held");
    plan = hand_plan(QWEN_H100(128) ", \"seq_lens\": [1048576], \"rounds\": [{\"groups\": "
                     "[{\"rank0\": 0, \"size\": 128, \"ring\": 16, \"seqs\": [0], "
                     "\"recompute\": false, \"pipelined\": false}]}]");
    if (!tap_ok(plan != NULL, "the worked example plan reads and evaluates")) {
        return;
    }
    tap_is_double(plan->predicted.step_s, 48 * 0.46588031288950943, REL_TOL, 0,
                  "worked example: step = 48 x 0.46588031 s (C + 0.2 R + A)");
    tap_is_double(plan->predicted.rank_s[77], 48 * 0.46588031288950943, REL_TOL, 0,
                  "every rank of the group takes that time");
    tap_is_double(plan->predicted.rank_mem_bytes[3], 34850349600.0, REL_TOL, 0,
                  "worked example: memory with ring buffers");
    tap_ok(nsp_plan_validate(plan) == NSP_OK, "the worked example plan is valid");
    nsp_plan_free(plan);
}

/* A recomputed, pipelined group of 64 = 32 x 2 (u = 32 > G: the all-to-all
 * crosses nodes; u > n_kv: one replicated KV head per rank) holding s =
 * 2^19, and rank 5 also holding a kept leaf of 2000 tokens, on 64 H100. By
 * hand (docs/reference/cost-model.md section 2):
 *   a2a  = 1.5 * 2 * 31/32 * 8192 * (64 + 64) * 128 * 2 = 780,140,544 B
 *   A    = a2a / 45e9 + 4 * 40e-6                     = 1.7496456533e-2 s
 *   m    = (2-1)*2 + (2-1) + 2                         = 5 messages
 *   ring = 5 * 262144 * 2 * 1 * 128 * 2               = 671,088,640 B
 *   R    = ring / 45e9 + 5 * 40e-6                    = 1.5113080889e-2 s
 *   rank 0: t = C + 0.2 (A + R)                        = 0.31691962780144480 s
 *   rank 5: t (with the leaf's compute and tokens)     = 0.31951890471780847 s
 *   memory rank 0: 16P/64 + W + 8192 * (264,192 + 81,920)        = 14,755,316,800 B
 *          rank 5: + 2000 * 3,244,032                             = 21,243,380,800 B
 *   lower bound with rings: 48 * max(total/64 = 0.2337337, comp(s, 64) + ep = 0.2336931)
 *                                                      = 11.219217062059286 s
 *   lower bound v1 (degree 32)                         = 22.434535208744027 s */
static void test_recomputed_pipelined(void)
{
    nsp_plan_t *plan = hand_plan(
        QWEN_H100(64) ", \"seq_lens\": [524288, 2000], \"rounds\": [{\"groups\": ["
        "{\"rank0\": 0, \"size\": 64, \"ring\": 2, \"seqs\": [0], \"recompute\": true, "
        "\"pipelined\": true}, {\"rank0\": 5, \"size\": 1, \"seqs\": [1], \"recompute\": false, "
        "\"pipelined\": true}]}]");
    nsp_cost_t cost;

    if (!tap_ok(plan != NULL, "the recomputed ring plan reads and evaluates")) {
        return;
    }
    nsp_cost_init(&cost, &plan->model, &plan->cluster);
    tap_is_double(nsp_cost_group_a2a_bytes(&cost, 524288.0, 64, 2) * 1.5, 780140544.0, 0, 0,
                  "u = 32 subgroup a2a bytes (x 3/2 recomputed)");
    tap_is_int(nsp_cost_ring_messages(2, 1), 5, "ring 2, recomputed: 4r-3 = 5 messages");
    tap_is_double(nsp_cost_ring_bytes(&cost, 524288.0, 64, 2, 1), 671088640.0, 0, 0,
                  "ring bytes with the recomputed forward");
    tap_is_double(plan->predicted.rank_s[0], 48 * 0.3169196278014448, REL_TOL, 0,
                  "rank 0: C + 0.2 (A + R)");
    tap_is_double(plan->predicted.rank_s[5], 48 * 0.31951890471780847, REL_TOL, 0,
                  "rank 5 (with the leaf)");
    tap_is_double(plan->predicted.step_s, 15.336907426454808, REL_TOL, 0,
                  "step = the slowest rank (rank 5)");
    tap_is_double(plan->predicted.rank_mem_bytes[0], 14755316800.0, REL_TOL, 0,
                  "memory rank 0: recomputed activations and ring buffers");
    tap_is_double(plan->predicted.rank_mem_bytes[5], 21243380800.0, REL_TOL, 0,
                  "memory rank 5: plus the kept leaf");
    tap_is_double(plan->predicted.lower_bound_s, 22.434535208744027, REL_TOL, 0,
                  "no ring flag: the v1 bound (the long sequence at degree 32)");
    plan->flags |= NSP_PLAN_FLAG_RING;
    tap_ok(nsp_plan_evaluate(plan) == NSP_OK, "re-evaluated with the ring flag");
    tap_is_double(plan->predicted.lower_bound_s, 11.219217062059286, REL_TOL, 0,
                  "ring flag: the bound with rings (degree 64 = the ranks)");
    {
        double lb = 0.0;
        nsp_planner_params_t p;
        memset(&p, 0, sizeof(p));
        p.kind = NSP_PLANNER_NESTED;
        p.field_mask = NSP_PLANNER_FIELD_ENABLE_RING;
        p.enable_ring = 1;
        tap_ok(nsp_planner_lower_bound(&plan->model, &plan->cluster, plan->seq_lens, 2, &p,
                                       &lb) == NSP_OK && lb == plan->predicted.lower_bound_s,
               "nsp_planner_lower_bound with rings gives it too");
        p.enable_ring = 0;
        tap_ok(nsp_planner_lower_bound(&plan->model, &plan->cluster, plan->seq_lens, 2, &p,
                                       &lb) == NSP_OK && lb == 22.434535208744027,
               "and without rings nsp_lower_bound's");
    }
    {
        /* the flag and the ring groups survive JSON */
        char       *buf = NULL;
        size_t      len = 0;
        FILE       *f = open_memstream(&buf, &len);
        nsp_plan_t *back = NULL;
        nsp_plan_write_json(plan, f);
        fclose(f);
        tap_ok(nsp_plan_read_json(buf, &back) == NSP_OK && back->flags == NSP_PLAN_FLAG_RING &&
               back->rounds[0].groups[0].ring == 2 && nsp_plan_evaluate(back) == NSP_OK &&
               back->predicted.step_s == plan->predicted.step_s &&
               back->predicted.lower_bound_s == plan->predicted.lower_bound_s,
               "a ring plan with its flag reads back and evaluates to the same numbers");
        nsp_plan_free(back);
        free(buf);
    }
    nsp_plan_free(plan);
}

static void test_degrees(void)
{
    static const struct {
        const char *model;
        int         G, d, ring;
    } cases[] = {
        {"qwen3-30b-a3b", 8, 16, 1},   {"qwen3-30b-a3b", 8, 32, 1},
        {"qwen3-30b-a3b", 8, 64, 8},   {"qwen3-30b-a3b", 8, 128, 16},
        {"qwen3-30b-a3b", 8, 48, 6},   {"qwen3-30b-a3b", 8, 256, 32},
        {"qwen3-30b-a3b", 4, 64, 16},  {"qwen3-235b-a22b", 8, 64, 1},
        {"qwen3-235b-a22b", 8, 128, 16}, {"llama3-8b", 8, 96, 12},
    };
    int ok = 0;

    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); ++k) {
        nsp_model_t   m;
        nsp_cluster_t c;
        nsp_cost_t    cost;
        int           r;
        nsp_model_preset(cases[k].model, &m);
        nsp_cluster_preset("h100", 256, &c);
        c.ranks_per_node = cases[k].G;
        nsp_cost_init(&cost, &m, &c);
        r = nsp_cost_ring_for_degree(&cost, cases[k].d);
        if (r == cases[k].ring && nsp_cost_group_valid(&cost, cases[k].d, r)) {
            ++ok;
        } else {
            tap_diag("%s, G %d, degree %d: ring %d, want %d", cases[k].model, cases[k].G,
                     cases[k].d, r, cases[k].ring);
        }
    }
    tap_is_int(ok, (int)(sizeof(cases) / sizeof(cases[0])),
               "planners' ring per degree: Ulysses up to the heads, above it u = the largest "
               "Ulysses degree <= G dividing d");
    tap_ok(nsp_cost_ring_messages(2, 0) == 4 && nsp_cost_ring_messages(8, 0) == 22 &&
           nsp_cost_ring_messages(8, 1) == 29, "messages: 3r-2 kept, 4r-3 recomputed");
}

static void expect_invalid(const char *groups, const char *needle, const char *what)
{
    char        text[2048];
    nsp_plan_t *plan = NULL;
    int         ok;

    snprintf(text, sizeof(text), "{\"format\": \"nspcomm-plan-v1\", \"planner\": \"hand\", "
             QWEN_H100(128) ", \"seq_lens\": [100000], \"rounds\": [{\"groups\": [%s]}]}",
             groups);
    ok = nsp_plan_read_json(text, &plan) == NSP_OK;
    if (needle == NULL) {
        tap_ok(ok && nsp_plan_validate(plan) == NSP_OK, "%s is valid", what);
    } else {
        tap_ok(ok && nsp_plan_validate(plan) == NSP_ERR_INVALID_ARG &&
               strstr(nsp_last_error(), needle) != NULL, "%s is rejected: %s", what,
               nsp_last_error());
        if (ok) {
            tap_ok(nsp_plan_evaluate(plan) == (strstr(needle, "divide") ? NSP_ERR_INVALID_ARG
                                                                         : NSP_OK),
                   "%s: the evaluator %s", what,
                   strstr(needle, "divide") ? "refuses it too" : "still evaluates it");
        }
    }
    nsp_plan_free(plan);
}

static void test_validation(void)
{
    expect_invalid("{\"rank0\": 0, \"size\": 128, \"ring\": 16, \"seqs\": [0], \"recompute\": "
                   "false, \"pipelined\": false}", NULL, "128 = 8 x 16");
    expect_invalid("{\"rank0\": 0, \"size\": 128, \"ring\": 128, \"seqs\": [0], \"recompute\": "
                   "true, \"pipelined\": false}", NULL, "pure ring 128 = 1 x 128");
    expect_invalid("{\"rank0\": 64, \"size\": 64, \"ring\": 2, \"seqs\": [0], \"recompute\": "
                   "true, \"pipelined\": false}", NULL, "64 = 32 x 2");
    expect_invalid("{\"rank0\": 0, \"size\": 128, \"ring\": 3, \"seqs\": [0], \"recompute\": "
                   "false, \"pipelined\": false}", "divide", "ring 3 on 128 ranks");
    expect_invalid("{\"rank0\": 0, \"size\": 128, \"ring\": 2, \"seqs\": [0], \"recompute\": "
                   "false, \"pipelined\": false}", "Ulysses degree 64", "128 = 64 x 2");
    expect_invalid("{\"rank0\": 0, \"size\": 64, \"seqs\": [0], \"recompute\": "
                   "false, \"pipelined\": false}", "Ulysses degree 64", "64 without a ring");
}

int main(void)
{
    test_v1_fixture();
    test_ring1_functions();
    test_worked_example();
    test_recomputed_pipelined();
    test_degrees();
    test_validation();
    return tap_done();
}

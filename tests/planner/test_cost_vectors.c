/*
 * The cost model against the team's independent reference values
 * (tests/planner/data/costmodel-vectors.json, a copy of shared/): all cases,
 * every quantity, and the docs/design.md §8 example plan's step time and lower bound.
 */
#include "common/json.h"
#include "common/log.h"
#include "planner/cost.h"
#include "random_plan.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-12

static double member(const nsp_json_t *obj, const char *key)
{
    const nsp_json_t *v = nsp_json_get(obj, key);

    return (v != NULL && v->type == NSP_JSON_NUMBER) ? v->number : -1.0;
}

static void check_case(const nsp_json_t *c, int index)
{
    const char   *mname = nsp_json_get(c, "model")->string;
    const char   *cname = nsp_json_get(c, "cluster")->string;
    const int     ranks = (int)member(c, "ranks");
    const double  s = member(c, "seq_len");
    const int     d = (int)member(c, "degree");
    nsp_model_t   model;
    nsp_cluster_t cluster;
    nsp_cost_t    cost;
    double        bytes;
    char          tag[96];

    snprintf(tag, sizeof(tag), "case %d (%s, %s, N=%d, s=%.0f, d=%d)", index, mname, cname,
             ranks, s, d);
    if (nsp_model_preset(mname, &model) != NSP_OK ||
        nsp_cluster_preset(cname, ranks, &cluster) != NSP_OK ||
        nsp_cost_init(&cost, &model, &cluster) != NSP_OK) {
        tap_ok(0, "%s: presets and cost init (%s)", tag, nsp_last_error());
        return;
    }
    bytes = nsp_cost_a2a_bytes(&cost, s, d);
    tap_is_double(nsp_cost_comp(&cost, s, d), member(c, "comp_s"), REL_TOL, 0, "%s: comp_s", tag);
    tap_is_double(bytes, member(c, "a2a_bytes"), REL_TOL, 0, "%s: a2a_bytes", tag);
    tap_is_double(nsp_cost_a2a_time(&cost, bytes, d), member(c, "a2a_s"), REL_TOL, 0,
                  "%s: a2a_s", tag);
    tap_is_double(nsp_cost_ep_time(&cost, s / d), member(c, "ep_s_for_chunk"), REL_TOL, 0,
                  "%s: ep_s_for_chunk", tag);
    tap_is_double(nsp_cost_act_bytes(&cost, 0), member(c, "mem_bytes_per_token_kept"), REL_TOL,
                  0, "%s: activation bytes per token, kept", tag);
    tap_is_double(nsp_cost_act_bytes(&cost, 1), member(c, "mem_bytes_per_token_recompute"),
                  REL_TOL, 0, "%s: activation bytes per token, recomputed", tag);
    tap_is_double(cost.fixed_mem_bytes - cluster.workspace_bytes,
                  member(c, "model_states_bytes_per_rank"), REL_TOL, 0,
                  "%s: model states per rank (16P/N)", tag);
}

static void check_design_example(const nsp_json_t *root)
{
    const nsp_json_t *ex = nsp_json_get(root, "design_example_plan");
    char             *text = rp_read_text(rp_srcdir_path("tests/planner/data/design-example-plan.json"));
    nsp_plan_t       *plan = NULL;
    double            lb = 0.0;

    if (!tap_ok(text != NULL && nsp_plan_read_json(text, &plan) == NSP_OK,
                "the docs/design.md §8 example plan reads")) {
        tap_diag("%s", nsp_last_error());
        free(text);
        return;
    }
    free(text);
    tap_is_double(plan->predicted.step_s, 17.226, 0, 1e-12, "stored step_s is read as stored");
    tap_ok(nsp_plan_evaluate(plan) == NSP_OK, "the example plan evaluates");
    tap_is_double(plan->predicted.step_s, member(ex, "step_s"), 1e-12, 0,
                  "example plan step_s = reference %.10g", member(ex, "step_s"));
    tap_is_double(plan->predicted.lower_bound_s, member(ex, "lower_bound_s"), 1e-12, 0,
                  "example plan lower bound = reference %.10g", member(ex, "lower_bound_s"));
    tap_ok(nsp_lower_bound(&plan->model, &plan->cluster, plan->seq_lens, plan->nseqs, &lb) ==
           NSP_OK && lb == plan->predicted.lower_bound_s, "nsp_lower_bound agrees");
    tap_is_int(nsp_plan_validate(plan), NSP_OK, "the example plan is valid");
    nsp_plan_free(plan);
}

int main(void)
{
    const char *path = rp_srcdir_path("tests/planner/data/costmodel-vectors.json");
    nsp_json_t *root = NULL;
    const nsp_json_t *cases;

    if (nsp_json_parse_file(path, &root) != NSP_OK) {
        tap_ok(0, "read %s: %s", path, nsp_last_error());
        return tap_done();
    }
    cases = nsp_json_get(root, "cases");
    tap_ok(cases != NULL && cases->type == NSP_JSON_ARRAY && cases->count == 60,
           "the reference file holds 60 cases");
    for (size_t i = 0; cases != NULL && i < cases->count; ++i) {
        check_case(&cases->items[i], (int)i);
    }
    check_design_example(root);
    nsp_json_free(root);
    return tap_done();
}

/* Plans to JSON and back: every field, and the same prediction bit for bit. */
#include "common/log.h"
#include "planner/planner_io.h"
#include "random_plan.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char *plan_to_text(const nsp_plan_t *plan, nsp_status_t *status)
{
    char  *text = NULL;
    size_t len = 0;
    FILE  *f = open_memstream(&text, &len);

    *status = nsp_plan_write_json(plan, f);
    fclose(f);
    return text;
}

static int same_bits(const double *a, const double *b, int n)
{
    return memcmp(a, b, sizeof(double) * (size_t)n) == 0;
}

/* Every field of two plans equal (doubles bit for bit). */
static int plans_equal(const nsp_plan_t *a, const nsp_plan_t *b, const char **what)
{
    const int ranks = a->cluster.ranks;

    *what = "header";
    if (strcmp(a->planner, b->planner) != 0 || a->flags != b->flags || a->nseqs != b->nseqs ||
        a->nrounds != b->nrounds || memcmp(&a->model, &b->model, sizeof(a->model)) != 0 ||
        memcmp(&a->cluster, &b->cluster, sizeof(a->cluster)) != 0) {
        return 0;
    }
    *what = "seq_lens";
    if (memcmp(a->seq_lens, b->seq_lens, sizeof(int64_t) * (size_t)a->nseqs) != 0) {
        return 0;
    }
    *what = "rounds";
    for (int r = 0; r < a->nrounds; ++r) {
        if (a->rounds[r].ngroups != b->rounds[r].ngroups) {
            return 0;
        }
        for (int g = 0; g < a->rounds[r].ngroups; ++g) {
            const nsp_plan_group_t *x = &a->rounds[r].groups[g], *y = &b->rounds[r].groups[g];
            if (x->rank0 != y->rank0 || x->size != y->size || x->nseqs != y->nseqs ||
                x->recompute != y->recompute || x->pipelined != y->pipelined ||
                x->ring != y->ring ||
                memcmp(x->seqs, y->seqs, sizeof(int) * (size_t)x->nseqs) != 0) {
                return 0;
            }
        }
    }
    *what = "predicted";
    return same_bits(&a->predicted.step_s, &b->predicted.step_s, 1) &&
           same_bits(&a->predicted.lower_bound_s, &b->predicted.lower_bound_s, 1) &&
           same_bits(&a->predicted.plan_ms, &b->predicted.plan_ms, 1) &&
           same_bits(a->predicted.rank_s, b->predicted.rank_s, ranks) &&
           same_bits(a->predicted.rank_mem_bytes, b->predicted.rank_mem_bytes, ranks);
}

static void test_round_trips(void)
{
    static const struct {
        const char *model;
        const char *cluster;
        int         ranks;
        int         nseqs;
        int64_t     max_len;
    } setups[] = {
        {"qwen3-30b-a3b", "h100", 64, 300, 393216},
        {"llama3-8b", "h800", 16, 60, 131072},
        {"qwen3-235b-a22b", "h100", 128, 500, 262144},
    };
    uint64_t st = 2024;
    int      fails = 0, count = 0, ring_seen = 0, multi_round = 0;

    for (int it = 0; it < 30; ++it) {
        const int     k = it % 3;
        nsp_model_t   model;
        nsp_cluster_t cluster;
        nsp_plan_t   *plan = NULL, *back = NULL;
        nsp_status_t  status;
        char         *text;
        const char   *what = "";

        nsp_model_preset(setups[k].model, &model);
        nsp_cluster_preset(setups[k].cluster, setups[k].ranks, &cluster);
        if (rp_make(&st, (rp_kind_t)(it % 3), &model, &cluster, setups[k].nseqs,
                    setups[k].max_len, &plan) != NSP_OK) {
            tap_ok(0, "random plan %d: %s", it, nsp_last_error());
            continue;
        }
        plan->predicted.plan_ms = rp_unit(&st) * 10.0;   /* kept as written */
        plan->flags = (unsigned)(it & 3);
        text = plan_to_text(plan, &status);
        ring_seen |= strstr(text, "\"ring\"") != NULL;
        multi_round |= plan->nrounds > 1;
        if (status != NSP_OK || nsp_plan_read_json(text, &back) != NSP_OK) {
            tap_diag("plan %d: %s", it, nsp_last_error());
            ++fails;
        } else if (!plans_equal(plan, back, &what)) {
            tap_diag("plan %d (%s) read back differs in %s", it, plan->planner, what);
            ++fails;
        } else {
            /* Re-evaluate the read plan: the same numbers, bit for bit. */
            double plan_ms = back->predicted.plan_ms;
            if (nsp_plan_evaluate(back) != NSP_OK || !plans_equal(plan, back, &what) ||
                back->predicted.plan_ms != plan_ms || nsp_plan_validate(back) != NSP_OK) {
                tap_diag("plan %d: evaluation of the read plan differs in %s (%s)", it, what,
                         nsp_last_error());
                ++fails;
            }
        }
        ++count;
        free(text);
        nsp_plan_free(plan);
        nsp_plan_free(back);
    }
    tap_is_int(fails, 0, "%d random plans (nested, static, disjoint; 3 models) write, read back "
               "and re-evaluate to the same prediction bit for bit", count);
    tap_ok(ring_seen, "some plans carry a ring degree, written as \"ring\"");
    tap_ok(multi_round, "some plans have several rounds");
}

static void test_format_details(void)
{
    nsp_model_t   model;
    nsp_cluster_t cluster;
    nsp_plan_t   *plan = NULL;
    nsp_status_t  status;
    char         *text;
    uint64_t      st = 5;
    int           ring1 = 1;

    nsp_model_preset("qwen3-30b-a3b", &model);
    nsp_cluster_preset("h100", 16, &cluster);
    if (rp_make(&st, RP_STATIC, &model, &cluster, 20, 65536, &plan) != NSP_OK) {
        tap_ok(0, "plan");
        return;
    }
    for (int r = 0; r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            ring1 &= plan->rounds[r].groups[g].ring == 1;
        }
    }
    text = plan_to_text(plan, &status);
    tap_ok(status == NSP_OK && strncmp(text, "{\n  \"format\": \"nspcomm-plan-v1\",\n", 33) == 0,
           "a plan starts with its format");
    tap_ok(strstr(text, "\"planner\": \"static\"") && strstr(text, "\"flags\": 0") &&
           strstr(text, "\"model\": {\"name\": \"qwen3-30b-a3b\", \"layers\": 48") &&
           strstr(text, "\"cluster\": {\"name\": \"h100\", \"ranks\": 16") &&
           strstr(text, "\"seq_lens\": [") && strstr(text, "\"rounds\": [") &&
           strstr(text, "{\"rank0\": ") && strstr(text, "\"step_s\": ") &&
           strstr(text, "\"rank_s\": [") && strstr(text, "\"rank_mem_bytes\": [") &&
           strstr(text, "\"lower_bound_s\": ") && strstr(text, "\"plan_ms\": "),
           "it has the fields of docs/design.md §8 (plus flags)");
    tap_ok(ring1 && strstr(text, "\"ring\"") == NULL, "ring 1 is not written");
    free(text);
    plan->predicted.step_s = NAN;
    text = plan_to_text(plan, &status);
    tap_is_int(status, NSP_ERR_INVALID_ARG, "a NaN prediction cannot be written");
    free(text);
    nsp_plan_free(plan);
    tap_is_int(nsp_plan_write_json(NULL, stdout), NSP_ERR_INVALID_ARG, "NULL plan");
}

/* The docs/design.md §8 example, edited by `from` -> `to`, read back. */
static nsp_status_t read_edited(const char *from, const char *to, nsp_plan_t **plan)
{
    char        *text = rp_read_text(rp_srcdir_path("tests/planner/data/design-example-plan.json"));
    char        *edited, *at;
    nsp_status_t st;

    *plan = NULL;
    if (text == NULL) {
        return NSP_ERR_IO;
    }
    at = strstr(text, from);
    if (at == NULL) {
        free(text);
        return NSP_ERR_INTERNAL;
    }
    edited = malloc(strlen(text) + strlen(to) + 1);
    memcpy(edited, text, (size_t)(at - text));
    strcpy(edited + (at - text), to);
    strcat(edited, at + strlen(from));
    st = nsp_plan_read_json(edited, plan);
    free(edited);
    free(text);
    return st;
}

typedef struct edit_case {
    const char  *from, *to;
    nsp_status_t status;
    const char  *words;
} edit_case_t;

static void test_read_errors(void)
{
    static const edit_case_t cases[] = {
        {"nspcomm-plan-v1", "nspcomm-plan-v2", NSP_ERR_PARSE, "<plan>:2: format"},
        {"\"seqs\": [0]", "\"seqs\": [3]", NSP_ERR_INVALID_ARG, "not an index"},
        {"\"seqs\": [0]", "\"seqs\": [-1]", NSP_ERR_INVALID_ARG, "not an index"},
        {"\"rank0\": 37", "\"rank0\": 63, \"size\": 2, \"x\": 1", NSP_ERR_PARSE, "duplicate key"},
        {"\"rank0\": 37, \"size\": 1", "\"rank0\": 63, \"size\": 2", NSP_ERR_INVALID_ARG,
         "outside"},
        {"\"recompute\": true, \"pipelined\": true}", "\"recompute\": true}", NSP_ERR_PARSE,
         "\"pipelined\""},
        {"\"recompute\": false", "\"recompute\": 0", NSP_ERR_PARSE, "boolean"},
        {"\"rank_s\": []", "\"rank_s\": [1, 2]", NSP_ERR_PARSE, "64 ranks"},
        {"\"plan_ms\": 0.4", "\"plan_ms\": 0.4, \"speed\": 1", NSP_ERR_PARSE, "\"speed\""},
        {"[393216, 5120, 812]", "[393216, 0, 812]", NSP_ERR_INVALID_ARG, "seq_lens[1]"},
        {"[393216, 5120, 812]", "[393216, 5120.5, 812]", NSP_ERR_PARSE, "integer"},
        {"\"layers\": 48", "\"layers\": -48", NSP_ERR_INVALID_ARG, "\"layers\""},
        {"\"round_fixed_s\": 0}", "\"round_fixed_s\": 0", NSP_ERR_PARSE, "<plan>:"},
        {"\"seq_lens\"", "\"seq_lengths\"", NSP_ERR_PARSE, "\"seq_lengths\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        nsp_plan_t  *plan = NULL;
        nsp_status_t st = read_edited(cases[i].from, cases[i].to, &plan);
        tap_ok(st == cases[i].status && plan == NULL &&
               strstr(nsp_last_error(), cases[i].words) != NULL,
               "edited example %zu (%s -> %s) gives %s naming '%s'", i, cases[i].from,
               cases[i].to, nsp_status_string(cases[i].status), cases[i].words);
        if (st != cases[i].status || strstr(nsp_last_error(), cases[i].words) == NULL) {
            tap_diag("got %d: %s", st, nsp_last_error());
        }
        nsp_plan_free(plan);
    }
    {
        nsp_plan_t *plan = NULL;
        tap_ok(read_edited("\"recompute\": false, \"pipelined\": true",
                           "\"recompute\": false, \"pipelined\": true, \"ring\": 1, \"_note\": 1",
                           &plan) == NSP_OK && plan->rounds[0].groups[1].ring == 1,
               "\"ring\": 1 and '_' comment keys are accepted");
        nsp_plan_free(plan);
        tap_ok(read_edited(",\n  \"predicted\": {\"step_s\": 17.226, \"rank_s\": [], "
                           "\"rank_mem_bytes\": [], \"lower_bound_s\": 12.796,\n"
                           "                \"plan_ms\": 0.4}", "", &plan) == NSP_OK &&
               plan->predicted.step_s == 0.0 && nsp_plan_evaluate(plan) == NSP_OK &&
               fabs(plan->predicted.step_s - 17.2262036) < 1e-6,
               "a plan without \"predicted\" reads and evaluates");
        nsp_plan_free(plan);
    }
}

int main(void)
{
    test_round_trips();
    test_format_details();
    test_read_errors();
    return tap_done();
}

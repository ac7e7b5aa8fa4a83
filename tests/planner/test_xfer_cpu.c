/*
 * The exchange CPU of a rank (docs/reference/cost-model.md section 9): the cluster
 * keys cpu_byte_intra, cpu_byte_inter, cpu_call_intra, cpu_call_inter.
 *  - a cluster file's keys load, write and load back; absent they are 0,
 *    and a cluster at 0 writes none of them (plans stay byte-identical);
 *  - at 0 a plan evaluates to exactly (bit for bit) what it did without the
 *    keys; set, every rank's time grows by exactly the formula
 *    cpu_byte(x) * 2 * bytes + calls * cpu_call(x), added to its compute C
 *    (not hidden by eta), for a pipelined intra-node Ulysses group, a
 *    non-pipelined Ulysses x ring group across nodes (its all-to-all and its
 *    ring), and a rank in both;
 *  - bad values are NSP_ERR_INVALID_ARG (file and line, or the field),
 *    a non-number or one beyond a double NSP_ERR_PARSE.
 */
#include "common/json.h"
#include "common/log.h"
#include "planner/cost.h"
#include "planner/planner_io.h"
#include "random_plan.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REL_TOL 1e-12

/* The four values of the tests (seconds per byte, per call). */
#define CB_INTRA 1e-12
#define CB_INTER 4e-12
#define CC_INTRA 2e-6
#define CC_INTER 5e-6
#define CPU_KEYS                                                                      \
    "\"cpu_byte_intra\": 1e-12, \"cpu_byte_inter\": 4e-12, \"cpu_call_intra\": 2e-6, " \
    "\"cpu_call_inter\": 5e-6"

/* 64 H100 ranks (G = 8) of qwen3-30b-a3b, no round cost (per-layer figures):
 * group 0 = ranks 0..7 (Ulysses 8, intra, pipelined) holds s0; group 1 = all
 * 64 ranks as 32 x 2 (u = 32 > G: the all-to-all and the ring cross nodes,
 * not pipelined) holds s1. Rank 0 is in both, rank 9 in group 1 only. */
#define S0 65536.0
#define S1 262144.0
#define PLAN_FMT                                                                            \
    "{\"format\": \"nspcomm-plan-v1\", \"planner\": \"hand\", \"model\": {\"base\": "      \
    "\"qwen3-30b-a3b\"}, \"cluster\": {\"base\": \"h100\", \"ranks\": 64, \"round_fixed_s\": " \
    "0%s}, \"seq_lens\": [65536, 262144], \"rounds\": [{\"groups\": ["                      \
    "{\"rank0\": 0, \"size\": 8, \"seqs\": [0], \"recompute\": false, \"pipelined\": true}, " \
    "{\"rank0\": 0, \"size\": 64, \"ring\": 2, \"seqs\": [1], \"recompute\": false, "        \
    "\"pipelined\": false}]}]}"

static nsp_plan_t *read_plan(const char *cpu_keys)
{
    char        text[2048];
    nsp_plan_t *plan = NULL;

    snprintf(text, sizeof(text), PLAN_FMT, cpu_keys);
    if (nsp_plan_read_json(text, &plan) != NSP_OK || nsp_plan_evaluate(plan) != NSP_OK) {
        tap_diag("hand plan: %s", nsp_last_error());
        nsp_plan_free(plan);
        return NULL;
    }
    return plan;
}

static char *plan_text(const nsp_plan_t *plan)
{
    char  *buf = NULL;
    size_t len = 0;
    FILE  *f = open_memstream(&buf, &len);

    if (f == NULL) {
        return NULL;
    }
    nsp_plan_write_json(plan, f);
    fclose(f);
    return buf;
}

/* The per-layer time of rank 0 (in both groups) or rank 9 (group 1 only)
 * from the model's pieces and the exchange CPU written out here. */
static double rank_time(const nsp_cost_t *c, int rank, int with_cpu)
{
    const double a0 = nsp_cost_a2a_bytes(c, S0, 8);               /* intra, u = 8    */
    const double a1 = nsp_cost_group_a2a_bytes(c, S1, 64, 2);     /* inter, u = 32   */
    const double r1 = nsp_cost_ring_bytes(c, S1, 64, 2, 0);       /* inter, d = 64   */
    const int    m1 = nsp_cost_ring_messages(2, 0);               /* 3r - 2 = 4      */
    const double x0 = CB_INTRA * 2 * a0 + 4 * CC_INTRA;
    const double x1 = CB_INTER * 2 * a1 + 4 * CC_INTER + CB_INTER * 2 * r1 + m1 * CC_INTER;
    double       C = nsp_cost_comp(c, S1, 64) + (with_cpu ? x1 : 0.0);
    double       tokens = S1 / 64, kp = nsp_cost_ring_time(c, r1, 64, 2, 0);
    double       ks = nsp_cost_group_a2a_time(c, a1, 64, 2), eta = c->cluster.overlap;

    if (rank == 0) {
        C += nsp_cost_comp(c, S0, 8) + (with_cpu ? x0 : 0.0);
        tokens += S0 / 8;
        kp += nsp_cost_a2a_time(c, a0, 8);
    }
    C += nsp_cost_ep_time(c, tokens);
    return fmax(C, kp) + (1 - eta) * fmin(C, kp) + ks;
}

static void test_formula(void)
{
    nsp_plan_t *none = read_plan(""), *zero = read_plan(", \"cpu_byte_intra\": 0, "
                                                        "\"cpu_byte_inter\": 0, "
                                                        "\"cpu_call_intra\": 0, "
                                                        "\"cpu_call_inter\": 0");
    nsp_plan_t *set = read_plan(", " CPU_KEYS);
    nsp_cost_t  cost;
    const int   L = 48;

    if (!tap_ok(none && zero && set, "the hand plan reads and evaluates with the keys absent, "
                                     "0 and set")) {
        goto out;
    }
    tap_ok(zero->predicted.step_s == none->predicted.step_s &&
           memcmp(zero->predicted.rank_s, none->predicted.rank_s, 64 * sizeof(double)) == 0,
           "all four at 0: the same step and rank times bit for bit as without the keys");
    nsp_cost_init(&cost, &set->model, &set->cluster);
    tap_is_double(none->predicted.rank_s[9], L * rank_time(&cost, 9, 0), REL_TOL, 0,
                  "without: rank 9 = max(C, R) + 0.2 min(C, R) + A");
    tap_is_double(set->predicted.rank_s[9], L * rank_time(&cost, 9, 1), REL_TOL, 0,
                  "set: rank 9's C grows by cpu_byte_inter x 2 x (a2a + ring bytes) + (4 + "
                  "messages) x cpu_call_inter");
    tap_is_double(set->predicted.rank_s[0], L * rank_time(&cost, 0, 1), REL_TOL, 0,
                  "set: rank 0 adds its intra-node group's cpu_byte_intra x 2 x bytes + 4 x "
                  "cpu_call_intra");
    tap_ok(set->predicted.rank_s[0] > none->predicted.rank_s[0] &&
           set->predicted.step_s == set->predicted.rank_s[0],
           "the term only adds; the step is the slowest rank (rank 0)");
    {
        const double a0 = nsp_cost_a2a_bytes(&cost, S0, 8);
        tap_is_double(nsp_cost_xfer_cpu(&cost, a0, 8, 4), CB_INTRA * 2 * a0 + 4 * CC_INTRA,
                      REL_TOL, 0, "nsp_cost_xfer_cpu at degree 8 <= G: the intra values");
        tap_is_double(nsp_cost_xfer_cpu(&cost, a0, 16, 3), CB_INTER * 2 * a0 + 3 * CC_INTER,
                      REL_TOL, 0, "and at degree 16 > G: the inter values");
        tap_ok(nsp_cost_group_xfer_cpu(&cost, 0.0, 0.0, 1, 1, 0) == 0.0,
               "a group of one rank exchanges nothing: no exchange CPU");
    }
out:
    nsp_plan_free(none), nsp_plan_free(zero), nsp_plan_free(set);
}

/* The keys in plan JSON: absent at 0 (byte-identical plans), written when
 * set, and read back to the same evaluation. */
static void test_plan_json(void)
{
    nsp_plan_t *none = read_plan(""), *set = read_plan(", " CPU_KEYS), *back = NULL;
    char       *t_none = none ? plan_text(none) : NULL, *t_set = set ? plan_text(set) : NULL;

    tap_ok(t_none != NULL && strstr(t_none, "cpu_") == NULL,
           "a plan of a cluster without exchange CPU writes no cpu_ key");
    tap_ok(t_set != NULL && strstr(t_set, "\"cpu_byte_inter\": 4e-12") != NULL &&
           strstr(t_set, "\"cpu_call_intra\": 2e-06") != NULL, "a plan with them writes all four");
    tap_ok(t_set != NULL && nsp_plan_read_json(t_set, &back) == NSP_OK &&
           nsp_plan_evaluate(back) == NSP_OK && back->cluster.cpu_byte_inter == CB_INTER &&
           back->predicted.step_s == set->predicted.step_s,
           "it reads back with the same values and evaluates to the same step");
    nsp_plan_free(back);
    free(t_none), free(t_set);
    nsp_plan_free(none), nsp_plan_free(set);
}

/* nsp_cluster_load / write / load; absent = 0. */
static void test_cluster_file(void)
{
    const char       *path = rp_temp_file("{\"base\": \"h100\", \"ranks\": 16, " CPU_KEYS "}");
    nsp_cluster_t     c, back, plain;
    nsp_json_t       *obj = NULL;
    char             *buf = NULL;
    size_t            len = 0;
    FILE             *f;
    nsp_json_writer_t w;

    if (!tap_ok(path != NULL && nsp_cluster_load(path, &c) == NSP_OK &&
                c.cpu_byte_intra == CB_INTRA && c.cpu_byte_inter == CB_INTER &&
                c.cpu_call_intra == CC_INTRA && c.cpu_call_inter == CC_INTER && c.ranks == 16,
                "a cluster file with the four keys loads them")) {
        tap_diag("%s", nsp_last_error());
        return;
    }
    unlink(path);
    f = open_memstream(&buf, &len);
    nsp_json_writer_init(&w, f, 0);
    nsp_cluster_write_json(&w, NULL, &c);
    nsp_json_writer_finish(&w);
    fclose(f);
    tap_ok(nsp_json_parse(buf, len, "<written>", &obj) == NSP_OK &&
           nsp_cluster_from_json(obj, NULL, &back) == NSP_OK &&
           memcmp(&back, &c, sizeof(c)) == 0, "written and read back: the same cluster");
    nsp_json_free(obj);
    free(buf);
    nsp_cluster_preset("h100", 16, &plain);
    tap_ok(plain.cpu_byte_intra == 0 && plain.cpu_byte_inter == 0 && plain.cpu_call_intra == 0 &&
           plain.cpu_call_inter == 0, "the presets have no exchange CPU");
    path = rp_temp_file("{\"base\": \"h100\", \"ranks\": 16}");
    tap_ok(path != NULL && nsp_cluster_load(path, &c) == NSP_OK && c.cpu_byte_intra == 0 &&
           c.cpu_call_inter == 0, "a file without the keys: 0");
    if (path) {
        unlink(path);
    }
}

static void test_bad_values(void)
{
    static const struct {
        const char  *text;
        nsp_status_t status;
        const char  *words;
    } cases[] = {
        {"{\"base\": \"h100\",\n \"cpu_byte_intra\": -1e-12}", NSP_ERR_INVALID_ARG,
         "\"cpu_byte_intra\" must be >= 0"},
        {"{\"base\": \"h100\",\n \"cpu_call_inter\": \"fast\"}", NSP_ERR_PARSE, "cpu_call_inter"},
        {"{\"base\": \"h100\",\n \"cpu_byte_inter\": 1e999}", NSP_ERR_PARSE, "cpu_byte_inter"},
        {"{\"base\": \"h100\",\n \"cpu_bytes_intra\": 1e-12}", NSP_ERR_PARSE, "unknown key"},
    };
    nsp_model_t   m;
    nsp_cluster_t c;
    nsp_cost_t    cost;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        const char  *path = rp_temp_file(cases[i].text);
        nsp_status_t st = path ? nsp_cluster_load(path, &c) : NSP_ERR_IO;
        tap_ok(st == cases[i].status && strstr(nsp_last_error(), cases[i].words) != NULL &&
               strstr(nsp_last_error(), ":2:") != NULL,
               "bad file %zu: %s at line 2 naming '%s'", i, nsp_status_string(cases[i].status),
               cases[i].words);
        if (st != cases[i].status) {
            tap_diag("got %d: %s", st, nsp_last_error());
        }
        if (path) {
            unlink(path);
        }
    }
    nsp_model_preset("qwen3-30b-a3b", &m);
    nsp_cluster_preset("h100", 64, &c);
    c.cpu_call_intra = NAN;
    tap_ok(nsp_cost_init(&cost, &m, &c) == NSP_ERR_INVALID_ARG &&
               strstr(nsp_last_error(), "cpu_call_intra") != NULL,
           "nsp_cost_init refuses a NaN cpu_call_intra, naming it");
    c.cpu_call_intra = 0, c.cpu_byte_inter = -1;
    tap_ok(nsp_cost_init(&cost, &m, &c) == NSP_ERR_INVALID_ARG, "and a negative cpu_byte_inter");
}

int main(void)
{
    test_formula();
    test_plan_json();
    test_cluster_file();
    test_bad_values();
    return tap_done();
}

/*
 * The planners with rings allowed (params.enable_ring, docs/reference/cost-model.md).
 *
 * Over many random long-tailed batches (64..256 ranks, sequences up to 2M
 * tokens) static and nested plan with and without rings, and disjoint with
 * rings (its greedy): every plan passes the independent check
 * (tests/planner/planners/check.c: groups u x r with u a Ulysses degree,
 * memory with ring buffers, prediction = evaluation) and
 * nsp_plan_validate; ring plans carry
 * NSP_PLAN_FLAG_RING and the ring lower bound (nsp_planner_lower_bound);
 * ring groups have the shape nsp_cost_ring_for_degree gives; nested with
 * rings is never slower than nested without (a superset of choices: the
 * planner keeps the better tree), static with rings never slower than static
 * without, nested never below the ring bound; the same input gives the same
 * plan. Then targeted cases: one 1M-token sequence on 128 ranks goes above
 * degree 32 and the plan is faster; a sequence only rings can hold; the
 * parameters.
 *
 * Usage: test_planner_ring [seeds]   (default 200; $NSP_TEST_SEEDS)
 */
#include "check.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_SEEDS 40
#else
#define DEFAULT_SEEDS 200
#endif

static const int     ranks_choices[] = {64, 128, 256};
static const int64_t max_len_choices[] = {393216, 1048576, 2097152};

typedef struct tally {
    int batches, plans, checked, valid, flagged, bounded, shaped, deterministic;
    int nested_le, static_le, above_bound, ring_used, faster;
    int fails;
} tally_t;

static int plan_one(const nsp_model_t *m, const nsp_cluster_t *c, const int64_t *lens, int n,
                    nsp_planner_kind_t kind, int ring, nsp_plan_t **plan)
{
    nsp_planner_params_t p;

    memset(&p, 0, sizeof(p));
    p.kind = kind;
    if (ring) {
        p.field_mask |= NSP_PLANNER_FIELD_ENABLE_RING;
        p.enable_ring = 1;
    }
    return nsp_plan_create(m, c, lens, n, &p, plan) == NSP_OK;
}

/* u ranks can shard the heads: u divides n_q, and divides n_kv or is a
 * multiple of it (KV heads replicated). */
static int ulysses_ok(const nsp_model_t *m, int u)
{
    return u >= 1 && u <= m->q_heads && m->q_heads % u == 0 &&
           (m->kv_heads % u == 0 || u % m->kv_heads == 0);
}

/* Every ring group has the planners' shape: u = d / r the largest Ulysses
 * degree <= G dividing d (docs/reference/cost-model.md section 5); r = 1 at or below
 * the head count. Returns the largest group size of the plan in *top. */
static int ring_shapes_ok(const nsp_plan_t *p, int *top)
{
    const int G = p->cluster.ranks_per_node;

    *top = 0;
    for (int r = 0; r < p->nrounds; ++r) {
        for (int g = 0; g < p->rounds[r].ngroups; ++g) {
            const nsp_plan_group_t *grp = &p->rounds[r].groups[g];
            int                     u = 1;
            *top = grp->size > *top ? grp->size : *top;
            if (ulysses_ok(&p->model, grp->size)) {
                if (grp->ring != 1) {
                    return 0;
                }
                continue;
            }
            for (int v = 1; v <= G && v <= grp->size; ++v) {
                if (grp->size % v == 0 && ulysses_ok(&p->model, v)) {
                    u = v;
                }
            }
            if (grp->ring != grp->size / u) {
                return 0;
            }
        }
    }
    return 1;
}

static void fail_once(tally_t *t, const char *what, int seed)
{
    tap_ok(0, "seed %d: %s", seed, what);
    t->fails++;
}

/* ulysses_only: the planner must not use rings (disjoint). */
static void check_one(tally_t *t, const nsp_plan_t *p, int disjoint, int ulysses_only,
                      double lb_ring, int seed, const char *name)
{
    char why[512];
    int  top;

    t->plans++;
    if (pc_check_plan(p, disjoint, why, sizeof(why))) {
        t->checked++;
    } else {
        tap_ok(0, "seed %d: %s plan: %s", seed, name, why);
        t->fails++;
    }
    if (nsp_plan_validate(p) == NSP_OK) {
        t->valid++;
    } else {
        tap_ok(0, "seed %d: %s plan fails nsp_plan_validate: %s", seed, name, nsp_last_error());
        t->fails++;
    }
    if (p->flags & NSP_PLAN_FLAG_RING) {
        t->flagged++;
    } else {
        fail_once(t, "a ring plan without NSP_PLAN_FLAG_RING", seed);
    }
    if (p->predicted.lower_bound_s == lb_ring) {
        t->bounded++;
    } else {
        tap_ok(0, "seed %d: %s lower bound %.9g != nsp_planner_lower_bound %.9g", seed, name,
               p->predicted.lower_bound_s, lb_ring);
        t->fails++;
    }
    if (ring_shapes_ok(p, &top) && (!ulysses_only || top <= p->model.q_heads)) {
        t->shaped++;
    } else {
        tap_ok(0, "seed %d: %s plan has a ring group of another shape (largest %d)", seed,
               name, top);
        t->fails++;
    }
}

static void run_seed(int seed, tally_t *t)
{
    uint64_t             state = 0x7219000ull + (uint64_t)seed;
    const int            ranks = ranks_choices[pc_next(&state) % 3];
    const int64_t        tpr = 4096 + (int64_t)(pc_next(&state) % 4) * 4096;
    const int64_t        max_len = max_len_choices[pc_next(&state) % 3];
    nsp_model_t          model;
    nsp_cluster_t        cluster;
    nsp_planner_params_t params;
    int64_t             *lens = NULL;
    nsp_plan_t          *st0 = NULL, *st1 = NULL, *ne0 = NULL, *ne1 = NULL, *dj1 = NULL;
    nsp_plan_t          *again = NULL;
    double               lb_ring = 0.0, lb_plain = 0.0;
    int                  n, top = 0;

    nsp_model_preset("qwen3-30b-a3b", &model);
    nsp_cluster_preset("h100", ranks, &cluster);
    n = pc_batch(&state, ranks, tpr, max_len, &lens);
    memset(&params, 0, sizeof(params));
    params.kind = NSP_PLANNER_NESTED;
    params.field_mask = NSP_PLANNER_FIELD_ENABLE_RING;
    params.enable_ring = 1;
    if (n <= 0 || nsp_planner_lower_bound(&model, &cluster, lens, n, &params, &lb_ring) != NSP_OK ||
        nsp_lower_bound(&model, &cluster, lens, n, &lb_plain) != NSP_OK) {
        fail_once(t, "batch or bound", seed);
        free(lens);
        return;
    }
    t->batches++;
    /* a sequence above the Ulysses limit's memory plans with rings only */
    if (!plan_one(&model, &cluster, lens, n, NSP_PLANNER_STATIC, 1, &st1) ||
        !plan_one(&model, &cluster, lens, n, NSP_PLANNER_NESTED, 1, &ne1)) {
        tap_ok(0, "seed %d (%d ranks, %d seqs): a planner with rings fails: %s", seed, ranks,
               n, nsp_last_error());
        t->fails++;
        goto out;
    }
    check_one(t, st1, 1, 0, lb_ring, seed, "static (ring)");
    check_one(t, ne1, 0, 0, lb_ring, seed, "nested (ring)");
    if (seed % 4 == 0) {
        setenv("NSPCOMM_MILP", "none", 1);   /* its greedy: fast and repeatable */
        if (plan_one(&model, &cluster, lens, n, NSP_PLANNER_DISJOINT, 1, &dj1)) {
            check_one(t, dj1, 1, 1, lb_ring, seed, "disjoint (ring)");
        } else {
            fail_once(t, "disjoint with rings fails", seed);
        }
        unsetenv("NSPCOMM_MILP");
    }
    if (ne1->predicted.step_s >= lb_ring * (1.0 - 1e-9)) {
        t->above_bound++;
    } else {
        fail_once(t, "nested with rings below the ring lower bound", seed);
    }
    ring_shapes_ok(ne1, &top);
    t->ring_used += top > model.q_heads;
    if (plan_one(&model, &cluster, lens, n, NSP_PLANNER_NESTED, 1, &again)) {
        if (pc_same_plan(ne1, again)) {
            t->deterministic++;
        } else {
            fail_once(t, "nested with rings gave two plans for one input", seed);
        }
    }
    /* without rings: only if the batch fits the Ulysses limit */
    if (plan_one(&model, &cluster, lens, n, NSP_PLANNER_STATIC, 0, &st0) &&
        plan_one(&model, &cluster, lens, n, NSP_PLANNER_NESTED, 0, &ne0)) {
        if (ne1->predicted.step_s <= ne0->predicted.step_s * (1.0 + 1e-12)) {
            t->nested_le++;
        } else {
            tap_ok(0, "seed %d (%d ranks, %d seqs): nested with rings %.6f s slower than "
                   "without %.6f s", seed, ranks, n, ne1->predicted.step_s,
                   ne0->predicted.step_s);
            t->fails++;
        }
        if (st1->predicted.step_s <= st0->predicted.step_s * (1.0 + 1e-12)) {
            t->static_le++;
        } else {
            tap_ok(0, "seed %d: static with rings %.6f s slower than without %.6f s", seed,
                   st1->predicted.step_s, st0->predicted.step_s);
            t->fails++;
        }
        t->faster += ne1->predicted.step_s < ne0->predicted.step_s * (1.0 - 1e-9);
        if (!(lb_ring <= lb_plain)) {
            fail_once(t, "the ring bound is above the Ulysses bound", seed);
        }
    } else {
        t->nested_le++;   /* nothing to compare: the batch needs rings */
        t->static_le++;
    }
out:
    nsp_plan_free(again);
    nsp_plan_free(st0);
    nsp_plan_free(st1);
    nsp_plan_free(ne0);
    nsp_plan_free(ne1);
    nsp_plan_free(dj1);
    free(lens);
}

/* The group holding sequence i in a plan (NULL if none). */
static const nsp_plan_group_t *group_of(const nsp_plan_t *p, int i)
{
    for (int r = 0; r < p->nrounds; ++r) {
        for (int g = 0; g < p->rounds[r].ngroups; ++g) {
            const nsp_plan_group_t *grp = &p->rounds[r].groups[g];
            for (int k = 0; k < grp->nseqs; ++k) {
                if (grp->seqs[k] == i) {
                    return grp;
                }
            }
        }
    }
    return NULL;
}

/* One 1M-token sequence and 3M tokens of short ones on 128 H100. At degree
 * 32 the long one alone takes 1.82 s per layer; the whole batch balanced
 * over 128 ranks about 0.48 s: only a degree above 32 balances it. */
static void test_million_tokens(void)
{
    uint64_t       state = 11;
    int64_t       *lens = malloc(sizeof(int64_t) * 8000);
    nsp_model_t    m;
    nsp_cluster_t  c;
    nsp_plan_t    *ne0 = NULL, *ne1 = NULL, *st0 = NULL, *st1 = NULL;
    int64_t        total = 0;
    int            n = 1;
    char           why[256];

    lens[0] = 1048576;
    while (total < 3 * 1048576) {
        lens[n] = 64 + (int64_t)(pc_next(&state) % 2000);
        total += lens[n++];
    }
    nsp_model_preset("qwen3-30b-a3b", &m);
    nsp_cluster_preset("h100", 128, &c);
    tap_ok(plan_one(&m, &c, lens, n, NSP_PLANNER_NESTED, 0, &ne0) &&
           plan_one(&m, &c, lens, n, NSP_PLANNER_NESTED, 1, &ne1) &&
           plan_one(&m, &c, lens, n, NSP_PLANNER_STATIC, 0, &st0) &&
           plan_one(&m, &c, lens, n, NSP_PLANNER_STATIC, 1, &st1),
           "1M tokens on 128 ranks: nested and static plan with and without rings");
    if (ne0 == NULL || ne1 == NULL || st0 == NULL || st1 == NULL) {
        goto out;
    }
    {
        const nsp_plan_group_t *g0 = group_of(ne0, 0), *g1 = group_of(ne1, 0);
        tap_ok(pc_check_plan(ne1, 0, why, sizeof(why)) && nsp_plan_validate(ne1) == NSP_OK,
               "the ring plan holds");
        tap_ok(g0 != NULL && g0->size == 32, "without rings the 1M sequence is at degree 32 "
               "(%d)", g0 != NULL ? g0->size : -1);
        tap_ok(g1 != NULL && g1->size > 32 && g1->ring > 1 && g1->size == 8 * g1->ring,
               "with rings it is above degree 32: %d = 8 x ring %d", g1 != NULL ? g1->size : -1,
               g1 != NULL ? g1->ring : -1);
        tap_ok(ne1->predicted.step_s * 2.0 < ne0->predicted.step_s,
               "and the step is over 2x faster: %.3f s vs %.3f s (%.2fx)", ne1->predicted.step_s,
               ne0->predicted.step_s, ne0->predicted.step_s / ne1->predicted.step_s);
        tap_ok(ne1->predicted.step_s <= 1.15 * ne1->predicted.lower_bound_s,
               "within 1.15x of the ring lower bound (%.3f s vs %.3f s)", ne1->predicted.step_s,
               ne1->predicted.lower_bound_s);
        tap_ok(ne0->predicted.lower_bound_s > 2.0 * ne1->predicted.lower_bound_s,
               "the Ulysses bound is that sequence at degree 32 (%.3f s vs %.3f s with rings)",
               ne0->predicted.lower_bound_s, ne1->predicted.lower_bound_s);
        tap_ok(st1->predicted.step_s < st0->predicted.step_s &&
               st1->rounds[0].groups[0].size > 32,
               "static with rings picks a degree above 32 (%d) and is faster: %.3f s vs %.3f s",
               st1->rounds[0].groups[0].size, st1->predicted.step_s, st0->predicted.step_s);
        tap_ok(ne1->predicted.step_s < st1->predicted.step_s,
               "nested with rings beats static with rings (%.3f s vs %.3f s)",
               ne1->predicted.step_s, st1->predicted.step_s);
    }
out:
    nsp_plan_free(ne0);
    nsp_plan_free(ne1);
    nsp_plan_free(st0);
    nsp_plan_free(st1);
    free(lens);
}

/* 12M tokens in one sequence: at degree 32, recomputed, it needs ~99 GB per
 * rank; at 128 (8 x 16) ~27 GB. */
static void test_only_rings_hold_it(void)
{
    int64_t       lens[3] = {12 * 1048576, 4096, 777};
    nsp_model_t   m;
    nsp_cluster_t c;
    nsp_plan_t   *p = NULL;
    char          why[256];

    nsp_model_preset("qwen3-30b-a3b", &m);
    nsp_cluster_preset("h100", 128, &c);
    for (int kind = 0; kind < 3; kind += 2) {
        const char *name = kind == 0 ? "static" : "nested";
        p = NULL;
        tap_ok(!plan_one(&m, &c, lens, 3, (nsp_planner_kind_t)kind, 0, &p) &&
               strstr(nsp_last_error(), "sequence 0") != NULL,
               "%s: a 12M-token sequence is infeasible without rings", name);
        nsp_plan_free(p);
        p = NULL;
        tap_ok(plan_one(&m, &c, lens, 3, (nsp_planner_kind_t)kind, 1, &p) &&
               pc_check_plan(p, kind == 0, why, sizeof(why)) && group_of(p, 0)->size == 128 &&
               group_of(p, 0)->ring == 16, "%s: with rings it plans, on 128 = 8 x 16 ranks",
               name);
        nsp_plan_free(p);
    }
}

/* 12 query and 4 KV heads on 24 ranks, 8 per node: degrees 3 and 6 divide
 * the query heads but cannot shard the KV heads, so no plan may use them as
 * a Ulysses degree; above 12 the ring groups are 4 x r (24 = 4 x 6). */
static void test_kv_heads_shard(void)
{
    const int64_t lens[5] = {400000, 60000, 9000, 3000, 500};
    nsp_model_t   m;
    nsp_cluster_t c;
    char          why[256];

    nsp_model_preset("llama3-8b", &m);
    m.q_heads  = 12;
    m.kv_heads = 4;
    nsp_cluster_preset("h100", 24, &c);
    c.ranks_per_node = 8;
    for (int kind = 0; kind < 3; kind += 2) {
        for (int ring = 0; ring < 2; ++ring) {
            nsp_plan_t *p = NULL;
            int         ok = plan_one(&m, &c, lens, 5, (nsp_planner_kind_t)kind, ring, &p);
            int         top = 0, rings = 0;
            for (int r = 0; ok && r < p->nrounds; ++r) {
                for (int g = 0; g < p->rounds[r].ngroups; ++g) {
                    const nsp_plan_group_t *grp = &p->rounds[r].groups[g];
                    ok &= ulysses_ok(&m, grp->size / grp->ring);
                    top = grp->size > top ? grp->size : top;
                    rings += grp->ring > 1;
                }
            }
            ok = ok && ring_shapes_ok(p, &top) && pc_check_plan(p, kind == 0, why, sizeof(why)) &&
                 nsp_plan_validate(p) == NSP_OK && (!ring || (top == 24 && rings > 0));
            tap_ok(ok, "n_q 12, n_kv 4: %s %s rings: every Ulysses degree shards both head "
                   "counts (largest group %d)", kind == 0 ? "static" : "nested",
                   ring ? "with" : "without", top);
            nsp_plan_free(p);
        }
    }
}

static void test_params(void)
{
    const int64_t        lens[4] = {1048576, 300000, 5000, 100};
    const int            levels[4] = {1, 8, 64, 128};
    nsp_model_t          m;
    nsp_cluster_t        c;
    nsp_planner_params_t p;
    nsp_plan_t          *plan = NULL;
    int                  ok;

    nsp_model_preset("qwen3-30b-a3b", &m);
    nsp_cluster_preset("h100", 128, &c);
    memset(&p, 0, sizeof(p));
    p.kind = NSP_PLANNER_NESTED;
    p.field_mask = NSP_PLANNER_FIELD_ENABLE_RING;
    p.enable_ring = 2;
    tap_ok(nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_ERR_INVALID_ARG &&
           plan == NULL && strstr(nsp_last_error(), "enable_ring") != NULL,
           "enable_ring = 2 is rejected: %s", nsp_last_error());

    p.enable_ring = 1;   /* without its field bit: ignored, as every field */
    p.field_mask = 0;
    tap_ok(nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_OK && plan->flags == 0 &&
           group_of(plan, 0)->size <= 32, "enable_ring without its field bit is ignored");
    nsp_plan_free(plan);
    plan = NULL;

    p.kind = NSP_PLANNER_STATIC;
    p.field_mask = NSP_PLANNER_FIELD_STATIC_DEGREE;
    p.static_degree = 64;
    tap_ok(nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_ERR_INVALID_ARG,
           "static degree 64 without rings is rejected: %s", nsp_last_error());
    p.field_mask |= NSP_PLANNER_FIELD_ENABLE_RING;
    ok = nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_OK;
    for (int r = 0; ok && r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            ok &= plan->rounds[r].groups[g].size == 64 && plan->rounds[r].groups[g].ring == 8;
        }
    }
    tap_ok(ok, "static degree 64 with rings: every group 64 = 8 x ring 8");
    nsp_plan_free(plan);
    plan = NULL;
    p.static_degree = 48;
    tap_ok(nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_ERR_INVALID_ARG,
           "static degree 48 (does not divide 128 ranks) is rejected: %s", nsp_last_error());

    p.kind = NSP_PLANNER_NESTED;
    p.field_mask = NSP_PLANNER_FIELD_ENABLE_RING | NSP_PLANNER_FIELD_LEVEL_DEGREES;
    p.nlevels = 4;
    p.level_degrees = levels;
    ok = nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_OK;
    for (int r = 0; ok && r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            const nsp_plan_group_t *grp = &plan->rounds[r].groups[g];
            ok &= (grp->size == 1 && grp->ring == 1) || (grp->size == 8 && grp->ring == 1) ||
                  (grp->size == 64 && grp->ring == 8) || (grp->size == 128 && grp->ring == 16);
        }
    }
    tap_ok(ok, "nested with levels 1, 8, 64, 128 and rings uses them (64 = 8x8, 128 = 8x16)");
    nsp_plan_free(plan);
    plan = NULL;
    p.field_mask = NSP_PLANNER_FIELD_LEVEL_DEGREES;
    tap_ok(nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_ERR_INVALID_ARG,
           "level 64 without rings is rejected: %s", nsp_last_error());

    setenv("NSPCOMM_MILP", "none", 1);
    p.kind = NSP_PLANNER_DISJOINT;
    p.field_mask = NSP_PLANNER_FIELD_ENABLE_RING;
    ok = nsp_plan_create(&m, &c, lens, 4, &p, &plan) == NSP_OK &&
         (plan->flags & NSP_PLAN_FLAG_RING) != 0;
    for (int r = 0; ok && r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            ok &= plan->rounds[r].groups[g].ring == 1 && plan->rounds[r].groups[g].size <= 32;
        }
    }
    tap_ok(ok, "disjoint with rings stays Ulysses-only and carries the ring flag");
    unsetenv("NSPCOMM_MILP");
    nsp_plan_free(plan);
}

int main(int argc, char **argv)
{
    const int seeds = pc_seed_count(argc, argv, DEFAULT_SEEDS);
    tally_t   t;

    memset(&t, 0, sizeof(t));
    for (int seed = 0; seed < seeds; ++seed) {
        run_seed(seed, &t);
    }
    tap_is_int(t.fails, 0, "no failure over %d seeds", seeds);
    tap_is_int(t.batches, seeds, "every batch drawn");
    tap_is_int(t.checked, t.plans, "every plan (%d) passes the independent check", t.plans);
    tap_is_int(t.valid, t.plans, "every plan passes nsp_plan_validate");
    tap_is_int(t.flagged, t.bounded, "every ring plan carries the flag and the ring bound (%d)",
               t.flagged);
    tap_is_int(t.shaped, t.flagged, "every ring group has the planners' u x r shape");
    tap_is_int(t.nested_le, seeds, "nested with rings is never slower than without");
    tap_is_int(t.static_le, seeds, "static with rings is never slower than without");
    tap_is_int(t.above_bound, seeds, "nested with rings never beats the ring lower bound");
    tap_is_int(t.deterministic, seeds, "the same input gives the same ring plan");
    tap_ok(t.ring_used > 0 && t.faster > 0, "rings are used above degree 32 in %d of %d "
           "batches, and nested is faster with rings in %d", t.ring_used, seeds, t.faster);
    test_million_tokens();
    test_only_rings_hold_it();
    test_kv_heads_shard();
    test_params();
    return tap_done();
}

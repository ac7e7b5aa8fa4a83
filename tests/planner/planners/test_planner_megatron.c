/*
 * The megatron planner (Megatron-Core's dynamic context parallelism policy,
 * docs/reference/planners.md) over many random long-tailed batches (ranks 8..256):
 *
 *  - every plan passes the independent check (each sequence once, groups
 *    valid and pairwise disjoint in a round, no rank over memory, prediction
 *    = evaluation) and nsp_plan_validate;
 *  - with a fixed max_seqlen_per_rank m, the degrees follow the rule: all
 *    sequences of a group share d(s) = 2^ceil(log2(s / m)) (at least 1), and
 *    the group has d(s) ranks or, where a round had idle ranks, a power-of-two
 *    multiple of it; one recompute setting for the whole plan;
 *  - the default search is never slower than the fixed values it considers
 *    (m = longest / 2^j);
 *  - the same input gives the same plan.
 *
 * Then bad knob values: zero or negative, too small for the longest
 * sequence (its group would exceed the largest degree), too large for
 * memory with kept activations; each a clear error naming the knob.
 *
 * Usage: test_planner_megatron [seeds]   (default 150; $NSP_TEST_SEEDS)
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
#define DEFAULT_SEEDS 150
#endif
#define MAX_LEN 393216

static const int ranks_choices[] = {8, 16, 32, 64, 128, 256};

typedef struct tally {
    int plans, valid, rule_ok, rule_checked, searched_ok, searched, same, fails;
    int exact_degree_groups, groups;
} tally_t;

static nsp_status_t plan_mg(const nsp_model_t *m, const nsp_cluster_t *c, const int64_t *lens,
                            int n, int64_t knob, int rc, nsp_plan_t **plan)
{
    nsp_planner_params_t p;

    memset(&p, 0, sizeof(p));
    p.kind = NSP_PLANNER_MEGATRON;
    if (knob > 0) {
        p.field_mask |= NSP_PLANNER_FIELD_MAX_SEQLEN;
        p.max_seqlen_per_rank = knob;
    }
    if (rc >= 0) {
        p.field_mask |= NSP_PLANNER_FIELD_STATIC_RECOMPUTE;
        p.static_recompute = rc;
    }
    return nsp_plan_create(m, c, lens, n, &p, plan);
}

/* d(s) of the policy, computed here from its definition. */
static int rule_degree(int64_t s, int64_t m)
{
    const double q = (double)s / (double)m;
    int          d = 1;

    while (d < q) {
        d *= 2;
    }
    return d;
}

/* The degree rule on a plan made with knob m; 0 and why[] if broken. */
static int check_rule(const nsp_plan_t *plan, int64_t m, tally_t *t, char *why, size_t len)
{
    int rc0 = -1;

    for (int r = 0; r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            const nsp_plan_group_t *grp = &plan->rounds[r].groups[g];
            const int               d = rule_degree(plan->seq_lens[grp->seqs[0]], m);
            if (rc0 >= 0 && grp->recompute != rc0) {
                snprintf(why, len, "round %d group %d: recompute %d, another group %d", r, g,
                         grp->recompute, rc0);
                return 0;
            }
            rc0 = grp->recompute;
            if (grp->size % d != 0 || ((grp->size / d) & (grp->size / d - 1)) != 0) {
                snprintf(why, len, "round %d group %d: size %d is not d(s) = %d times a power "
                         "of two", r, g, grp->size, d);
                return 0;
            }
            for (int k = 1; k < grp->nseqs; ++k) {
                if (rule_degree(plan->seq_lens[grp->seqs[k]], m) != d) {
                    snprintf(why, len, "round %d group %d: sequences of d(s) %d and %d", r, g, d,
                             rule_degree(plan->seq_lens[grp->seqs[k]], m));
                    return 0;
                }
            }
            t->groups++;
            t->exact_degree_groups += grp->size == d;
        }
    }
    return 1;
}

static int64_t longest_of(const int64_t *lens, int n)
{
    int64_t s = 0;

    for (int i = 0; i < n; ++i) {
        s = lens[i] > s ? lens[i] : s;
    }
    return s;
}

/* The default search against fixed knobs m = longest / 2^j it considers. */
static void check_search(const nsp_model_t *m, const nsp_cluster_t *c, const int64_t *lens,
                         int n, const nsp_plan_t *best, int seed, tally_t *t)
{
    const int64_t smax = longest_of(lens, n);

    for (int j = 0; j <= 5; ++j) {
        const int64_t knob = (smax + (1 << j) - 1) >> j;
        for (int rc = 0; rc <= 1; ++rc) {
            nsp_plan_t *p = NULL;
            if (plan_mg(m, c, lens, n, knob, rc, &p) != NSP_OK) {
                /* that value cannot hold this batch: try the next */
                continue;   /* that value does not hold this batch */
            }
            t->searched++;
            if (best->predicted.step_s <= p->predicted.step_s * (1 + 1e-12)) {
                t->searched_ok++;
            } else if (t->fails++ < 5) {
                tap_diag("seed %d: the search (%.6f s) is slower than m = %lld, rc %d (%.6f s)",
                         seed, best->predicted.step_s, (long long)knob, rc,
                         p->predicted.step_s);
            }
            nsp_plan_free(p);
        }
    }
}

static void run_seed(int seed, tally_t *t)
{
    uint64_t      state = 0x3e6a0000ull + (uint64_t)seed;
    const int     ranks = ranks_choices[pc_next(&state) % 6];
    const int64_t tpr = 2048 + (int64_t)(pc_next(&state) % 4) * 4096;
    nsp_model_t   model;
    nsp_cluster_t cluster;
    int64_t      *lens = NULL, knob;
    nsp_plan_t   *plan = NULL, *again = NULL, *fixed = NULL;
    char          why[512];
    int           n;

    nsp_model_preset("qwen3-30b-a3b", &model);
    nsp_cluster_preset("h100", ranks, &cluster);
    n = pc_batch(&state, ranks, tpr, MAX_LEN, &lens);
    if (plan_mg(&model, &cluster, lens, n, 0, -1, &plan) != NSP_OK) {
        if (t->fails++ < 5) {
            tap_diag("seed %d (%d ranks, %d seqs): %s", seed, ranks, n, nsp_last_error());
        }
        goto out;
    }
    t->plans++;
    if (pc_check_plan(plan, 1, why, sizeof(why)) && nsp_plan_validate(plan) == NSP_OK &&
        strcmp(plan->planner, "megatron") == 0) {
        t->valid++;
    } else if (t->fails++ < 5) {
        tap_diag("seed %d: invalid megatron plan: %s", seed, why);
    }
    if (plan_mg(&model, &cluster, lens, n, 0, -1, &again) == NSP_OK &&
        pc_same_plan(plan, again)) {
        t->same++;
    }
    /* a fixed knob between longest/32 and longest: the degree rule */
    knob = (longest_of(lens, n) + 7) / 8;
    if (plan_mg(&model, &cluster, lens, n, knob, 1, &fixed) == NSP_OK) {
        t->rule_checked++;
        if (check_rule(fixed, knob, t, why, sizeof(why)) &&
            pc_check_plan(fixed, 1, why, sizeof(why))) {
            t->rule_ok++;
        } else if (t->fails++ < 5) {
            tap_diag("seed %d, m = %lld: %s", seed, (long long)knob, why);
        }
    } else {
        /* that value cannot hold this batch: try the next */
    }
    if (seed % 5 == 0) {
        check_search(&model, &cluster, lens, n, plan, seed, t);
    }
out:
    nsp_plan_free(fixed);
    nsp_plan_free(again);
    nsp_plan_free(plan);
    free(lens);
}

/* One bad knob: the status and a message naming what is wrong. */
static void expect_bad(const int64_t *lens, int n, int64_t knob, int rc, nsp_status_t want,
                       const char *needle, const char *what)
{
    nsp_model_t          model;
    nsp_cluster_t        cluster;
    nsp_planner_params_t p;
    nsp_plan_t          *plan = NULL;
    nsp_status_t         st;

    nsp_model_preset("qwen3-30b-a3b", &model);
    nsp_cluster_preset("h100", 64, &cluster);
    memset(&p, 0, sizeof(p));
    p.kind = NSP_PLANNER_MEGATRON;
    p.field_mask = NSP_PLANNER_FIELD_MAX_SEQLEN;
    p.max_seqlen_per_rank = knob;
    if (rc >= 0) {
        p.field_mask |= NSP_PLANNER_FIELD_STATIC_RECOMPUTE;
        p.static_recompute = rc;
    }
    st = nsp_plan_create(&model, &cluster, lens, n, &p, &plan);
    tap_ok(st == want && plan == NULL && strstr(nsp_last_error(), needle) != NULL &&
           strstr(nsp_last_error(), "max_seqlen_per_rank") != NULL, "%s: %s", what,
           nsp_last_error());
    nsp_plan_free(plan);
}

static void bad_knobs(void)
{
    int64_t lens[40];

    lens[0] = 393216;
    for (int i = 1; i < 40; ++i) {
        lens[i] = 1000 + 37 * i;
    }
    expect_bad(lens, 40, 0, -1, NSP_ERR_INVALID_ARG, "positive", "max_seqlen_per_rank 0");
    expect_bad(lens, 40, -4096, -1, NSP_ERR_INVALID_ARG, "positive", "a negative value");
    /* 393216 / 4096 = 96 -> 128 ranks: above degree 32 (and the 64 ranks) */
    expect_bad(lens, 40, 4096, -1, NSP_ERR_INVALID_ARG, "12288",
               "too small: the longest sequence would need 128 ranks");
    /* 393216 tokens on one rank, kept: ~1.2 TiB of activations */
    expect_bad(lens, 40, 393216, 0, NSP_ERR_INVALID_ARG, "GiB",
               "too large for memory with kept activations");
}

int main(int argc, char **argv)
{
    const int seeds = pc_seed_count(argc, argv, DEFAULT_SEEDS);
    tally_t   t;

    memset(&t, 0, sizeof(t));
    tap_plan(10);
    for (int s = 0; s < seeds; ++s) {
        run_seed(s, &t);
    }
    tap_ok(t.plans == seeds, "megatron planned %d of %d random batches", t.plans, seeds);
    tap_ok(t.valid == t.plans, "%d of %d plans pass the independent check and validation "
           "(each sequence once, disjoint groups, memory held)", t.valid, t.plans);
    tap_ok(t.same == t.plans, "%d of %d plans repeat exactly", t.same, t.plans);
    tap_ok(t.rule_checked > seeds / 2 && t.rule_ok == t.rule_checked,
           "degree rule 2^ceil(log2(s/m)) on %d of %d fixed-knob plans (%d of %d groups at "
           "exactly d(s), the rest doubled into idle ranks)", t.rule_ok, t.rule_checked,
           t.exact_degree_groups, t.groups);
    tap_ok(t.exact_degree_groups > t.groups / 2, "most groups have exactly d(s) ranks");
    tap_ok(t.searched > 0 && t.searched_ok == t.searched,
           "the default search is never slower than a fixed longest/2^j (%d of %d)",
           t.searched_ok, t.searched);
    bad_knobs();
    return tap_done();
}

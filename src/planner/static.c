/*
 * The static planner (docs/design.md §5.2): one degree d for the whole batch, the
 * ranks cut into N/d consecutive groups, full recomputation or none.
 *
 * For one (d, recompute) configuration a sequence costs its group a fixed
 * time t_i = rcf*comp(s,d) + ep(s/d) + rcb*a2a_bytes(s,d)/B(d) per layer
 * (plus 4a(d) once per used group) and s/d activation tokens per rank. The
 * slots are (round, group); a step costs the sum over rounds of the slowest
 * group. Sequences go longest first to the slot that raises that sum least
 * (ties: the least loaded slot), opening a round only when no open round has
 * memory left: longest-processing-time-first with memory, across rounds.
 *
 * By default every valid degree x {no recompute, recompute} is tried, each
 * with a few packings (1..3 rounds opened up front, and plain LPT over all
 * slots), and the fastest plan is kept: the best static SP a careful user
 * could configure for this batch. Cost: O(configs * packings * n * G) worst
 * case, O(n log G) typical (a heap per round).
 *
 * With rings (params.enable_ring) the degrees above the Ulysses limit that
 * divide the ranks are tried too, as Ulysses x ring groups
 * (nsp_cost_ring_for_degree): a careful user would add context parallelism.
 * A ring group's time is not a sum over its sequences (its ring exchange
 * hides behind its compute: max(C, R) + (1-eta) min(C, R) + A, see
 * docs/reference/cost-model.md), so its slots keep C, R and A and their load is that
 * formula, exactly.
 */
#include "planner/route.h"
#include "common/log.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Packing rules tried for each configuration. */
enum { PACK_MIN_STEP = 0, PACK_LPT = 1, PACK_RULES = 2 };
/* Rounds opened up front beyond the memory minimum: 0, 1, 2. */
#define STATIC_EXTRA_ROUNDS 3

/* The per-sequence costs of one configuration. */
typedef struct static_items {
    double *t;    /* [nseqs] seconds per layer the sequence adds to its group
                     (ring 1: compute + a2a; ring > 1: compute) */
    double *a;    /* [nseqs] ring > 1: a2a seconds (at B(u)) */
    double *rg;   /* [nseqs] ring > 1: ring seconds (at B(d)) */
    double *mem;  /* [nseqs] activation bytes per rank it adds */
} static_items_t;

/* Slots (round, group) of one packing. */
typedef struct static_pack {
    int     groups;     /* G: groups per round */
    int     rounds;     /* rounds opened so far */
    int     max_rounds;
    double  lat;        /* 4a(d): paid once per used group (0 if d = 1); ring:
                           4a(u) (0 if u = 1) */
    int     ring;       /* ring degree of the groups */
    double  lat_ring;   /* ring > 1: messages * a(d), once per used group */
    double  eta1;       /* 1 - eta */
    double *load;       /* [max_rounds * G] seconds per layer */
    double *sc, *sa, *sr;  /* [max_rounds * G] ring > 1: C, A, R sums of a slot */
    double *mem;        /* [max_rounds * G] activation bytes per rank */
    int    *count;      /* [max_rounds * G] sequences */
    double *round_max;  /* [max_rounds] slowest group of each round */
    int    *slot_of;    /* [nseqs] the slot of each sequence */
} static_pack_t;

/* Ring > 1: a slot's C, A and R after taking item i. */
static void slot_ring_after(const static_pack_t *p, int slot, int i, const static_items_t *it,
                            double *c, double *a, double *r)
{
    const int first = p->count[slot] == 0;

    *c = p->sc[slot] + it->t[i];
    *a = p->sa[slot] + it->a[i] + (first ? p->lat : 0.0);
    *r = p->sr[slot] + it->rg[i] + (first ? p->lat_ring : 0.0);
}

static double slot_load_after(const static_pack_t *p, int slot, int i, const static_items_t *it)
{
    double c, a, r;

    if (p->ring <= 1) {
        return p->load[slot] + it->t[i] + (p->count[slot] == 0 ? p->lat : 0.0);
    }
    /* the ring hides behind the group's compute (docs/reference/cost-model.md) */
    slot_ring_after(p, slot, i, it, &c, &a, &r);
    return fmax(c, r) + p->eta1 * fmin(c, r) + a;
}

/* The least loaded slot of round r with memory for `mem`, or -1. */
static int round_best_slot(const static_pack_t *p, int r, double mem, double cap)
{
    int    best = -1;
    double best_load = DBL_MAX;

    for (int g = 0; g < p->groups; ++g) {
        const int slot = r * p->groups + g;
        if (p->mem[slot] + mem <= cap && p->load[slot] < best_load) {
            best_load = p->load[slot];
            best      = slot;
        }
    }
    return best;
}

/* Place sequence i; returns 0 if no round (open or new) can hold it. */
static int pack_one(static_pack_t *p, int rule, int i, const static_items_t *it, double cap)
{
    int    best = -1;
    double best_key1 = DBL_MAX, best_key2 = DBL_MAX;

    for (int r = 0; r < p->rounds; ++r) {
        const int slot = round_best_slot(p, r, it->mem[i], cap);
        double    after, key1, key2;
        if (slot < 0) {
            continue;
        }
        after = slot_load_after(p, slot, i, it);
        /* min-step: raise the sum of round maxima least, then fill the least
         * loaded slot; LPT: the least loaded slot of all. */
        key1 = rule == PACK_MIN_STEP ? fmax(0.0, after - p->round_max[r]) : after;
        key2 = after;
        if (key1 < best_key1 - 1e-15 || (key1 <= best_key1 + 1e-15 && key2 < best_key2)) {
            best_key1 = key1;
            best_key2 = key2;
            best      = slot;
        }
    }
    if (best < 0) {
        if (p->rounds >= p->max_rounds) {
            return 0;
        }
        best = p->rounds * p->groups;   /* first group of a new round */
        p->rounds++;
    }
    {
        const int r = best / p->groups;
        if (p->ring > 1) {
            slot_ring_after(p, best, i, it, &p->sc[best], &p->sa[best], &p->sr[best]);
        }
        p->load[best] = p->ring > 1 ? fmax(p->sc[best], p->sr[best]) +
                                      p->eta1 * fmin(p->sc[best], p->sr[best]) + p->sa[best]
                                    : slot_load_after(p, best, i, it);
        p->mem[best] += it->mem[i];
        p->count[best]++;
        p->slot_of[i] = best;
        if (p->load[best] > p->round_max[r]) {
            p->round_max[r] = p->load[best];
        }
    }
    return 1;
}

/* Step seconds (all layers) of one packing, or DBL_MAX if infeasible. */
static double pack_all(const nsp_planner_input_t *in, static_pack_t *p, int rule,
                       int rounds0, const static_items_t *it)
{
    double step = 0.0;

    memset(p->load, 0, sizeof(double) * (size_t)p->max_rounds * (size_t)p->groups);
    memset(p->mem, 0, sizeof(double) * (size_t)p->max_rounds * (size_t)p->groups);
    memset(p->count, 0, sizeof(int) * (size_t)p->max_rounds * (size_t)p->groups);
    if (p->ring > 1) {
        memset(p->sc, 0, sizeof(double) * (size_t)p->max_rounds * (size_t)p->groups);
        memset(p->sa, 0, sizeof(double) * (size_t)p->max_rounds * (size_t)p->groups);
        memset(p->sr, 0, sizeof(double) * (size_t)p->max_rounds * (size_t)p->groups);
    }
    memset(p->round_max, 0, sizeof(double) * (size_t)p->max_rounds);
    p->rounds = rounds0 < p->max_rounds ? rounds0 : p->max_rounds;
    for (int k = 0; k < in->nseqs; ++k) {
        if (!pack_one(p, rule, in->order[k], it, in->mem_cap)) {
            return DBL_MAX;
        }
    }
    for (int r = 0; r < p->rounds; ++r) {
        /* a used round is a micro-batch: it pays its fixed cost */
        step += p->round_max[r] > 0.0 ? p->round_max[r] + in->cost.round_s / in->cost.model.layers
                                      : 0.0;
    }
    return step * in->cost.model.layers;
}

/* Fill the per-sequence costs of configuration (d, rc); 0 if some sequence
 * does not fit a rank's memory at this degree. Sets *min_rounds from memory. */
static int config_items(const nsp_planner_input_t *in, int d, int rc, int groups,
                        static_items_t *it, int *min_rounds)
{
    const nsp_cost_t *cost = &in->cost;
    const int         ring = nsp_planner_ring_of(in, d);
    double            total_mem = 0.0;

    for (int i = 0; i < in->nseqs; ++i) {
        nsp_seq_cost_t sc;
        nsp_seq_cost_ring(cost, (double)in->lens[i], d, ring, rc, &sc);
        if (sc.mem_bytes > in->mem_cap) {
            return 0;
        }
        if (ring > 1) {
            it->t[i]  = sc.comp_s;
            it->a[i]  = sc.bytes / nsp_cost_bw(cost, d / ring);
            it->rg[i] = sc.ring_bytes / nsp_cost_bw(cost, d);
        } else {
            it->t[i] = sc.comp_s + sc.bytes / nsp_cost_bw(cost, d);
        }
        it->mem[i] = sc.mem_bytes;
        total_mem += sc.mem_bytes;
    }
    *min_rounds = (int)ceil(total_mem / (in->mem_cap * groups) - 1e-12);
    if (*min_rounds < 1) {
        *min_rounds = 1;
    }
    return 1;
}

static nsp_status_t build_plan(const nsp_planner_input_t *in, int d, int rc, int groups,
                               int rounds, const int *slot_of, nsp_plan_t **plan)
{
    nsp_group_desc_t *desc = malloc(sizeof(*desc) * (size_t)rounds * (size_t)groups);
    nsp_status_t      status;

    if (desc == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %d static groups", rounds * groups);
    }
    for (int r = 0; r < rounds; ++r) {
        for (int g = 0; g < groups; ++g) {
            nsp_group_desc_t *gd = &desc[r * groups + g];
            gd->round     = r;
            gd->rank0     = g * d;
            gd->size      = d;
            gd->recompute = rc;
            gd->pipelined = 0;   /* one level per rank: nothing to overlap with */
            gd->ring      = nsp_planner_ring_of(in, d);
        }
    }
    status = nsp_plan_build("static", &in->cost.model, &in->cost.cluster, in->lens, in->nseqs,
                            desc, rounds * groups, slot_of, plan);
    free(desc);
    return status;
}

/* Degrees static may use: the valid Ulysses degrees and, with rings, the
 * degrees above them that divide the ranks (consecutive groups cover all). */
static int static_degree_ok(const nsp_planner_input_t *in, int d)
{
    const nsp_cost_t *cost = &in->cost;

    return nsp_cost_degree_valid(cost, d) ||
           (in->enable_ring && d > cost->max_degree && d <= cost->cluster.ranks &&
            cost->cluster.ranks % d == 0);
}

/* The best (degree, recompute, packing) over `degrees` (NULL: every valid
 * degree, filtered by params.static_degree / static_recompute). */
static nsp_status_t static_search(const nsp_planner_input_t *in, const int *degrees, int ndeg,
                                  int *best_d_p, int *best_rc_p, int *best_rounds_p,
                                  int *best_slot, double *best_step_p)
{
    const nsp_cost_t *cost  = &in->cost;
    const int         N     = cost->cluster.ranks;
    const size_t      n     = (size_t)(in->nseqs > 0 ? in->nseqs : 1);
    static_items_t    it    = {NULL, NULL, NULL, NULL};
    const int         dtop  = in->enable_ring ? N : cost->max_degree;
    static_pack_t     p;
    int               best_d = 0, best_rc = 0, best_rounds = 0, tried = 0;
    double            best_step = DBL_MAX;
    nsp_status_t      status = NSP_OK;

    memset(&p, 0, sizeof(p));
    p.max_rounds = in->max_rounds;
    it.t      = malloc(sizeof(double) * n);
    it.a      = malloc(sizeof(double) * n);
    it.rg     = malloc(sizeof(double) * n);
    it.mem    = malloc(sizeof(double) * n);
    p.load    = malloc(sizeof(double) * (size_t)in->max_rounds * (size_t)N);
    p.mem     = malloc(sizeof(double) * (size_t)in->max_rounds * (size_t)N);
    p.count   = malloc(sizeof(int) * (size_t)in->max_rounds * (size_t)N);
    p.round_max = malloc(sizeof(double) * (size_t)in->max_rounds);
    p.slot_of = malloc(sizeof(int) * n);
    p.sc      = malloc(sizeof(double) * (size_t)in->max_rounds * (size_t)N);
    p.sa      = malloc(sizeof(double) * (size_t)in->max_rounds * (size_t)N);
    p.sr      = malloc(sizeof(double) * (size_t)in->max_rounds * (size_t)N);
    p.eta1    = 1.0 - cost->cluster.overlap;
    if (it.t == NULL || it.a == NULL || it.rg == NULL || it.mem == NULL || p.load == NULL ||
        p.mem == NULL || p.count == NULL || p.round_max == NULL || p.slot_of == NULL ||
        p.sc == NULL || p.sa == NULL || p.sr == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "static planner: cannot allocate slots for %d "
                           "ranks x %d rounds", N, in->max_rounds);
        goto out_free;
    }
    for (int d = 1; d <= dtop; ++d) {
        int allowed = degrees == NULL;
        for (int k = 0; k < ndeg; ++k) {
            allowed |= degrees[k] == d;
        }
        if (!allowed || !static_degree_ok(in, d) ||
            (degrees == NULL && in->static_degree > 0 && d != in->static_degree)) {
            continue;
        }
        for (int rc = 0; rc <= 1; ++rc) {
            int min_rounds;
            if (degrees == NULL && in->static_recompute >= 0 && rc != in->static_recompute) {
                continue;
            }
            p.groups = N / d;
            p.ring   = nsp_planner_ring_of(in, d);
            p.lat    = d / p.ring > 1 ?
                       NSP_COST_A2A_PER_LAYER * nsp_cost_lat(cost, d / p.ring) : 0.0;
            p.lat_ring = p.ring > 1 ? nsp_cost_ring_messages(p.ring, rc) * nsp_cost_lat(cost, d)
                                    : 0.0;
            if (!config_items(in, d, rc, p.groups, &it, &min_rounds) ||
                min_rounds > in->max_rounds) {
                NSP_DEBUG("static: degree %d recompute %d cannot hold the batch", d, rc);
                continue;
            }
            for (int rule = 0; rule < PACK_RULES; ++rule) {
                for (int extra = 0; extra < STATIC_EXTRA_ROUNDS; ++extra) {
                    const double step = pack_all(in, &p, rule, min_rounds + extra, &it);
                    ++tried;
                    if (step < best_step) {
                        best_step = step;
                        best_d = d;
                        best_rc = rc;
                        best_rounds = p.rounds;
                        memcpy(best_slot, p.slot_of, sizeof(int) * (size_t)in->nseqs);
                    }
                }
            }
            NSP_DEBUG("static: degree %d recompute %d: best so far %.4f s", d, rc, best_step);
        }
    }
    if (best_step == DBL_MAX) {
        status = nsp_error_quiet(NSP_ERR_INFEASIBLE, "static planner: no degree%s fits the "
                                 "batch in at most %d rounds (%d packings tried); raise "
                                 "params.max_rounds or allow recomputation",
                                 in->static_degree > 0 ? " of the one given" : "",
                                 in->max_rounds, tried);
        goto out_free;
    }
    *best_d_p      = best_d;
    *best_rc_p     = best_rc;
    *best_rounds_p = best_rounds;
    *best_step_p   = best_step;

out_free:
    free(p.sc);
    free(p.sa);
    free(p.sr);
    free(it.a);
    free(it.rg);
    free(p.slot_of);
    free(p.round_max);
    free(p.count);
    free(p.mem);
    free(p.load);
    free(it.mem);
    free(it.t);
    return status;
}

nsp_status_t nsp_static_assign(const nsp_planner_input_t *in, nsp_route_assign_t *a,
                               double *step_s)
{
    int         *slot = malloc(sizeof(int) * (size_t)(in->nseqs > 0 ? in->nseqs : 1));
    int          d = 0, rc = 0, rounds = 0;
    double       step = 0.0;
    nsp_status_t status;

    if (slot == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "static planner: cannot allocate %d sequences",
                         in->nseqs);
    }
    status = static_search(in, in->level_degrees, in->nlevels, &d, &rc, &rounds, slot, &step);
    if (status == NSP_OK) {
        const int groups = in->cost.cluster.ranks / d;
        a->nrounds = rounds;
        for (int i = 0; i < in->nseqs; ++i) {
            a->round[i] = slot[i] / groups;
            a->rank0[i] = slot[i] % groups * d;
            a->size[i]  = d;
            a->rc[i]    = rc;
        }
        *step_s = step;
    }
    free(slot);
    return status;
}

static nsp_status_t static_plan(const nsp_planner_input_t *in, nsp_plan_t **plan)
{
    int         *slot = malloc(sizeof(int) * (size_t)(in->nseqs > 0 ? in->nseqs : 1));
    int          d = 0, rc = 0, rounds = 0;
    double       step = 0.0;
    nsp_status_t status;

    if (slot == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "static planner: cannot allocate %d sequences",
                         in->nseqs);
    }
    status = static_search(in, NULL, 0, &d, &rc, &rounds, slot, &step);
    if (status == NSP_ERR_INFEASIBLE) {
        char msg[512];   /* decided quietly inside; report it here, once */
        snprintf(msg, sizeof(msg), "%s", nsp_last_error());
        status = nsp_error(NSP_ERR_INFEASIBLE, "%s", msg);
    }
    if (status == NSP_OK) {
        NSP_DEBUG("static: chose degree %d (ring %d), recompute %d, %d rounds: %.4f s", d,
                  nsp_planner_ring_of(in, d), rc, rounds, step);
        status = build_plan(in, d, rc, in->cost.cluster.ranks / d, rounds, slot, plan);
    }
    free(slot);
    return status;
}

/* The fixed degree, else the largest valid one: Ulysses, or with rings the
 * largest that divides the ranks (static ring degrees divide the ranks). */
static int static_top_degree(const nsp_planner_input_t *in)
{
    int top = in->cost.max_degree;

    if (in->static_degree > 0) {
        return in->static_degree;
    }
    for (int d = top + 1; in->enable_ring && d <= in->cost.cluster.ranks; ++d) {
        if (in->cost.cluster.ranks % d == 0) {
            top = d;
        }
    }
    return top;
}

const nsp_planner_entry_t nsp_planner_static_entry = {
    .name       = "static",
    .kind       = NSP_PLANNER_STATIC,
    .caps       = NSP_PLANNER_CAP_DISJOINT_ROUNDS | NSP_PLANNER_CAP_RING_LEVELS,
    .top_degree = static_top_degree,
    .plan       = static_plan,
};

/*
 * Round helpers shared by the disjoint planner's greedy (disjoint.c) and its
 * MILP (milp.c): the exact time of each round of a disjoint assignment and
 * the polish that moves sequences off a round's slowest group. Neither file
 * calls the other for these, so the two do not call each other in a circle.
 */
#include "planner/disjoint.h"
#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double nsp_dj_group_lat(const nsp_cost_t *cost, int d)
{
    return d > 1 ? NSP_COST_A2A_PER_LAYER * nsp_cost_lat(cost, d) : 0.0;
}

/* ---- exact cost of an assignment ------------------------------------------- */

/* Time of one disjoint group from its sums (per layer): C + K. */
static double group_time(const nsp_cost_t *cost, double comp1, double tokens, double bytes,
                         int nseq, int d, int rc)
{
    const double rcf = rc ? NSP_COST_RECOMPUTE_COMP : 1.0;
    const double rcb = rc ? NSP_COST_RECOMPUTE_A2A : 1.0;
    const double C   = (rcf * comp1 + cost->ep_s_per_token * tokens) / d;

    return nseq > 0 ? C + nsp_cost_a2a_time(cost, rcb * bytes, d) : 0.0;
}

typedef struct dj_gsum {
    int    round, rank0, size, rc, nseq;
    double comp1, tokens, bytes;
} dj_gsum_t;

static int cmp_gsum(const void *a, const void *b)
{
    const dj_gsum_t *x = a, *y = b;

    if (x->round != y->round) {
        return x->round < y->round ? -1 : 1;
    }
    if (x->rank0 != y->rank0) {
        return x->rank0 < y->rank0 ? -1 : 1;
    }
    return (x->size > y->size) - (x->size < y->size);
}

nsp_status_t nsp_dj_round_times(const nsp_planner_input_t *in, const nsp_route_assign_t *a,
                                double *round_s, int *mem_ok)
{
    const nsp_cost_t *cost = &in->cost;
    const int         n = in->nseqs;
    dj_gsum_t        *g = malloc(sizeof(*g) * (size_t)(n > 0 ? n : 1));
    int               ng = 0;

    if (g == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "disjoint planner: cannot allocate %d groups", n);
    }
    for (int i = 0; i < n; ++i) {
        g[i].round = a->round[i];
        g[i].rank0 = a->rank0[i];
        g[i].size  = a->size[i];
        g[i].rc    = a->rc[i];
        g[i].nseq  = 1;
        g[i].comp1 = nsp_cost_comp(cost, (double)in->lens[i], 1);
        g[i].tokens = (double)in->lens[i];
        g[i].bytes = nsp_cost_a2a_bytes(cost, (double)in->lens[i], a->size[i]);
    }
    qsort(g, (size_t)n, sizeof(*g), cmp_gsum);
    for (int i = 0; i < n; ++i) {   /* merge equal groups in place */
        if (ng > 0 && g[ng - 1].round == g[i].round && g[ng - 1].rank0 == g[i].rank0 &&
            g[ng - 1].size == g[i].size) {
            g[ng - 1].nseq++;
            g[ng - 1].comp1  += g[i].comp1;
            g[ng - 1].tokens += g[i].tokens;
            g[ng - 1].bytes  += g[i].bytes;
            g[ng - 1].rc     |= g[i].rc;
        } else {
            g[ng++] = g[i];
        }
    }
    for (int r = 0; r < a->nrounds; ++r) {
        round_s[r] = 0.0;
    }
    *mem_ok = 1;
    for (int k = 0; k < ng; ++k) {
        const double t = group_time(cost, g[k].comp1, g[k].tokens, g[k].bytes, g[k].nseq,
                                    g[k].size, g[k].rc);
        const double m = g[k].tokens / g[k].size * nsp_cost_act_bytes(cost, g[k].rc);
        round_s[g[k].round] = fmax(round_s[g[k].round], t);
        if (m > in->mem_cap) {
            *mem_ok = 0;
        }
    }
    free(g);
    return NSP_OK;
}

/* Step (per layer) of an assignment, DBL_MAX if over memory. */

/* ---- polishing: moves off the slowest group of a round ---------------------------- */

/* Time and memory sequence i adds to a group of degree d, flag rc. */
static void seq_in_group(const nsp_cost_t *cost, double s, int d, int rc, double *t, double *m)
{
    nsp_seq_cost_t sc;

    nsp_seq_cost(cost, s, d, rc, &sc);
    *t = sc.comp_s + sc.bytes / nsp_cost_bw(cost, d);
    *m = sc.mem_bytes;
}

typedef struct dj_pgroup {
    int    rank0, size, rc, nseq;
    double load, mem;
} dj_pgroup_t;

/* One round: while some sequence of the slowest group fits another group of
 * the round so that both end below the slowest's old time, move the one that
 * gives the lowest of the two. */
static nsp_status_t polish_round(const nsp_planner_input_t *in, nsp_route_assign_t *a, int r)
{
    const nsp_cost_t *cost = &in->cost;
    const int         n = in->nseqs;
    dj_pgroup_t      *g = malloc(sizeof(*g) * (size_t)(n > 0 ? n : 1));
    int              *gof = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    int              *mine = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    int               ng = 0, m = 0;

    if (g == NULL || gof == NULL || mine == NULL) {
        free(g);
        free(gof);
        free(mine);
        return nsp_error(NSP_ERR_NO_MEMORY, "disjoint planner: cannot allocate %d groups", n);
    }
    for (int i = 0; i < n; ++i) {
        int k;
        if (a->round[i] != r) {
            continue;
        }
        mine[m++] = i;
        for (k = 0; k < ng; ++k) {
            if (g[k].rank0 == a->rank0[i] && g[k].size == a->size[i]) {
                break;
            }
        }
        if (k == ng) {
            g[ng].rank0 = a->rank0[i];
            g[ng].size  = a->size[i];
            g[ng].rc    = a->rc[i];
            g[ng].nseq  = 0;
            g[ng].load  = nsp_dj_group_lat(cost, a->size[i]);
            g[ng].mem   = 0.0;
            ++ng;
        }
        {
            double t, mb;
            seq_in_group(cost, (double)in->lens[i], g[k].size, g[k].rc, &t, &mb);
            g[k].load += t;
            g[k].mem  += mb;
            g[k].nseq++;
            gof[i] = k;
        }
    }
    for (int it = 0; it < 4 * m + 16; ++it) {
        int    G = 0, best_i = -1, best_h = -1;
        double best_new;
        for (int k = 1; k < ng; ++k) {
            if (g[k].load > g[G].load) {
                G = k;
            }
        }
        best_new = g[G].load * (1.0 - 1e-9);
        for (int q = 0; q < m; ++q) {
            const int    i = mine[q];
            const double s = (double)in->lens[i];
            double       tg, mg;
            if (gof[i] != G || g[G].nseq < 2) {
                continue;   /* keep every group non-empty: its ranks are laid out */
            }
            seq_in_group(cost, s, g[G].size, g[G].rc, &tg, &mg);
            for (int h = 0; h < ng; ++h) {
                double th, mh, worse;
                if (h == G) {
                    continue;
                }
                seq_in_group(cost, s, g[h].size, g[h].rc, &th, &mh);
                if (g[h].mem + mh > in->mem_cap) {
                    continue;
                }
                worse = fmax(g[G].load - tg, g[h].load + th);
                if (worse < best_new) {
                    best_new = worse;
                    best_i   = i;
                    best_h   = h;
                }
            }
        }
        if (best_i < 0) {
            break;
        }
        {
            const double s = (double)in->lens[best_i];
            double       t, mb;
            seq_in_group(cost, s, g[G].size, g[G].rc, &t, &mb);
            g[G].load -= t;
            g[G].mem  -= mb;
            g[G].nseq--;
            seq_in_group(cost, s, g[best_h].size, g[best_h].rc, &t, &mb);
            g[best_h].load += t;
            g[best_h].mem  += mb;
            g[best_h].nseq++;
            gof[best_i]      = best_h;
            a->rank0[best_i] = g[best_h].rank0;
            a->size[best_i]  = g[best_h].size;
            a->rc[best_i]    = g[best_h].rc;
        }
    }
    free(g);
    free(gof);
    free(mine);
    return NSP_OK;
}

nsp_status_t nsp_dj_polish(const nsp_planner_input_t *in, nsp_route_assign_t *a)
{
    for (int r = 0; r < a->nrounds; ++r) {
        NSP_CHECK(polish_round(in, a, r));
    }
    return NSP_OK;
}

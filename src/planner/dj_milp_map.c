/*
 * Between the disjoint planner's assignments and its round model
 * (dj_milp.h): the greedy's groups as the solver's start, and a solution's
 * counts per bucket and group mapped to concrete sequences (longest first
 * to the least loaded group that still wants one of its bucket), packed
 * aligned and evaluated exactly.
 */
#include "planner/dj_milp.h"
#include "common/log.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct gload {
    double load;
    int    g;
} gload_t;

static int cmp_gload_desc(const void *a, const void *b)
{
    const gload_t *x = a, *y = b;

    if (x->load != y->load) {
        return x->load > y->load ? -1 : 1;
    }
    return (x->g > y->g) - (x->g < y->g);
}

/* The greedy's groups of round r as a start vector; 0 if they do not map
 * (a degree outside the tree, too many groups of a type, a pruned pair). */
int nsp_dj_milp_start(const dj_round_t *R, const nsp_route_assign_t *a, const nsp_milp_t *p,
                      double zinc, double *x)
{
    const nsp_planner_input_t *in = R->in;
    const int                  N  = in->cost.cluster.ranks;
    gload_t                   *loads = malloc(sizeof(gload_t) * (size_t)N);
    int                       *type_of = malloc(sizeof(int) * (size_t)N);
    int                       *slot_of = malloc(sizeof(int) * (size_t)N);
    int                        ok = 1;

    if (loads == NULL || type_of == NULL || slot_of == NULL) {
        ok = 0;
        goto out;
    }
    memset(x, 0, sizeof(double) * (size_t)p->ncols);
    x[R->zcol] = zinc;
    /* greedy groups are keyed by rank0; collect their type and load */
    for (int g = 0; g < N; ++g) {
        type_of[g] = -1;
        loads[g].load = 0.0;
        loads[g].g = g;
    }
    for (int q = 0; q < R->m && ok; ++q) {
        const int i = R->seqs[q];
        int       t = -1;
        for (int tt = 0; tt < R->ntypes; ++tt) {
            if (R->tdeg[tt] == a->size[i] && R->trc[tt] == a->rc[i]) {
                t = tt;
            }
        }
        if (t < 0) {
            ok = 0;
            break;
        }
        type_of[a->rank0[i]] = t;
        loads[a->rank0[i]].load += R->bt[R->bucket[q] * R->ntypes + t];
    }
    if (!ok) {
        goto out;
    }
    /* order each type's groups by load, largest first (symmetry rows) */
    qsort(loads, (size_t)N, sizeof(*loads), cmp_gload_desc);
    {
        int used[2 * NSP_PLANNER_MAX_LEVELS] = {0};
        for (int k = 0; k < N; ++k) {
            const int r0 = loads[k].g, t = type_of[r0];
            if (t < 0) {
                continue;
            }
            if (used[t] >= R->gcount[t]) {
                NSP_TRACE("MILP start: more greedy groups of degree %d than candidates (%d)",
                          R->tdeg[t], R->gcount[t]);
                ok = 0;
                goto out;
            }
            slot_of[r0] = R->gfirst[t] + used[t]++;
            x[R->ycol[slot_of[r0]]] = 1.0;
        }
    }
    for (int q = 0; q < R->m; ++q) {
        const int i = R->seqs[q], g = slot_of[a->rank0[i]];
        const int c = R->xcol[(size_t)R->bucket[q] * R->ngroups + g];
        if (c < 0) {
            NSP_TRACE("MILP start: sequence %d (bucket %d) has no column in its greedy group", i,
                      R->bucket[q]);
            ok = 0;
            goto out;
        }
        x[c] += 1.0;
    }
    /* z: the slowest group in the model's terms; every group in memory */
    x[R->zcol] = 0.0;
    for (int g = 0; g < R->ngroups; ++g) {
        const int t = R->gtype[g];
        double    load = nsp_dj_group_lat(&in->cost, R->tdeg[t]) / zinc * x[R->ycol[g]], mem = 0.0;
        for (int b = 0; b < R->nb; ++b) {
            const int c = R->xcol[(size_t)b * R->ngroups + g];
            if (c >= 0) {
                load += R->bt[b * R->ntypes + t] * x[c];
                mem  += R->bm[b * R->ntypes + t] * x[c];
            }
        }
        x[R->zcol] = fmax(x[R->zcol], load);
        if (mem > x[R->ycol[g]] * (1.0 + 1e-12) || load > 1.10) {
            NSP_TRACE("MILP start: group %d over the model's limits (memory %.4f, time %.4f)",
                      g, mem, load);
            ok = 0;   /* bucket means over a limit of the model: no start */
        }
    }
out:
    free(loads);
    free(type_of);
    free(slot_of);
    return ok;
}

/* nsp_dj_milp_map's work arrays, per group g of the model ([ngroups]) unless
 * said: want[nb][ngroups] sequences still wanted per bucket, load (seconds),
 * target (the solution's time), mem (bytes), used (open; later its index + 1
 * into rank0), size/rank0/slot (the open groups packed), gseq[m] (each
 * sequence's group). */
typedef struct map_work {
    double *want, *load, *target, *mem;
    int    *used, *size, *rank0, *slot, *gseq;
} map_work_t;

static void map_work_free(map_work_t *w)
{
    free(w->want);
    free(w->load);
    free(w->target);
    free(w->mem);
    free(w->used);
    free(w->size);
    free(w->rank0);
    free(w->slot);
    free(w->gseq);
}

/* 0, or -1 when out of memory (free with map_work_free either way). */
static int map_work_alloc(const dj_round_t *R, map_work_t *w)
{
    const size_t ng = (size_t)R->ngroups;

    w->want   = malloc(sizeof(double) * (size_t)R->nb * ng);
    w->load   = calloc(ng, sizeof(double));
    w->target = calloc(ng, sizeof(double));
    w->mem    = calloc(ng, sizeof(double));
    w->used   = malloc(sizeof(int) * ng);
    w->size   = malloc(sizeof(int) * ng);
    w->rank0  = malloc(sizeof(int) * ng);
    w->slot   = malloc(sizeof(int) * ng);
    w->gseq   = malloc(sizeof(int) * (size_t)(R->m > 0 ? R->m : 1));
    return w->want == NULL || w->load == NULL || w->target == NULL || w->mem == NULL ||
                   w->used == NULL || w->size == NULL || w->rank0 == NULL ||
                   w->slot == NULL || w->gseq == NULL
               ? -1
               : 0;
}

/* From the solution x: which groups are open, what each wants of each
 * bucket (integer buckets rounded), and each group's target time. */
static void map_targets(const dj_round_t *R, const double *x, double zinc, map_work_t *w)
{
    const nsp_cost_t *cost = &R->in->cost;

    for (int g = 0; g < R->ngroups; ++g) {
        w->used[g]   = x[R->ycol[g]] > 0.5;
        w->load[g]   = w->used[g] ? nsp_dj_group_lat(cost, R->tdeg[R->gtype[g]]) : 0.0;
        w->target[g] = w->load[g];
        for (int b = 0; b < R->nb; ++b) {
            const int c = R->xcol[(size_t)b * R->ngroups + g];
            double    v = (c >= 0 && w->used[g]) ? x[c] : 0.0;
            if (R->bcount[b] <= DJ_MILP_INT_COUNT) {
                v = floor(v + 0.5);
            }
            w->want[(size_t)b * R->ngroups + g] = v;
            w->target[g] += v * R->bt[b * R->ntypes + R->gtype[g]] * zinc;
        }
    }
}

/* Whether a sequence of s tokens fits group g's memory; its cost in *sc. */
static int map_fits(const dj_round_t *R, const map_work_t *w, int g, double s,
                    nsp_seq_cost_t *sc)
{
    const int t = R->gtype[g];

    nsp_seq_cost(&R->in->cost, s, R->tdeg[t], R->trc[t], sc);
    return w->mem[g] + sc->mem_bytes <= R->in->mem_cap;
}

/* The group for a sequence of s tokens of bucket b, or -1: of an integer
 * bucket the least loaded open group with a count left; of a continuous one
 * the open group with the most time left to its target that has memory,
 * else (shares used up by rounding) the least loaded open group with room. */
static int map_pick(const dj_round_t *R, const map_work_t *w, int b, double s)
{
    const int      integral = R->bcount[b] <= DJ_MILP_INT_COUNT;
    int            best     = -1;
    double         best_key = -DBL_MAX;
    nsp_seq_cost_t sc;

    for (int g = 0; g < R->ngroups; ++g) {
        const double want = w->want[(size_t)b * R->ngroups + g];
        double       key;
        if (!w->used[g] || (integral && want < 0.5)) {
            continue;
        }
        if (!integral) {
            if (want <= 1e-9 || !map_fits(R, w, g, s, &sc)) {
                continue;
            }
            key = w->target[g] - w->load[g];   /* the most time left to its target */
        } else {
            key = -w->load[g];                 /* the least loaded */
        }
        if (best < 0 || key > best_key) {
            best     = g;
            best_key = key;
        }
    }
    if (best < 0 && !integral) {
        for (int g = 0; g < R->ngroups; ++g) {
            if (!w->used[g] || R->xcol[(size_t)b * R->ngroups + g] < 0) {
                continue;
            }
            if (map_fits(R, w, g, s, &sc) && (best < 0 || w->load[g] < w->load[best])) {
                best = g;
            }
        }
    }
    return best;
}

/* Sequence q (s tokens, bucket b) into group g. */
static void map_place(const dj_round_t *R, map_work_t *w, int q, int b, double s, int g)
{
    const nsp_cost_t *cost = &R->in->cost;
    const int         t    = R->gtype[g];
    nsp_seq_cost_t    sc;

    nsp_seq_cost(cost, s, R->tdeg[t], R->trc[t], &sc);
    w->load[g] += sc.comp_s + sc.bytes / nsp_cost_bw(cost, R->tdeg[t]);
    w->mem[g]  += sc.mem_bytes;
    w->want[(size_t)b * R->ngroups + g] -= 1.0;
    w->gseq[q] = g;
}

/* Pack the open groups on N ranks (aligned); their count, or -1 when one
 * is over memory or they do not pack. */
static int map_pack(const dj_round_t *R, map_work_t *w, int N)
{
    int nused = 0;

    for (int g = 0; g < R->ngroups; ++g) {
        if (w->used[g] && w->mem[g] > R->in->mem_cap) {
            return -1;
        }
        if (w->used[g]) {
            w->slot[nused] = g;
            w->size[nused++] = R->tdeg[R->gtype[g]];
        }
    }
    if (nsp_pack_aligned(w->size, nused, N, w->rank0) < 0) {
        nsp_error_clear();
        return -1;
    }
    return nused;
}

/* Map a solution to concrete sequences of round r in *a (rank0 from aligned
 * packing); returns the exact round time, or DBL_MAX if it does not map.
 * Longest first, each sequence to map_pick's group. */
double nsp_dj_milp_map(const dj_round_t *R, const double *x, double zinc, int r,
                       nsp_route_assign_t *a)
{
    const int  N     = R->in->cost.cluster.ranks;
    map_work_t w     = {0};
    double     worst = DBL_MAX;
    int        nused;

    if (map_work_alloc(R, &w) != 0) {
        goto out;
    }
    map_targets(R, x, zinc, &w);
    for (int q = 0; q < R->m; ++q) {
        const int    b    = R->bucket[q];
        const double s    = (double)R->in->lens[R->seqs[q]];
        const int    best = map_pick(R, &w, b, s);
        if (best < 0) {
            goto out;
        }
        map_place(R, &w, q, b, s, best);
    }
    nused = map_pack(R, &w, N);
    if (nused < 0) {
        goto out;
    }
    worst = 0.0;
    for (int k = 0; k < nused; ++k) {
        worst = fmax(worst, w.load[w.slot[k]]);
        w.used[w.slot[k]] = k + 1;   /* index into rank0 */
    }
    for (int q = 0; q < R->m; ++q) {
        const int i = R->seqs[q], g = w.gseq[q];
        a->round[i] = r;
        a->rank0[i] = w.rank0[w.used[g] - 1];
        a->size[i]  = R->tdeg[R->gtype[g]];
        a->rc[i]    = R->trc[R->gtype[g]];
    }
out:
    map_work_free(&w);
    return worst;
}

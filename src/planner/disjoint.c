/*
 * The disjoint planner (docs/design.md §5.2): FlexSP's formulation. Each round cuts
 * the ranks into disjoint aligned groups of the tree's degrees (1, 2, 4, ...)
 * and assigns every sequence of the round to one group, minimising the
 * slowest group under the memory limit. A group's ranks hold only that group,
 * so nothing overlaps: a group takes C + K per layer.
 *
 * 1. Greedy (always; the MILP's incumbent and the fallback without a solver):
 *    a. Rounds: sequences go longest first to the round with the least area
 *       so far among those with activation memory left (kept or recomputed
 *       variant), for a few round counts around the memory minimum.
 *    b. Per round, a binary search on the makespan T: each sequence takes the
 *       smallest degree at which it alone fits in T and in memory; sequences
 *       of one degree are packed longest first into the least loaded group of
 *       that degree that still has time and memory left, opening groups as
 *       needed; T is feasible if the groups need at most N ranks.
 *    c. The routing engine in disjoint mode (route.c) gives a second greedy;
 *       the faster of the two (exact cost model) is kept.
 * 2. MILP per round (milp.c, CBC or GLPK): see the formulation there. The
 *    greedy's groups are its starting solution; its answer replaces the
 *    round's groups only if it is faster once the bucketed counts are mapped
 *    back to concrete sequences and evaluated exactly.
 */
#include "planner/disjoint.h"
#include "planner/route.h"
#include "common/log.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Extra round counts tried beyond the memory minimum. */
#define DJ_EXTRA_ROUNDS 2
/* Binary search steps on the makespan of one round. */
#define DJ_SEARCH_STEPS 40

static nsp_status_t assign_step(const nsp_planner_input_t *in, const nsp_route_assign_t *a,
                                double *step)
{
    double *rs = malloc(sizeof(double) * (size_t)(a->nrounds > 0 ? a->nrounds : 1));
    int     ok;

    if (rs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "disjoint planner: cannot allocate %d rounds",
                         a->nrounds);
    }
    NSP_CHECK(nsp_dj_round_times(in, a, rs, &ok));
    *step = 0.0;
    for (int r = 0; r < a->nrounds; ++r) {
        /* a used round pays its fixed cost (per layer here) */
        *step += rs[r] > 0.0 ? rs[r] + in->cost.round_s / in->cost.model.layers : 0.0;
    }
    if (!ok) {
        *step = DBL_MAX;
    }
    free(rs);
    return NSP_OK;
}

static void assign_copy(nsp_route_assign_t *dst, const nsp_route_assign_t *src)
{
    const size_t n = sizeof(int) * (size_t)src->nseqs;

    dst->nrounds = src->nrounds;
    memcpy(dst->round, src->round, n);
    memcpy(dst->rank0, src->rank0, n);
    memcpy(dst->size, src->size, n);
    memcpy(dst->rc, src->rc, n);
}

/* ---- 1b. one round: binary search on the makespan ---------------------------- */

typedef struct dj_pack {
    /* input */
    const nsp_planner_input_t *in;
    const int *seqs;      /* [m] sequence indices of the round, longest first */
    int        m;
    int        rc;        /* 0: kept, 1: recomputed */
    int        floor;     /* smallest degree index a sequence may take: larger groups
                             pack memory with less fragmentation */
    int        nd;        /* degrees */
    int        deg[NSP_PLANNER_MAX_LEVELS];
    /* scratch */
    double    *t;         /* [m * nd] group time the sequence adds at each degree */
    double    *mem;       /* [m * nd] memory per rank at each degree */
    int       *gid;       /* [m] group of each sequence */
    double    *gload;     /* [m] group time */
    double    *gmem;      /* [m] group memory per rank */
    int       *gdeg;      /* [m] degree index of each group */
    int       *heap;      /* [m] min-heap of group ids per degree (one at a time) */
    int       *pos;       /* [m] position of each group in the heap */
    int        ng;
} dj_pack_t;

/* Min-heap of groups by load, with each group's position. */
static void heap_swap(dj_pack_t *p, int a, int b)
{
    const int ga = p->heap[a], gb = p->heap[b];

    p->heap[a] = gb;
    p->heap[b] = ga;
    p->pos[gb] = a;
    p->pos[ga] = b;
}

static void heap_down(dj_pack_t *p, int n, int k)
{
    for (;;) {
        int c = 2 * k + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && p->gload[p->heap[c + 1]] < p->gload[p->heap[c]]) {
            ++c;
        }
        if (p->gload[p->heap[k]] <= p->gload[p->heap[c]]) {
            break;
        }
        heap_swap(p, k, c);
        k = c;
    }
}

static void heap_up(dj_pack_t *p, int k)
{
    while (k > 0 && p->gload[p->heap[(k - 1) / 2]] > p->gload[p->heap[k]]) {
        heap_swap(p, k, (k - 1) / 2);
        k = (k - 1) / 2;
    }
}

/* Pack the round for makespan T: ranks needed, or INT_MAX if some sequence
 * fits at no degree. Groups in p->gid / gdeg. */
static int pack_for(dj_pack_t *p, double T)
{
    const nsp_cost_t *cost = &p->in->cost;
    const double      cap  = p->in->mem_cap;
    int               ranks = 0;

    p->ng = 0;
    for (int k = 0; k < p->nd; ++k) {
        const int d   = p->deg[k];
        const double lat = nsp_dj_group_lat(cost, d);
        int       hn  = 0;
        for (int q = 0; q < p->m; ++q) {
            int kk, best = -1;
            /* the degree of sequence q: the smallest that fits T and memory */
            if (k == 0) {
                p->gid[q] = -1;
            }
            if (p->gid[q] >= 0) {
                continue;
            }
            for (kk = p->floor; kk < p->nd; ++kk) {
                if (p->t[q * p->nd + kk] + nsp_dj_group_lat(cost, p->deg[kk]) <= T &&
                    p->mem[q * p->nd + kk] <= cap) {
                    break;
                }
            }
            if (kk == p->nd) {
                return 1 << 30;
            }
            if (kk != k) {
                continue;
            }
            /* the least loaded group of this degree with time and memory left;
             * the heap holds them by load: pop until one fits (rarely many) */
            {
                int tries = 0;
                for (int h = 0; h < hn && tries < 8; ++h, ++tries) {
                    const int g = p->heap[h];
                    if (p->gload[g] + p->t[q * p->nd + k] <= T &&
                        p->gmem[g] + p->mem[q * p->nd + k] <= cap) {
                        best = g;
                        break;
                    }
                }
            }
            if (best < 0) {
                best = p->ng++;
                p->gload[best] = lat;
                p->gmem[best]  = 0.0;
                p->gdeg[best]  = k;
                p->heap[hn]    = best;
                p->pos[best]   = hn++;
                heap_up(p, hn - 1);
                ranks += d;
            }
            p->gload[best] += p->t[q * p->nd + k];
            p->gmem[best]  += p->mem[q * p->nd + k];
            p->gid[q] = best;
            heap_down(p, hn, p->pos[best]);   /* its load grew */
        }
    }
    return ranks;
}

/* Best makespan packing of one round into at most N ranks with degrees from
 * p->floor up; fills a->rank0/size/rc of its sequences. Returns the round's
 * time or DBL_MAX. */
static double pack_round_floor(dj_pack_t *p, int round, nsp_route_assign_t *a, int *rank0_tmp,
                               int *size_tmp)
{
    const nsp_cost_t *cost = &p->in->cost;
    const int         N = cost->cluster.ranks;
    double            lo = 0.0, hi = 0.0, best_T;

    if (p->m == 0) {
        return 0.0;
    }
    for (int q = 0; q < p->m; ++q) {
        const double s = (double)p->in->lens[p->seqs[q]];
        double       tmin = DBL_MAX;
        for (int k = 0; k < p->nd; ++k) {
            nsp_seq_cost_t sc;
            nsp_seq_cost(cost, s, p->deg[k], p->rc, &sc);
            p->t[q * p->nd + k]   = sc.comp_s + sc.bytes / nsp_cost_bw(cost, p->deg[k]);
            p->mem[q * p->nd + k] = sc.mem_bytes;
            if (sc.mem_bytes <= p->in->mem_cap && k >= p->floor) {
                tmin = fmin(tmin, p->t[q * p->nd + k] + nsp_dj_group_lat(cost, p->deg[k]));
            }
        }
        if (tmin == DBL_MAX) {
            return DBL_MAX;
        }
        lo = fmax(lo, tmin);
        hi += p->t[q * p->nd + p->nd - 1];
    }
    hi = fmax(hi + nsp_dj_group_lat(cost, p->deg[p->nd - 1]), lo) * 2.0 + 1e-9;
    if (pack_for(p, hi) > N) {
        return DBL_MAX;   /* memory: even one long group per top degree fails */
    }
    best_T = hi;
    for (int it = 0; it < DJ_SEARCH_STEPS && hi - lo > 1e-6 * hi; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (pack_for(p, mid) <= N) {
            hi = best_T = mid;
        } else {
            lo = mid;
        }
    }
    (void)pack_for(p, best_T);
    /* aligned ranges: groups in the order they were opened, largest degree first */
    for (int g = 0; g < p->ng; ++g) {
        size_tmp[g] = p->deg[p->gdeg[g]];
    }
    if (nsp_pack_aligned(size_tmp, p->ng, N, rank0_tmp) < 0) {
        return DBL_MAX;
    }
    {
        double worst = 0.0;
        for (int g = 0; g < p->ng; ++g) {
            worst = fmax(worst, p->gload[g]);
        }
        for (int q = 0; q < p->m; ++q) {
            const int i = p->seqs[q], g = p->gid[q];
            a->round[i] = round;
            a->rank0[i] = rank0_tmp[g];
            a->size[i]  = size_tmp[g];
            a->rc[i]    = p->rc;
        }
        return worst;
    }
}

/* The best packing over every degree floor (the last floor tried that wins
 * is packed again so the assignment matches). */
static double pack_round(dj_pack_t *p, int round, nsp_route_assign_t *a, int *rank0_tmp,
                         int *size_tmp)
{
    double best = DBL_MAX;
    int    best_floor = -1;

    for (p->floor = 0; p->floor < p->nd; ++p->floor) {
        const double t = pack_round_floor(p, round, a, rank0_tmp, size_tmp);
        if (t < best) {
            best       = t;
            best_floor = p->floor;
        }
    }
    if (best_floor >= 0 && best_floor != p->nd - 1) {
        p->floor = best_floor;
        best = pack_round_floor(p, round, a, rank0_tmp, size_tmp);
    }
    return best;
}

/* ---- 1a. rounds --------------------------------------------------------------- */

/* Ways to spread a batch over rounds. */
enum {
    SPLIT_SPREAD = 0,   /* longest first to the round with the least area */
    SPLIT_CHUNK  = 1,   /* longest first, filling round after round (FlexSP-like
                           chunks of similar lengths) */
    SPLIT_KINDS  = 2
};

/* Spread the batch over R rounds; 0 if memory does not hold. */
static int split_rounds(const nsp_planner_input_t *in, int R, int rc, int kind, int *round_of,
                        double *area, double *mem)
{
    const nsp_cost_t *cost = &in->cost;
    const double      budget = in->mem_cap * cost->cluster.ranks;
    double            total = 0.0;
    int               cur = 0;

    for (int r = 0; r < R; ++r) {
        area[r] = mem[r] = 0.0;
    }

    if (kind == SPLIT_CHUNK) {
        for (int i = 0; i < in->nseqs; ++i) {
            total += (double)in->lens[i] * nsp_cost_act_bytes(cost, rc);
        }
        for (int k = 0; k < in->nseqs; ++k) {
            const int    i = in->order[k];
            const double m = (double)in->lens[i] * nsp_cost_act_bytes(cost, rc);
            /* an even share of the memory per round, never over the budget */
            while (cur < R - 1 && (mem[cur] + m > budget * 0.97 ||
                                   mem[cur] + 0.5 * m > total / R)) {
                ++cur;
            }
            if (mem[cur] + m > budget * 0.97 && cur == R - 1) {
                return 0;
            }
            round_of[i] = cur;
            mem[cur] += m;
        }
        return 1;
    }

    for (int k = 0; k < in->nseqs; ++k) {
        const int    i = in->order[k];
        const double s = (double)in->lens[i];
        const double m = s * nsp_cost_act_bytes(cost, rc);
        const double w = nsp_cost_comp(cost, s, 1) * (rc ? NSP_COST_RECOMPUTE_COMP : 1.0) +
                         nsp_cost_ep_time(cost, s);
        int          best = -1;
        for (int r = 0; r < R; ++r) {
            if (mem[r] + m <= budget * 0.97 && (best < 0 || area[r] < area[best])) {
                best = r;
            }
        }
        if (best < 0) {
            return 0;
        }
        round_of[i] = best;
        area[best] += w;
        mem[best]  += m;
    }
    return 1;
}

/* Pack every round of a split (round_of); returns the step per layer (the
 * sum of round maxima) or DBL_MAX. seqs is scratch of [nseqs]. */
static double pack_rounds(dj_pack_t *p, const int *round_of, int *seqs, nsp_route_assign_t *cur,
                          int *rank0_tmp, int *size_tmp)
{
    const nsp_planner_input_t *in = p->in;
    double                     step = 0.0;

    for (int r = 0; r < cur->nrounds; ++r) {
        double t;
        p->m = 0;
        for (int k = 0; k < in->nseqs; ++k) {   /* longest first */
            if (round_of[in->order[k]] == r) {
                seqs[p->m++] = in->order[k];
            }
        }
        p->seqs = seqs;
        t = pack_round(p, r, cur, rank0_tmp, size_tmp);
        if (t == DBL_MAX) {
            return DBL_MAX;
        }
        step += t;
    }
    return step;
}

static nsp_status_t class_greedy(const nsp_planner_input_t *in, nsp_route_assign_t *best,
                                 double *best_step)
{
    const nsp_cost_t  *cost = &in->cost;
    const int          n = in->nseqs, N = cost->cluster.ranks;
    const size_t       nz = (size_t)(n > 0 ? n : 1);
    const size_t       nd = (size_t)in->nlevels;
    nsp_route_assign_t cur;
    dj_pack_t          p;
    int               *round_of = malloc(sizeof(int) * nz);
    int               *seqs = malloc(sizeof(int) * nz);
    int               *rank0_tmp = malloc(sizeof(int) * nz);
    int               *size_tmp = malloc(sizeof(int) * nz);
    double            *area = malloc(sizeof(double) * (size_t)in->max_rounds);
    double            *mem = malloc(sizeof(double) * (size_t)in->max_rounds);
    double             kept_bytes = 0.0;
    nsp_status_t       status;

    memset(&p, 0, sizeof(p));
    p.t     = malloc(sizeof(double) * nz * nd);
    p.mem   = malloc(sizeof(double) * nz * nd);
    p.gid   = malloc(sizeof(int) * nz);
    p.gload = malloc(sizeof(double) * nz);
    p.gmem  = malloc(sizeof(double) * nz);
    p.gdeg  = malloc(sizeof(int) * nz);
    p.heap  = malloc(sizeof(int) * nz);
    p.pos   = malloc(sizeof(int) * nz);
    status  = nsp_route_assign_alloc(&cur, n);
    if (round_of == NULL || seqs == NULL || rank0_tmp == NULL || size_tmp == NULL ||
        area == NULL || mem == NULL || p.t == NULL || p.mem == NULL || p.gid == NULL ||
        p.gload == NULL || p.gmem == NULL || p.gdeg == NULL || p.heap == NULL || p.pos == NULL || status < 0) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "disjoint planner: cannot allocate scratch for "
                           "%d sequences", n);
        goto out_free;
    }
    p.in = in;
    p.nd = in->nlevels;
    memcpy(p.deg, in->level_degrees, sizeof(int) * nd);
    for (int i = 0; i < n; ++i) {
        kept_bytes += (double)in->lens[i] * cost->act_bytes_keep;
    }
    for (int rc = 0; rc <= 1; ++rc) {
        const double bytes = rc ? kept_bytes / cost->act_bytes_keep * cost->act_bytes_recompute
                                : kept_bytes;
        int          r0 = (int)ceil(bytes / (in->mem_cap * N * 0.97) - 1e-12);
        if (r0 < 1) {
            r0 = 1;
        }
        for (int R = r0; R <= r0 + DJ_EXTRA_ROUNDS && R <= in->max_rounds; ++R) {
            for (int kind = 0; kind < SPLIT_KINDS; ++kind) {
                double step;
                if (!split_rounds(in, R, rc, kind, round_of, area, mem)) {
                    continue;
                }
                p.rc = rc;
                cur.nrounds = R;
                step = pack_rounds(&p, round_of, seqs, &cur, rank0_tmp, size_tmp);
                if (step < DBL_MAX) {
                    NSP_CHECK_GOTO(assign_step(in, &cur, &step), status, out_free);
                }
                NSP_DEBUG("disjoint greedy: %d rounds, %s, %s: %.6f s per layer", R,
                          rc ? "recomputed" : "kept", kind == SPLIT_CHUNK ? "chunked" : "spread",
                          step == DBL_MAX ? -1.0 : step);
                if (step < *best_step) {
                    *best_step = step;
                    assign_copy(best, &cur);
                }
            }
        }
    }
    status = NSP_OK;

out_free:
    nsp_route_assign_free(&cur);
    free(p.pos);
    free(p.heap);
    free(p.gdeg);
    free(p.gmem);
    free(p.gload);
    free(p.gid);
    free(p.mem);
    free(p.t);
    free(mem);
    free(area);
    free(size_tmp);
    free(rank0_tmp);
    free(seqs);
    free(round_of);
    return status;
}

/* ---- entry point ---------------------------------------------------------------- */

static nsp_status_t disjoint_plan(const nsp_planner_input_t *in, nsp_plan_t **plan)
{
    nsp_route_assign_t best, eng;
    double             best_step = DBL_MAX, eng_step = DBL_MAX;
    unsigned           flags = 0;
    nsp_status_t       status;

    NSP_CHECK(nsp_route_assign_alloc(&best, in->nseqs));
    NSP_CHECK_GOTO(nsp_route_assign_alloc(&eng, in->nseqs), status, out_free_best);
    NSP_CHECK_GOTO(class_greedy(in, &best, &best_step), status, out_free);
    status = nsp_route(in, NSP_ROUTE_DISJOINT, &eng, NULL);
    if (status == NSP_OK) {
        NSP_CHECK_GOTO(assign_step(in, &eng, &eng_step), status, out_free);
        NSP_DEBUG("disjoint: class greedy %.6f, routing greedy %.6f s per layer", best_step,
                  eng_step);
        if (eng_step < best_step) {
            best_step = eng_step;
            assign_copy(&best, &eng);
        }
    } else if (best_step == DBL_MAX) {
        goto out_free;   /* neither greedy found a plan: report the engine's error */
    }
    if (best_step == DBL_MAX) {
        status = nsp_error(NSP_ERR_INFEASIBLE, "disjoint planner: no disjoint grouping holds "
                           "the batch in at most %d rounds; raise params.max_rounds",
                           in->max_rounds);
        goto out_free;
    }
    NSP_CHECK_GOTO(nsp_dj_polish(in, &best), status, out_free);
    NSP_CHECK_GOTO(nsp_dj_milp_improve(in, &best, &flags), status, out_free);
    status = nsp_route_plan(in, "disjoint", &best, 0, flags, plan);

out_free:
    nsp_route_assign_free(&eng);
out_free_best:
    nsp_route_assign_free(&best);
    return status;
}

/* FlexSP's groups are Ulysses-only: its tree has no ring levels. */
const nsp_planner_entry_t nsp_planner_disjoint_entry = {
    .name       = "disjoint",
    .kind       = NSP_PLANNER_DISJOINT,
    .caps       = NSP_PLANNER_CAP_DISJOINT_ROUNDS,
    .top_degree = nsp_planner_tree_top_degree,
    .plan       = disjoint_plan,
};

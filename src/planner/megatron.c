/*
 * The megatron planner: Megatron-Core's dynamic (hybrid) context parallelism
 * policy, restated in this project's cost model as a baseline
 * (docs/reference/planners.md, "megatron"). Per global batch, with one knob m
 * (max_seqlen_per_rank) and one recompute setting for every group:
 *
 *  - a sequence of s tokens gets d(s) = 2^ceil(log2(s / m)) ranks (at least 1);
 *  - groups are aligned blocks of a power-of-two size, disjoint in a round;
 *  - a round (micro-batch) is filled from the sequences left, longest first,
 *    cut into as many buckets of about equal work as there are distinct
 *    degrees: the first bucket whose head can be placed gives the next
 *    sequence, which goes to a fresh block of free ranks if there are enough,
 *    else to the least loaded group of its size (with memory left); once a
 *    sequence smaller than the round's first has been placed, the round ends
 *    as soon as every rank is within 5% of the slowest; the most loaded
 *    group's last sequence goes back while that narrows the spread; groups
 *    of the smallest size double into ranks still free; what is left waits
 *    for the next round.
 *
 * The knob is searched as a careful user would set it (values that make the
 * longest sequence take 1, 2, 4, ... ranks, the powers of two, and the most a
 * rank can hold), with recomputation off and on; the fastest plan is kept.
 * Units: seconds per layer per rank inside (cost.h), steps in seconds.
 */
#include "planner/planners.h"
#include "common/log.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A round ends once max - min of the ranks' times is within this share of max. */
#define MG_BALANCE_SLACK 0.05
/* A bucket closes once its work would pass this multiple of its share. */
#define MG_BUCKET_SLACK 1.10
/* Most knob values tried per recompute setting. */
#define MG_MAX_KNOBS 64

/* One group of the round being filled (per rank, per layer). */
typedef struct mg_group {
    int    size, ring;   /* degree d = u * ring */
    int    nseq, top;    /* sequences; the last one added (chain through below[]) */
    double comp;         /* compute incl. recompute factor and MoE term, seconds */
    double bytes;        /* all-to-all bytes */
    double rbytes;       /* ring bytes */
    double mem;          /* activation bytes */
    double time;         /* the time of each of its ranks */
} mg_group_t;

/* One run of the policy for one (knob, recompute). */
typedef struct mg_run {
    const nsp_planner_input_t *in;
    int64_t     m;          /* max_seqlen_per_rank, tokens */
    int         rc;         /* every group recomputed (1) or kept (0) */
    int        *deg;        /* [nseqs] d(s) of each sequence */
    double     *work;       /* [nseqs] its time alone in a group of d(s), bucket work */
    int        *pend;       /* [nseqs] sequences still to place, in order */
    int        *left;       /* [nseqs] the next round's pending list */
    int        *trimmed;    /* [nseqs] sequences a round gave back */
    int        *chain;      /* [nseqs] scratch of mg_group_refresh */
    int         npend;
    int        *bstart;     /* [nseqs + 1] bucket b = pend[bhead[b] .. bstart[b+1]) */
    int        *bhead;      /* [nseqs] */
    int         nbuckets;
    int        *below;      /* [nseqs] the sequence added to its group before it */
    mg_group_t *grp;        /* [ranks] groups of the round being filled */
    int         ngrp, free_ranks;
    int        *sizes, *rank0;          /* [ranks] scratch for the aligned packing */
    nsp_group_desc_t *desc; /* [nseqs] groups of all rounds (each holds >= 1 sequence) */
    int        *seq_group;  /* [nseqs] index into desc */
    int         ndesc, nrounds;
    double      step;       /* seconds per step */
} mg_run_t;

static int mg_degree_allowed(const nsp_planner_input_t *in, int d)
{
    if (d < 1 || d > in->cost.cluster.ranks) {
        return 0;
    }
    return in->enable_ring ? 1 : nsp_cost_degree_valid(&in->cost, d);
}

/* d(s) = max(1, 2^ceil(log2(s / m))): the smallest power of two d with s <= d m. */
static int mg_degree_of(int64_t s, int64_t m, int cap)
{
    int d = 1;

    while ((int64_t)d * m < s && d <= cap) {
        d *= 2;
    }
    return d;
}

static void mg_seq_cost(const mg_run_t *run, int i, int d, nsp_seq_cost_t *c)
{
    const nsp_planner_input_t *in = run->in;

    nsp_seq_cost_ring(&in->cost, (double)in->lens[i], d, nsp_planner_ring_of(in, d), run->rc,
                      c);
}

/* The time of a group's ranks: one group per rank, so nothing overlaps but
 * the ring (docs/reference/cost-model.md): max(C, R) + (1-eta) min(C, R) + A. */
static void mg_group_time(const mg_run_t *run, mg_group_t *g)
{
    const nsp_cost_t *cost = &run->in->cost;
    const double      a = g->nseq > 0 ? nsp_cost_group_a2a_time(cost, g->bytes, g->size,
                                                                g->ring) : 0.0;
    const double      r = g->nseq > 0 ? nsp_cost_ring_time(cost, g->rbytes, g->size, g->ring,
                                                           run->rc) : 0.0;

    g->time = nsp_cost_rank_time(cost, g->comp, r, a);
}

static void mg_group_add(mg_run_t *run, mg_group_t *g, int i)
{
    nsp_seq_cost_t c;

    mg_seq_cost(run, i, g->size, &c);
    g->comp   += c.comp_s;
    g->bytes  += c.bytes;
    g->rbytes += c.ring_bytes;
    g->mem    += c.mem_bytes;
    run->below[i] = g->top;
    g->top = i;
    g->nseq++;
    mg_group_time(run, g);
}

/* Recompute a group's sums from its chain, at its current size. */
static void mg_group_refresh(mg_run_t *run, mg_group_t *g)
{
    int n = 0;

    for (int i = g->top; i >= 0; i = run->below[i]) {
        run->chain[n++] = i;
    }
    g->ring = nsp_planner_ring_of(run->in, g->size);
    g->comp = g->bytes = g->rbytes = g->mem = 0.0;
    g->nseq = 0;
    g->top  = -1;
    for (int k = n - 1; k >= 0; --k) {   /* bottom-up: the chain keeps its order */
        mg_group_add(run, g, run->chain[k]);
    }
}

/* ---- buckets ---------------------------------------------------------------- */

/* Cut pend[] into as many runs of about equal work as it has distinct degrees. */
static void mg_make_buckets(mg_run_t *run)
{
    const int n = run->npend;
    int       k = 0, seen = 0;   /* bit d: degree 2^d seen */
    double    total = 0.0, cur = 0.0, target;

    for (int p = 0; p < n; ++p) {
        const int i = run->pend[p];
        int       lg = 0;
        while ((1 << lg) < run->deg[i]) {
            ++lg;
        }
        if (!(seen & (1 << lg))) {
            seen |= 1 << lg;
            ++k;
        }
        total += run->work[i];
    }
    target = total / (k > 0 ? k : 1);
    run->nbuckets = 0;
    for (int p = 0; p < n; ++p) {
        const double w = run->work[run->pend[p]];
        const int    open = run->nbuckets > 0 && p > run->bstart[run->nbuckets - 1];
        if (run->nbuckets == 0 ||
            (open && (cur + w > MG_BUCKET_SLACK * target || n - p <= k - run->nbuckets))) {
            run->bstart[run->nbuckets] = p;
            run->bhead[run->nbuckets]  = p;
            run->nbuckets++;
            cur = 0.0;
        }
        cur += w;
    }
    run->bstart[run->nbuckets] = n;
}

/* ---- filling one round ----------------------------------------------------------- */

/* The least loaded group of degree d with memory for sequence i, or -1. */
static int mg_least_loaded(mg_run_t *run, int i, int d)
{
    nsp_seq_cost_t c;
    int            best = -1;

    mg_seq_cost(run, i, d, &c);
    for (int g = 0; g < run->ngrp; ++g) {
        const mg_group_t *gr = &run->grp[g];
        if (gr->size == d && gr->mem + c.mem_bytes <= run->in->mem_cap &&
            (best < 0 || gr->time < run->grp[best].time)) {
            best = g;
        }
    }
    return best;
}

/* Place sequence i: a fresh block if enough ranks are free, else the least
 * loaded group of its size with room; 0 if neither exists. */
static int mg_place(mg_run_t *run, int i)
{
    const int d = run->deg[i];
    int       g;

    if (run->free_ranks >= d) {
        g = run->ngrp++;
        memset(&run->grp[g], 0, sizeof(run->grp[g]));
        run->grp[g].size = d;
        run->grp[g].ring = nsp_planner_ring_of(run->in, d);
        run->grp[g].top  = -1;
        run->free_ranks -= d;
    } else if ((g = mg_least_loaded(run, i, d)) < 0) {
        return 0;
    }
    mg_group_add(run, &run->grp[g], i);
    return 1;
}

/* Slowest and fastest rank of the round (a free rank has time 0). */
static void mg_spread(const mg_run_t *run, double *maxt, double *mint)
{
    *maxt = 0.0;
    *mint = run->ngrp > 0 ? DBL_MAX : 0.0;
    for (int g = 0; g < run->ngrp; ++g) {
        *maxt = fmax(*maxt, run->grp[g].time);
        *mint = fmin(*mint, run->grp[g].time);
    }
    if (run->free_ranks > 0) {
        *mint = 0.0;
    }
}

static int mg_buckets_left(const mg_run_t *run)
{
    for (int b = 0; b < run->nbuckets; ++b) {
        if (run->bhead[b] < run->bstart[b + 1]) {
            return 1;
        }
    }
    return 0;
}

/* The first bucket whose head can be placed now, or -1. */
static int mg_pick(mg_run_t *run)
{
    for (int b = 0; b < run->nbuckets; ++b) {
        if (run->bhead[b] < run->bstart[b + 1]) {
            const int i = run->pend[run->bhead[b]];
            if (run->free_ranks >= run->deg[i] || mg_least_loaded(run, i, run->deg[i]) >= 0) {
                return b;
            }
        }
    }
    return -1;
}

/* Fill the round from the buckets until none can be placed or, once a
 * smaller degree than the round's first was placed, the ranks balance. */
static int mg_fill(mg_run_t *run)
{
    int first = 0, check = 0, placed = 0;

    for (int b; (b = mg_pick(run)) >= 0;) {
        const int i = run->pend[run->bhead[b]];
        double    maxt, mint;

        mg_place(run, i);
        run->bhead[b]++;
        ++placed;
        first = first > 0 ? first : run->deg[i];
        check |= run->deg[i] < first;
        mg_spread(run, &maxt, &mint);
        if (check && mg_buckets_left(run) && maxt - mint <= MG_BALANCE_SLACK * maxt) {
            break;
        }
    }
    return placed;
}

/* The next round's list: what the buckets hold, in order, then what the
 * round gave back. */
static void mg_collect_leftovers(mg_run_t *run, int ntrimmed)
{
    int n = 0;

    for (int b = 0; b < run->nbuckets; ++b) {
        for (int p = run->bhead[b]; p < run->bstart[b + 1]; ++p) {
            run->left[n++] = run->pend[p];
        }
    }
    for (int k = 0; k < ntrimmed; ++k) {
        run->left[n++] = run->trimmed[k];
    }
    {
        int *tmp = run->pend;
        run->pend  = run->left;
        run->left  = tmp;
        run->npend = n;
    }
}

/* Give back the most loaded group's last sequence while that narrows the
 * spread (only when no rank is idle); *n of them in trimmed[]. */
static void mg_trim(mg_run_t *run, int *n)
{
    for (;;) {
        double     maxt, mint, pmax = 0.0, pmin = DBL_MAX;
        int        worst = 0;
        mg_group_t save;
        mg_spread(run, &maxt, &mint);
        if (maxt - mint <= MG_BALANCE_SLACK * maxt || mint <= 0.0) {
            return;
        }
        for (int g = 1; g < run->ngrp; ++g) {
            worst = run->grp[g].time > run->grp[worst].time ? g : worst;
        }
        if (run->grp[worst].nseq <= 1) {
            return;
        }
        save = run->grp[worst];
        run->grp[worst].top = run->below[save.top];
        mg_group_refresh(run, &run->grp[worst]);
        for (int g = 0; g < run->ngrp; ++g) {
            pmax = fmax(pmax, run->grp[g].time);
            pmin = fmin(pmin, run->grp[g].time);
        }
        if (!(pmax - pmin < maxt - mint)) {
            run->grp[worst] = save;   /* the chain below save.top is untouched */
            return;
        }
        run->trimmed[(*n)++] = save.top;
    }
}

/* Idle ranks: double a group of the smallest size that can grow into them
 * (the most loaded of that size), until none can. */
static void mg_fill_idle(mg_run_t *run)
{
    while (run->free_ranks > 0) {
        int best = -1;
        for (int g = 0; g < run->ngrp; ++g) {
            const mg_group_t *gr = &run->grp[g];
            if (gr->size <= run->free_ranks && mg_degree_allowed(run->in, 2 * gr->size) &&
                (best < 0 || gr->size < run->grp[best].size ||
                 (gr->size == run->grp[best].size && gr->time > run->grp[best].time))) {
                best = g;
            }
        }
        if (best < 0) {
            return;
        }
        run->free_ranks -= run->grp[best].size;
        run->grp[best].size *= 2;
        mg_group_refresh(run, &run->grp[best]);
    }
}

/* Place the round's groups as aligned blocks and append them to the plan. */
static nsp_status_t mg_emit_round(mg_run_t *run)
{
    const nsp_cost_t *cost = &run->in->cost;
    double            maxt = 0.0;

    for (int g = 0; g < run->ngrp; ++g) {
        run->sizes[g] = run->grp[g].size;
    }
    NSP_CHECK(nsp_pack_aligned(run->sizes, run->ngrp, cost->cluster.ranks, run->rank0));
    for (int g = 0; g < run->ngrp; ++g) {
        const mg_group_t *gr = &run->grp[g];
        nsp_group_desc_t *gd = &run->desc[run->ndesc];
        gd->round     = run->nrounds;
        gd->rank0     = run->rank0[g];
        gd->size      = gr->size;
        gd->recompute = run->rc;
        gd->pipelined = 0;   /* one group per rank: nothing to overlap with */
        gd->ring      = gr->ring;
        for (int i = gr->top; i >= 0; i = run->below[i]) {
            run->seq_group[i] = run->ndesc;
        }
        maxt = fmax(maxt, gr->time);
        run->ndesc++;
    }
    run->step += cost->model.layers * maxt + cost->round_s;
    run->nrounds++;
    return NSP_OK;
}

/* One round: fill, trim, spread over idle ranks, emit; pend[] becomes what
 * is left. *placed = 0 if nothing could be placed. */
static nsp_status_t mg_round(mg_run_t *run, int *placed)
{
    int ntrimmed = 0;

    run->ngrp       = 0;
    run->free_ranks = run->in->cost.cluster.ranks;
    mg_make_buckets(run);
    *placed = mg_fill(run);
    if (*placed == 0) {
        return NSP_OK;
    }
    mg_trim(run, &ntrimmed);
    mg_fill_idle(run);
    NSP_CHECK(mg_emit_round(run));
    mg_collect_leftovers(run, ntrimmed);
    return NSP_OK;
}

/* ---- one run, the knob search, the entry point ------------------------------- */

/* Why a knob value cannot plan the batch (for the error of a fixed knob). */
typedef struct mg_reject {
    int    seq;     /* the sequence, -1 if none */
    int    deg;     /* its d(s) */
    double mem;     /* its activation bytes per rank at d(s) (0: the degree is the reason) */
    int    rounds;  /* 1: max_rounds was the reason */
} mg_reject_t;

/* The largest power-of-two degree a group may have. */
static int mg_top_degree(const nsp_planner_input_t *in)
{
    int d = 1;

    while (mg_degree_allowed(in, 2 * d)) {
        d *= 2;
    }
    return d;
}

/* Degrees and bucket work of every sequence for (m, rc); 0 (and *why) if a
 * sequence gets a degree no group may have or does not fit memory alone. */
static int mg_prepare(mg_run_t *run, int64_t m, int rc, mg_reject_t *why)
{
    const nsp_planner_input_t *in = run->in;
    const int                  top = mg_top_degree(in);

    run->m  = m;
    run->rc = rc;
    for (int i = 0; i < in->nseqs; ++i) {
        mg_group_t     g;
        nsp_seq_cost_t c;
        const int      d = mg_degree_of(in->lens[i], m, in->cost.cluster.ranks);
        why->seq = i;
        why->deg = d;
        why->mem = 0.0;
        if (d > top) {
            return 0;
        }
        mg_seq_cost(run, i, d, &c);
        if (c.mem_bytes > in->mem_cap) {
            why->mem = c.mem_bytes;
            return 0;
        }
        run->deg[i] = d;
        memset(&g, 0, sizeof(g));
        g.size = d;
        g.ring = nsp_planner_ring_of(in, d);
        g.top  = -1;
        mg_group_add(run, &g, i);
        run->work[i] = g.time;
    }
    memcpy(run->pend, in->order, sizeof(int) * (size_t)in->nseqs);
    run->npend   = in->nseqs;
    run->ndesc   = 0;
    run->nrounds = 0;
    run->step    = 0.0;
    why->seq     = -1;
    return 1;
}

/* Rounds until every sequence is placed; *ok = 0 past max_rounds. */
static nsp_status_t mg_run(mg_run_t *run, int *ok)
{
    while (run->npend > 0) {
        int placed;
        if (run->nrounds >= run->in->max_rounds) {
            *ok = 0;
            return NSP_OK;
        }
        NSP_CHECK(mg_round(run, &placed));
        if (!placed) {
            return nsp_error(NSP_ERR_INTERNAL, "megatron planner: an empty round could not "
                             "place sequence %d", run->pend[0]);
        }
    }
    *ok = 1;
    return NSP_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The values a careful user would try for max_seqlen_per_rank: those that
 * give the longest sequence 1, 2, 4, ... ranks, the powers of two, and the
 * most tokens one rank can hold; all between longest / top degree and what a
 * rank holds (a value above that would not hold its own chunk). */
static int mg_knobs(const nsp_planner_input_t *in, int rc, int64_t *knob)
{
    const int64_t smax = in->nseqs > 0 ? in->lens[in->order[0]] : 1;
    const int     top  = mg_top_degree(in);
    const int64_t lo   = (smax + top - 1) / top;
    int64_t       hold = (int64_t)floor(in->mem_cap / nsp_cost_act_bytes(&in->cost, rc));
    int           n = 0, u = 0;

    hold = hold < smax ? hold : smax;
    for (int64_t d = 1; d <= top && n < MG_MAX_KNOBS; d *= 2) {
        knob[n++] = (smax + d - 1) / d;
    }
    for (int64_t p = 1; p <= hold && n < MG_MAX_KNOBS; p *= 2) {
        knob[n++] = p;
    }
    if (n < MG_MAX_KNOBS) {
        knob[n++] = hold;
    }
    qsort(knob, (size_t)n, sizeof(*knob), cmp_i64);
    for (int k = 0; k < n; ++k) {
        if (knob[k] >= lo && knob[k] <= hold && knob[k] >= 1 && (u == 0 || knob[u - 1] != knob[k])) {
            knob[u++] = knob[k];
        }
    }
    return u;
}

static void mg_run_free(mg_run_t *run)
{
    free(run->deg);
    free(run->work);
    free(run->pend);
    free(run->left);
    free(run->trimmed);
    free(run->chain);
    free(run->bstart);
    free(run->bhead);
    free(run->below);
    free(run->grp);
    free(run->sizes);
    free(run->rank0);
    free(run->desc);
    free(run->seq_group);
}

static nsp_status_t mg_run_alloc(const nsp_planner_input_t *in, mg_run_t *run)
{
    const size_t n = (size_t)(in->nseqs > 0 ? in->nseqs : 1);
    const size_t N = (size_t)in->cost.cluster.ranks;

    memset(run, 0, sizeof(*run));
    run->in        = in;
    run->deg       = malloc(sizeof(int) * n);
    run->work      = malloc(sizeof(double) * n);
    run->pend      = malloc(sizeof(int) * n);
    run->left      = malloc(sizeof(int) * n);
    run->trimmed   = malloc(sizeof(int) * n);
    run->chain     = malloc(sizeof(int) * n);
    run->bstart    = malloc(sizeof(int) * (n + 1));
    run->bhead     = malloc(sizeof(int) * n);
    run->below     = malloc(sizeof(int) * n);
    run->grp       = malloc(sizeof(mg_group_t) * N);
    run->sizes     = malloc(sizeof(int) * N);
    run->rank0     = malloc(sizeof(int) * N);
    run->desc      = malloc(sizeof(nsp_group_desc_t) * n);
    run->seq_group = malloc(sizeof(int) * n);
    if (run->deg == NULL || run->work == NULL || run->pend == NULL || run->left == NULL ||
        run->trimmed == NULL || run->chain == NULL || run->bstart == NULL ||
        run->bhead == NULL || run->below == NULL || run->grp == NULL || run->sizes == NULL ||
        run->rank0 == NULL || run->desc == NULL || run->seq_group == NULL) {
        mg_run_free(run);
        return nsp_error(NSP_ERR_NO_MEMORY, "megatron planner: cannot allocate scratch for %d "
                         "sequences", in->nseqs);
    }
    return NSP_OK;
}

/* The error for a max_seqlen_per_rank the user fixed and no plan came of. */
static nsp_status_t mg_knob_error(const nsp_planner_input_t *in, int64_t m, int rc,
                                  const mg_reject_t *why)
{
    const int top = mg_top_degree(in);

    if (why->rounds) {
        return nsp_error(NSP_ERR_INFEASIBLE, "megatron planner: with max_seqlen_per_rank=%lld "
                         "the batch needs more than max_rounds=%d rounds", (long long)m,
                         in->max_rounds);
    }
    if (why->mem <= 0.0) {
        const int64_t s = in->lens[why->seq];
        return nsp_error(NSP_ERR_INVALID_ARG, "params.max_seqlen_per_rank=%lld gives sequence "
                         "%d (%lld tokens) 2^ceil(log2(%lld / %lld)) = %d ranks, more than the "
                         "largest power-of-two degree %d; use max_seqlen_per_rank >= %lld",
                         (long long)m, why->seq, (long long)s, (long long)s, (long long)m,
                         why->deg, top, (long long)((s + top - 1) / top));
    }
    return nsp_error(NSP_ERR_INVALID_ARG, "params.max_seqlen_per_rank=%lld: sequence %d (%lld "
                     "tokens) on %d ranks needs %.2f GiB of activations per rank (%s) but a "
                     "rank has %.2f GiB for them; use a smaller value%s", (long long)m,
                     why->seq, (long long)in->lens[why->seq], why->deg, why->mem / GIB,
                     rc ? "recomputed" : "kept", in->mem_cap / GIB,
                     rc ? "" : " or recomputation");
}

/* Keep run's plan in best if faster. */
static void mg_keep(const mg_run_t *run, mg_run_t *best)
{
    const size_t n = (size_t)run->in->nseqs;

    if (run->step >= best->step) {
        return;
    }
    memcpy(best->desc, run->desc, sizeof(*run->desc) * (size_t)run->ndesc);
    memcpy(best->seq_group, run->seq_group, sizeof(int) * n);
    best->ndesc   = run->ndesc;
    best->nrounds = run->nrounds;
    best->step    = run->step;
    best->m       = run->m;
    best->rc      = run->rc;
}

/* Every (knob, recompute) of the search through the policy; the fastest in best. */
static nsp_status_t mg_search(const nsp_planner_input_t *in, mg_run_t *run, mg_run_t *best,
                              mg_reject_t *why)
{
    int64_t knob[MG_MAX_KNOBS];

    for (int rc = 0; rc <= 1; ++rc) {
        int nk;
        if (in->static_recompute >= 0 && rc != in->static_recompute) {
            continue;
        }
        nk = in->max_seqlen_per_rank > 0 ? 1 : mg_knobs(in, rc, knob);
        if (in->max_seqlen_per_rank > 0) {
            knob[0] = in->max_seqlen_per_rank;
        }
        for (int k = 0; k < nk; ++k) {
            int ok;
            why->rounds = 0;
            if (!mg_prepare(run, knob[k], rc, why)) {
                continue;
            }
            NSP_CHECK(mg_run(run, &ok));
            why->rounds = !ok;
            NSP_DEBUG("megatron: max_seqlen_per_rank %lld, %s: %s %.6f s in %d rounds",
                      (long long)knob[k], rc ? "recomputed" : "kept",
                      ok ? "step" : "over max_rounds", ok ? run->step : 0.0, run->nrounds);
            if (ok) {
                mg_keep(run, best);
            }
        }
    }
    return NSP_OK;
}

static nsp_status_t megatron_plan(const nsp_planner_input_t *in, nsp_plan_t **plan)
{
    mg_run_t     run, best;
    mg_reject_t  why = {-1, 0, 0.0, 0};
    nsp_status_t status;

    NSP_CHECK(mg_run_alloc(in, &run));
    NSP_CHECK_GOTO(mg_run_alloc(in, &best), status, out_free_run);
    best.step = DBL_MAX;
    NSP_CHECK_GOTO(mg_search(in, &run, &best, &why), status, out_free_best);
    if (best.step == DBL_MAX) {
        if (in->max_seqlen_per_rank > 0) {
            status = mg_knob_error(in, in->max_seqlen_per_rank,
                                   in->static_recompute >= 0 ? in->static_recompute : 1, &why);
        } else {
            status = nsp_error(NSP_ERR_INFEASIBLE, "megatron planner: no max_seqlen_per_rank "
                               "places the batch in at most %d rounds; raise params.max_rounds",
                               in->max_rounds);
        }
        goto out_free_best;
    }
    NSP_DEBUG("megatron: chose max_seqlen_per_rank %lld, %s: %.6f s in %d rounds",
              (long long)best.m, best.rc ? "recomputed" : "kept", best.step, best.nrounds);
    status = nsp_plan_build("megatron", &in->cost.model, &in->cost.cluster, in->lens,
                            in->nseqs, best.desc, best.ndesc, best.seq_group, plan);
out_free_best:
    mg_run_free(&best);
out_free_run:
    mg_run_free(&run);
    return status;
}

/* Every rank with rings, else the largest Ulysses degree. */
static int megatron_top_degree(const nsp_planner_input_t *in)
{
    return nsp_cost_top_degree(&in->cost, in->enable_ring);
}

const nsp_planner_entry_t nsp_planner_megatron_entry = {
    .name       = "megatron",
    .kind       = NSP_PLANNER_MEGATRON,
    .caps       = NSP_PLANNER_CAP_DISJOINT_ROUNDS | NSP_PLANNER_CAP_RING_LEVELS,
    .top_degree = megatron_top_degree,
    .plan       = megatron_plan,
};

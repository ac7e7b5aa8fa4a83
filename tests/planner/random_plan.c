/* Random valid plans and small helpers for the planner tests; see random_plan.h. */
#include "random_plan.h"
#include "planner/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef NSP_TEST_SRCDIR
#define NSP_TEST_SRCDIR "."
#endif

uint64_t rp_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t rp_range(uint64_t *state, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rp_next(state) % (uint64_t)(hi - lo + 1));
}

double rp_unit(uint64_t *state)
{
    return (double)(rp_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

int64_t rp_length(uint64_t *state, int64_t lo, int64_t hi)
{
    double  x = exp(log((double)lo) + rp_unit(state) * (log((double)hi) - log((double)lo)));
    int64_t s = (int64_t)x;

    return s < lo ? lo : (s > hi ? hi : s);
}

/* Builder state: groups of all rounds and per-(round, rank) activation bytes. */
typedef struct rp_builder {
    const nsp_cost_t *cost;
    nsp_group_desc_t *groups;
    int               ngroups, cap;
    double           *mem;        /* [rounds_cap * ranks] activation bytes */
    int               rounds_cap;
    double            budget;     /* activation bytes a rank may hold */
    int               ring;       /* 1: rings allowed (rp_make_ring) */
} rp_builder_t;

static int rp_add_group(rp_builder_t *b, int round, int rank0, int size, int recompute,
                        int pipelined, int ring)
{
    if (b->ngroups == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->groups = realloc(b->groups, sizeof(*b->groups) * (size_t)b->cap);
        if (b->groups == NULL) {
            abort();
        }
    }
    b->groups[b->ngroups] = (nsp_group_desc_t){round, rank0, size, recompute, pipelined, ring};
    return b->ngroups++;
}

/* Does sequence s fit in group g's ranks in its round? If so, account it. */
static int rp_try_place(rp_builder_t *b, int g, double s)
{
    const nsp_group_desc_t *grp = &b->groups[g];
    double                  add = s / grp->size *
                                  (nsp_cost_act_bytes(b->cost, grp->recompute) +
                                   nsp_cost_ring_mem_per_token(b->cost, grp->size, grp->ring));
    double                 *mem = b->mem + (size_t)grp->round * (size_t)b->cost->cluster.ranks;

    for (int r = grp->rank0; r < grp->rank0 + grp->size; ++r) {
        if (mem[r] + add > b->budget) {
            return 0;
        }
    }
    for (int r = grp->rank0; r < grp->rank0 + grp->size; ++r) {
        mem[r] += add;
    }
    return 1;
}

/* Rings allowed: a random valid ring degree for a group of `size` ranks
 * (size / ring a valid Ulysses degree): ring 1 half of the time when the
 * size is a Ulysses degree itself, else any valid power of two. */
static int rp_ring_degree(uint64_t *st, const nsp_cost_t *cost, int size)
{
    int opts[32], n = 0;

    if (nsp_cost_degree_valid(cost, size) && rp_range(st, 0, 1) == 0) {
        return 1;
    }
    for (int r = 2; r <= size; r *= 2) {
        if (nsp_cost_group_valid(cost, size, r)) {
            opts[n++] = r;
        }
    }
    return n > 0 ? opts[rp_range(st, 0, n - 1)] : 1;
}

/* The most ring buffer bytes per token a group of `size` may need (0
 * without rings). */
static double rp_worst_ring_mem(const rp_builder_t *b, int size)
{
    double worst = 0.0;

    for (int r = 2; b->ring && r <= size; r *= 2) {
        if (nsp_cost_group_valid(b->cost, size, r)) {
            const double m = nsp_cost_ring_mem_per_token(b->cost, size, r);
            worst = m > worst ? m : worst;
        }
    }
    return worst;
}

/* The ring of a static or disjoint group: 1 unless rings are allowed. */
static int rp_flat_ring(rp_builder_t *b, uint64_t *st, int size)
{
    return b->ring ? rp_ring_degree(st, b->cost, size) : 1;
}

/* Group of tree node (round, rank0, size), created on first use. */
static int rp_node(rp_builder_t *b, uint64_t *st, int round, int rank0, int size,
                   const int *level_recompute, int level)
{
    for (int g = 0; g < b->ngroups; ++g) {
        if (b->groups[g].round == round && b->groups[g].rank0 == rank0 &&
            b->groups[g].size == size) {
            return g;
        }
    }
    {
        int ring = 1;
        if (b->ring) {
            ring = rp_ring_degree(st, b->cost, size);
        } else if (size >= 4 && rp_range(st, 0, 3) == 0) {
            ring = 2;   /* size/2 is a power of two too: a valid Ulysses degree */
        }
        return rp_add_group(b, round, rank0, size, level_recompute[level],
                            (int)rp_range(st, 0, 1), ring);
    }
}

/* Valid power-of-two degrees, ascending, into deg[]; returns the count.
 * With rings every power of two up to the ranks is one. */
static int rp_degrees(const nsp_cost_t *cost, int ring, int *deg)
{
    int n = 0;

    for (int d = 1; d <= cost->cluster.ranks; d *= 2) {
        if (ring || nsp_cost_degree_valid(cost, d)) {
            deg[n++] = d;
        }
    }
    return n;
}

/* A random partition of [0, ranks) into aligned power-of-two pieces <= dmax
 * (pieces larger than dmax are always split). */
static int rp_partition(uint64_t *st, int rank0, int size, int dmax, int *out_rank0,
                        int *out_size, int n)
{
    if (size <= dmax && (size == 1 || rp_range(st, 0, 2) == 0)) {
        out_rank0[n] = rank0;
        out_size[n] = size;
        return n + 1;
    }
    n = rp_partition(st, rank0, size / 2, dmax, out_rank0, out_size, n);
    return rp_partition(st, rank0 + size / 2, size / 2, dmax, out_rank0, out_size, n);
}

/* One disjoint round: [0, dmax) as one piece (so the longest sequence has a
 * home), the rest partitioned at random. Returns the number of pieces. */
static int rp_disjoint_round(uint64_t *st, int ranks, int dmax, int *rank0, int *size)
{
    int n = 1;

    rank0[0] = 0;
    size[0] = dmax;
    for (int r0 = dmax; r0 < ranks; r0 += dmax) {
        n = rp_partition(st, r0, dmax, dmax, rank0, size, n);
    }
    return n;
}

static nsp_status_t rp_make_any(uint64_t *st, rp_kind_t kind, const nsp_model_t *model,
                                const nsp_cluster_t *cluster, int nseqs, int64_t max_len,
                                int ring, nsp_plan_t **plan)
{
    static const char *const names[] = {"nested", "static", "disjoint"};
    nsp_cost_t   cost;
    rp_builder_t b = {0};
    int          deg[32], ndeg, ranks = cluster->ranks;
    int          level_recompute[32];
    int         *seq_group = malloc(sizeof(int) * (size_t)(nseqs > 0 ? nseqs : 1));
    int64_t     *lens = malloc(sizeof(int64_t) * (size_t)(nseqs > 0 ? nseqs : 1));
    int          static_deg = 1, static_rc, nrounds_used = 1, static_ring = 1;
    int64_t      longest = 1;
    int         *part_rank0 = malloc(sizeof(int) * (size_t)ranks);
    int         *part_size = malloc(sizeof(int) * (size_t)ranks);
    nsp_status_t status;

    status = nsp_cost_init(&cost, model, cluster);
    if (status != NSP_OK || seq_group == NULL || lens == NULL) {
        goto out;
    }
    b.cost = &cost;
    b.ring = ring;
    b.rounds_cap = nseqs + 1;
    b.mem = calloc((size_t)b.rounds_cap * (size_t)ranks, sizeof(double));
    b.budget = cluster->mem_bytes - cost.fixed_mem_bytes;
    /* Lengths first: the same state gives the same batch for every kind. */
    for (int i = 0; i < nseqs; ++i) {
        lens[i] = rp_length(st, 16, max_len);
        longest = lens[i] > longest ? lens[i] : longest;
    }
    ndeg = rp_degrees(&cost, ring, deg);
    for (int l = 0; l < ndeg; ++l) {
        level_recompute[l] = (int)rp_range(st, 0, 1);
    }
    static_rc = (int)rp_range(st, 0, 1);
    /* Static: a random degree among those that hold the longest sequence. */
    for (int pass = 0; pass < 2; ++pass) {
        int ok[32], nok = 0;
        for (int l = 0; l < ndeg; ++l) {
            if ((double)longest / deg[l] * (nsp_cost_act_bytes(&cost, static_rc) +
                                            rp_worst_ring_mem(&b, deg[l])) <= b.budget) {
                ok[nok++] = deg[l];
            }
        }
        if (nok > 0) {
            static_deg = ok[rp_range(st, 0, nok - 1)];
            break;
        }
        static_rc = 1;
        static_deg = deg[ndeg - 1];
    }
    if (kind == RP_STATIC) {
        static_ring = rp_flat_ring(&b, st, static_deg);
        for (int r0 = 0; r0 + static_deg <= ranks; r0 += static_deg) {
            rp_add_group(&b, 0, r0, static_deg, static_rc, 1, static_ring);
        }
    } else if (kind == RP_DISJOINT) {
        int n = rp_disjoint_round(st, ranks, deg[ndeg - 1], part_rank0, part_size);
        for (int k = 0; k < n; ++k) {
            rp_add_group(&b, 0, part_rank0[k], part_size[k], (int)rp_range(st, 0, 1), 1,
                         rp_flat_ring(&b, st, part_size[k]));
        }
    }
    for (int i = 0; i < nseqs; ++i) {
        int placed = 0;
        for (int round = 0; !placed && round < b.rounds_cap; ++round) {
            if (round >= nrounds_used && kind != RP_NESTED) {
                /* A new round of the same shape (static) or a new partition. */
                if (kind == RP_STATIC) {
                    for (int r0 = 0; r0 + static_deg <= ranks; r0 += static_deg) {
                        rp_add_group(&b, round, r0, static_deg, static_rc, 1, static_ring);
                    }
                } else {
                    int n = rp_disjoint_round(st, ranks, deg[ndeg - 1], part_rank0, part_size);
                    for (int k = 0; k < n; ++k) {
                        rp_add_group(&b, round, part_rank0[k], part_size[k],
                                     (int)rp_range(st, 0, 1), 1,
                                     rp_flat_ring(&b, st, part_size[k]));
                    }
                }
                nrounds_used = round + 1;
            }
            if (kind == RP_NESTED) {
                /* Random tree nodes, then every node of the top level. */
                for (int attempt = 0; !placed && attempt < 8 + ranks / deg[ndeg - 1]; ++attempt) {
                    int l = attempt < 8 ? (int)rp_range(st, 0, ndeg - 1) : ndeg - 1;
                    int d = deg[l];
                    int r0 = attempt < 8 ? d * (int)rp_range(st, 0, ranks / d - 1)
                                         : d * (attempt - 8);
                    int g = rp_node(&b, st, round, r0, d, level_recompute, l);
                    if (rp_try_place(&b, g, (double)lens[i])) {
                        seq_group[i] = g;
                        placed = 1;
                    }
                }
            } else {
                int first = -1, count = 0, start;
                for (int k = 0; k < b.ngroups; ++k) {
                    if (b.groups[k].round == round) {
                        first = first < 0 ? k : first;
                        ++count;
                    }
                }
                start = (int)rp_range(st, 0, count - 1);
                for (int k = 0; !placed && k < count; ++k) {
                    int g = first + (start + k) % count;
                    if (rp_try_place(&b, g, (double)lens[i])) {
                        seq_group[i] = g;
                        placed = 1;
                    }
                }
            }
            if (kind == RP_NESTED && round + 1 > nrounds_used) {
                nrounds_used = round + 1;
            }
        }
        if (!placed) {
            status = NSP_ERR_INFEASIBLE;
            fprintf(stderr, "rp_make: sequence %d (%lld tokens) fits nowhere\n", i,
                    (long long)lens[i]);
            goto out;
        }
    }
    status = nsp_plan_build(names[kind], model, cluster, lens, nseqs, b.groups, b.ngroups,
                            seq_group, plan);
    if (status == NSP_OK && ring) {
        /* planned with rings allowed: the lower bound with rings */
        (*plan)->flags |= NSP_PLAN_FLAG_RING;
        status = nsp_plan_evaluate(*plan);
    }

out:
    free(part_rank0);
    free(part_size);
    free(b.groups);
    free(b.mem);
    free(seq_group);
    free(lens);
    return status;
}

nsp_status_t rp_make(uint64_t *st, rp_kind_t kind, const nsp_model_t *model,
                     const nsp_cluster_t *cluster, int nseqs, int64_t max_len,
                     nsp_plan_t **plan)
{
    return rp_make_any(st, kind, model, cluster, nseqs, max_len, 0, plan);
}

nsp_status_t rp_make_ring(uint64_t *st, rp_kind_t kind, const nsp_model_t *model,
                          const nsp_cluster_t *cluster, int nseqs, int64_t max_len,
                          nsp_plan_t **plan)
{
    return rp_make_any(st, kind, model, cluster, nseqs, max_len, 1, plan);
}

const char *rp_srcdir_path(const char *rel)
{
    static char buf[4096];
    const char *top = getenv("NSP_TOP_SRCDIR");

    snprintf(buf, sizeof(buf), "%s/%s", top != NULL && top[0] != '\0' ? top : NSP_TEST_SRCDIR,
             rel);
    return buf;
}

const char *rp_temp_file(const char *text)
{
    static char paths[8][64];
    static int  next;
    char       *path = paths[next++ % 8];
    int         fd;
    size_t      len = strlen(text);

    snprintf(path, 64, "/tmp/nsp_test_XXXXXX.json");
    fd = mkstemps(path, 5);
    if (fd < 0) {
        return NULL;
    }
    if (write(fd, text, len) != (ssize_t)len) {
        close(fd);
        unlink(path);
        return NULL;
    }
    close(fd);
    return path;
}

char *rp_read_text(const char *path)
{
    FILE  *f = fopen(path, "rb");
    char  *buf = NULL;
    size_t cap = 0, n = 0, got;

    if (f == NULL) {
        return NULL;
    }
    do {
        if (cap - n < 4096) {
            char *nb = realloc(buf, cap + 65536);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap += 65536;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Random nested plans and an independent reference for the nested all-to-all. */
#include "a2a_ref.h"
#include "attn_sp/attn_reduce_map.h"
#include "planner/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t a2a_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t a2a_rand_range(uint64_t *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(a2a_rand(s) % (uint64_t)(hi - lo + 1));
}

void a2a_random_degrees(uint64_t *rng, int nranks, a2a_plan_opts_t *o)
{
    int all[16], n = 0;

    /* A full chain: from 1, multiply by the smallest prime factor left. */
    all[n++] = 1;
    for (int d = 1; d < nranks && n < 16;) {
        int p = 2;
        while ((nranks / d) % p != 0) {
            ++p;
        }
        d *= p;
        all[n++] = d;
    }
    o->ndegrees   = 0;
    o->degrees[o->ndegrees++] = 1;
    for (int k = 1; k < n; ++k) {
        /* Keep each level with probability 3/4 (skipped levels stay empty). */
        if (a2a_rand(rng) % 4 != 0 || (k == n - 1 && o->ndegrees == 1)) {
            o->degrees[o->ndegrees++] = all[k];
        }
    }
    o->nranks = nranks;
}

int a2a_random_heads(uint64_t *rng, const a2a_plan_opts_t *o)
{
    int cand[128], n = 0;

    for (int h = 1; h <= 2 * o->nranks && n < 128; ++h) {
        int ok = 1;
        for (int k = 0; k < o->ndegrees; ++k) {
            int d = o->degrees[k];
            ok &= (h % d == 0 || d % h == 0);
        }
        if (ok) {
            cand[n++] = h;
        }
    }
    return cand[a2a_rand(rng) % (uint64_t)n];
}

/* Long-tailed length in [1, max_len]: log-uniform, with some tiny ones. */
static int64_t random_len(uint64_t *rng, int64_t max_len)
{
    double u;

    if (a2a_rand(rng) % 8 == 0) {
        return a2a_rand_range(rng, 1, max_len < 5 ? max_len : 5);
    }
    u = (double)(a2a_rand(rng) >> 11) / 9007199254740992.0;
    return 1 + (int64_t)floor(exp(u * log((double)max_len)));
}

typedef struct ref_group {
    int round, size, rank0, nseqs, cap;
    int *seqs;
} ref_group_t;

nsp_plan_t *a2a_random_plan(uint64_t *rng, const a2a_plan_opts_t *o)
{
    int           nseqs = o->nrounds * o->seqs_per_round, ng = 0;
    int64_t      *lens  = calloc((size_t)nseqs + 1, sizeof(int64_t));
    ref_group_t  *g     = calloc((size_t)nseqs * 2 + 1, sizeof(*g));
    nsp_model_t   model;
    nsp_cluster_t cluster;
    nsp_plan_t   *plan = NULL;

    memset(&model, 0, sizeof(model));
    memset(&cluster, 0, sizeof(cluster));
    snprintf(model.name, sizeof(model.name), "a2a-test");
    snprintf(cluster.name, sizeof(cluster.name), "a2a-test");
    cluster.ranks          = o->nranks;
    cluster.ranks_per_node = o->nranks;
    if (lens == NULL || g == NULL) {
        goto out;
    }
    for (int i = 0; i < nseqs; ++i) {
        int     round = i % o->nrounds, k, d, rank0, gi;
        int64_t len = random_len(rng, o->max_len);
        /* Longer sequences go to larger degrees more often. */
        k = (int)a2a_rand_range(rng, 0, o->ndegrees - 1);
        if (len > o->max_len / 4 && k < o->ndegrees - 1 && a2a_rand(rng) % 2) {
            k = o->ndegrees - 1;
        }
        d     = o->degrees[k];
        rank0 = d * (int)a2a_rand_range(rng, 0, o->nranks / d - 1);
        lens[i] = len;
        for (gi = 0; gi < ng; ++gi) {
            if (g[gi].round == round && g[gi].size == d && g[gi].rank0 == rank0 &&
                !(o->messy && a2a_rand(rng) % 5 == 0)) {
                break; /* messy: sometimes open a duplicate entry of the same group */
            }
        }
        if (gi == ng) {
            g[ng++] = (ref_group_t){.round = round, .size = d, .rank0 = rank0};
        }
        if (g[gi].nseqs == g[gi].cap) {
            int *s;
            g[gi].cap = g[gi].cap ? 2 * g[gi].cap : 4;
            s = realloc(g[gi].seqs, sizeof(int) * (size_t)g[gi].cap);
            if (s == NULL) {
                goto out;
            }
            g[gi].seqs = s;
        }
        g[gi].seqs[g[gi].nseqs++] = i;
    }
    if (o->messy) {
        for (int a = ng - 1; a > 0; --a) {
            int         b = (int)a2a_rand_range(rng, 0, a);
            ref_group_t t = g[a];
            g[a] = g[b];
            g[b] = t;
        }
    }
    if (nsp_plan_alloc("a2a-test", &model, &cluster, lens, nseqs, &plan) != NSP_OK) {
        goto out;
    }
    plan->rounds  = calloc((size_t)o->nrounds, sizeof(*plan->rounds));
    if (plan->rounds == NULL) {
        goto err_free_plan;
    }
    plan->nrounds = o->nrounds;
    for (int r = 0; r < o->nrounds; ++r) {
        nsp_plan_round_t *pr = &plan->rounds[r];
        pr->groups = calloc((size_t)ng + 1, sizeof(*pr->groups));
        if (pr->groups == NULL) {
            goto err_free_plan;
        }
        for (int gi = 0; gi < ng; ++gi) {
            nsp_plan_group_t *pg;
            if (g[gi].round != r) {
                continue;
            }
            pg = &pr->groups[pr->ngroups++];
            pg->rank0 = g[gi].rank0;
            pg->size  = g[gi].size;
            pg->nseqs = g[gi].nseqs;
            pg->ring  = 1;
            pg->pipelined = 1;
            pg->seqs  = g[gi].seqs;
            g[gi].seqs = NULL; /* now owned by the plan */
        }
    }
    goto out;

err_free_plan:
    nsp_plan_free(plan);
    plan = NULL;
out:
    for (int gi = 0; g != NULL && gi < ng; ++gi) {
        free(g[gi].seqs);
    }
    free(g);
    free(lens);
    return plan;
}

nsp_plan_t *a2a_random_disjoint_plan(uint64_t *rng, a2a_plan_opts_t *o)
{
    int           nseqs = o->nrounds * o->seqs_per_round;
    int64_t      *lens  = calloc((size_t)nseqs + 1, sizeof(int64_t));
    nsp_model_t   model;
    nsp_cluster_t cluster;
    nsp_plan_t   *plan = NULL;

    memset(&model, 0, sizeof(model));
    memset(&cluster, 0, sizeof(cluster));
    cluster.ranks = o->nranks;
    o->ndegrees   = 3;
    o->degrees[0] = 1;
    o->degrees[1] = 2;
    o->degrees[2] = 4;
    if (lens == NULL) {
        return NULL;
    }
    for (int i = 0; i < nseqs; ++i) {
        lens[i] = random_len(rng, o->max_len);
    }
    if (nsp_plan_alloc("a2a-disjoint", &model, &cluster, lens, nseqs, &plan) != NSP_OK) {
        free(lens);
        return NULL;
    }
    free(lens);
    plan->rounds = calloc((size_t)o->nrounds, sizeof(*plan->rounds));
    if (plan->rounds == NULL) {
        goto err_free_plan;
    }
    plan->nrounds = o->nrounds;
    for (int r = 0; r < o->nrounds; ++r) {
        nsp_plan_round_t *pr = &plan->rounds[r];
        int               at = 0;
        pr->groups = calloc((size_t)o->nranks, sizeof(*pr->groups));
        if (pr->groups == NULL) {
            goto err_free_plan;
        }
        while (at < o->nranks) { /* cut [0, nranks) into groups of 1, 2 or 4 */
            int size = 1 << a2a_rand_range(rng, 0, 2);
            while (at + size > o->nranks) {
                size /= 2;
            }
            pr->groups[pr->ngroups].rank0     = at;
            pr->groups[pr->ngroups].size      = size;
            pr->groups[pr->ngroups].ring      = 1;
            pr->groups[pr->ngroups].pipelined = 1;
            pr->groups[pr->ngroups].seqs      = malloc(sizeof(int) * (size_t)o->seqs_per_round);
            if (pr->groups[pr->ngroups].seqs == NULL) {
                goto err_free_plan;
            }
            pr->ngroups++;
            at += size;
        }
        for (int j = 0; j < o->seqs_per_round; ++j) {
            nsp_plan_group_t *pg = &pr->groups[a2a_rand_range(rng, 0, pr->ngroups - 1)];
            pg->seqs[pg->nseqs++] = r * o->seqs_per_round + j;
        }
    }
    return plan;

err_free_plan:
    nsp_plan_free(plan);
    return NULL;
}

static uint32_t mix32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

void a2a_value(int seq, int64_t token, int head, int dim, size_t elem_size, void *out)
{
    uint32_t v = mix32(((uint64_t)seq << 40) ^ ((uint64_t)token << 16) ^
                       ((uint64_t)head << 8) ^ (uint64_t)dim);
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                          (unsigned char)(v >> 16), (unsigned char)(v >> 24)};

    memcpy(out, b, elem_size < 4 ? elem_size : 4);
}

float a2a_value_f32(int seq, int64_t token, int head, int dim)
{
    return (float)(mix32(((uint64_t)seq << 40) ^ ((uint64_t)token << 16) ^
                         ((uint64_t)head << 8) ^ (uint64_t)dim) % 1000u) - 500.0f;
}

/* ---- the independent view of one rank ---------------------------------- */

typedef struct ref_level {
    int  degree, rank0;
    int  nseqs;
    int *seqs;  /* [nseqs] */
} ref_level_t;

/* The rank's levels: degree 1 first, then the other distinct degrees of the
 * groups holding it, ascending; each with its groups' sequences in plan order. */
static int ref_levels(const nsp_plan_t *plan, int round, int rank, ref_level_t **out, int *n)
{
    const nsp_plan_round_t *r = &plan->rounds[round];
    int                     degrees[64], nd = 0;
    ref_level_t            *lv;

    degrees[nd++] = 1;
    for (int g = 0; g < r->ngroups; ++g) {
        const nsp_plan_group_t *pg = &r->groups[g];
        int                     seen = 0;
        if (rank < pg->rank0 || rank >= pg->rank0 + pg->size) {
            continue;
        }
        for (int k = 0; k < nd; ++k) {
            seen |= degrees[k] == pg->size;
        }
        if (!seen && nd < 64) {
            degrees[nd++] = pg->size;
        }
    }
    for (int a = 0; a < nd; ++a) { /* bubble sort: tiny */
        for (int b = 0; b + 1 < nd - a; ++b) {
            if (degrees[b] > degrees[b + 1]) {
                int t = degrees[b];
                degrees[b] = degrees[b + 1];
                degrees[b + 1] = t;
            }
        }
    }
    lv = calloc((size_t)(unsigned)nd + 1, sizeof(*lv));
    if (lv == NULL) {
        return -1;
    }
    for (int k = 0; k < nd; ++k) {
        lv[k].degree = degrees[k];
        lv[k].rank0  = rank;
        lv[k].seqs   = malloc(sizeof(int) * (size_t)(plan->nseqs + 1));
        if (lv[k].seqs == NULL) {
            return -1;
        }
        for (int g = 0; g < r->ngroups; ++g) {
            const nsp_plan_group_t *pg = &r->groups[g];
            if (pg->size != degrees[k] || rank < pg->rank0 || rank >= pg->rank0 + pg->size) {
                continue;
            }
            lv[k].rank0 = pg->rank0;
            for (int j = 0; j < pg->nseqs; ++j) {
                lv[k].seqs[lv[k].nseqs++] = pg->seqs[j];
            }
        }
    }
    *out = lv;
    *n   = nd;
    return 0;
}

static void ref_levels_free(ref_level_t *lv, int n)
{
    for (int k = 0; lv != NULL && k < n; ++k) {
        free(lv[k].seqs);
    }
    free(lv);
}

/* Hand the s tokens out one at a time to the index holding fewest (lowest
 * index on ties): index i gets tokens [*start, *start + *len). */
static void ref_chunk(int64_t s, int d, int i, int64_t *start, int64_t *len)
{
    int64_t count[256] = {0};

    for (int64_t t = 0; t < s; ++t) {
        int best = 0;
        for (int k = 1; k < d; ++k) {
            if (count[k] < count[best]) {
                best = k;
            }
        }
        count[best]++;
    }
    *start = 0;
    for (int k = 0; k < i; ++k) {
        *start += count[k];
    }
    *len = count[i];
}

/* Does index i of a degree-d group hold head h (of H)? */
static int ref_holds(int h, int heads, int d, int i)
{
    if (d <= heads) {
        return (int)((int64_t)h * d / heads) == i;
    }
    return (int)((int64_t)i * heads / d) == h;
}

static int ref_replicas(int heads, int d)
{
    return d > heads ? d / heads : 1;
}

float a2a_value_small(int seq, int64_t token, int head, int dim)
{
    return (float)(((int)a2a_value_f32(seq, token, head, dim) + 500) % 16) - 8.0f;
}

void a2a_put_num(int kind, void *p, float v)
{
    uint16_t h = kind == A2A_NUM_BF16 ? nsp_rd_float_to_bf16(v) : nsp_rd_float_to_half(v);

    if (kind == A2A_NUM_F32) {
        memcpy(p, &v, sizeof(v));
    } else {
        memcpy(p, &h, sizeof(h));
    }
}

static void put(void *buf, int64_t idx, size_t elem_size, int f32, int seq, int64_t tok, int h,
                int dim, float scale)
{
    char *p = (char *)buf + (size_t)idx * elem_size;

    if (f32 == A2A_NUM_F32) {
        a2a_put_num(f32, p, a2a_value_f32(seq, tok, h, dim) * scale);
    } else if (f32 != A2A_NUM_BYTES) { /* 16-bit: small integers, every sum exact */
        a2a_put_num(f32, p, a2a_value_small(seq, tok, h, dim) * scale);
    } else {
        a2a_value(seq, tok, h, dim, elem_size, p);
    }
}

static int ref_seq_sharded(const nsp_plan_t *plan, int round, int rank, int heads, int head_dim,
                           size_t elem_size, int f32, int summed, void **buf, int64_t *tokens)
{
    ref_level_t *lv = NULL;
    int          nl = 0;
    int64_t      total = 0, idx = 0, start, len;
    char        *out;

    if (ref_levels(plan, round, rank, &lv, &nl) != 0) {
        return -1;
    }
    for (int k = 0; k < nl; ++k) {
        for (int j = 0; j < lv[k].nseqs; ++j) {
            ref_chunk(plan->seq_lens[lv[k].seqs[j]], lv[k].degree, rank - lv[k].rank0, &start,
                      &len);
            total += len;
        }
    }
    out = malloc((size_t)(total * heads * head_dim) * elem_size + 1);
    if (out == NULL) {
        ref_levels_free(lv, nl);
        return -1;
    }
    for (int k = 0; k < nl; ++k) {
        for (int j = 0; j < lv[k].nseqs; ++j) {
            int s = lv[k].seqs[j];
            ref_chunk(plan->seq_lens[s], lv[k].degree, rank - lv[k].rank0, &start, &len);
            for (int64_t t = start; t < start + len; ++t) {
                for (int h = 0; h < heads; ++h) {
                    float scale = summed ? (float)ref_replicas(heads, lv[k].degree) : 1.0f;
                    for (int e = 0; e < head_dim; ++e) {
                        put(out, idx++, elem_size, f32, s, t, h, e, scale);
                    }
                }
            }
        }
    }
    ref_levels_free(lv, nl);
    *buf    = out;
    *tokens = total;
    return 0;
}

int a2a_ref_seq_sharded(const nsp_plan_t *plan, int round, int rank, int heads, int head_dim,
                        size_t elem_size, int f32, void **buf, int64_t *tokens)
{
    return ref_seq_sharded(plan, round, rank, heads, head_dim, elem_size, f32, 0, buf, tokens);
}

int a2a_ref_seq_sharded_summed(const nsp_plan_t *plan, int round, int rank, int heads,
                               int head_dim, int kind, void **buf, int64_t *tokens)
{
    return ref_seq_sharded(plan, round, rank, heads, head_dim, kind == A2A_NUM_F32 ? 4 : 2,
                           kind, 1, buf, tokens);
}

int a2a_ref_head_sharded(const nsp_plan_t *plan, int round, int rank, int heads, int head_dim,
                         size_t elem_size, int f32, void **buf, int64_t *rows)
{
    ref_level_t *lv = NULL;
    int          nl = 0;
    int64_t      total = 0, idx = 0;
    char        *out;

    if (ref_levels(plan, round, rank, &lv, &nl) != 0) {
        return -1;
    }
    for (int k = 0; k < nl; ++k) {
        int held = 0;
        for (int h = 0; h < heads; ++h) {
            held += ref_holds(h, heads, lv[k].degree, rank - lv[k].rank0);
        }
        for (int j = 0; j < lv[k].nseqs; ++j) {
            total += plan->seq_lens[lv[k].seqs[j]] * held;
        }
    }
    out = malloc((size_t)(total * head_dim) * elem_size + 1);
    if (out == NULL) {
        ref_levels_free(lv, nl);
        return -1;
    }
    for (int k = 0; k < nl; ++k) {
        for (int j = 0; j < lv[k].nseqs; ++j) {
            int s = lv[k].seqs[j];
            for (int64_t t = 0; t < plan->seq_lens[s]; ++t) {
                for (int h = 0; h < heads; ++h) {
                    if (!ref_holds(h, heads, lv[k].degree, rank - lv[k].rank0)) {
                        continue;
                    }
                    for (int e = 0; e < head_dim; ++e) {
                        put(out, idx++, elem_size, f32, s, t, h, e, 1.0f);
                    }
                }
            }
        }
    }
    ref_levels_free(lv, nl);
    *buf  = out;
    *rows = total;
    return 0;
}

nsp_plan_t *a2a_case_plan(uint64_t seed, int p, int nranks, int disjoint,
                          a2a_plan_opts_t *o, uint64_t *rng)
{
    memset(o, 0, sizeof(*o));
    *rng = seed + 7919u * (uint64_t)p;
    o->nranks         = nranks;
    o->nrounds        = 1 + (int)(a2a_rand(rng) % 2);
    o->seqs_per_round = 1 + (int)(a2a_rand(rng) % 10);
    o->max_len        = 2 + (int64_t)(a2a_rand(rng) % 6000);
    o->messy          = p % 2;
    if (disjoint) {
        return a2a_random_disjoint_plan(rng, o);
    }
    a2a_random_degrees(rng, nranks, o);
    return a2a_random_plan(rng, o);
}

int a2a_tensor_init(a2a_tensor_t *t, const nsp_plan_t *plan, int round, int rank, int heads,
                    int head_dim, size_t elem, int f32)
{
    memset(t, 0, sizeof(*t));
    t->heads    = heads;
    t->head_dim = head_dim;
    t->elem     = elem;
    t->f32      = f32;
    t->row      = (size_t)head_dim * elem;
    if (a2a_ref_seq_sharded(plan, round, rank, heads, head_dim, elem, f32, &t->seq, &t->T) ||
        a2a_ref_head_sharded(plan, round, rank, heads, head_dim, elem, f32, &t->ref, &t->rows)) {
        return -1;
    }
    t->head = malloc((size_t)t->rows * t->row + 1);
    t->back = malloc((size_t)t->T * (size_t)heads * t->row + 1);
    if (t->head == NULL || t->back == NULL) {
        return -1;
    }
    memset(t->head, 0xab, (size_t)t->rows * t->row);
    memset(t->back, 0xcd, (size_t)t->T * (size_t)heads * t->row);
    return 0;
}

void a2a_tensor_free(a2a_tensor_t *t)
{
    free(t->seq);
    free(t->head);
    free(t->back);
    free(t->ref);
    memset(t, 0, sizeof(*t));
}

/* Helpers of the planner tests: batches and an independent plan check. */
#include "check.h"
#include "nsp_opt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pc_seed_count(int argc, char **argv, int fallback)
{
    const char *env  = getenv("NSP_TEST_SEEDS");
    const char *text = argc > 1 ? argv[1] : env;
    int         n    = fallback;

    if (text != NULL && nsp_opt_int("planner test", argc > 1 ? "SEEDS" : "NSP_TEST_SEEDS", text,
                                    0, 1000000, &n) != NSP_OK) {
        exit(NSP_OPT_EXIT_USAGE); /* a test run with a bad seed count: say so, run nothing */
    }
    return n;
}

uint64_t pc_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double pc_unit(uint64_t *state)
{
    return (double)(pc_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

int pc_batch(uint64_t *state, int ranks, int64_t tokens_per_rank, int64_t max_len,
             int64_t **lens_p)
{
    const int64_t budget = (int64_t)ranks * tokens_per_rank;
    int64_t       total = 0, *lens = NULL;
    int           n = 0, cap = 0;

    while (total < budget) {
        double  u = pc_unit(state), v = pc_unit(state), len;
        int64_t s;
        if (u < 0.01) {
            /* Pareto tail from 8K: a few sequences carry much of the compute */
            len = 8192.0 * pow(1.0 - v, -1.0 / 1.1);
        } else {
            /* log-normal body: Box-Muller, median ~ 600 tokens */
            const double w = pc_unit(state);
            len = exp(6.4 + 1.3 * sqrt(-2.0 * log(1.0 - v)) * cos(2.0 * M_PI * w));
        }
        s = (int64_t)len;
        if (s < 1) {
            s = 1;
        }
        if (s > max_len) {
            s = max_len;
        }
        if (s > budget - total) {
            s = budget - total;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            lens = realloc(lens, sizeof(int64_t) * (size_t)cap);
            if (lens == NULL) {
                return -1;
            }
        }
        lens[n++] = s;
        total += s;
    }
    *lens_p = lens;
    return n;
}

static int fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return 0;
}

/* A group of d ranks with ring degree `ring`: d = u * ring, u a Ulysses
 * degree (u <= n_q, n_q % u == 0, and the KV heads shard over u ranks:
 * n_kv % u == 0 or u % n_kv == 0); ring 1 is docs/design.md §5.1's d | n_q. */
static int degree_ok(const nsp_plan_t *p, int d, int ring)
{
    const int u = ring >= 1 ? d / ring : 0;

    return d >= 1 && d <= p->cluster.ranks && ring >= 1 && d % ring == 0 &&
           u <= p->model.q_heads && p->model.q_heads % u == 0 &&
           (p->model.kv_heads % u == 0 || u % p->model.kv_heads == 0);
}

/* docs/reference/cost-model.md: a ring rank holds 5 KV blocks of u times its tokens,
 * K and V of max(n_kv, u)/u heads each, bf16; nothing for ring 1. */
static double ring_buffer_bytes(const nsp_model_t *m, int d, int ring)
{
    const int u = d / ring;
    const int kv = m->kv_heads > u ? m->kv_heads : u;

    return ring > 1 ? 5.0 * u * 2.0 * ((double)kv / u) * m->head_dim * 2.0 : 0.0;
}

/* Activation bytes per token (docs/design.md §5.1), kept or recomputed. */
static double act_bytes(const nsp_model_t *m, int recompute)
{
    const double keep = m->layers * 2.0 *
        (5.0 * m->hidden + ((double)m->q_heads + 2.0 * m->kv_heads) * m->head_dim + 3.0 * m->ffn);

    return recompute ? m->layers * (double)m->hidden * 2.0 + keep / m->layers : keep;
}

int pc_check_plan(const nsp_plan_t *p, int disjoint, char *why, size_t len)
{
    const int  N = p->cluster.ranks;
    int       *seen = calloc((size_t)(p->nseqs > 0 ? p->nseqs : 1), sizeof(int));
    double    *mem = malloc(sizeof(double) * (size_t)N);
    int        ok = 1;
    const double fixed = 16.0 * p->model.params / N + p->cluster.workspace_bytes;

    if (len > 0) {
        why[0] = '\0';
    }
    if (seen == NULL || mem == NULL) {
        free(seen);
        free(mem);
        return fail(why, len, "out of memory");
    }
    for (int r = 0; r < p->nrounds && ok; ++r) {
        const nsp_plan_round_t *rd = &p->rounds[r];
        if (rd->ngroups < 1) {
            ok = fail(why, len, "round %d has no group", r);
            break;
        }
        for (int g = 0; g < N; ++g) {
            mem[g] = fixed;
        }
        for (int a = 0; a < rd->ngroups && ok; ++a) {
            const nsp_plan_group_t *ga = &rd->groups[a];
            double                  tok = 0.0;
            if (ga->rank0 < 0 || ga->size < 1 || ga->rank0 + ga->size > N ||
                !degree_ok(p, ga->size, ga->ring)) {
                ok = fail(why, len, "round %d group %d: [%d, +%d) is not a valid group", r, a,
                          ga->rank0, ga->size);
                break;
            }
            if (ga->nseqs < 1) {
                ok = fail(why, len, "round %d group %d is empty", r, a);
                break;
            }
            if (!disjoint && ga->rank0 % ga->size != 0) {
                ok = fail(why, len, "round %d group %d: rank0 %d not aligned to size %d", r, a,
                          ga->rank0, ga->size);
                break;
            }
            for (int b = a + 1; b < rd->ngroups && ok; ++b) {
                const nsp_plan_group_t *gb = &rd->groups[b];
                const int overlap = ga->rank0 < gb->rank0 + gb->size && gb->rank0 < ga->rank0 + ga->size;
                const int a_in_b = ga->rank0 >= gb->rank0 && ga->rank0 + ga->size <= gb->rank0 + gb->size;
                const int b_in_a = gb->rank0 >= ga->rank0 && gb->rank0 + gb->size <= ga->rank0 + ga->size;
                if (disjoint && overlap) {
                    ok = fail(why, len, "round %d: groups %d and %d overlap", r, a, b);
                } else if (!disjoint && overlap && !(a_in_b || b_in_a)) {
                    ok = fail(why, len, "round %d: groups %d and %d overlap without nesting", r, a, b);
                } else if (!disjoint && ga->rank0 == gb->rank0 && ga->size == gb->size) {
                    ok = fail(why, len, "round %d: tree node [%d, +%d) appears twice", r,
                              ga->rank0, ga->size);
                }
            }
            for (int k = 0; k < ga->nseqs && ok; ++k) {
                const int i = ga->seqs[k];
                if (i < 0 || i >= p->nseqs) {
                    ok = fail(why, len, "round %d group %d: sequence index %d", r, a, i);
                    break;
                }
                seen[i]++;
                tok += (double)p->seq_lens[i] / ga->size;
            }
            for (int q = ga->rank0; q < ga->rank0 + ga->size && ok; ++q) {
                mem[q] += tok * (act_bytes(&p->model, ga->recompute) +
                                 ring_buffer_bytes(&p->model, ga->size, ga->ring));
            }
        }
        for (int q = 0; q < N && ok; ++q) {
            if (mem[q] > p->cluster.mem_bytes * (1.0 + 1e-12)) {
                ok = fail(why, len, "round %d: rank %d holds %.4g bytes > %.4g", r, q, mem[q],
                          p->cluster.mem_bytes);
            }
        }
    }
    for (int i = 0; i < p->nseqs && ok; ++i) {
        if (seen[i] != 1) {
            ok = fail(why, len, "sequence %d placed %d times", i, seen[i]);
        }
    }
    if (ok) {
        /* the stored prediction is what a fresh evaluation gives */
        const double step = p->predicted.step_s;
        nsp_plan_t   copy = *p;
        double      *rs = malloc(sizeof(double) * (size_t)N);
        double      *rm = malloc(sizeof(double) * (size_t)N);
        if (rs == NULL || rm == NULL) {
            ok = fail(why, len, "out of memory");
        } else {
            copy.predicted.rank_s = rs;
            copy.predicted.rank_mem_bytes = rm;
            if (nsp_plan_evaluate(&copy) != NSP_OK) {
                ok = fail(why, len, "nsp_plan_evaluate failed: %s", nsp_last_error());
            } else if (fabs(copy.predicted.step_s - step) > 1e-9 * step) {
                ok = fail(why, len, "stored step %.9g != evaluated %.9g", step,
                          copy.predicted.step_s);
            }
        }
        free(rs);
        free(rm);
    }
    free(seen);
    free(mem);
    return ok;
}

int pc_same_plan(const nsp_plan_t *a, const nsp_plan_t *b)
{
    if (a->nrounds != b->nrounds || a->flags != b->flags || a->nseqs != b->nseqs ||
        a->predicted.step_s != b->predicted.step_s) {
        return 0;
    }
    for (int r = 0; r < a->nrounds; ++r) {
        const nsp_plan_round_t *x = &a->rounds[r], *y = &b->rounds[r];
        if (x->ngroups != y->ngroups) {
            return 0;
        }
        for (int g = 0; g < x->ngroups; ++g) {
            const nsp_plan_group_t *u = &x->groups[g], *v = &y->groups[g];
            if (u->rank0 != v->rank0 || u->size != v->size || u->nseqs != v->nseqs ||
                u->recompute != v->recompute || u->pipelined != v->pipelined ||
                memcmp(u->seqs, v->seqs, sizeof(int) * (size_t)u->nseqs) != 0) {
                return 0;
            }
        }
    }
    return 1;
}

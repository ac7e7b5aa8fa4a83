/*
 * Layouts over many random nested plans, in one process for every rank:
 * chunks cover each sequence exactly once and differ by at most one token,
 * offsets are consecutive, the head-sharded sizes match the independent
 * reference, every rank of a round agrees on the plan hash; plus the worked
 * example of docs/reference/alltoall.md and the errors.
 */
#include "attn_sp/layout.h"
#include "a2a_ref.h"
#include "planner/plan_internal.h"
#include "../tap.h"

#include <stdlib.h>
#include <string.h>

/* Check one round of a plan for all ranks; returns the number of problems
 * found (each reported with a diagnostic). */
static int check_round(const nsp_plan_t *plan, int round, int heads)
{
    int            N = plan->cluster.ranks, bad = 0;
    nsp_layout_t **lay = calloc((size_t)N, sizeof(*lay));
    /* covered[s] counts tokens of sequence s seen over all ranks' chunks */
    int64_t       *covered = calloc((size_t)plan->nseqs + 1, sizeof(int64_t));
    uint64_t       hash0 = 0;

    if (lay == NULL || covered == NULL) {
        tap_diag("out of memory");
        free(lay);
        free(covered);
        return 1;
    }
    for (int r = 0; r < N; ++r) {
        nsp_layout_info_t info;
        int64_t           cursor = 0, full = 0, rows = 0, ref_rows = 0;
        void             *ref = NULL;

        if (nsp_layout_create(plan, round, r, &lay[r]) != NSP_OK ||
            nsp_layout_query(lay[r], &info) != NSP_OK) {
            tap_diag("round %d rank %d: layout failed: %s", round, r, nsp_last_error());
            ++bad;
            continue;
        }
        if (r == 0) {
            hash0 = info.plan_hash;
        }
        bad += (info.plan_hash != hash0);
        for (int l = 0; l < info.nlevels; ++l) {
            nsp_layout_level_t lv;
            nsp_layout_level(lay[r], l, &lv);
            if ((l == 0 && lv.degree != 1) || lv.index != r - lv.rank0 || lv.index < 0 ||
                lv.index >= lv.degree || lv.local_offset != cursor ||
                lv.seq_offset[0] != 0 || lv.seq_offset[lv.nseqs] != lv.full_tokens) {
                tap_diag("round %d rank %d level %d: bad header (degree %d index %d offset "
                         "%lld cursor %lld)", round, r, l, lv.degree, lv.index,
                         (long long)lv.local_offset, (long long)cursor);
                ++bad;
            }
            if (l > 0) {
                nsp_layout_level_t prev;
                nsp_layout_level(lay[r], l - 1, &prev);
                bad += (prev.degree >= lv.degree); /* strictly ascending */
            }
            for (int j = 0; j < lv.nseqs; ++j) {
                int64_t s = lv.seq_len[j], base = s / lv.degree;
                bad += (lv.seq_len[j] != plan->seq_lens[lv.seqs[j]]);
                bad += (lv.chunk_offset[j] != cursor);
                bad += (lv.chunk_len[j] < base || lv.chunk_len[j] > base + 1);
                bad += (lv.chunk_start[j] < 0 || lv.chunk_start[j] + lv.chunk_len[j] > s);
                bad += (lv.seq_offset[j + 1] - lv.seq_offset[j] != s);
                /* the chunk of index i starts where index i-1's ends: check
                 * with the neighbour's layout when already built */
                if (lv.index > 0 && lay[r - 1] != NULL) {
                    nsp_layout_info_t pi;
                    nsp_layout_query(lay[r - 1], &pi);
                    for (int pl = 0; pl < pi.nlevels; ++pl) {
                        nsp_layout_level_t pv;
                        nsp_layout_level(lay[r - 1], pl, &pv);
                        if (pv.degree == lv.degree && pv.nseqs == lv.nseqs) {
                            bad += (pv.seqs[j] != lv.seqs[j]);
                            bad += (pv.chunk_start[j] + pv.chunk_len[j] != lv.chunk_start[j]);
                            bad += (pv.chunk_len[j] < lv.chunk_len[j]); /* longer first */
                        }
                    }
                }
                covered[lv.seqs[j]] += lv.chunk_len[j];
                cursor += lv.chunk_len[j];
            }
            bad += (lv.local_tokens != cursor - lv.local_offset);
            full += lv.full_tokens;
        }
        bad += (info.local_tokens != cursor || info.full_tokens != full);
        if (nsp_layout_head_rows(lay[r], heads, &rows) != NSP_OK ||
            a2a_ref_head_sharded(plan, round, r, heads, 1, 1, 0, &ref, &ref_rows) != 0 ||
            rows != ref_rows) {
            tap_diag("round %d rank %d: head rows %lld, reference %lld (H=%d)", round, r,
                     (long long)rows, (long long)ref_rows, heads);
            ++bad;
        }
        free(ref);
        if (a2a_ref_seq_sharded(plan, round, r, 1, 1, 1, 0, &ref, &ref_rows) != 0 ||
            ref_rows != info.local_tokens) {
            tap_diag("round %d rank %d: T_local %lld, reference %lld", round, r,
                     (long long)info.local_tokens, (long long)ref_rows);
            ++bad;
        }
        free(ref);
    }
    /* Every sequence of the round covered exactly once, all tokens. */
    for (int g = 0; g < plan->rounds[round].ngroups; ++g) {
        const nsp_plan_group_t *pg = &plan->rounds[round].groups[g];
        for (int j = 0; j < pg->nseqs; ++j) {
            if (covered[pg->seqs[j]] != plan->seq_lens[pg->seqs[j]]) {
                tap_diag("round %d seq %d: %lld of %lld tokens covered", round, pg->seqs[j],
                         (long long)covered[pg->seqs[j]],
                         (long long)plan->seq_lens[pg->seqs[j]]);
                ++bad;
            }
            covered[pg->seqs[j]] = -1; /* seen; a second appearance would fail above */
        }
    }
    for (int r = 0; r < N; ++r) {
        nsp_layout_free(lay[r]);
    }
    free(lay);
    free(covered);
    return bad;
}

static void test_random_plans(void)
{
    uint64_t rng = 12345;
    int      sizes[] = {1, 2, 3, 4, 6, 8, 12, 16};
    int      plans = 0, bad = 0;

    for (int it = 0; it < 300; ++it) {
        a2a_plan_opts_t o;
        nsp_plan_t     *plan;
        int             heads;
        memset(&o, 0, sizeof(o));
        a2a_random_degrees(&rng, sizes[it % 8], &o);
        o.nrounds        = 1 + (int)(a2a_rand(&rng) % 3);
        o.seqs_per_round = 1 + (int)(a2a_rand(&rng) % 12);
        o.max_len        = 1 + (int64_t)(a2a_rand(&rng) % 3000);
        o.messy          = (it % 2);
        heads            = a2a_random_heads(&rng, &o);
        plan             = a2a_random_plan(&rng, &o);
        if (plan == NULL) {
            ++bad;
            continue;
        }
        for (int r = 0; r < plan->nrounds; ++r) {
            bad += check_round(plan, r, heads);
        }
        ++plans;
        nsp_plan_free(plan);
    }
    tap_is_int(bad, 0, "layouts of %d random nested plans (1-16 ranks, messy group order, "
               "duplicate group entries): chunks cover, offsets consecutive, sizes match "
               "the reference, hashes agree", plans);
}

/* A plan from literal groups (one round) for the example and error tests. */
static nsp_plan_t *literal_plan(int ranks, const int64_t *lens, int nseqs,
                                const nsp_plan_group_t *groups, int ngroups)
{
    nsp_model_t   model;
    nsp_cluster_t cluster;
    nsp_plan_t   *plan;

    memset(&model, 0, sizeof(model));
    memset(&cluster, 0, sizeof(cluster));
    cluster.ranks = ranks;
    if (nsp_plan_alloc("literal", &model, &cluster, lens, nseqs, &plan) != NSP_OK) {
        return NULL;
    }
    plan->rounds  = calloc(1, sizeof(*plan->rounds));
    plan->nrounds = 1;
    plan->rounds[0].groups  = calloc((size_t)ngroups, sizeof(nsp_plan_group_t));
    plan->rounds[0].ngroups = ngroups;
    for (int g = 0; g < ngroups; ++g) {
        plan->rounds[0].groups[g]      = groups[g];
        plan->rounds[0].groups[g].seqs = malloc(sizeof(int) * (size_t)groups[g].nseqs);
        memcpy(plan->rounds[0].groups[g].seqs, groups[g].seqs,
               sizeof(int) * (size_t)groups[g].nseqs);
    }
    return plan;
}

/* The worked example of docs/reference/alltoall.md: 4 ranks, sequences of 10, 3, 5 and 2
 * tokens; seq 0 over [0,4), seq 2 over [2,4), seqs 1 and 3 alone on ranks 2
 * and 0. Rank 2 holds seq 1 (level 0), its chunk of seq 2 (level 1: degree
 * 2, index 0: tokens 0..2) and of seq 0 (level 2: degree 4, index 2: tokens
 * 6..7). */
static void test_worked_example(void)
{
    int64_t            lens[] = {10, 3, 5, 2};
    int                s0[] = {0}, s1[] = {1}, s2[] = {2}, s3[] = {3};
    nsp_plan_group_t   groups[] = {
        {.rank0 = 0, .size = 4, .nseqs = 1, .seqs = s0, .ring = 1},
        {.rank0 = 2, .size = 1, .nseqs = 1, .seqs = s1, .ring = 1},
        {.rank0 = 2, .size = 2, .nseqs = 1, .seqs = s2, .ring = 1},
        {.rank0 = 0, .size = 1, .nseqs = 1, .seqs = s3, .ring = 1},
    };
    nsp_plan_t        *plan = literal_plan(4, lens, 4, groups, 4);
    nsp_layout_t      *lay  = NULL;
    nsp_layout_info_t  info;
    nsp_layout_level_t l0, l1, l2;
    nsp_layout_heads_t h1, h2;

    if (!tap_ok(plan != NULL && nsp_layout_create(plan, 0, 2, &lay) == NSP_OK,
                "worked example: layout of rank 2")) {
        nsp_plan_free(plan);
        return;
    }
    nsp_layout_query(lay, &info);
    nsp_layout_level(lay, 0, &l0);
    nsp_layout_level(lay, 1, &l1);
    nsp_layout_level(lay, 2, &l2);
    tap_is_int(info.nlevels, 3, "three levels: degrees 1, 2, 4");
    tap_ok(l0.degree == 1 && l1.degree == 2 && l2.degree == 4, "degrees ascending");
    tap_ok(l0.nseqs == 1 && l0.seqs[0] == 1 && l0.chunk_len[0] == 3 && l0.chunk_offset[0] == 0,
           "level 0: seq 1 whole, tokens 0..2 of T_local");
    tap_ok(l1.index == 0 && l1.chunk_start[0] == 0 && l1.chunk_len[0] == 3 &&
           l1.chunk_offset[0] == 3, "level 1: seq 2 tokens 0..2 (5 = 3 + 2), at T_local 3");
    tap_ok(l2.index == 2 && l2.chunk_start[0] == 6 && l2.chunk_len[0] == 2 &&
           l2.chunk_offset[0] == 6, "level 2: seq 0 tokens 6..7 (10 = 3+3+2+2), at T_local 6");
    tap_is_int(info.local_tokens, 8, "T_local = 3 + 3 + 2");
    /* H = 4 heads: level 0 all 4, level 1 heads 0-1, level 2 head 2. */
    tap_ok(nsp_layout_heads(lay, 1, 4, &h1) == NSP_OK && h1.first_head == 0 &&
           h1.nheads == 2 && h1.row_offset == 12 && h1.rows == 10,
           "H=4, level 1: heads 0-1, rows 12..21 ([5, 2, D])");
    tap_ok(nsp_layout_heads(lay, 2, 4, &h2) == NSP_OK && h2.first_head == 2 &&
           h2.nheads == 1 && h2.row_offset == 22 && h2.rows == 10,
           "H=4, level 2: head 2, rows 22..31 ([10, 1, D])");
    /* H = 2 (KV heads): level 2 replicates: index 2 holds head 1, 2 replicas. */
    tap_ok(nsp_layout_heads(lay, 2, 2, &h2) == NSP_OK && h2.first_head == 1 &&
           h2.nheads == 1 && h2.replicas == 2 && h2.row_offset == 6 + 5,
           "H=2, level 2: KV head 1 replicated on 2 ranks, after [3,2,D] + [5,1,D]");
    nsp_layout_free(lay);
    nsp_plan_free(plan);
}

static void test_errors(void)
{
    int64_t          lens[] = {10, 7};
    int              s0[] = {0}, s1[] = {1};
    nsp_plan_group_t overlap[] = {
        {.rank0 = 0, .size = 2, .nseqs = 1, .seqs = s0, .ring = 1},
        {.rank0 = 1, .size = 2, .nseqs = 1, .seqs = s1, .ring = 1},
    };
    nsp_plan_group_t outside[] = {
        {.rank0 = 2, .size = 4, .nseqs = 1, .seqs = s0, .ring = 1},
    };
    nsp_plan_group_t three[] = {
        {.rank0 = 0, .size = 3, .nseqs = 2, .seqs = (int[]){0, 1}, .ring = 1},
    };
    nsp_plan_t        *plan;
    nsp_layout_t      *lay = (nsp_layout_t *)0x1;
    nsp_layout_heads_t h;

    plan = literal_plan(4, lens, 2, overlap, 2);
    tap_is_int(nsp_layout_create(plan, 0, 1, &lay), NSP_ERR_INVALID_ARG,
               "rank in two different groups of one degree is rejected");
    tap_ok(strstr(nsp_last_error(), "two different groups of degree 2") != NULL,
           "and the message says so: %s", nsp_last_error());
    tap_ok(lay == (nsp_layout_t *)0x1, "no output written on error");
    tap_is_int(nsp_layout_create(plan, 1, 0, &lay), NSP_ERR_INVALID_ARG, "round out of range");
    tap_is_int(nsp_layout_create(plan, 0, 4, &lay), NSP_ERR_INVALID_ARG, "rank out of range");
    nsp_plan_free(plan);

    plan = literal_plan(4, lens, 2, outside, 1);
    tap_is_int(nsp_layout_create(plan, 0, 0, &lay), NSP_ERR_INVALID_ARG,
               "a group beyond the ranks is rejected");
    nsp_plan_free(plan);

    plan = literal_plan(4, lens, 2, three, 1);
    if (tap_ok(nsp_layout_create(plan, 0, 1, &lay) == NSP_OK, "degree 3 layout")) {
        tap_is_int(nsp_layout_heads(lay, 1, 4, &h), NSP_ERR_INVALID_ARG,
                   "4 heads cannot be sharded over degree 3");
        tap_ok(strstr(nsp_last_error(), "4 heads over a group of degree 3") != NULL,
               "and the message names both: %s", nsp_last_error());
        tap_ok(nsp_layout_heads(lay, 1, 6, &h) == NSP_OK && h.nheads == 2 && h.first_head == 2,
               "6 heads over degree 3: index 1 holds heads 2-3");
        tap_ok(nsp_layout_heads(lay, 1, 1, &h) == NSP_OK && h.nheads == 1 && h.replicas == 3,
               "1 head over degree 3: replicated 3 times");
        nsp_layout_free(lay);
    }
    nsp_plan_free(plan);
    tap_is_int(nsp_layout_create(NULL, 0, 0, &lay), NSP_ERR_INVALID_ARG, "NULL plan");
}

static void test_hash_changes(void)
{
    int64_t          lens[] = {10, 7};
    int              s0[] = {0}, s1[] = {1};
    nsp_plan_group_t groups[] = {
        {.rank0 = 0, .size = 2, .nseqs = 1, .seqs = s0, .ring = 1},
        {.rank0 = 1, .size = 1, .nseqs = 1, .seqs = s1, .ring = 1},
    };
    nsp_plan_t       *plan = literal_plan(2, lens, 2, groups, 2);
    nsp_layout_t     *a, *b;
    nsp_layout_info_t ia, ib;

    nsp_layout_create(plan, 0, 0, &a);
    plan->seq_lens[1] = 8; /* a sequence rank 0 does not even hold */
    nsp_layout_create(plan, 0, 0, &b);
    nsp_layout_query(a, &ia);
    nsp_layout_query(b, &ib);
    tap_ok(ia.plan_hash != ib.plan_hash, "the plan hash covers the whole round");
    nsp_layout_free(a);
    nsp_layout_free(b);
    nsp_plan_free(plan);
}

static void test_chunk_math(void)
{
    int bad = 0;

    for (int64_t s = 0; s < 50; ++s) {
        for (int d = 1; d <= 9; ++d) {
            int64_t next = 0, st, len;
            for (int i = 0; i < d; ++i) {
                nsp_chunk_of(s, d, i, &st, &len);
                bad += (st != next) + (len != s / d + (i < s % d));
                next = st + len;
            }
            bad += (next != s);
        }
    }
    tap_is_int(bad, 0, "chunk math: consecutive, first s %% d get one more, covers s");
}

int main(void)
{
    test_chunk_math();
    test_worked_example();
    test_errors();
    test_hash_changes();
    test_random_plans();
    return tap_done();
}

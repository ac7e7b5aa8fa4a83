/*
 * Host pack/unpack over many random nested plans, every rank simulated in
 * one process (the "transport" is a memcpy between the ranks' buffers):
 *  - the per-peer counts agree (what p sends to q is what q expects from p);
 *  - sequence-to-head gives every rank exactly the head-sharded buffer the
 *    independent reference computes from the global tensor;
 *  - head-to-sequence gives back the input exactly (pack then unpack is the
 *    identity), with the self block through the buffers or copied directly;
 *  - with SUM_F32, SUM_BF16 and SUM_FP16, replicated heads come back summed
 *    over their replicas; 16-bit sums round after each addition;
 *  - moved as runs (pack.h "Runs", what alltoallv_iov_post sends), every
 *    pair's stream copied from the sender's runs of its source straight
 *    into the receiver's runs of its destination, both directions give
 *    the same results bit for bit, with no pack and no unpack;
 *  - levels large enough that the direct self copies stream around the
 *    cache give the same results.
 */
#include "attn_sp/copy_rows.h"
#include "attn_sp/layout.h"
#include "attn_sp/pack.h"
#include "attn_sp/replica_sum.h"
#include "a2a_ref.h"
#include "../tap.h"

#include <stdlib.h>
#include <string.h>

typedef struct sim_rank {
    nsp_layout_t *lay;
    char         *seq;      /* [T_local, H, D] input */
    char         *head;     /* head-sharded, produced by s2h */
    char         *back;     /* [T_local, H, D] produced by h2s */
    int64_t       T, rows;
} sim_rank_t;

typedef struct sim_cfg {
    int                heads, head_dim;
    size_t             elem;
    nsp_pack_self_t    self;
    nsp_a2a_replicas_t replicas;
    int                f32;
    uint64_t           parts_seed;  /* != 0: split levels into random parts (*_sel) */
    int                runs;        /* 1: levels move as runs (nsp_pack_runs_*) */
} sim_cfg_t;

/* The level of rank r with degree d, or -1. */
static int level_of_degree(const nsp_layout_t *lay, int d)
{
    nsp_layout_info_t info;

    nsp_layout_query(lay, &info);
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_level(lay, l, &lv);
        if (lv.degree == d) {
            return l;
        }
    }
    return -1;
}

/* Exchange the sequences `sel` (NULL: all) of one level of group [rank0,
 * rank0 + d) in direction dir over all members; `direct` >= 0: that one
 * sequence, in place in the block (s2h receive, h2s send); `last` says this
 * is the level's last part (for the self copies). Returns problems found. */
static int sim_part(sim_rank_t *R, int rank0, int d, nsp_a2a_dir_t dir, const sim_cfg_t *c,
                    const unsigned char *sel, int direct, int first_part, int last_part)
{
    size_t  row = (size_t)c->head_dim * c->elem;
    size_t *sb = calloc((size_t)d * d, sizeof(size_t)), *sd = calloc((size_t)d * d, sizeof(size_t));
    size_t *rb = calloc((size_t)d * d, sizeof(size_t)), *rd = calloc((size_t)d * d, sizeof(size_t));
    char  **send = calloc((size_t)d, sizeof(char *)), **recv = calloc((size_t)d, sizeof(char *));
    int     bad = 0;

    for (int m = 0; m < d; ++m) {
        sim_rank_t        *me = &R[rank0 + m];
        int                l  = level_of_degree(me->lay, d);
        nsp_level_view_t   v;
        nsp_layout_level_t lv;
        nsp_layout_heads_t hs;
        size_t             stot = 0, rtot = 0;
        const char        *src;

        nsp_layout_level_view(me->lay, l, &v);
        nsp_layout_level(me->lay, l, &lv);
        nsp_layout_heads(me->lay, l, c->heads, &hs);
        if (nsp_pack_counts_sel(&v, sel, dir, c->heads, row, c->replicas, c->self, sb + m * d,
                                sd + m * d, rb + m * d, rd + m * d) != NSP_OK) {
            ++bad;
            continue;
        }
        if (direct >= 0) { /* in place: the block side uses the sequence's places */
            nsp_pack_seq_displs(&v, direct, c->heads, row,
                                dir == NSP_A2A_SEQ_TO_HEAD ? rd + m * d : sd + m * d);
        }
        for (int p = 0; p < d; ++p) {
            stot += sb[m * d + p];
            rtot += rb[m * d + p];
        }
        send[m] = malloc(stot + 1);
        recv[m] = malloc(rtot + 1);
        if (dir == NSP_A2A_SEQ_TO_HEAD) {
            src = me->seq + (size_t)lv.local_offset * (size_t)c->heads * row;
            nsp_pack_s2h_sel(&v, sel, c->heads, row, src, send[m], sb + m * d, sd + m * d);
        } else {
            src = me->head + (size_t)hs.row_offset * row;
            if (direct >= 0) { /* sent in place: the "send buffer" is the block itself */
                free(send[m]);
                send[m] = NULL;
            } else {
                nsp_pack_h2s_sel(&v, sel, c->heads, row, src, send[m], sb + m * d, sd + m * d);
            }
        }
    }
    /* The "transport": q receives from p what p packed for q. */
    for (int q = 0; q < d && bad == 0; ++q) {
        for (int p = 0; p < d; ++p) {
            if (sb[p * d + q] != rb[q * d + p]) {
                tap_diag("group %d+%d: %d sends %zu bytes to %d, which expects %zu", rank0, d,
                         p, sb[p * d + q], q, rb[q * d + p]);
                ++bad;
                continue;
            }
            {
                /* in place: h2s sends from p's block, s2h receives into q's block */
                const char *from = send[p];
                char       *to   = recv[q];
                if (direct >= 0 && dir == NSP_A2A_HEAD_TO_SEQ) {
                    nsp_layout_heads_t hs;
                    nsp_layout_heads(R[rank0 + p].lay, level_of_degree(R[rank0 + p].lay, d),
                                     c->heads, &hs);
                    from = R[rank0 + p].head + (size_t)hs.row_offset * row;
                }
                if (direct >= 0 && dir == NSP_A2A_SEQ_TO_HEAD) {
                    nsp_layout_heads_t hs;
                    nsp_layout_heads(R[rank0 + q].lay, level_of_degree(R[rank0 + q].lay, d),
                                     c->heads, &hs);
                    to = R[rank0 + q].head + (size_t)hs.row_offset * row;
                }
                memcpy(to + rd[q * d + p], from + sd[p * d + q], sb[p * d + q]);
            }
        }
    }
    for (int m = 0; m < d && bad == 0; ++m) {
        sim_rank_t        *me = &R[rank0 + m];
        int                l  = level_of_degree(me->lay, d), first = 1;
        nsp_level_view_t   v;
        nsp_layout_level_t lv;
        nsp_layout_heads_t hs;
        char              *chunks, *block;

        nsp_layout_level_view(me->lay, l, &v);
        nsp_layout_level(me->lay, l, &lv);
        nsp_layout_heads(me->lay, l, c->heads, &hs);
        block = me->head + (size_t)hs.row_offset * row;
        if (dir == NSP_A2A_SEQ_TO_HEAD) {
            chunks = me->seq + (size_t)lv.local_offset * (size_t)c->heads * row;
            if (direct < 0) {
                nsp_unpack_s2h_sel(&v, sel, c->heads, row, recv[m], rb + m * d, rd + m * d,
                                   block);
            }
            if (c->self == NSP_PACK_SKIP_SELF && last_part) {
                nsp_pack_copy_self(&v, dir, c->heads, row, c->replicas, chunks, block);
            }
        } else {
            chunks = me->back + (size_t)lv.local_offset * (size_t)c->heads * row;
            nsp_pack_self_is_first(&v, c->heads, &first);
            if (c->self == NSP_PACK_SKIP_SELF && first && first_part) {
                nsp_pack_copy_self(&v, dir, c->heads, row, c->replicas, block, chunks);
            }
            nsp_unpack_h2s_sel(&v, sel, c->heads, row, c->replicas, recv[m], rb + m * d,
                               rd + m * d, chunks);
            if (c->self == NSP_PACK_SKIP_SELF && !first && last_part) {
                nsp_pack_copy_self(&v, dir, c->heads, row, c->replicas, block, chunks);
            }
        }
    }
    for (int m = 0; m < d; ++m) {
        free(send[m]);
        free(recv[m]);
    }
    free(send);
    free(recv);
    free(sb);
    free(sd);
    free(rb);
    free(rd);
    return bad;
}

/* Copy the byte stream of src runs (in sbase) into that of dst runs (in
 * dbase); the totals must be equal (returns 1 otherwise). */
static int stream_copy(char *dbase, const nsp_pack_run_t *dst, size_t nd, const char *sbase,
                       const nsp_pack_run_t *src, size_t ns)
{
    size_t i = 0, j = 0, di = 0, sj = 0, dt = 0, st = 0;

    for (size_t k = 0; k < nd; ++k) {
        dt += dst[k].len;
    }
    for (size_t k = 0; k < ns; ++k) {
        st += src[k].len;
    }
    if (dt != st) {
        return 1;
    }
    while (i < nd && j < ns) {
        size_t n = dst[i].len - di < src[j].len - sj ? dst[i].len - di : src[j].len - sj;
        memcpy(dbase + dst[i].off + di, sbase + src[j].off + sj, n);
        di += n;
        sj += n;
        if (di == dst[i].len) {
            ++i;
            di = 0;
        }
        if (sj == src[j].len) {
            ++j;
            sj = 0;
        }
    }
    return 0;
}

/* A level moved as runs: sender p's runs of its source to receiver q's
 * runs of its destination, then each rank's own block copied directly. */
static int sim_runs(sim_rank_t *R, int rank0, int d, nsp_a2a_dir_t dir, const sim_cfg_t *c)
{
    size_t           row = (size_t)c->head_dim * c->elem;
    nsp_pack_run_t **sr = calloc((size_t)d, sizeof(*sr)), **rr = calloc((size_t)d, sizeof(*rr));
    size_t         **sf = calloc((size_t)d, sizeof(*sf)), **rf = calloc((size_t)d, sizeof(*rf));
    size_t          *cnt = calloc(4 * (size_t)d, sizeof(size_t));
    char           **src = calloc((size_t)d, sizeof(char *)), **dst = calloc((size_t)d, sizeof(char *));
    int              bad = 0;

    for (int m = 0; m < d; ++m) {
        sim_rank_t        *me = &R[rank0 + m];
        nsp_level_view_t   v;
        nsp_layout_level_t lv;
        nsp_layout_heads_t hs;
        size_t             max;
        int                l = level_of_degree(me->lay, d);
        char              *chunks, *block;

        nsp_layout_level_view(me->lay, l, &v);
        nsp_layout_level(me->lay, l, &lv);
        nsp_layout_heads(me->lay, l, c->heads, &hs);
        max   = nsp_pack_runs_max(&v) + 1;
        sr[m] = calloc(max, sizeof(nsp_pack_run_t));
        rr[m] = calloc(max, sizeof(nsp_pack_run_t));
        sf[m] = calloc((size_t)d + 1, sizeof(size_t));
        rf[m] = calloc((size_t)d + 1, sizeof(size_t));
        block = me->head + (size_t)hs.row_offset * row;
        if (nsp_pack_counts_sel(&v, NULL, dir, c->heads, row, c->replicas, NSP_PACK_SKIP_SELF,
                                cnt, cnt + d, cnt + 2 * d, cnt + 3 * d) != NSP_OK) {
            ++bad;
            continue;
        }
        if (dir == NSP_A2A_SEQ_TO_HEAD) {
            chunks = me->seq + (size_t)lv.local_offset * (size_t)c->heads * row;
            bad += nsp_pack_runs_chunks(&v, NULL, c->heads, row, cnt, sr[m], sf[m]) != NSP_OK;
            bad += nsp_pack_runs_block(&v, NULL, c->heads, row, cnt + 2 * d, rr[m], rf[m]) !=
                   NSP_OK;
            src[m] = chunks;
            dst[m] = block;
        } else {
            chunks = me->back + (size_t)lv.local_offset * (size_t)c->heads * row;
            bad += nsp_pack_runs_block(&v, NULL, c->heads, row, cnt, sr[m], sf[m]) != NSP_OK;
            bad += nsp_pack_runs_chunks(&v, NULL, c->heads, row, cnt + 2 * d, rr[m], rf[m]) !=
                   NSP_OK;
            src[m] = block;
            dst[m] = chunks;
        }
        bad += sf[m][d] > max || rf[m][d] > max;
    }
    for (int q = 0; q < d && bad == 0; ++q) { /* the "transport" */
        for (int p = 0; p < d; ++p) {
            if (stream_copy(dst[q], rr[q] + rf[q][p], rf[q][p + 1] - rf[q][p], src[p],
                            sr[p] + sf[p][q], sf[p][q + 1] - sf[p][q]) != 0) {
                tap_diag("group %d+%d: the runs %d sends %d and those %d receives differ in "
                         "length", rank0, d, p, q, q);
                ++bad;
            }
        }
    }
    for (int m = 0; m < d && bad == 0; ++m) { /* own blocks (REPLICAS_FIRST) */
        sim_rank_t        *me = &R[rank0 + m];
        nsp_level_view_t   v;
        nsp_layout_level_view(me->lay, level_of_degree(me->lay, d), &v);
        nsp_pack_copy_self(&v, dir, c->heads, row, c->replicas, src[m], dst[m]);
    }
    for (int m = 0; m < d; ++m) {
        free(sr[m]);
        free(rr[m]);
        free(sf[m]);
        free(rf[m]);
    }
    free(sr);
    free(rr);
    free(sf);
    free(rf);
    free(cnt);
    free(src);
    free(dst);
    return bad;
}

/* One level of a group: whole, or split into random parts (a batched subset
 * and in-place single sequences) when c->parts_seed is set. */
static int sim_group(sim_rank_t *R, int rank0, int d, nsp_a2a_dir_t dir, const sim_cfg_t *c)
{
    nsp_level_view_t v;
    uint64_t         rng = c->parts_seed + (uint64_t)rank0 * 131u + (uint64_t)d;
    unsigned char   *direct, *small;
    int              bad = 0, nparts = 0, k = 0, nsmall = 0;

    if (c->runs) {
        return sim_runs(R, rank0, d, dir, c);
    }
    if (c->parts_seed == 0) {
        return sim_part(R, rank0, d, dir, c, NULL, -1, 1, 1);
    }
    nsp_layout_level_view(R[rank0].lay, level_of_degree(R[rank0].lay, d), &v);
    direct = calloc((size_t)v.nseqs + 1, 1);
    small  = calloc((size_t)v.nseqs + 1, 1);
    for (int j = 0; j < v.nseqs; ++j) {
        direct[j] = a2a_rand(&rng) % 2;
        small[j]  = !direct[j];
        nsmall   += small[j];
        nparts   += direct[j];
    }
    nparts += nsmall > 0;
    if (nsmall > 0) {
        bad += sim_part(R, rank0, d, dir, c, small, -1, k == 0, k == nparts - 1);
        ++k;
    }
    for (int j = 0; j < v.nseqs; ++j) {
        if (direct[j]) {
            unsigned char *one = calloc((size_t)v.nseqs + 1, 1);
            one[j] = 1;
            bad += sim_part(R, rank0, d, dir, c, one, j, k == 0, k == nparts - 1);
            ++k;
            free(one);
        }
    }
    if (nparts == 0) { /* no sequences: the self copies still run (nothing to do) */
        bad += sim_part(R, rank0, d, dir, c, NULL, -1, 1, 1);
    }
    free(direct);
    free(small);
    return bad;
}

/* Both directions over every group of one round; returns problems found. */
static int sim_round(const nsp_plan_t *plan, int round, const sim_cfg_t *c)
{
    int         N = plan->cluster.ranks, bad = 0;
    size_t      row = (size_t)c->head_dim * c->elem;
    sim_rank_t *R = calloc((size_t)N, sizeof(*R));

    for (int r = 0; r < N; ++r) {
        nsp_layout_level_t l0;
        size_t             l0_bytes;
        if (nsp_layout_create(plan, round, r, &R[r].lay) != NSP_OK ||
            a2a_ref_seq_sharded(plan, round, r, c->heads, c->head_dim, c->elem, c->f32,
                                (void **)&R[r].seq, &R[r].T) != 0 ||
            nsp_layout_head_rows(R[r].lay, c->heads, &R[r].rows) != NSP_OK) {
            tap_diag("round %d rank %d: setup failed: %s", round, r, nsp_last_error());
            return 1;
        }
        R[r].head = calloc((size_t)R[r].rows * row + 1, 1);
        R[r].back = calloc((size_t)R[r].T * (size_t)c->heads * row + 1, 1);
        /* Level 0 is copied as is, both ways. */
        nsp_layout_level(R[r].lay, 0, &l0);
        l0_bytes = (size_t)l0.local_tokens * (size_t)c->heads * row;
        memcpy(R[r].head, R[r].seq, l0_bytes);
    }
    for (int dir = NSP_A2A_SEQ_TO_HEAD; dir <= NSP_A2A_HEAD_TO_SEQ; ++dir) {
        for (int r = 0; r < N; ++r) {
            nsp_layout_info_t info;
            nsp_layout_query(R[r].lay, &info);
            for (int l = 1; l < info.nlevels; ++l) {
                nsp_layout_level_t lv;
                nsp_layout_level(R[r].lay, l, &lv);
                if (lv.index == 0) {
                    bad += sim_group(R, r, lv.degree, (nsp_a2a_dir_t)dir, c);
                }
            }
        }
        if (dir == NSP_A2A_SEQ_TO_HEAD) {
            for (int r = 0; r < N; ++r) {
                void   *ref;
                int64_t rows;
                nsp_layout_level_t l0;
                a2a_ref_head_sharded(plan, round, r, c->heads, c->head_dim, c->elem, c->f32,
                                     &ref, &rows);
                if (rows != R[r].rows || memcmp(ref, R[r].head, (size_t)rows * row) != 0) {
                    tap_diag("round %d rank %d: head-sharded buffer differs from the "
                             "reference", round, r);
                    ++bad;
                }
                free(ref);
                nsp_layout_level(R[r].lay, 0, &l0);
                memcpy(R[r].back, R[r].head, (size_t)l0.local_tokens * (size_t)c->heads * row);
            }
        }
    }
    for (int r = 0; r < N; ++r) {
        void   *want = R[r].seq;
        int64_t T    = R[r].T;
        if (c->replicas != NSP_A2A_REPLICAS_FIRST) {
            a2a_ref_seq_sharded_summed(plan, round, r, c->heads, c->head_dim, c->f32, &want,
                                       &T);
        }
        if (memcmp(want, R[r].back, (size_t)T * (size_t)c->heads * row) != 0) {
            tap_diag("round %d rank %d: head-to-sequence did not give back %s", round, r,
                     c->replicas != NSP_A2A_REPLICAS_FIRST ? "the replica sums" : "the input");
            ++bad;
        }
        if (want != R[r].seq) {
            free(want);
        }
        free(R[r].seq);
        free(R[r].head);
        free(R[r].back);
        nsp_layout_free(R[r].lay);
    }
    free(R);
    return bad;
}

static const char *replica_mode_name(nsp_a2a_replicas_t mode)
{
    switch (mode) {
    case NSP_A2A_REPLICAS_SUM_F32: return "summed in float32";
    case NSP_A2A_REPLICAS_SUM_BF16: return "summed in bfloat16";
    case NSP_A2A_REPLICAS_SUM_FP16: return "summed in float16";
    default: return "first";
    }
}

static void test_random(nsp_pack_self_t self, nsp_a2a_replicas_t replicas, int f32,
                        uint64_t seed, int iters, int parts, int runs)
{
    uint64_t rng = seed;
    int      sizes[] = {2, 3, 4, 6, 8, 16};
    int      bad = 0, rounds = 0, replicated = 0;

    for (int it = 0; it < iters; ++it) {
        a2a_plan_opts_t o;
        sim_cfg_t       c;
        nsp_plan_t     *plan;
        memset(&o, 0, sizeof(o));
        a2a_random_degrees(&rng, sizes[it % 6], &o);
        o.nrounds        = 1 + (int)(a2a_rand(&rng) % 2);
        o.seqs_per_round = 1 + (int)(a2a_rand(&rng) % 10);
        o.max_len        = 1 + (int64_t)(a2a_rand(&rng) % 400);
        o.messy          = it % 2;
        c.heads          = a2a_random_heads(&rng, &o);
        c.head_dim       = 1 + (int)(a2a_rand(&rng) % 5);
        c.elem           = f32 == A2A_NUM_F32 ? 4 : f32 != A2A_NUM_BYTES ? 2 : (it % 2 ? 2 : 4);
        c.self           = self;
        c.replicas       = replicas;
        c.f32            = f32;
        c.parts_seed     = parts ? seed * 1000003u + (uint64_t)it + 1u : 0;
        c.runs           = runs;
        replicated      += (o.degrees[o.ndegrees - 1] > c.heads);
        plan = a2a_random_plan(&rng, &o);
        for (int r = 0; plan != NULL && r < plan->nrounds; ++r, ++rounds) {
            bad += sim_round(plan, r, &c);
        }
        nsp_plan_free(plan);
    }
    tap_is_int(bad, 0, "%d random rounds (%d with replicated heads)%s, self %s, replicas %s: "
               "s2h equals the reference, h2s gives back %s", rounds, replicated,
               runs    ? ", levels moved as runs (no pack, no unpack)"
               : parts ? ", levels split into random parts (batched subset + in-place singles)"
                       : "",
               self == NSP_PACK_SKIP_SELF ? "copied directly" : "through the buffers",
               replica_mode_name(replicas),
               replicas != NSP_A2A_REPLICAS_FIRST ? "replica sums" : "the input");
}

/* Levels large enough that the direct self copies stream around the cache
 * (copy_rows.h): bf16 rows of 136 elements (272 bytes, not a multiple of
 * a cache line) and of 128 (256 bytes), long sequences. Counts the levels
 * whose output reached nsp_copy_stream_min_bytes(), so the test knows the
 * streamed path ran. */
static void test_large_levels(void)
{
    uint64_t rng = 4242;
    int      bad = 0, rounds = 0, streamed = 0, copied = 0;

    for (int it = 0; it < 4; ++it) {
        a2a_plan_opts_t o;
        sim_cfg_t       c;
        nsp_plan_t     *plan;
        memset(&o, 0, sizeof(o));
        a2a_random_degrees(&rng, it % 2 ? 4 : 2, &o);
        o.nrounds        = 1;
        o.seqs_per_round = 3 + it;
        o.max_len        = 40000;
        memset(&c, 0, sizeof(c));
        c.heads    = 8;
        c.head_dim = it % 2 ? 128 : 136;
        c.elem     = 2;
        c.self     = NSP_PACK_SKIP_SELF;
        c.replicas = NSP_A2A_REPLICAS_FIRST;
        plan = a2a_random_plan(&rng, &o);
        for (int r = 0; plan != NULL && r < plan->nrounds; ++r, ++rounds) {
            for (int k = 0; k < plan->cluster.ranks; ++k) {
                nsp_layout_t     *lay = NULL;
                nsp_layout_info_t info;
                if (nsp_layout_create(plan, r, k, &lay) != NSP_OK) {
                    ++bad;
                    continue;
                }
                nsp_layout_query(lay, &info);
                for (int l = 1; l < info.nlevels; ++l) {
                    nsp_layout_heads_t hs;
                    nsp_layout_heads(lay, l, c.heads, &hs);
                    if (nsp_copy_should_stream((size_t)hs.rows * (size_t)c.head_dim * c.elem)) {
                        ++streamed;
                    } else {
                        ++copied;
                    }
                }
                nsp_layout_free(lay);
            }
            bad += sim_round(plan, r, &c);
        }
        nsp_plan_free(plan);
    }
    tap_ok(bad == 0 && streamed > 0, "%d rounds of long sequences, rows of 256 and 272 bytes: "
           "s2h equals the reference and h2s gives back the input with the self copies "
           "streamed on %d levels (output >= %zu bytes) and through the cache on %d", rounds,
           streamed, nsp_copy_stream_min_bytes(), copied);
}

static void test_counts_example(void)
{
    /* Degree 4, one sequence of 10 tokens (chunks 3,3,2,2), H = 8, D*elem=1:
     * index 1 sends 3 tokens x 2 heads to everyone, and receives each
     * peer's chunk x its 2 heads. With H = 2 (replicated, 2 replicas per head)
     * in h2s, only indices 0 and 2 send. */
    int64_t          len = 10;
    nsp_level_view_t v = {.degree = 4, .index = 1, .nseqs = 1, .seq_len = &len};
    size_t           sb[4], sd[4], rb[4], rd[4];

    nsp_pack_counts(&v, NSP_A2A_SEQ_TO_HEAD, 8, 1, NSP_A2A_REPLICAS_FIRST, NSP_PACK_WITH_SELF,
                    sb, sd, rb, rd);
    tap_ok(sb[0] == 6 && sb[3] == 6 && sd[3] == 18 && rb[0] == 6 && rb[2] == 4 && rd[3] == 16,
           "s2h counts for degree 4, 10 tokens, 8 heads");
    nsp_pack_counts(&v, NSP_A2A_HEAD_TO_SEQ, 2, 1, NSP_A2A_REPLICAS_FIRST, NSP_PACK_SKIP_SELF,
                    sb, sd, rb, rd);
    tap_ok(sb[0] == 0 && sb[2] == 0 && rb[0] == 3 && rb[1] == 0 && rb[2] == 3 && rb[3] == 0,
           "h2s with replicated heads: only first replicas send, self skipped");
    tap_is_int(nsp_pack_counts(&v, NSP_A2A_HEAD_TO_SEQ, 2, 6, NSP_A2A_REPLICAS_SUM_F32,
                               NSP_PACK_WITH_SELF, sb, sd, rb, rd),
               NSP_ERR_INVALID_ARG, "SUM_F32 rejects rows that are not whole floats");
    tap_is_int(nsp_pack_counts(&v, NSP_A2A_HEAD_TO_SEQ, 2, 3, NSP_A2A_REPLICAS_SUM_BF16,
                               NSP_PACK_WITH_SELF, sb, sd, rb, rd),
               NSP_ERR_INVALID_ARG, "SUM_BF16 rejects rows that are not whole 2-byte elements");
    tap_is_int(nsp_pack_counts(&v, NSP_A2A_HEAD_TO_SEQ, 2, 6, NSP_A2A_REPLICAS_SUM_FP16,
                               NSP_PACK_WITH_SELF, sb, sd, rb, rd),
               NSP_OK, "SUM_FP16 takes rows of 3 binary16 elements");
    tap_ok(rb[0] == 3 * 6 && rb[1] == 3 * 6 && rb[2] == 3 * 6 && rb[3] == 3 * 6,
           "h2s with a summing mode: every replica sends (3 tokens x 1 head x 6 bytes)");
    tap_is_int(nsp_pack_counts(&v, NSP_A2A_SEQ_TO_HEAD, 6, 4, NSP_A2A_REPLICAS_FIRST,
                               NSP_PACK_WITH_SELF, sb, sd, rb, rd),
               NSP_ERR_INVALID_ARG, "6 heads over degree 4 are rejected");
}

/* One 16-bit addition rounds as float32 addition then nearest even, and r
 * replicas round r - 1 times, in ascending order: 1 + 2^-8 + 2^-8 in
 * bfloat16 is 1 (each 2^-8 is half an ulp and rounds to even), where one
 * rounding of the exact sum gives 1 + 2^-7. */
static void test_sum_rounding(void)
{
    uint16_t one = nsp_rd_float_to_bf16(1.0f), tiny = nsp_rd_float_to_bf16(0x1p-8f);
    uint16_t acc = one, h[2] = {nsp_rd_float_to_half(1.0f), nsp_rd_float_to_half(0x1p-11f)};
    float    f[2] = {1.0f, 0x1p-23f};

    nsp_rs_add_bytes(NSP_RD_BF16, &acc, &tiny, sizeof(acc));
    nsp_rs_add_bytes(NSP_RD_BF16, &acc, &tiny, sizeof(acc));
    tap_ok(nsp_rd_bf16_to_float(acc) == 1.0f,
           "bfloat16 sum 1 + 2^-8 + 2^-8 rounds after each addition: 1 (exact sum 1 + 2^-7)");
    nsp_rs_add_bytes(NSP_RD_FP16, &h[0], &h[1], sizeof(h[0]));
    tap_ok(nsp_rd_half_to_float(h[0]) == 1.0f, "float16 1 + 2^-11 is a tie and rounds to even: 1");
    nsp_rs_add_bytes(NSP_RD_FP32, &f[0], &f[1], sizeof(f[0]));
    tap_ok(f[0] == 1.0f + 0x1p-23f, "float32 rows add as float32");
}

/* replica_sum.h's constants are nspcomm.h's, and name the right element. */
static void test_mode_values(void)
{
    tap_ok((int)NSP_RS_FIRST == (int)NSP_A2A_REPLICAS_FIRST &&
               (int)NSP_RS_SUM_F32 == (int)NSP_A2A_REPLICAS_SUM_F32 &&
               (int)NSP_RS_SUM_BF16 == (int)NSP_A2A_REPLICAS_SUM_BF16 &&
               (int)NSP_RS_SUM_FP16 == (int)NSP_A2A_REPLICAS_SUM_FP16,
           "replica_sum.h's mode values are nsp_a2a_replicas_t's");
    tap_ok(nsp_rs_elem_bytes(NSP_RS_SUM_F32) == 4 && nsp_rs_elem_bytes(NSP_RS_SUM_BF16) == 2 &&
               nsp_rs_elem_bytes(NSP_RS_SUM_FP16) == 2 && nsp_rs_elem_bytes(NSP_RS_FIRST) == 0,
           "summing modes add 4-, 2- and 2-byte elements; FIRST adds none");
}

int main(void)
{
    test_counts_example();
    test_random(NSP_PACK_WITH_SELF, NSP_A2A_REPLICAS_FIRST, 0, 1, 120, 0, 0);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_FIRST, 0, 2, 120, 0, 0);
    test_random(NSP_PACK_WITH_SELF, NSP_A2A_REPLICAS_SUM_F32, 1, 3, 80, 0, 0);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_SUM_F32, 1, 4, 80, 0, 0);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_FIRST, 0, 5, 120, 1, 0);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_SUM_F32, 1, 6, 80, 1, 0);
    test_random(NSP_PACK_WITH_SELF, NSP_A2A_REPLICAS_SUM_BF16, A2A_NUM_BF16, 7, 80, 0, 0);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_SUM_BF16, A2A_NUM_BF16, 8, 80, 1, 0);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_SUM_FP16, A2A_NUM_FP16, 9, 80, 0, 0);
    test_random(NSP_PACK_WITH_SELF, NSP_A2A_REPLICAS_SUM_FP16, A2A_NUM_FP16, 10, 80, 1, 0);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_FIRST, 0, 7, 150, 0, 1);
    test_random(NSP_PACK_SKIP_SELF, NSP_A2A_REPLICAS_FIRST, 1, 8, 80, 0, 1);
    test_large_levels();
    test_sum_rounding();
    test_mode_values();
    return tap_done();
}

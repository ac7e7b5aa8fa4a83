/*
 * nspcomm in one page: every rank plans the same batch with the nested
 * planner, builds the tree of groups, runs round 0 of the plan's nested
 * all-to-all (sequence-sharded [T_local, H, D] -> head-sharded) and checks
 * every element it receives. Start it under a launcher, e.g.
 *   NSPCOMM_ROOT=127.0.0.1:29500 mpirun -np 4 ./nested_alltoall
 * or with NSPCOMM_RANK and NSPCOMM_NRANKS set per process (docs/guide/c-api.md).
 */
#include <nspcomm.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define H 8 /* heads of the tensor */
#define D 4 /* elements per head row */
#define CHECK(call)                                                     \
    do {                                                                \
        if ((call) != NSP_OK) {                                         \
            fprintf(stderr, "%s: %s\n", #call, nsp_last_error());       \
            exit(1);                                                    \
        }                                                               \
    } while (0)

/* What element (token t of sequence s, head h, d) holds, on every rank. */
static uint32_t value(int s, int64_t t, int h, int d)
{
    return (uint32_t)((((int64_t)s << 20 | t) * H + h) * D + d);
}

int main(void)
{
    const int64_t        lens[] = {65536, 24000, 9000, 3000, 500}; /* tokens */
    nsp_planner_params_t params = {.kind = NSP_PLANNER_NESTED};
    nsp_comm_t          *world;
    nsp_tree_t          *tree;
    nsp_model_t          model;
    nsp_cluster_t        cluster;
    nsp_plan_t          *plan;
    nsp_layout_t        *layout;
    nsp_layout_info_t    info;
    nsp_layout_level_t   lv;
    nsp_layout_heads_t   hd;
    nsp_request_t       *reqs[NSP_TREE_MAX_LEVELS];
    int                  rank, size;
    int64_t              rows;
    long                 wrong = 0;

    CHECK(nsp_comm_init_env(&world, NULL));
    CHECK(nsp_comm_rank(world, &rank));
    CHECK(nsp_comm_size(world, &size));
    CHECK(nsp_tree_create(world, NULL, 0, &tree)); /* degrees 1, 2, 4, ... */
    CHECK(nsp_model_preset("llama3-8b", &model));
    CHECK(nsp_cluster_preset("h100", 8, &cluster)); /* an H100 node, of which */
    cluster.ranks = size;                           /* this job has `size` GPUs */
    CHECK(nsp_plan_create(&model, &cluster, lens, 5, &params, &plan));
    CHECK(nsp_layout_create(plan, 0, rank, &layout)); /* this rank in round 0 */
    CHECK(nsp_layout_query(layout, &info));
    CHECK(nsp_layout_head_rows(layout, H, &rows));

    /* src [T_local, H, D]: this rank's chunk of each sequence, level by level */
    uint32_t *src = malloc(sizeof(uint32_t) * (size_t)(info.local_tokens * H * D + 1));
    uint32_t *dst = malloc(sizeof(uint32_t) * (size_t)(rows * D + 1));
    for (int l = 0; l < info.nlevels; ++l) {
        CHECK(nsp_layout_level(layout, l, &lv));
        for (int j = 0; j < lv.nseqs; ++j)
            for (int64_t t = 0; t < lv.chunk_len[j] * H * D; ++t)
                src[lv.chunk_offset[j] * H * D + t] =
                    value(lv.seqs[j], lv.chunk_start[j] + t / (H * D), t / D % H, t % D);
    }
    nsp_a2a_params_t a2a = {.direction = NSP_A2A_SEQ_TO_HEAD, .heads = H, .head_dim = D,
                            .elem_size = sizeof(uint32_t), .src = src, .dst = dst};
    CHECK(nsp_a2a_post(tree, layout, &a2a, reqs)); /* one request per level */

    /* dst, level l: its whole sequences [T_l, h_l, D] for heads first_head.. */
    for (int l = 0; l < info.nlevels; ++l) {
        CHECK(nsp_request_wait(reqs[l]));
        CHECK(nsp_request_free(reqs[l]));
        CHECK(nsp_layout_level(layout, l, &lv));
        CHECK(nsp_layout_heads(layout, l, H, &hd));
        for (int j = 0; j < lv.nseqs; ++j)
            for (int64_t t = 0; t < lv.seq_len[j] * hd.nheads * D; ++t)
                wrong += dst[(hd.row_offset + lv.seq_offset[j] * hd.nheads) * D + t] !=
                         value(lv.seqs[j], t / (hd.nheads * D), hd.first_head + t / D % hd.nheads,
                               t % D);
    }
    printf("rank %d: %d levels, %lld head rows received, %ld wrong\n", rank, info.nlevels,
           (long long)rows, wrong);
    free(src);
    free(dst);
    nsp_layout_free(layout);
    nsp_plan_free(plan);
    nsp_tree_destroy(tree);
    nsp_comm_destroy(world);
    return wrong != 0;
}

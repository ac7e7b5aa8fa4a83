/*
 * Sizes where C can carry them (NSP_A2A_FIELD_BYTES): given src_bytes and
 * dst_bytes, the nested all-to-all checks them against the layout at its
 * entry (nsp_a2a_check_bytes, the check nsp_a2a_post makes first): exact
 * sizes pass, one byte short is NSP_ERR_INVALID_ARG naming the buffer, in
 * both directions; without the field nothing is checked. The sizes are
 * computed here independently from the layout's levels.
 */
#include "attn_sp/a2a_bytes.h"
#include "../tap.h"

#include <stdlib.h>
#include <string.h>

#define HEADS 32
#define HDIM  128

/* A nested plan of 8 ranks and its layout for rank `rank`, round 0. */
static nsp_plan_t *make_plan(void)
{
    static const int64_t lens[] = {60000, 20000, 9000, 4000, 4000, 3000, 2000, 1000, 500, 500};
    nsp_model_t          model;
    nsp_cluster_t        cluster;
    nsp_planner_params_t pp;
    nsp_plan_t          *plan = NULL;

    memset(&pp, 0, sizeof(pp));
    pp.kind = NSP_PLANNER_NESTED;
    if (nsp_model_preset("qwen3-30b-a3b", &model) != NSP_OK ||
        nsp_cluster_preset("h100", 8, &cluster) != NSP_OK ||
        nsp_plan_create(&model, &cluster, lens, 10, &pp, &plan) != NSP_OK) {
        tap_diag("plan: %s", nsp_last_error());
        return NULL;
    }
    return plan;
}

/* Rows of D elements of the two buffers, from the levels: [T_local * H]
 * sequence-sharded, sum over levels of T_l * H / degree head-sharded (a
 * degree above H keeps one head per rank). */
static void rows_of(const nsp_layout_t *lay, int64_t *seq_rows, int64_t *head_rows)
{
    nsp_layout_info_t info;

    nsp_layout_query(lay, &info);
    *seq_rows  = info.local_tokens * HEADS;
    *head_rows = 0;
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_level(lay, l, &lv);
        *head_rows += lv.full_tokens * (lv.degree <= HEADS ? HEADS / lv.degree : 1);
    }
}

static void check_dir(const nsp_layout_t *lay, nsp_a2a_dir_t dir, size_t seq_b, size_t head_b)
{
    const char      *d = dir == NSP_A2A_SEQ_TO_HEAD ? "s2h" : "h2s";
    nsp_a2a_params_t p;
    size_t           src = dir == NSP_A2A_SEQ_TO_HEAD ? seq_b : head_b;
    size_t           dst = dir == NSP_A2A_SEQ_TO_HEAD ? head_b : seq_b;

    memset(&p, 0, sizeof(p));
    p.direction  = dir;
    p.heads      = HEADS;
    p.head_dim   = HDIM;
    p.elem_size  = 2;
    tap_is_int(nsp_a2a_check_bytes(lay, &p, "test"), NSP_OK, "%s: no sizes: not checked", d);
    p.field_mask = NSP_A2A_FIELD_BYTES;
    p.src_bytes  = src;
    p.dst_bytes  = dst;
    tap_is_int(nsp_a2a_check_bytes(lay, &p, "test"), NSP_OK, "%s: exact sizes (src %zu, dst "
               "%zu bytes)", d, src, dst);
    p.src_bytes = src - 1;
    tap_ok(nsp_a2a_check_bytes(lay, &p, "test") == NSP_ERR_INVALID_ARG &&
               strstr(nsp_last_error(), "src has") != NULL,
           "%s: src one byte short: refused naming src (%s)", d, nsp_last_error());
    p.src_bytes = src;
    p.dst_bytes = dst - 1;
    tap_ok(nsp_a2a_check_bytes(lay, &p, "test") == NSP_ERR_INVALID_ARG &&
               strstr(nsp_last_error(), "dst has") != NULL,
           "%s: dst one byte short: refused naming dst", d);
}

int main(void)
{
    nsp_plan_t   *plan = make_plan();
    nsp_layout_t *lay  = NULL;
    int64_t       seq_rows, head_rows;

    if (!tap_ok(plan != NULL && nsp_layout_create(plan, 0, 0, &lay) == NSP_OK,
                "a nested plan of 8 ranks and rank 0's layout")) {
        nsp_plan_free(plan);
        return tap_done();
    }
    rows_of(lay, &seq_rows, &head_rows);
    tap_ok(seq_rows > 0 && head_rows > 0, "rank 0 holds tokens (%lld sequence-sharded rows, "
           "%lld head-sharded)", (long long)seq_rows, (long long)head_rows);
    check_dir(lay, NSP_A2A_SEQ_TO_HEAD, (size_t)seq_rows * HDIM * 2, (size_t)head_rows * HDIM * 2);
    check_dir(lay, NSP_A2A_HEAD_TO_SEQ, (size_t)seq_rows * HDIM * 2, (size_t)head_rows * HDIM * 2);
    nsp_layout_free(lay);
    nsp_plan_free(plan);
    return tap_done();
}

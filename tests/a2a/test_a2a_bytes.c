/*
 * Sizes where C can carry them (NSP_A2A_FIELD_BYTES): given src_bytes and
 * dst_bytes, the nested all-to-all checks them against the layout at its
 * entry (nsp_a2a_check_bytes, the check nsp_a2a_post makes first). Over
 * random nested plans, every rank, both directions: the exact sizes of the
 * independent reference buffers (a2a_ref.c) pass, one byte short is
 * NSP_ERR_INVALID_ARG naming the buffer, and without the field nothing is
 * checked.
 */
#include "attn_sp/a2a_bytes.h"
#include "a2a_ref.h"
#include "../tap.h"

#include <stdlib.h>
#include <string.h>

#define PLANS 12
#define HDIM  8

typedef struct tally {
    int cases, nonempty, exact_ok, src_short, dst_short, unchecked;
} tally_t;

/* One rank, one direction: the four calls. */
static void check_dir(const nsp_layout_t *lay, nsp_a2a_dir_t dir, int heads, size_t seq_b,
                      size_t head_b, tally_t *t)
{
    nsp_a2a_params_t p;
    const size_t     src = dir == NSP_A2A_SEQ_TO_HEAD ? seq_b : head_b;
    const size_t     dst = dir == NSP_A2A_SEQ_TO_HEAD ? head_b : seq_b;

    memset(&p, 0, sizeof(p));
    p.direction = dir;
    p.heads     = heads;
    p.head_dim  = HDIM;
    p.elem_size = 2;
    t->cases++;
    t->nonempty += src > 0 && dst > 0;
    t->unchecked += nsp_a2a_check_bytes(lay, &p, "test") == NSP_OK;
    p.field_mask = NSP_A2A_FIELD_BYTES;
    p.src_bytes  = src;
    p.dst_bytes  = dst;
    t->exact_ok += nsp_a2a_check_bytes(lay, &p, "test") == NSP_OK;
    if (src > 0) {
        p.src_bytes = src - 1;
        t->src_short += nsp_a2a_check_bytes(lay, &p, "test") == NSP_ERR_INVALID_ARG &&
                        strstr(nsp_last_error(), "src has") != NULL;
        p.src_bytes = src;
    } else {
        t->src_short++; /* nothing to be short of */
    }
    if (dst > 0) {
        p.dst_bytes = dst - 1;
        t->dst_short += nsp_a2a_check_bytes(lay, &p, "test") == NSP_ERR_INVALID_ARG &&
                        strstr(nsp_last_error(), "dst has") != NULL;
    } else {
        t->dst_short++;
    }
}

/* Every rank of round 0 of one plan; -1 if a reference or layout failed. */
static int check_plan(const nsp_plan_t *plan, int heads, tally_t *t)
{
    for (int r = 0; r < plan->cluster.ranks; ++r) {
        nsp_layout_t *lay = NULL;
        void         *sbuf = NULL, *hbuf = NULL;
        int64_t       tokens = 0, rows = 0;
        int           ok = nsp_layout_create(plan, 0, r, &lay) == NSP_OK &&
                 a2a_ref_seq_sharded(plan, 0, r, heads, HDIM, 2, 0, &sbuf, &tokens) == 0 &&
                 a2a_ref_head_sharded(plan, 0, r, heads, HDIM, 2, 0, &hbuf, &rows) == 0;
        if (ok) {
            const size_t seq_b = (size_t)tokens * heads * HDIM * 2, head_b = (size_t)rows * HDIM * 2;
            check_dir(lay, NSP_A2A_SEQ_TO_HEAD, heads, seq_b, head_b, t);
            check_dir(lay, NSP_A2A_HEAD_TO_SEQ, heads, seq_b, head_b, t);
        }
        free(sbuf);
        free(hbuf);
        nsp_layout_free(lay);
        if (!ok) {
            tap_diag("rank %d: %s", r, nsp_last_error());
            return -1;
        }
    }
    return 0;
}

int main(void)
{
    uint64_t rng = 20261201;
    tally_t  t;
    int      bad = 0;

    memset(&t, 0, sizeof(t));
    for (int k = 0; k < PLANS; ++k) {
        a2a_plan_opts_t opts = {.nranks = 8, .nrounds = 1, .seqs_per_round = 12,
                                .max_len = 600};
        nsp_plan_t     *plan;
        a2a_random_degrees(&rng, opts.nranks, &opts);
        plan = a2a_random_plan(&rng, &opts);
        bad += plan == NULL || check_plan(plan, a2a_random_heads(&rng, &opts), &t) != 0;
        nsp_plan_free(plan);
    }
    tap_ok(bad == 0 && t.cases == PLANS * 8 * 2, "%d random plans, 8 ranks, both directions: "
           "%d cases", PLANS, t.cases);
    tap_ok(t.nonempty >= t.cases / 2, "%d of them with both buffers non-empty", t.nonempty);
    tap_is_int(t.unchecked, t.cases, "without NSP_A2A_FIELD_BYTES nothing is checked");
    tap_is_int(t.exact_ok, t.cases, "the reference buffers' exact sizes pass");
    tap_is_int(t.src_short, t.cases, "src one byte short: refused naming src");
    tap_is_int(t.dst_short, t.cases, "dst one byte short: refused naming dst");
    return tap_done();
}

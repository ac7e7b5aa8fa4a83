/*
 * Mapped sources of the host engine (nested_a2a_mapped.h): the announce,
 * the early copies out of the peers' sources, the decision every index of
 * the group makes alike, and the "done" messages.
 */
#include "config.h"

#include "attn_sp/nested_a2a_mapped.h"

#include "attn_sp/pack.h"
#include "attn_sp/replica_sum.h"
#include "common/log.h"
#include "transport/request.h"

#include <stdlib.h>
#include <string.h>

/* Part numbers of a mapped level's control messages (above any data part). */
#define A2A_PART_ANNOUNCE 254
#define A2A_PART_DONE     255

nsp_status_t nsp_a2a_mapped_setup(const nsp_a2a_level_t *L, nsp_a2a_mapped_t **out)
{
    const nsp_a2a_t  *op = L->a2a;
    nsp_tp_comm_t    *w  = op->world;
    int               d = L->lv.degree, yes = 0;
    nsp_a2a_mapped_t *M;

    *out = NULL;
    if (d < 2 || !op->prep.mapped ||
        (op->dir == NSP_A2A_HEAD_TO_SEQ && nsp_rs_sums((int32_t)op->replicas))) {
        return NSP_OK;
    }
    NSP_CHECK(w->ops->mem_group_mapped(w, NSP_TP_REGION_ANY, L->lv.rank0, d, &yes));
    if (!yes) {
        return NSP_OK;
    }
    M = calloc(1, sizeof(*M));
    if (M != NULL) {
        M->descs      = calloc((size_t)d, sizeof(*M->descs));
        M->copied     = calloc((size_t)d, 1);
        M->ctl_counts = calloc((size_t)d, sizeof(size_t));
    }
    if (M == NULL || M->descs == NULL || M->copied == NULL || M->ctl_counts == NULL ||
        nsp_a2a_tps_alloc(&M->ctl, 2 * (size_t)(d - 1)) != NSP_OK) {
        nsp_a2a_mapped_free(M);
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate the mapped "
                         "path of level %d (degree %d)", L->level, d);
    }
    *out = M;
    return NSP_OK;
}

void nsp_a2a_mapped_free(nsp_a2a_mapped_t *M)
{
    if (M == NULL) {
        return;
    }
    nsp_a2a_tps_free(&M->ctl);
    free(M->descs);
    free(M->copied);
    free(M->ctl_counts);
    free(M);
}

void nsp_a2a_mapped_arm(const nsp_a2a_level_t *L, nsp_a2a_mapped_t *M)
{
    nsp_a2a_tps_reset(&M->ctl);
    M->mapped   = 0;
    M->spec_off = 0;
    memset(M->copied, 0, (size_t)L->lv.degree);
}

void nsp_a2a_mapped_disarm(nsp_a2a_mapped_t *M)
{
    nsp_a2a_tps_reset(&M->ctl);
}

nsp_status_t nsp_a2a_mapped_announce(nsp_a2a_level_t *L, nsp_a2a_mapped_t *M)
{
    const nsp_a2a_t *op = L->a2a;
    int              d = L->lv.degree, me = L->lv.index;
    size_t           bytes, offset = 0;
    uint32_t         region = 0;
    nsp_tp_comm_t   *w = op->world;

    NSP_CHECK(nsp_pack_src_bytes(&L->view, op->dir, op->heads, op->row_bytes, me, &bytes));
    M->mine.bytes  = bytes;
    M->mine.ok     = bytes == 0 ||
                     w->ops->mem_find(w, L->src, bytes, &region, &offset) == NSP_OK;
    M->mine.region = region;
    M->mine.offset = offset;
    M->descs[me]   = M->mine;
    NSP_TRACE("a2a post %u level %d: announcing at %.6f", op->post_seq, L->level, nsp_now_s());
    /* one step per peer, so each announce is seen as soon as it arrives:
     * step k sends to index me+k and receives from index me-k into descs */
    for (int k = 1; k < d; ++k) {
        int to = (me + k) % d, from = (me - k + d) % d;
        NSP_CHECK(nsp_group_sendrecv_post(
            L->group, &M->mine, sizeof(nsp_a2a_desc_t), to, &M->descs[from],
            sizeof(nsp_a2a_desc_t), from,
            nsp_a2a_part_tag(op->post_seq, L->degree_id, A2A_PART_ANNOUNCE), NULL,
            &M->ctl.reqs[M->ctl.n]));
        M->ctl.seen[M->ctl.n] = M->ctl.reqs[M->ctl.n]->progress;
        ++M->ctl.n;
    }
    return NSP_OK;
}

/* May index q's share be copied now, before every announce is in? Its own
 * announce allows the mapped path (a later "no" from another index makes the
 * level fall back, and the exchange then overwrites all of dst: early
 * copies only ever write this rank's own dst, and read sources that stay
 * borrowed until this rank took part in the level). */
static nsp_status_t desc_ok(const nsp_a2a_level_t *L, const nsp_a2a_mapped_t *M, int q,
                            int *yes)
{
    const nsp_a2a_t      *op = L->a2a;
    nsp_tp_comm_t        *w  = op->world;
    const nsp_a2a_desc_t *D  = &M->descs[q];
    size_t            want;

    NSP_CHECK(nsp_pack_src_bytes(&L->view, op->dir, op->heads, op->row_bytes, q, &want));
    *yes = D->ok && D->bytes == want;
    if (*yes && want > 0) {
        NSP_CHECK(w->ops->mem_group_mapped(w, D->region, L->lv.rank0, L->lv.degree, yes));
    }
    return NSP_OK;
}

/* Copy index q's share out of its mapped source into this rank's dst. */
static nsp_status_t copy_from(const nsp_a2a_level_t *L, nsp_a2a_mapped_t *M, int q)
{
    const nsp_a2a_t      *op  = L->a2a;
    nsp_tp_comm_t        *w   = op->world;
    const nsp_a2a_desc_t *D   = &M->descs[q];
    const void           *src = L->src;

    if (D->bytes > 0 && q != L->lv.index) {
        NSP_CHECK(w->ops->mem_peer_ptr(w, L->lv.rank0 + q, D->region, D->offset, D->bytes,
                                       &src));
    }
    if (D->bytes > 0 || q == L->lv.index) {
        NSP_CHECK(nsp_pack_copy_peer(&L->view, op->dir, op->heads, op->row_bytes, q, src,
                                     L->dst));
    }
    M->copied[q] = 1;
    return NSP_OK;
}

/* Copy, before every announce is in, from each peer whose announce
 * arrived and allowed it: k = 0 my own share; k >= 1 index me-k, whose
 * announce arrived when request k-1 is done (and freed). */
static nsp_status_t copy_early(const nsp_a2a_level_t *L, nsp_a2a_mapped_t *M)
{
    int d = L->lv.degree, me = L->lv.index, yes;

    for (int k = 0; k < d && M->ctl.n == d - 1 && !M->spec_off; ++k) {
        int q = (me - k + d) % d;
        if (k > 0 && M->ctl.reqs[k - 1] != NULL) {
            continue;
        }
        if (!M->copied[q]) {
            NSP_CHECK(desc_ok(L, M, q, &yes));
            M->spec_off = !yes;
            if (yes) {
                NSP_CHECK(copy_from(L, M, q));
            }
        }
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_mapped_decide(nsp_a2a_level_t *L, nsp_a2a_mapped_t *M, int *fell_back)
{
    nsp_a2a_t    *op = L->a2a;
    int           d  = L->lv.degree;
    const size_t *zero = M->ctl_counts;
    nsp_status_t  status = nsp_a2a_tps_test(&M->ctl, &op->progress, &op->idle);

    if (status < 0) {
        return status;
    }
    NSP_CHECK(copy_early(L, M));
    if (status == NSP_INPROGRESS) {
        return status;
    }
    M->ctl.n = 0; /* every announce request is done and freed */
    for (int q = 0, all = 1; q < d && all; ++q) {
        NSP_CHECK(desc_ok(L, M, q, &all));
        if (!all) {
            NSP_DEBUG("a2a post %u level %d: index %d's source is not mapped for the whole "
                      "group; exchanging through the transport", op->post_seq, L->level, q);
            *fell_back = 1;
            return NSP_OK;
        }
    }
    for (int q = 0; q < d; ++q) {
        if (!M->copied[q]) {
            NSP_CHECK(copy_from(L, M, q));
        }
    }
    M->mapped  = 1;
    *fell_back = 0;
    NSP_TRACE("a2a post %u level %d: copied from mapped peers at %.6f", op->post_seq,
              L->level, nsp_now_s());
    /* zero bytes to and from every peer: "I no longer read your source" */
    return nsp_a2a_tps_post(&M->ctl, L->group, &M->mine, zero, zero, M->descs, zero, zero,
                            nsp_a2a_part_tag(op->post_seq, L->degree_id, A2A_PART_DONE), NULL);
}

nsp_status_t nsp_a2a_mapped_test(nsp_a2a_mapped_t *M, uint64_t *progress, int *idle)
{
    return nsp_a2a_tps_test(&M->ctl, progress, idle);
}

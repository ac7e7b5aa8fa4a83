/*
 * What every engine of the nested all-to-all shares (nested_a2a_common.h):
 * tags, the in-place threshold, the agreement hashes, the checks and
 * defaults of a post, where a level's data sits, the parts of a level and
 * the transport requests of a level. Pure functions and the world's
 * collectives; no engine, no memory type.
 */
#include "config.h"

#include "attn_sp/nested_a2a_common.h"

#include "attn_sp/pack.h"
#include "attn_sp/replica_sum.h"
#include "common/log.h"
#include "transport/request.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tags, the in-place threshold, hashes ----------------------------------- */

uint32_t nsp_a2a_tag(uint32_t post_seq, int degree)
{
    return NSP_TP_TAG(NSP_TP_TAG_CLASS_A2A, ((post_seq & 0xfffu) << 12) | ((uint32_t)degree & 0xfffu));
}

/* The environment is configuration of the process, read once (any thread). */
static pthread_once_t direct_min_once = PTHREAD_ONCE_INIT;
static size_t         direct_min_bytes;

static void direct_min_read(void)
{
    const char *env = getenv("NSPCOMM_A2A_DIRECT_MIN");

    direct_min_bytes = NSP_PACK_DIRECT_MIN_BYTES;
    if (env != NULL && *env != '\0') {
        char              *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0' && v > 0) {
            direct_min_bytes = (size_t)v;
        } else {
            NSP_WARN("NSPCOMM_A2A_DIRECT_MIN=%s is not a positive byte count; using %zu",
                     env, direct_min_bytes);
        }
    }
}

size_t nsp_a2a_direct_min(void)
{
    pthread_once(&direct_min_once, direct_min_read);
    return direct_min_bytes;
}

static pthread_once_t iov_min_once = PTHREAD_ONCE_INIT;
static size_t         iov_min_bytes;

static void iov_min_read(void)
{
    const char *env = getenv("NSPCOMM_A2A_IOV_MIN");

    iov_min_bytes = NSP_A2A_IOV_MIN_BYTES;
    if (env != NULL && *env != '\0') {
        char              *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (strcmp(env, "off") == 0) {
            iov_min_bytes = SIZE_MAX;
        } else if (*end == '\0' && env[0] >= '0' && env[0] <= '9') {
            iov_min_bytes = (size_t)v;
        } else {
            NSP_WARN("NSPCOMM_A2A_IOV_MIN=%s is neither a byte count nor \"off\"; using %zu",
                     env, iov_min_bytes);
        }
    }
}

size_t nsp_a2a_iov_min(void)
{
    pthread_once(&iov_min_once, iov_min_read);
    return iov_min_bytes;
}

uint32_t nsp_a2a_part_tag(uint32_t post_seq, int degree_id, int part)
{
    return NSP_TP_TAG(NSP_TP_TAG_CLASS_A2A, ((post_seq & 0x7ffu) << 13) |
                                                (((uint32_t)degree_id & 0x1fu) << 8) |
                                                ((uint32_t)part & 0xffu));
}

uint64_t nsp_a2a_check_hash(uint64_t plan_hash, nsp_a2a_dir_t dir, int heads, int head_dim,
                            size_t elem_size, nsp_a2a_replicas_t replicas, int mapped)
{
    int64_t v[8] = {(int64_t)dir, heads, head_dim, (int64_t)elem_size, (int64_t)replicas,
                    (int64_t)nsp_a2a_direct_min(), mapped, (int64_t)nsp_a2a_iov_min()};

    return nsp_fnv1a(plan_hash, v, sizeof(v));
}

nsp_status_t nsp_a2a_compare_hashes(const uint64_t *hashes, int nranks, const char *what)
{
    char list[160] = "";
    int  ndiff = 0, len = 0, first = -1;

    for (int r = 1; r < nranks; ++r) {
        if (hashes[r] == hashes[0]) {
            continue;
        }
        if (first < 0) {
            first = r;
        }
        if (ndiff < 8) {
            len += snprintf(list + len, sizeof(list) - (size_t)len, "%s%d", ndiff ? "," : "", r);
        }
        ++ndiff;
    }
    if (ndiff == 0) {
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_MISMATCH, "%s: %d rank(s) (%s%s) differ from rank 0 (hash "
                     "%016llx on rank %d vs %016llx on rank 0); every rank must build its "
                     "layout from the same plan and round and pass the same direction, heads, "
                     "head_dim, elem_size, replicas and mapped, after the same exchanges "
                     "on this world", what, ndiff, list,
                     ndiff > 8 ? ",..." : "", (unsigned long long)hashes[first], first,
                     (unsigned long long)hashes[0]);
}

/* ---- the checks and defaults of a post, the agreement ----------------------- */


/* A replica mode nspcomm.h knows, and a summing one on elements of its
 * type's size (SUM_F32: 4 bytes, SUM_BF16 and SUM_FP16: 2). */
static nsp_status_t check_replicas(nsp_a2a_replicas_t mode, size_t es, const char *what)
{
    static const char *const names[] = {"the first replica", "the float32 sum",
                                        "the bfloat16 sum", "the float16 sum"};
    size_t need = nsp_rs_elem_bytes((int32_t)mode);

    if ((unsigned)mode >= sizeof(names) / sizeof(names[0])) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: replicas %d is not an nsp_a2a_replicas_t",
                         what, (int)mode);
    }
    if (need != 0 && es != need) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: replicas %d (%s) adds %zu-byte elements, "
                         "elem_size is %zu", what, (int)mode, names[mode], need, es);
    }
    return NSP_OK;
}
static nsp_status_t check_params(const nsp_a2a_params_t *p, const nsp_layout_info_t *info,
                                 int64_t head_rows, const char *what)
{
    size_t es = p->elem_size;

    if (es != 1 && es != 2 && es != 4 && es != 8) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: elem_size %zu is not 1, 2, 4 or 8 bytes",
                         what, es);
    }
    if (p->heads < 1 || p->head_dim < 1 ||
        (p->direction != NSP_A2A_SEQ_TO_HEAD && p->direction != NSP_A2A_HEAD_TO_SEQ)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: heads %d, head_dim %d or direction %d "
                         "invalid", what, p->heads, p->head_dim, (int)p->direction);
    }
    if (p->field_mask & NSP_A2A_FIELD_REPLICAS) {
        NSP_CHECK(check_replicas(p->replicas, es, what));
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_check_bufs(const nsp_a2a_prep_t *prep, const void *src, const void *dst,
                                const char *what)
{
    if ((prep->info.local_tokens > 0 || prep->head_rows > 0) && (src == NULL || dst == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: NULL src or dst for %lld tokens", what,
                         (long long)prep->info.local_tokens);
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_world(nsp_tree_t *tree, const nsp_layout_info_t *info, const char *what,
                           nsp_comm_t **world_p)
{
    nsp_comm_t *world;
    int         rank, size;

    NSP_CHECK(nsp_tree_world(tree, &world));
    NSP_CHECK(nsp_comm_rank(world, &rank));
    NSP_CHECK(nsp_comm_size(world, &size));
    if (info->rank != rank || info->ranks != size) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: the layout is for rank %d of %d, but this "
                         "is rank %d of a world of %d", what, info->rank, info->ranks, rank,
                         size);
    }
    *world_p = world;
    return NSP_OK;
}

nsp_status_t nsp_a2a_prepare(nsp_tree_t *tree, const nsp_layout_t *layout,
                             const nsp_a2a_params_t *params, const char *what,
                             nsp_a2a_prep_t *prep)
{
    int64_t head_rows = 0;
    uint64_t mask;

    if (tree == NULL || layout == NULL || params == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_post: NULL tree, layout, params or "
                         "requests");
    }
    mask = params->field_mask;
    NSP_CHECK(nsp_layout_query(layout, &prep->info));
    NSP_CHECK(nsp_layout_head_rows(layout, params->heads, &head_rows));
    NSP_CHECK(check_params(params, &prep->info, head_rows, what));
    NSP_CHECK(nsp_a2a_world(tree, &prep->info, what, &prep->world));
    prep->head_rows = head_rows;
    prep->serial   = (mask & NSP_A2A_FIELD_SERIAL) ? params->serial : 0;
    prep->check    = (mask & NSP_A2A_FIELD_CHECK) ? params->check : 1;
    prep->replicas = (mask & NSP_A2A_FIELD_REPLICAS) ? params->replicas : NSP_A2A_REPLICAS_FIRST;
    prep->mapped   = (mask & NSP_A2A_FIELD_MAPPED) ? params->mapped : 0;
    if (prep->mapped != 0 && prep->mapped != 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: mapped is %d; pass 0 or 1", what,
                         prep->mapped);
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_allgather_check(nsp_comm_t *world, uint64_t hash, const char *what)
{
    int          size;
    uint64_t    *all;
    nsp_status_t status;

    NSP_CHECK(nsp_comm_size(world, &size));
    all = malloc(sizeof(uint64_t) * (size_t)size);
    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate %d hashes", what, size);
    }
    NSP_CHECK_GOTO(nsp_comm_allgather(world, &hash, all, sizeof(hash)), status, out_free);
    status = nsp_a2a_compare_hashes(all, size, what);
out_free:
    free(all);
    return status;
}

nsp_status_t nsp_a2a_agree(const nsp_a2a_prep_t *prep, const nsp_a2a_params_t *params,
                           const char *what)
{
    uint64_t hash;
    uint32_t seq;

    if (!prep->check) {
        return NSP_OK;
    }
    /* the world's operation number too: ranks whose counts drifted apart
     * would cross their messages */
    seq  = nsp_comm_seq(prep->world);
    hash = nsp_a2a_check_hash(prep->info.plan_hash, params->direction, params->heads,
                              params->head_dim, params->elem_size, prep->replicas,
                              prep->mapped);
    return nsp_a2a_allgather_check(prep->world, nsp_fnv1a(hash, &seq, sizeof(seq)), what);
}

void nsp_a2a_level_bufs(nsp_a2a_dir_t dir, const char *src, char *dst, int heads,
                        size_t row_bytes, const nsp_layout_level_t *lv,
                        const nsp_layout_heads_t *hs, const char **level_src, char **level_dst)
{
    size_t chunks = (size_t)lv->local_offset * (size_t)heads * row_bytes;
    size_t block  = (size_t)hs->row_offset * row_bytes;

    *level_src = src + (dir == NSP_A2A_SEQ_TO_HEAD ? chunks : block);
    *level_dst = dst + (dir == NSP_A2A_SEQ_TO_HEAD ? block : chunks);
}

size_t nsp_a2a_sum(const size_t *v, int n)
{
    size_t s = 0;

    for (int k = 0; k < n; ++k) {
        s += v[k];
    }
    return s;
}


/* ---- the parts of a level ------------------------------------------------- */

nsp_status_t nsp_a2a_parts_alloc(nsp_a2a_level_t *L, int nparts)
{
    int d = L->lv.degree, n = L->view.nseqs;

    L->nparts = nparts;
    L->parts  = calloc((size_t)nparts, sizeof(*L->parts));
    L->counts = calloc(4 * (size_t)d * (size_t)nparts, sizeof(size_t));
    L->sels   = calloc((size_t)nparts * ((size_t)n + 1), 1);
    if (L->parts == NULL || L->counts == NULL || L->sels == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate the parts of "
                         "level %d (%d sequences)", L->level, n);
    }
    for (int p = 0; p < nparts; ++p) {
        nsp_a2a_part_t *P = &L->parts[p];
        P->sb  = L->counts + (size_t)p * 4 * (size_t)d;
        P->sd  = P->sb + d;
        P->rb  = P->sd + d;
        P->rd  = P->rb + d;
        P->sel = L->sels + (size_t)p * ((size_t)n + 1);
        P->seq = -1;
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_part_counts(const nsp_a2a_level_t *L, nsp_a2a_part_t *P)
{
    const nsp_a2a_t *a = L->a2a;

    NSP_CHECK(nsp_pack_counts_sel(&L->view, P->sel, a->dir, a->heads, a->row_bytes, a->replicas,
                                  NSP_PACK_SKIP_SELF, P->sb, P->sd, P->rb, P->rd));
    if (P->seq < 0) {
        return NSP_OK;
    }
    /* in place: where the sequence sits in the block */
    return nsp_pack_seq_displs(&L->view, P->seq, a->heads, a->row_bytes,
                               a->dir == NSP_A2A_SEQ_TO_HEAD ? P->rd : P->sd);
}

size_t nsp_a2a_level_bytes(const nsp_a2a_level_t *L, int recv)
{
    size_t n = 0;

    for (int k = 0; k < L->nparts; ++k) {
        n += nsp_a2a_sum(recv ? L->parts[k].rb : L->parts[k].sb, L->lv.degree);
    }
    return n;
}

/* ---- the transport requests of a level -------------------------------------- */

nsp_status_t nsp_a2a_tps_alloc(nsp_a2a_tps_t *t, size_t max)
{
    t->n    = 0;
    t->reqs = calloc(max, sizeof(*t->reqs));
    t->seen = calloc(max, sizeof(*t->seen));
    return t->reqs != NULL && t->seen != NULL ? NSP_OK : NSP_ERR_NO_MEMORY;
}

void nsp_a2a_tps_reset(nsp_a2a_tps_t *t)
{
    for (int k = 0; k < t->n; ++k) {
        nsp_request_free(t->reqs[k]);
        t->reqs[k] = NULL;
    }
    t->n = 0;
}

void nsp_a2a_tps_free(nsp_a2a_tps_t *t)
{
    nsp_a2a_tps_reset(t);
    free(t->reqs);
    free(t->seen);
    memset(t, 0, sizeof(*t));
}

nsp_status_t nsp_a2a_tps_post(nsp_a2a_tps_t *t, nsp_group_t *group, const void *send,
                              const size_t *sb, const size_t *sd, void *recv, const size_t *rb,
                              const size_t *rd, uint32_t tag, void *stream)
{
    nsp_tp_alltoallv_t args = {.sendbuf = send, .sendcounts = sb, .sdispls = sd,
                               .recvbuf = recv, .recvcounts = rb, .rdispls = rd};
    int                n;

    NSP_CHECK(nsp_group_alltoallv_post(group, &args, tag, stream, &t->reqs[t->n], &n));
    for (int k = 0; k < n; ++k) { /* their progress so far seen */
        t->seen[t->n] = t->reqs[t->n]->progress;
        ++t->n;
    }
    return NSP_OK;
}

nsp_status_t nsp_a2a_tps_test(nsp_a2a_tps_t *t, uint64_t *progress, int *idle)
{
    int left = 0;

    for (int k = 0; k < t->n; ++k) {
        nsp_request_t *r = t->reqs[k];
        nsp_status_t   st;
        if (r == NULL) {
            continue;
        }
        st = nsp_request_test(r);
        *progress += r->progress - t->seen[k];
        t->seen[k] = r->progress;
        if (st == NSP_INPROGRESS) {
            *idle &= r->idle;
            ++left;
            continue;
        }
        if (st < 0) {
            return st; /* decided (and logged) by the transport or its request */
        }
        nsp_request_free(r);
        t->reqs[k] = NULL;
        ++*progress;
    }
    return left > 0 ? NSP_INPROGRESS : NSP_OK;
}

/*
 * Nested sequence-parallel attention: the driver that pipelines the nested
 * all-to-all of every level with the kernel (nested_attn.h for the order of
 * a call, ring_attn.h for ring levels, docs/design/attention.md).
 */
#include "config.h"

#include "attn_sp/nested_attn.h"

#include "attn_sp/memtype.h"
#include "attn_sp/attn_ref.h"
#include "attn_sp/layout.h"
#include "attn_sp/nested_a2a.h"
#include "attn_sp/pack.h"
#include "attn_sp/ring_attn.h"
#include "common/log.h"
#include "transport/comm.h"
#include "transport/request.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NATTN_MAX_LEVELS   NSP_TREE_MAX_LEVELS
#define NATTN_DEFAULT_SLICES 8

/* Head-sharded buffers kept by the attn between calls; with dK/dV summed in
 * float32 (dkv_f32), their float32 copies head-sharded (_H, [rows_kv, D])
 * and sequence-sharded (_S, [T_local, n_kv, D]). */
enum { B_Q, B_K, B_V, B_O, B_LSE, B_DO, B_DQ, B_DK, B_DV, B_DK32H, B_DV32H, B_DK32S, B_DV32S,
       B_COUNT };

/* What a call is, for the agreement check. */
enum { KIND_FWD = 1, KIND_BWD_SAVED = 2, KIND_BWD_FULL = 3 };

/* One level as the driver sees it, fixed at create. */
typedef struct nattn_level {
    nsp_layout_level_t lv;
    nsp_layout_heads_t hq, hkv;   /* rows of the level in head-sharded q (n_q) and k (n_kv) */
    int                nk;        /* kernel sequences: entries, or sequences of a ring level */
    int64_t           *cu;        /* [nk + 1] tokens of each kernel sequence in the block */
    int64_t           *slice_cu;  /* [nk + 1] scratch: rebased offsets of one slice */
    int                nslices;
    int               *slice;     /* [nslices + 1] kernel sequence bounds */
    nsp_ring_level_t  *ring;      /* ring levels only */
    /* Bytes this rank sends in one all-to-all of the level (self excluded). */
    uint64_t           s2h_q, s2h_kv, s2h_lse, h2s_q, h2s_kv_sum, h2s_lse;
} nattn_level_t;

/* The exchanges of the calls, built once by create (nsp_a2a_create) and
 * started by every call that uses them; a call starts each at most once.
 * Sequence-to-head of q, k, v, o, lse, dout; head-to-sequence of o, lse
 * (forward), dq, dk, dv (backward). */
enum { X_Q, X_K, X_V, X_O, X_LSE, X_DO, X_O_BACK, X_LSE_BACK, X_DQ_BACK, X_DK_BACK,
       X_DV_BACK, X_COUNT };

#define NATTN_MAX_XFERS 9 /* most exchanges of one call (a stateless backward) */

struct nsp_nested_attn {
    const nsp_attn_mem_t    *mem;       /* of the world's memory type (memtype.h) */
    const nsp_reduce_ops_t  *reduce;    /* its reductions */
    void                    *stream;    /* the caller's (nsp_nested_attn_set_stream) */
    void                    *stream0;   /* what the caller's NULL stands for (mem->bind) */
    void                    *mem_state; /* what mem->bind kept (the emulated kernel's) */
    nsp_tree_t              *tree;
    nsp_comm_t              *world;
    const nsp_layout_t      *layout;
    nsp_layout_info_t        info;
    nsp_attn_params_t        attn;      /* model heads, resolved scale (no sizes: the
                                           kernels see per-level buffers) */
    nsp_attn_params_t        io;        /* as given: the sizes of the callers' buffers */
    nsp_attn_kernel_t        kernel;
    nsp_attn_dtype_t         dtype;
    size_t                   es;        /* bytes per element of q, k, v, ... */
    int                      serial, check, max_slices;
    int                      kv_replicated; /* some level of this rank replicates KV heads */
    int                      want_dkv_f32; /* params.dkv_f32: sum dK/dV in float32 */
    int                      dkv_f32;   /* want_dkv_f32, dtype is not FP32 and some rank
                                           replicates KV heads: dK/dV go back in float32,
                                           summed (else in dtype: SUM_BF16/SUM_FP16) */
    uint64_t                 hash;      /* of the round and the static parameters */
    int64_t                  rows_q, rows_kv;  /* head-sharded rows for n_q and n_kv heads */
    nattn_level_t           *levels;    /* [info.nlevels] */
    void                    *buf[B_COUNT];
    size_t                   cap[B_COUNT];
    nsp_a2a_t               *xh[X_COUNT]; /* the exchanges, [X_*] */
};

struct nsp_nested_attn_saved {
    const nsp_nested_attn_t *owner;
    const nsp_attn_mem_t    *mem;
    uint64_t                 hash;
    void                    *q, *k, *v, *o;
    float                   *lse;
};


/* ---- slices -------------------------------------------------------------- */

int nsp_nested_attn_slices(const int64_t *cu, int n, int max_slices, int *bounds)
{
    double total = 0.0, acc = 0.0;
    int    ns = 0;

    bounds[0] = 0;
    if (n <= 0) {
        return 0;
    }
    for (int x = 0; x < n; ++x) {
        double len = (double)(cu[x + 1] - cu[x]);
        total += len * len;
    }
    /* A slice ends once it holds 1/max_slices of the work, so a dominant
     * sequence gets a slice of its own and the small ones after it share one. */
    for (int x = 0; x + 1 < n && total > 0.0; ++x) {
        double len = (double)(cu[x + 1] - cu[x]);
        acc += len * len;
        if (ns + 1 < max_slices && acc >= total / (double)max_slices) {
            bounds[++ns] = x + 1;
            acc = 0.0;
        }
    }
    bounds[++ns] = n;
    return ns;
}

/* ---- create -------------------------------------------------------------- */

static nsp_status_t elem_size_of(nsp_attn_dtype_t dtype, size_t *es)
{
    switch (dtype) {
    case NSP_ATTN_FP32:
        *es = 4;
        return NSP_OK;
    case NSP_ATTN_BF16:
    case NSP_ATTN_FP16:
        *es = 2;
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_INVALID_ARG, "nested attention: dtype %d is not NSP_ATTN_FP32, "
                     "BF16 or FP16", (int)dtype);
}

static nsp_status_t read_params(nsp_nested_attn_t *a, const nsp_nested_attn_params_t *p)
{
    uint64_t m = p->field_mask;

    NSP_CHECK(nsp_attn_check_params(&p->attn));
    a->attn            = p->attn;
    a->io              = p->attn;
    a->attn.field_mask = 0;
    if (a->attn.scale == 0.0f) {
        a->attn.scale = 1.0f / sqrtf((float)a->attn.head_dim);
    }
    if (m & NSP_NESTED_ATTN_FIELD_KERNEL) {
        if (p->kernel.fwd == NULL) {
            return nsp_error(NSP_ERR_INVALID_ARG, "nested attention: params.kernel.fwd is "
                             "NULL (leave NSP_NESTED_ATTN_FIELD_KERNEL unset for the "
                             "reference kernel)");
        }
        a->kernel = p->kernel;
    } else {
        NSP_CHECK(nsp_attn_kernel_reference(&a->kernel));
    }
    a->dtype = (m & NSP_NESTED_ATTN_FIELD_DTYPE) ? p->dtype : NSP_ATTN_FP32;
    NSP_CHECK(elem_size_of(a->dtype, &a->es));
    a->serial     = (m & NSP_NESTED_ATTN_FIELD_SERIAL) ? p->serial != 0 : 0;
    a->check      = (m & NSP_NESTED_ATTN_FIELD_CHECK) ? p->check != 0 : 1;
    a->max_slices = (m & NSP_NESTED_ATTN_FIELD_SLICES) ? p->max_slices : NATTN_DEFAULT_SLICES;
    if (a->max_slices < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nested attention: params.max_slices is %d; "
                         "use 1 or more", a->max_slices);
    }
    a->want_dkv_f32 = (m & NSP_NESTED_ATTN_FIELD_DKV_F32) ? p->dkv_f32 != 0 : 0;
    return NSP_OK;
}

/* Bytes this rank sends in one all-to-all of level l (self excluded). */
static nsp_status_t level_bytes(const nsp_layout_t *layout, int l, nsp_a2a_dir_t dir, int heads,
                                size_t row_bytes, nsp_a2a_replicas_t rep, uint64_t *bytes)
{
    nsp_level_view_t view;
    size_t          *c;
    nsp_status_t     status;

    *bytes = 0;
    NSP_CHECK(nsp_layout_level_view(layout, l, &view));
    if (l == 0 || view.degree == 1) {
        return NSP_OK;
    }
    c = calloc(4 * (size_t)view.degree, sizeof(size_t));
    if (c == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate counts");
    }
    NSP_CHECK_GOTO(nsp_pack_counts(&view, dir, heads, row_bytes, rep, NSP_PACK_SKIP_SELF, c,
                                   c + view.degree, c + 2 * view.degree, c + 3 * view.degree),
                   status, out_free);
    for (int p = 0; p < view.degree; ++p) {
        *bytes += c[p];
    }
out_free:
    free(c);
    return status;
}

static nsp_status_t level_setup_bytes(nsp_nested_attn_t *a, int l, nattn_level_t *L)
{
    size_t rb = (size_t)a->attn.head_dim * a->es;
    int    nq = a->attn.q_heads, nkv = a->attn.kv_heads;

    NSP_CHECK(level_bytes(a->layout, l, NSP_A2A_SEQ_TO_HEAD, nq, rb, NSP_A2A_REPLICAS_FIRST,
                          &L->s2h_q));
    NSP_CHECK(level_bytes(a->layout, l, NSP_A2A_SEQ_TO_HEAD, nkv, rb, NSP_A2A_REPLICAS_FIRST,
                          &L->s2h_kv));
    NSP_CHECK(level_bytes(a->layout, l, NSP_A2A_SEQ_TO_HEAD, nq, 4, NSP_A2A_REPLICAS_FIRST,
                          &L->s2h_lse));
    NSP_CHECK(level_bytes(a->layout, l, NSP_A2A_HEAD_TO_SEQ, nq, rb, NSP_A2A_REPLICAS_FIRST,
                          &L->h2s_q));
    /* h2s_kv_sum: by create_exchanges(), once the world decided dkv_f32 */
    return level_bytes(a->layout, l, NSP_A2A_HEAD_TO_SEQ, nq, 4, NSP_A2A_REPLICAS_FIRST,
                       &L->h2s_lse);
}

/* Kernel sequences of a level: its entries, or for a ring level each
 * sequence's two spans as one (they are consecutive in the block). */
static nsp_status_t level_setup_seqs(nsp_nested_attn_t *a, nattn_level_t *L)
{
    int per = L->lv.ring > 1 ? 2 : 1;

    L->nk       = L->lv.nseqs / per;
    L->cu       = malloc(sizeof(int64_t) * ((size_t)L->nk + 1));
    L->slice_cu = malloc(sizeof(int64_t) * ((size_t)L->nk + 1));
    L->slice    = malloc(sizeof(int) * ((size_t)a->max_slices + 1));
    if (L->cu == NULL || L->slice_cu == NULL || L->slice == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate %d sequences",
                         L->nk);
    }
    for (int x = 0; x <= L->nk; ++x) {
        L->cu[x] = L->lv.seq_offset[x * per];
    }
    L->nslices = nsp_nested_attn_slices(L->cu, L->nk, L->lv.ring > 1 ? 1 : a->max_slices,
                                        L->slice);
    return NSP_OK;
}

static nsp_status_t level_setup(nsp_nested_attn_t *a, int l)
{
    nattn_level_t *L = &a->levels[l];

    NSP_CHECK(nsp_layout_level(a->layout, l, &L->lv));
    if (a->attn.q_heads % L->lv.ulysses != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nested attention: level %d (degree %d, ring %d) "
                         "has Ulysses degree %d, which does not divide the %d query heads; "
                         "give the group a ring degree r so that d / r divides n_q", l,
                         L->lv.degree, L->lv.ring, L->lv.ulysses, a->attn.q_heads);
    }
    NSP_CHECK(nsp_layout_heads(a->layout, l, a->attn.q_heads, &L->hq));
    NSP_CHECK(nsp_layout_heads(a->layout, l, a->attn.kv_heads, &L->hkv));
    a->kv_replicated |= L->hkv.replicas > 1;
    NSP_CHECK(a->mem->check_level(l, &L->lv));
    NSP_CHECK(level_setup_seqs(a, L));
    NSP_CHECK(level_setup_bytes(a, l, L));
    if (L->lv.ring > 1) {
        NSP_CHECK(nsp_ring_level_create(a->tree, &L->lv, L->hkv.nheads, a->attn.head_dim,
                                        a->mem, a->reduce, &L->ring));
    }
    NSP_INFO("nested attention: level %d degree %d (ring %d x Ulysses %d, group %d..%d), %d "
             "seqs, %lld tokens, heads q %d..%d kv %d..%d%s, %d kernel slices", l,
             L->lv.degree, L->lv.ring, L->lv.ulysses, L->lv.rank0,
             L->lv.rank0 + L->lv.degree - 1, L->nk, (long long)L->lv.full_tokens,
             L->hq.first_head, L->hq.first_head + L->hq.nheads - 1, L->hkv.first_head,
             L->hkv.first_head + L->hkv.nheads - 1, L->hkv.replicas > 1 ? " (replicated)" : "",
             L->nslices);
    return NSP_OK;
}

/*
 * The agreement of every collective call: allgather (hash, local status)
 * over the world. A rank whose own checks failed (`local` < 0) returns its
 * error; the others learn of it here instead of waiting for it in an
 * exchange, and fail with that rank's code. Then all hashes must be equal.
 */
static nsp_status_t agree(nsp_comm_t *world, uint64_t hash, nsp_status_t local,
                          const char *what)
{
    int64_t      mine[2] = {(int64_t)hash, (int64_t)local};
    int64_t     *all;
    uint64_t    *hashes;
    int          size;
    nsp_status_t status;

    NSP_CHECK(nsp_comm_size(world, &size));
    all    = malloc(sizeof(int64_t) * 2 * (size_t)size);
    hashes = malloc(sizeof(uint64_t) * (size_t)size);
    if (all == NULL || hashes == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate %d hashes",
                           size);
        goto out_free;
    }
    NSP_CHECK_GOTO(nsp_comm_allgather(world, mine, all, sizeof(mine)), status, out_free);
    if (local < 0) {
        status = local; /* decided (and logged) by this rank's own checks */
        goto out_free;
    }
    for (int r = 0; r < size; ++r) {
        if (all[2 * r + 1] < 0) {
            status = nsp_error((nsp_status_t)all[2 * r + 1], "%s: rank %d failed its own "
                               "checks (its log says why), so no rank goes on", what, r);
            goto out_free;
        }
        hashes[r] = (uint64_t)all[2 * r];
    }
    status = nsp_a2a_compare_hashes(hashes, size, what);
out_free:
    free(all);
    free(hashes);
    return status;
}

static uint64_t static_hash(const nsp_nested_attn_t *a)
{
    int64_t v[7] = {a->attn.q_heads, a->attn.kv_heads, a->attn.head_dim, a->attn.causal,
                    (int64_t)a->dtype, 0, a->want_dkv_f32};
    float   scale = a->attn.scale;

    memcpy(&v[5], &scale, sizeof(scale));
    return nsp_fnv1a(a->info.plan_hash, v, sizeof(v));
}

/* The memory and reduce ops of the world's memory type. */
static nsp_status_t attn_mem_of(nsp_nested_attn_t *a)
{
    const nsp_memtype_t *mt = NULL;

    NSP_CHECK(nsp_memtype_of(a->world, &mt));
    a->mem    = mt->attn;
    a->reduce = mt->reduce;
    return NSP_OK;
}

static nsp_status_t check_world(nsp_nested_attn_t *a)
{
    int rank, size;

    NSP_CHECK(nsp_comm_rank(a->world, &rank));
    NSP_CHECK(nsp_comm_size(a->world, &size));
    if (a->info.rank != rank || a->info.ranks != size) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nested attention: the layout is for rank %d of "
                         "%d, but this is rank %d of a world of %d", a->info.rank,
                         a->info.ranks, rank, size);
    }
    NSP_CHECK(attn_mem_of(a));
    if (a->info.nlevels > NATTN_MAX_LEVELS) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested attention: the layout has %d levels, "
                         "more than %d", a->info.nlevels, NATTN_MAX_LEVELS);
    }
    return NSP_OK;
}

/* Everything create decides on this rank alone. */
static nsp_status_t create_local(nsp_nested_attn_t *a, const nsp_nested_attn_params_t *params)
{
    NSP_CHECK(read_params(a, params));
    NSP_CHECK(check_world(a));
    NSP_CHECK(a->mem->check_kernel(!(params->field_mask & NSP_NESTED_ATTN_FIELD_KERNEL)));
    NSP_CHECK(a->mem->bind(a->world, &a->attn, &a->kernel, &a->stream0, &a->mem_state));
    a->stream = a->stream0;
    NSP_CHECK(nsp_layout_head_rows(a->layout, a->attn.q_heads, &a->rows_q));
    NSP_CHECK(nsp_layout_head_rows(a->layout, a->attn.kv_heads, &a->rows_kv));
    a->levels = calloc((size_t)a->info.nlevels, sizeof(*a->levels));
    if (a->levels == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate %d levels",
                         a->info.nlevels);
    }
    for (int l = 0; l < a->info.nlevels; ++l) {
        NSP_CHECK(level_setup(a, l));
    }
    return NSP_OK;
}

/* ---- exchanges, built at create ---------------------------------------------- */

/* What exchange X_* moves: rows of `head_dim` elements of `es` bytes for
 * `heads` heads; gated head-to-sequence levels start when the call opens
 * them (serial mode gates sequence-to-head too). */
typedef struct xfer_shape {
    nsp_a2a_dir_t      dir;
    int                heads, head_dim, gated;
    size_t             es;
    nsp_a2a_replicas_t replicas;
} xfer_shape_t;

static xfer_shape_t xfer_shape(const nsp_nested_attn_t *a, int x)
{
    const int    nq = a->attn.q_heads, nkv = a->attn.kv_heads, D = a->attn.head_dim;
    xfer_shape_t sh = {NSP_A2A_SEQ_TO_HEAD, nq, D, a->serial, a->es, NSP_A2A_REPLICAS_FIRST};

    if (x >= X_O_BACK) {
        sh.dir   = NSP_A2A_HEAD_TO_SEQ;
        sh.gated = 1;
    }
    if (x == X_K || x == X_V || x == X_DK_BACK || x == X_DV_BACK) {
        sh.heads = nkv;
    }
    if (x == X_LSE || x == X_LSE_BACK) { /* [T, n_q] float32 */
        sh.head_dim = 1;
        sh.es       = 4;
    }
    if ((x == X_DK_BACK || x == X_DV_BACK) && (a->dtype == NSP_ATTN_FP32 || a->dkv_f32)) {
        sh.es       = 4; /* float32 (dkv_f32: copies of the wire dtype's gradients) */
        sh.replicas = NSP_A2A_REPLICAS_SUM_F32;
    } else if (x == X_DK_BACK || x == X_DV_BACK) { /* summed on the wire in dtype */
        sh.replicas = a->dtype == NSP_ATTN_BF16 ? NSP_A2A_REPLICAS_SUM_BF16
                                                : NSP_A2A_REPLICAS_SUM_FP16;
    }
    return sh;
}

/* dkv_f32: does any rank of the world replicate KV heads (a dtype other
 * than FP32, float32 sums asked for)? Every rank must build the same dK/dV
 * exchanges. */
static nsp_status_t agree_dkv_f32(nsp_nested_attn_t *a)
{
    int64_t      mine = a->kv_replicated, *all;
    int          size;
    nsp_status_t status = NSP_OK;

    a->dkv_f32 = 0;
    if (a->dtype == NSP_ATTN_FP32 || !a->want_dkv_f32) {
        return NSP_OK; /* every rank agreed on want_dkv_f32 (static_hash) */
    }
    NSP_CHECK(nsp_comm_size(a->world, &size));
    all = malloc(sizeof(int64_t) * (size_t)size);
    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate %d flags", size);
    }
    NSP_CHECK_GOTO(nsp_comm_allgather(a->world, &mine, all, sizeof(mine)), status, out_free);
    for (int r = 0; r < size; ++r) {
        a->dkv_f32 |= all[r] != 0;
    }
out_free:
    free(all);
    return status;
}

/* Every exchange of the calls (local: check = 0, the calls agree), and the
 * bytes of the dK/dV head-to-sequence. */
static nsp_status_t create_exchanges(nsp_nested_attn_t *a)
{
    NSP_CHECK(agree_dkv_f32(a));
    for (int l = 0; l < a->info.nlevels; ++l) {
        xfer_shape_t sh = xfer_shape(a, X_DK_BACK);
        NSP_CHECK(level_bytes(a->layout, l, sh.dir, sh.heads, (size_t)sh.head_dim * sh.es,
                              sh.replicas, &a->levels[l].h2s_kv_sum));
    }
    for (int x = 0; x < X_COUNT; ++x) {
        xfer_shape_t     sh = xfer_shape(a, x);
        nsp_a2a_params_t p;
        memset(&p, 0, sizeof(p));
        p.field_mask = NSP_A2A_FIELD_REPLICAS | NSP_A2A_FIELD_CHECK;
        p.direction  = sh.dir;
        p.heads      = sh.heads;
        p.head_dim   = sh.head_dim;
        p.elem_size  = sh.es;
        p.replicas   = sh.replicas;
        p.check      = 0; /* agreed once per call */
        NSP_CHECK(sh.gated ? nsp_a2a_create_gated(a->tree, a->layout, &p, &a->xh[x])
                           : nsp_a2a_create(a->tree, a->layout, &p, &a->xh[x]));
    }
    return NSP_OK;
}

nsp_status_t nsp_nested_attn_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                                    const nsp_nested_attn_params_t *params,
                                    nsp_nested_attn_t **attn_p)
{
    nsp_nested_attn_t *a;
    nsp_status_t       status;

    if (tree == NULL || layout == NULL || params == NULL || attn_p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_nested_attn_create: NULL tree, layout, "
                         "params or output");
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate");
    }
    a->tree   = tree;
    a->layout = layout;
    a->check  = (params->field_mask & NSP_NESTED_ATTN_FIELD_CHECK) ? params->check != 0 : 1;
    NSP_CHECK_GOTO(nsp_layout_query(layout, &a->info), status, err_destroy);
    NSP_CHECK_GOTO(nsp_tree_world(tree, &a->world), status, err_destroy);
    status = create_local(a, params);
    if (a->check) {
        /* Every rank fails together, also those whose own levels were fine. */
        status = agree(a->world, status < 0 ? 0 : static_hash(a), status,
                       "nested attention (create)");
    }
    NSP_CHECK_GOTO(status, status, err_destroy);
    a->hash = static_hash(a);
    NSP_CHECK_GOTO(create_exchanges(a), status, err_destroy);
    *attn_p = a;
    return NSP_OK;

err_destroy:
    nsp_nested_attn_destroy(a);
    return status;
}

nsp_status_t nsp_nested_attn_destroy(nsp_nested_attn_t *a)
{
    if (a == NULL) {
        return NSP_OK;
    }
    for (int l = 0; a->levels != NULL && l < a->info.nlevels; ++l) {
        nattn_level_t *L = &a->levels[l];
        free(L->cu);
        free(L->slice_cu);
        free(L->slice);
        nsp_ring_level_free(L->ring);
    }
    free(a->levels);
    for (int x = 0; x < X_COUNT; ++x) {
        nsp_a2a_destroy(a->xh[x]); /* no request is held between calls */
    }
    for (int b = 0; b < B_COUNT && a->mem != NULL; ++b) {
        a->mem->release(a->buf[b]);
    }
    if (a->mem != NULL) {
        a->mem->unbind(a->mem_state); /* no call is in flight between calls */
    }
    free(a);
    return NSP_OK;
}

nsp_status_t nsp_nested_attn_set_stream(nsp_nested_attn_t *a, void *stream)
{
    if (a == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_nested_attn_set_stream: attn is NULL");
    }
    NSP_CHECK(a->mem->check_stream(stream));
    a->stream = stream != NULL ? stream : a->stream0;
    return NSP_OK;
}

void nsp_nested_attn_saved_free(nsp_nested_attn_saved_t *s)
{
    if (s == NULL) {
        return;
    }
    s->mem->release(s->q);
    s->mem->release(s->k);
    s->mem->release(s->v);
    s->mem->release(s->o);
    s->mem->release(s->lse);
    free(s);
}

/* A head-sharded buffer of at least `bytes`, kept in the attn. */
static nsp_status_t attn_buffer(nsp_nested_attn_t *a, int b, size_t bytes, void **ptr)
{
    NSP_CHECK(a->mem->buffer(&a->buf[b], &a->cap[b], bytes));
    *ptr = a->buf[b];
    return NSP_OK;
}

/* ---- one call: its exchanges --------------------------------------------- */

/* One posted nested all-to-all (one tensor). */
typedef struct nattn_xfer {
    int            posted;
    nsp_a2a_t     *a2a;     /* its handle (opens gated levels) */
    nsp_request_t *req[NATTN_MAX_LEVELS];
    char           opened[NATTN_MAX_LEVELS];
    char           done[NATTN_MAX_LEVELS];
} nattn_xfer_t;

typedef struct nattn_call {
    nsp_nested_attn_t       *a;
    int                      kind; /* KIND_* */
    int                      nlevels;
    nattn_xfer_t             x[NATTN_MAX_XFERS];
    int                      nx;
    nsp_nested_attn_stats_t  st;
    uint32_t                 seq;  /* the world's operation number of the call (agreement) */
    float                   *dkv32[2]; /* backward with dkv_f32: head-sharded float32 dK, dV
                                          [rows_kv, D] (each level widened once computed) */
} nattn_call_t;

/* One exchange of a call: which (X_*), from where to where. */
typedef struct xfer_io {
    int         x;
    const void *src;
    void       *dst;
} xfer_io_t;

/* Start exchange xo->x (built at create) for the call. */
static nsp_status_t xfer_post(nattn_call_t *c, const xfer_io_t *xo, nattn_xfer_t **out)
{
    nattn_xfer_t *x = &c->x[c->nx];

    memset(x, 0, sizeof(*x));
    NSP_CHECK(nsp_a2a_start(c->a->xh[xo->x], xo->src, xo->dst, c->a->stream, x->req));
    x->posted = 1;
    x->a2a    = c->a->xh[xo->x];
    memset(x->opened, !xfer_shape(c->a, xo->x).gated, sizeof(x->opened));
    c->nx++;
    *out = x;
    return NSP_OK;
}

/* Post a call's exchanges, its nin inputs (into in[]) before its nout
 * outputs (into out[]). On an error the ones posted so far stay in c for
 * the caller's cleanup. */
static nsp_status_t xfer_post_all(nattn_call_t *c, const xfer_io_t *xin, int nin,
                                  nattn_xfer_t **in, const xfer_io_t *xout, int nout,
                                  nattn_xfer_t **out)
{
    for (int x = 0; x < nin; ++x) {
        NSP_CHECK(xfer_post(c, &xin[x], &in[x]));
    }
    for (int x = 0; x < nout; ++x) {
        NSP_CHECK(xfer_post(c, &xout[x], &out[x]));
    }
    return NSP_OK;
}

static nsp_status_t xfer_open(nattn_xfer_t *x, int l)
{
    if (x == NULL || x->opened[l]) {
        return NSP_OK;
    }
    x->opened[l] = 1;
    return nsp_a2a_open(x->a2a, l);
}

/* Test level l of x if it was opened and is not done; free it when done. */
static nsp_status_t xfer_test(nattn_xfer_t *x, int l, int *idle)
{
    nsp_status_t st;

    if (!x->opened[l] || x->done[l]) {
        return NSP_OK;
    }
    st = nsp_request_test(x->req[l]);
    if (st == NSP_OK) {
        x->done[l] = 1;
        nsp_request_free(x->req[l]);
        x->req[l] = NULL;
        *idle     = 0;
        return NSP_OK;
    }
    if (st == NSP_INPROGRESS) {
        *idle &= x->req[l]->idle;
        return NSP_INPROGRESS;
    }
    return st;
}

/* Move every exchange of the call: test the lowest open, unfinished level of
 * each (testing one level of an all-to-all advances all of its levels). */
static nsp_status_t call_progress(void *ctx, int *idle)
{
    nattn_call_t *c = ctx;

    *idle = 1;
    for (int k = 0; k < c->nx; ++k) {
        nattn_xfer_t *x = &c->x[k];
        for (int l = 0; l < c->nlevels; ++l) {
            if (x->opened[l] && !x->done[l]) {
                nsp_status_t st = xfer_test(x, l, idle);
                if (st < 0) {
                    return st;
                }
                break;
            }
        }
    }
    return NSP_OK;
}

/* Wait until level l of every xfer in xs[n] is done; wall time into wait_s. */
/* Idle polls of a wait before it naps WAIT_NAP_NS between polls. */
#define WAIT_SPINS  64
#define WAIT_NAP_NS (50 * 1000)

static nsp_status_t call_wait_level(nattn_call_t *c, nattn_xfer_t *const *xs, int n, int l)
{
    double       t0 = nsp_now_s();
    nsp_status_t status = NSP_OK;
    int          spins  = 0;

    for (;;) {
        int idle = 1, left = 0, idle2 = 1;
        for (int k = 0; k < n; ++k) {
            if (xs[k] == NULL) {
                continue;
            }
            NSP_CHECK_GOTO(xfer_test(xs[k], l, &idle), status, out);
            left += !xs[k]->done[l];
        }
        if (left == 0) {
            break;
        }
        NSP_CHECK_GOTO(call_progress(c, &idle2), status, out);
        spins = idle && idle2 ? spins + 1 : 0;
        if (spins > WAIT_SPINS) {
            /* a long wait: sleep, or a spinning rank takes the core of a
             * rank still computing (more ranks than cores) */
            nanosleep(&(struct timespec){0, WAIT_NAP_NS}, NULL);
        } else if (spins > 0) {
            sched_yield(); /* more ranks than cores: let the peers run */
        }
    }
out:
    c->st.level[l].wait_s += nsp_now_s() - t0;
    return status;
}

static void call_free(nattn_call_t *c)
{
    for (int k = 0; k < c->nx; ++k) {
        for (int l = 0; l < c->nlevels; ++l) {
            nsp_request_free(c->x[k].req[l]); /* only after an error: abandons */
            c->x[k].req[l] = NULL;
        }
    }
    c->nx = 0;
}

static nsp_status_t call_begin(nattn_call_t *c, nsp_nested_attn_t *a, int kind,
                               nsp_status_t local)
{
    memset(c, 0, sizeof(*c));
    c->a       = a;
    c->kind    = kind;
    c->nlevels = a->info.nlevels;
    c->st.nlevels = a->info.nlevels;
    c->st.wall_s  = nsp_now_s();
    for (int l = 0; l < a->info.nlevels; ++l) {
        const nattn_level_t           *L = &a->levels[l];
        nsp_nested_attn_level_stats_t *s = &c->st.level[l];
        s->degree  = L->lv.degree;
        s->ring    = L->lv.ring;
        s->ulysses = L->lv.ulysses;
        s->nseqs   = L->nk;
        s->tokens  = L->lv.full_tokens;
    }
    c->seq = nsp_comm_seq(a->world); /* every rank counts its calls alike */
    nsp_comm_seq_next(a->world);
    if (a->check) {
        int64_t v[2] = {kind, (int64_t)c->seq};
        return agree(a->world, nsp_fnv1a(a->hash, v, sizeof(v)), local,
                     kind == KIND_FWD ? "nested attention forward"
                                      : "nested attention backward (every rank must pass "
                                        "saved, or none)");
    }
    return local;
}

static void call_end(nattn_call_t *c, nsp_nested_attn_stats_t *stats)
{
    c->st.wall_s = nsp_now_s() - c->st.wall_s;
    for (int l = 0; l < c->nlevels; ++l) {
        const nsp_nested_attn_level_stats_t *s = &c->st.level[l];
        c->st.compute_s  += s->compute_s;
        c->st.wait_s     += s->wait_s;
        c->st.bytes_sent += s->a2a_bytes + s->ring_bytes;
    }
    if (stats != NULL) {
        *stats = c->st;
    }
}

/* ---- one call: compute ----------------------------------------------------- */

/* Head-sharded pointers of one level (bytes for the generic element type). */
typedef struct level_ptrs {
    const char  *q, *k, *v, *o, *dout;
    const float *lse;
    char        *out_o, *dq, *dk, *dv;
    float       *out_lse;
} level_ptrs_t;

static nsp_attn_batch_t level_proto(const nsp_nested_attn_t *a, const nattn_level_t *L, int l)
{
    nsp_attn_batch_t b;

    memset(&b, 0, sizeof(b));
    b.params          = a->attn;
    b.params.q_heads  = L->hq.nheads;
    b.params.kv_heads = L->hkv.nheads;
    b.dtype           = a->dtype;
    b.q_head0         = L->hq.first_head;
    b.kv_head0        = L->hkv.first_head;
    b.level           = l;
    b.stream          = a->stream;
    return b;
}

/* The rows of a level's block in the head-sharded buffers. */
static void level_offsets(const nsp_nested_attn_t *a, const nattn_level_t *L, size_t *qb,
                          size_t *kb, size_t *lse_rows)
{
    size_t row = (size_t)a->attn.head_dim * a->es;

    *qb       = (size_t)L->hq.row_offset * row;
    *kb       = (size_t)L->hkv.row_offset * row;
    *lse_rows = (size_t)L->hq.row_offset;
}

/* A Ulysses level (or level 0): the kernel slice by slice, testing the other
 * exchanges between slices. */
static nsp_status_t level_compute_ulysses(nattn_call_t *c, int l, const level_ptrs_t *p,
                                          int bwd)
{
    nsp_nested_attn_t *a = c->a;
    nattn_level_t     *L = &a->levels[l];
    size_t             qrow = (size_t)L->hq.nheads * (size_t)a->attn.head_dim * a->es;
    size_t             krow = (size_t)L->hkv.nheads * (size_t)a->attn.head_dim * a->es;
    size_t             lrow = (size_t)L->hq.nheads;

    for (int si = 0; si < L->nslices; ++si) {
        int              s0 = L->slice[si], s1 = L->slice[si + 1], idle;
        int64_t          t0 = L->cu[s0], max = 0;
        nsp_attn_batch_t b = level_proto(a, L, l);
        size_t           qo, ko;
        double           c0;
        nsp_status_t     st;

        for (int x = s0; x <= s1; ++x) {
            L->slice_cu[x - s0] = L->cu[x] - t0;
            if (x > s0 && L->cu[x] - L->cu[x - 1] > max) {
                max = L->cu[x] - L->cu[x - 1];
            }
        }
        if (L->cu[s1] == t0) {
            continue; /* only empty sequences */
        }
        b.nseqs      = s1 - s0;
        b.q_offsets  = L->slice_cu;
        b.kv_offsets = L->slice_cu;
        b.max_q_len  = max;
        b.max_kv_len = max;
        qo = (size_t)t0 * qrow;
        ko = (size_t)t0 * krow;
        c0 = nsp_thread_cpu_s();
        if (!bwd) {
            st = a->kernel.fwd(a->kernel.ctx, &b, p->q + qo, p->k + ko, p->v + ko,
                               p->out_o + qo, p->out_lse + (size_t)t0 * lrow);
        } else {
            st = a->kernel.bwd(a->kernel.ctx, &b, p->q + qo, p->k + ko, p->v + ko, p->o + qo,
                               p->lse + (size_t)t0 * lrow, p->dout + qo, p->dq + qo,
                               p->dk + ko, p->dv + ko);
        }
        c->st.level[l].compute_s += nsp_thread_cpu_s() - c0;
        NSP_CHECK(st);
        NSP_CHECK(call_progress(c, &idle));
    }
    return NSP_OK;
}

static nsp_status_t level_compute_ring(nattn_call_t *c, int l, const level_ptrs_t *p, int bwd)
{
    nsp_nested_attn_t  *a = c->a;
    nattn_level_t      *L = &a->levels[l];
    nsp_ring_level_io_t io;
    nsp_status_t        status;

    memset(&io, 0, sizeof(io));
    io.kernel       = &a->kernel;
    io.proto        = level_proto(a, L, l);
    io.progress     = call_progress;
    io.progress_ctx = c;
    if (!bwd) {
        status = nsp_ring_level_fwd(L->ring, &io, p->q, p->k, p->v, p->out_o, p->out_lse);
    } else {
        status = nsp_ring_level_bwd(L->ring, &io, p->q, p->k, p->v, p->o, p->lse, p->dout,
                                    p->dq, p->dk, p->dv);
    }
    c->st.level[l].compute_s  += io.compute_s;
    c->st.level[l].wait_s     += io.wait_s;
    c->st.level[l].ring_bytes += io.bytes_sent;
    return status;
}

static nsp_status_t level_compute(nattn_call_t *c, int l, const level_ptrs_t *base, int bwd)
{
    const nattn_level_t *L = &c->a->levels[l];
    level_ptrs_t         p;
    size_t               qb, kb, lr;

    level_offsets(c->a, L, &qb, &kb, &lr);
    memset(&p, 0, sizeof(p));
    p.q = base->q + qb;
    p.k = base->k + kb;
    p.v = base->v + kb;
    if (!bwd) {
        p.out_o   = base->out_o + qb;
        p.out_lse = base->out_lse + lr;
    } else {
        p.o    = base->o + qb;
        p.lse  = base->lse + lr;
        p.dout = base->dout + qb;
        p.dq   = base->dq + qb;
        p.dk   = base->dk + kb;
        p.dv   = base->dv + kb;
    }
    return L->ring != NULL ? level_compute_ring(c, l, &p, bwd)
                           : level_compute_ulysses(c, l, &p, bwd);
}

/* Backward with dkv_f32: widen level l's dK and dV (its block of the
 * head-sharded buffers, wire dtype) into the float32 source of their
 * summing exchange. Nothing otherwise. */
static nsp_status_t level_widen_dkv(nattn_call_t *c, int l, const level_ptrs_t *base)
{
    const nattn_level_t *L = &c->a->levels[l];
    size_t               e0 = (size_t)L->hkv.row_offset * (size_t)c->a->attn.head_dim;
    size_t               n  = (size_t)L->hkv.rows * (size_t)c->a->attn.head_dim;
    double               c0;
    nsp_status_t         st;

    if (c->dkv32[0] == NULL) {
        return NSP_OK;
    }
    c0 = nsp_thread_cpu_s();
    st = c->a->reduce->to_f32(c->a->dtype, n, base->dk + e0 * c->a->es, c->dkv32[0] + e0,
                           c->a->stream);
    st = st < 0 ? st : c->a->reduce->to_f32(c->a->dtype, n, base->dv + e0 * c->a->es,
                                            c->dkv32[1] + e0, c->a->stream);
    c->st.level[l].compute_s += nsp_thread_cpu_s() - c0;
    return st;
}

/*
 * The level loop shared by forward and backward: in[nin] are the inputs'
 * sequence-to-head exchanges, out[nout] the outputs' head-to-sequence
 * (gated). Pipelined: inputs are all in flight already; serial: each level
 * opens its inputs, and waits for its outputs before the next starts.
 */
static nsp_status_t call_levels(nattn_call_t *c, nattn_xfer_t *const *in, int nin,
                                nattn_xfer_t *const *out, int nout, const level_ptrs_t *base,
                                int bwd)
{
    for (int l = 0; l < c->nlevels; ++l) {
        if (c->a->serial) {
            for (int k = 0; k < nin; ++k) {
                NSP_CHECK(xfer_open(in[k], l));
            }
        }
        NSP_CHECK(call_wait_level(c, in, nin, l));
        NSP_CHECK(level_compute(c, l, base, bwd));
        NSP_CHECK(level_widen_dkv(c, l, base));
        for (int k = 0; k < nout; ++k) {
            NSP_CHECK(xfer_open(out[k], l));
        }
        if (c->a->serial) {
            NSP_CHECK(call_wait_level(c, out, nout, l));
        }
    }
    for (int l = 0; l < c->nlevels; ++l) {
        NSP_CHECK(call_wait_level(c, out, nout, l));
    }
    return NSP_OK;
}

/* ---- forward ---------------------------------------------------------------- */

static nsp_status_t check_buffers(const nsp_nested_attn_t *a, const char *what, int n,
                                  const void *const *bufs, const char *const *names)
{
    unsigned which = 0;

    if (a->info.local_tokens == 0) {
        return NSP_OK;
    }
    for (int k = 0; k < n; ++k) {
        if (bufs[k] == NULL) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s: buffer %s is NULL but this rank holds "
                             "%lld tokens", what, names[k], (long long)a->info.local_tokens);
        }
        which |= nsp_attn_buf_bit(names[k]);
    }
    /* the sizes given at create (params.attn.bytes), against [T_local, ...] */
    return nsp_attn_check_bytes(&a->io, what, a->info.local_tokens, a->info.local_tokens, which,
                                a->es);
}

static void stats_add_bytes(nattn_call_t *c, int bwd, int saved)
{
    for (int l = 0; l < c->nlevels; ++l) {
        const nattn_level_t *L = &c->a->levels[l];
        uint64_t             b;
        if (!bwd) { /* s2h q, k, v; h2s o, lse */
            b = L->s2h_q + 2 * L->s2h_kv + L->h2s_q + L->h2s_lse;
        } else { /* s2h dout (and q, k, v, o, lse); h2s dq, dk, dv */
            b = L->s2h_q + L->h2s_q + 2 * L->h2s_kv_sum;
            if (!saved) {
                b += 2 * L->s2h_q + 2 * L->s2h_kv + L->s2h_lse;
            }
        }
        c->st.level[l].a2a_bytes = b;
    }
}

/* Move the forward's head-sharded buffers into a saved object. */
static nsp_status_t make_saved(nsp_nested_attn_t *a, nsp_nested_attn_saved_t **saved)
{
    nsp_nested_attn_saved_t *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate saved state");
    }
    s->owner = a;
    s->mem   = a->mem;
    s->hash  = a->hash;
    s->q     = a->buf[B_Q];
    s->k     = a->buf[B_K];
    s->v     = a->buf[B_V];
    s->o     = a->buf[B_O];
    s->lse   = a->buf[B_LSE];
    for (int b = B_Q; b <= B_LSE; ++b) {
        a->buf[b] = NULL;
        a->cap[b] = 0;
    }
    *saved = s;
    return NSP_OK;
}

nsp_status_t nsp_nested_attn_fwd(nsp_nested_attn_t *a, const void *q, const void *k,
                                 const void *v, void *o, float *lse,
                                 nsp_nested_attn_saved_t **saved,
                                 nsp_nested_attn_stats_t *stats)
{
    const void *const  bufs[5]  = {q, k, v, o, lse};
    const char *const  names[5] = {"q", "k", "v", "o", "lse"};
    nattn_call_t       c;
    nattn_xfer_t      *in[3], *out[2];
    level_ptrs_t       base;
    void              *qh, *kh, *vh, *oh, *lh;
    size_t             rq, rk;
    int                D;
    nsp_status_t       status;

    if (a == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_nested_attn_fwd: attn is NULL");
    }
    D   = a->attn.head_dim;
    rq  = (size_t)a->rows_q * (size_t)D * a->es;
    rk  = (size_t)a->rows_kv * (size_t)D * a->es;
    qh = kh = vh = oh = lh = NULL;
    /* Local checks first; call_begin() makes every rank fail if one did. */
    status = check_buffers(a, "nsp_nested_attn_fwd", 5, bufs, names);
    status = status < 0 ? status : attn_buffer(a, B_Q, rq, &qh);
    status = status < 0 ? status : attn_buffer(a, B_K, rk, &kh);
    status = status < 0 ? status : attn_buffer(a, B_V, rk, &vh);
    status = status < 0 ? status : attn_buffer(a, B_O, rq, &oh);
    status = status < 0 ? status : attn_buffer(a, B_LSE, (size_t)a->rows_q * sizeof(float),
                                               &lh);
    NSP_CHECK(call_begin(&c, a, KIND_FWD, status));

    {
        const xfer_io_t xin[3]  = {{X_Q, q, qh}, {X_K, k, kh}, {X_V, v, vh}};
        const xfer_io_t xout[2] = {{X_O_BACK, oh, o}, {X_LSE_BACK, lh, lse}};
        NSP_CHECK_GOTO(xfer_post_all(&c, xin, 3, in, xout, 2, out), status, out_free);
    }
    memset(&base, 0, sizeof(base));
    base.q       = qh;
    base.k       = kh;
    base.v       = vh;
    base.out_o   = oh;
    base.out_lse = lh;
    NSP_CHECK_GOTO(call_levels(&c, in, 3, out, 2, &base, 0), status, out_free);
    if (saved != NULL) {
        NSP_CHECK_GOTO(make_saved(a, saved), status, out_free);
    }
    stats_add_bytes(&c, 0, 0);
    call_end(&c, stats);
    status = NSP_OK;
out_free:
    call_free(&c);
    return status;
}

/* ---- backward --------------------------------------------------------------- */

static nsp_status_t check_bwd(const nsp_nested_attn_t *a, const nsp_nested_attn_saved_t *s)
{
    if (s != NULL && (s->owner != a || s->hash != a->hash)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_nested_attn_bwd: the saved state comes "
                         "from another nested attention (another layout or parameters); pass "
                         "the one its forward returned, or NULL with q, k, v, o, lse");
    }
    if (a->kernel.bwd == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_nested_attn_bwd: the kernel has no "
                         "backward callback");
    }
    return NSP_OK;
}

/* With dkv_f32: the float32 copies of dK/dV, head-sharded (the level's
 * gradients widened, the exchange's source) and sequence-sharded (its
 * sums, rounded once into the caller's dk, dv); else all NULL. */
static nsp_status_t dkv_f32_buffers(nsp_nested_attn_t *a, void **h32, void **s32)
{
    size_t hb = (size_t)a->rows_kv * (size_t)a->attn.head_dim * sizeof(float);
    size_t sb = (size_t)a->info.local_tokens * (size_t)a->attn.kv_heads *
                (size_t)a->attn.head_dim * sizeof(float);

    h32[0] = h32[1] = s32[0] = s32[1] = NULL;
    if (!a->dkv_f32) {
        return NSP_OK;
    }
    NSP_CHECK(attn_buffer(a, B_DK32H, hb, &h32[0]));
    NSP_CHECK(attn_buffer(a, B_DV32H, hb, &h32[1]));
    NSP_CHECK(attn_buffer(a, B_DK32S, sb, &s32[0]));
    return attn_buffer(a, B_DV32S, sb, &s32[1]);
}

/* The one rounding of the float32 dK/dV sums into the caller's dk and dv
 * (on device memory on the caller's stream, waited for: the results are
 * in dk, dv when the call returns, as every other output). */
static nsp_status_t dkv_round(const nsp_nested_attn_t *a, void *const *s32, void *dk, void *dv)
{
    size_t n = (size_t)a->info.local_tokens * (size_t)a->attn.kv_heads *
               (size_t)a->attn.head_dim;

    if (!a->dkv_f32) {
        return NSP_OK;
    }
    NSP_CHECK(a->reduce->from_f32(a->dtype, n, s32[0], dk, a->stream));
    NSP_CHECK(a->reduce->from_f32(a->dtype, n, s32[1], dv, a->stream));
    return a->mem->sync(a->stream);
}

nsp_status_t nsp_nested_attn_bwd(nsp_nested_attn_t *a, const nsp_nested_attn_saved_t *saved,
                                 const void *q, const void *k, const void *v, const void *o,
                                 const float *lse, const void *dout, void *dq, void *dk,
                                 void *dv, nsp_nested_attn_stats_t *stats)
{
    const void *const  bufs[9]  = {dout, dq, dk, dv, q, k, v, o, lse};
    const char *const  names[9] = {"dout", "dq", "dk", "dv", "q", "k", "v", "o", "lse"};
    nattn_call_t       c;
    nattn_xfer_t      *in[6], *out[3];
    level_ptrs_t       base;
    void              *qh, *kh, *vh, *oh, *lh, *doh, *dqh, *dkh, *dvh, *h32[2], *s32[2];
    size_t             rq, rk;
    int                D, nin = 0;
    nsp_status_t       status;

    if (a == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_nested_attn_bwd: attn is NULL");
    }
    D  = a->attn.head_dim;
    rq = (size_t)a->rows_q * (size_t)D * a->es;
    rk = (size_t)a->rows_kv * (size_t)D * a->es;
    qh = kh = vh = oh = lh = doh = dqh = dkh = dvh = NULL;
    h32[0] = h32[1] = s32[0] = s32[1] = NULL;
    /* Local checks first; call_begin() makes every rank fail if one did. */
    status = check_buffers(a, "nsp_nested_attn_bwd", saved != NULL ? 4 : 9, bufs, names);
    status = status < 0 ? status : check_bwd(a, saved);
    if (status >= 0 && saved != NULL) {
        qh = saved->q, kh = saved->k, vh = saved->v, oh = saved->o, lh = saved->lse;
    } else if (status >= 0) {
        status = attn_buffer(a, B_Q, rq, &qh);
        status = status < 0 ? status : attn_buffer(a, B_K, rk, &kh);
        status = status < 0 ? status : attn_buffer(a, B_V, rk, &vh);
        status = status < 0 ? status : attn_buffer(a, B_O, rq, &oh);
        status = status < 0 ? status : attn_buffer(a, B_LSE,
                                                   (size_t)a->rows_q * sizeof(float), &lh);
    }
    status = status < 0 ? status : attn_buffer(a, B_DO, rq, &doh);
    status = status < 0 ? status : attn_buffer(a, B_DQ, rq, &dqh);
    status = status < 0 ? status : attn_buffer(a, B_DK, rk, &dkh);
    status = status < 0 ? status : attn_buffer(a, B_DV, rk, &dvh);
    status = status < 0 ? status : dkv_f32_buffers(a, h32, s32);
    NSP_CHECK(call_begin(&c, a, saved != NULL ? KIND_BWD_SAVED : KIND_BWD_FULL, status));
    c.dkv32[0] = h32[0], c.dkv32[1] = h32[1];

    {
        const xfer_io_t xin[6]  = {{X_DO, dout, doh}, {X_Q, q, qh},   {X_K, k, kh},
                                   {X_V, v, vh},      {X_O, o, oh},   {X_LSE, lse, lh}};
        const xfer_io_t xout[3] = {{X_DQ_BACK, dqh, dq},
                                   {X_DK_BACK, a->dkv_f32 ? h32[0] : dkh, a->dkv_f32 ? s32[0] : dk},
                                   {X_DV_BACK, a->dkv_f32 ? h32[1] : dvh, a->dkv_f32 ? s32[1] : dv}};
        nin = saved != NULL ? 1 : 6;
        NSP_CHECK_GOTO(xfer_post_all(&c, xin, nin, in, xout, 3, out), status, out_free);
    }
    memset(&base, 0, sizeof(base));
    base.q    = qh;
    base.k    = kh;
    base.v    = vh;
    base.o    = oh;
    base.lse  = lh;
    base.dout = doh;
    base.dq   = dqh;
    base.dk   = dkh;
    base.dv   = dvh;
    NSP_CHECK_GOTO(call_levels(&c, in, nin, out, 3, &base, 1), status, out_free);
    NSP_CHECK_GOTO(dkv_round(a, s32, dk, dv), status, out_free);
    stats_add_bytes(&c, 1, saved != NULL);
    call_end(&c, stats);
    status = NSP_OK;
out_free:
    call_free(&c);
    return status;
}

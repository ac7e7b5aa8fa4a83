/*
 * nsp_a2a_perf methods mpi (MPI_Alltoallv on exactly the nested traffic),
 * mpi-flat (on exactly the flat traffic) and mpi+pack (the nested exchange
 * with MPI as the transport), under mpirun; and the bootstrap of an nspcomm
 * world over MPI (perf/a2a_perf.h). A build without MPI keeps the methods
 * in the table, unavailable with the reason.
 */
#include "config.h"

#include "a2a_perf.h"

#include "transport/request.h"

#include <stdlib.h>
#include <string.h>

#ifdef NSP_HAVE_MPI
#include <mpi.h>

/* A method needs MPI initialised: run under mpirun. */
static const char *mpi_unavailable(const perf_ctx_t *c)
{
    return c->mpi ? NULL : "run under mpirun";
}

typedef struct mpi_raw {
    traffic_t tr;
    int      *ic; /* [4N] counts and displacements as int for MPI */
} mpi_raw_t;

/* The nested exchange's per-level state of mpi+pack. */
typedef struct mpack_level {
    nsp_layout_level_t lv;
    nsp_level_view_t   v;
    nsp_layout_heads_t hs;
    size_t            *sb, *sd, *rb, *rd; /* [d]; displacements into the world buffers */
} mpack_level_t;

typedef struct mpack {
    nsp_layout_t     *lay;
    nsp_layout_info_t info;
    mpack_level_t    *ml;      /* [nlevels]; level 0 unused */
    size_t           *wc;      /* [6N] world counts, displacements, fill marks */
    int              *ic;      /* [4N] the same as int for MPI */
    char             *src, *dst, *wsend, *wrecv;
} mpack_t;

/* int counts for MPI (sizes here stay far below 2 GiB per peer). */
static int *mpi_counts(const perf_ctx_t *c, const size_t *sc, const size_t *sd,
                       const size_t *rc, const size_t *rd)
{
    int *ic = a2a_xmalloc(4 * sizeof(int) * (size_t)c->nranks);

    for (int p = 0; p < c->nranks; ++p) {
        ic[p]                 = (int)sc[p];
        ic[c->nranks + p]     = (int)sd[p];
        ic[2 * c->nranks + p] = (int)rc[p];
        ic[3 * c->nranks + p] = (int)rd[p];
    }
    return ic;
}

static void mpi_call(perf_ctx_t *c, void *state, double *phase_s)
{
    mpi_raw_t *m = state;
    int        N = c->nranks;

    (void)phase_s;
    MPI_Alltoallv(m->tr.send, m->ic, m->ic + N, MPI_BYTE, m->tr.recv, m->ic + 2 * N,
                  m->ic + 3 * N, MPI_BYTE, MPI_COMM_WORLD);
}

static double mpi_check(perf_ctx_t *c, void *state)
{
    return a2a_traffic_check(c, &((mpi_raw_t *)state)->tr);
}

static void mpi_free(perf_ctx_t *c, void *state)
{
    mpi_raw_t *m = state;

    (void)c;
    a2a_traffic_free(&m->tr);
    free(m->ic);
    free(m);
}

static void mpi_copies(perf_ctx_t *c, void *state, a2a_copies_t *out)
{
    a2a_traffic_copies(c, &((mpi_raw_t *)state)->tr, out);
}

static const a2a_row_ops_t mpi_ops = {.call = mpi_call, .check = mpi_check, .free = mpi_free,
                                      .copies = mpi_copies};

/* MPI_Alltoallv on exactly the traffic of `plan`'s exchange. */
static void add_raw(perf_ctx_t *c, a2a_rows_t *rows, const char *name, const nsp_plan_t *plan)
{
    mpi_raw_t *m = a2a_xcalloc(sizeof(*m));

    a2a_traffic_make(c, plan, &m->tr);
    m->ic = mpi_counts(c, m->tr.sc, m->tr.sd, m->tr.rc, m->tr.rd);
    a2a_row_add(c, rows, name, &mpi_ops, m, m->tr.offrank);
}

static void setup_mpi(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_raw(c, rows, "mpi", plans->nested);
}

static void setup_mpi_flat(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_raw(c, rows, "mpi-flat", plans->flat);
}

/*
 * The nested exchange done with MPI as the transport, as a user without
 * nspcomm would: the same host pack of every level into one world buffer
 * (peer blocks, levels ascending inside), one MPI_Alltoallv, the same unpack,
 * level 0 and the own blocks copied directly. Same bytes, same copies.
 */
enum { PH_PACK, PH_ALLTOALLV, PH_UNPACK };

static void mpack_call(perf_ctx_t *c, void *state, double *phase_s)
{
    mpack_t           *r = state;
    int                N = c->nranks;
    size_t             rowb = (size_t)c->opts.head_dim * c->opts.elem;
    size_t             tok = (size_t)c->opts.heads * rowb;
    nsp_layout_level_t l0;
    double             t = nsp_now_s();

    for (int l = 1; l < r->info.nlevels; ++l) {
        mpack_level_t *L = &r->ml[l];
        nsp_pack_s2h(&L->v, c->opts.heads, rowb, r->src + (size_t)L->lv.local_offset * tok,
                     r->wsend, L->sb, L->sd);
    }
    phase_s[PH_PACK] += a2a_lap(&t);
    MPI_Alltoallv(r->wsend, r->ic, r->ic + N, MPI_BYTE, r->wrecv, r->ic + 2 * N, r->ic + 3 * N,
                  MPI_BYTE, MPI_COMM_WORLD);
    phase_s[PH_ALLTOALLV] += a2a_lap(&t);
    nsp_layout_level(r->lay, 0, &l0);
    memcpy(r->dst, r->src, (size_t)l0.local_tokens * tok);
    for (int l = 1; l < r->info.nlevels; ++l) {
        mpack_level_t *L = &r->ml[l];
        char          *block = r->dst + (size_t)L->hs.row_offset * rowb;
        nsp_unpack_s2h(&L->v, c->opts.heads, rowb, r->wrecv, L->rb, L->rd, block);
        nsp_pack_copy_self(&L->v, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, rowb,
                           NSP_A2A_REPLICAS_FIRST, r->src + (size_t)L->lv.local_offset * tok,
                           block);
    }
    phase_s[PH_UNPACK] += a2a_lap(&t);
}

static double mpack_check(perf_ctx_t *c, void *state)
{
    mpack_t *r = state;

    return a2a_check_head(c, r->lay, r->dst);
}

static void mpack_free(perf_ctx_t *c, void *state)
{
    mpack_t *r = state;

    (void)c;
    for (int l = 1; r->ml != NULL && l < r->info.nlevels; ++l) {
        free(r->ml[l].sb);
    }
    free(r->ml);
    free(r->wc);
    free(r->ic);
    free(r->src);
    free(r->dst);
    free(r->wsend);
    free(r->wrecv);
    nsp_layout_free(r->lay);
    free(r);
}

static void mpack_copies(perf_ctx_t *c, void *state, a2a_copies_t *out)
{
    a2a_nested_copies(c, ((mpack_t *)state)->lay, 1, out);
}

static const a2a_row_ops_t mpack_ops = {
    .call = mpack_call, .check = mpack_check, .free = mpack_free, .copies = mpack_copies,
    .phases = {"pack", "alltoallv", "unpack"}};

static void setup_mpack(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    int      N = c->nranks;
    size_t   rowb = (size_t)c->opts.head_dim * c->opts.elem;
    size_t   tok = (size_t)c->opts.heads * rowb, stot = 0, rtot = 0;
    size_t  *wsc, *wsd, *wrc, *wrd, *sfill, *rfill;
    int64_t  rows_h;
    mpack_t *r = a2a_xcalloc(sizeof(*r));

    PCHECK(c, nsp_layout_create(plans->nested, 0, c->rank, &r->lay), "layout");
    nsp_layout_query(r->lay, &r->info);
    PCHECK(c, nsp_layout_head_rows(r->lay, c->opts.heads, &rows_h), "head rows");
    r->ml = a2a_xcalloc((size_t)r->info.nlevels * sizeof(*r->ml));
    r->wc = a2a_xcalloc(6 * (size_t)N * sizeof(size_t));
    wsc = r->wc, wsd = wsc + N, wrc = wsd + N, wrd = wrc + N, sfill = wrd + N, rfill = sfill + N;
    for (int l = 1; l < r->info.nlevels; ++l) { /* world counts: sum over levels */
        mpack_level_t *L = &r->ml[l];
        nsp_layout_level(r->lay, l, &L->lv);
        nsp_layout_level_view(r->lay, l, &L->v);
        nsp_layout_heads(r->lay, l, c->opts.heads, &L->hs);
        L->sb = a2a_xmalloc(4 * sizeof(size_t) * (size_t)L->lv.degree);
        L->sd = L->sb + L->lv.degree;
        L->rb = L->sd + L->lv.degree;
        L->rd = L->rb + L->lv.degree;
        PCHECK(c, nsp_pack_counts(&L->v, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, rowb,
                                  NSP_A2A_REPLICAS_FIRST, NSP_PACK_SKIP_SELF, L->sb, L->sd,
                                  L->rb, L->rd), "pack counts");
        for (int p = 0; p < L->lv.degree; ++p) {
            wsc[L->lv.rank0 + p] += L->sb[p];
            wrc[L->lv.rank0 + p] += L->rb[p];
        }
    }
    for (int p = 0; p < N; ++p) {
        wsd[p] = stot;
        wrd[p] = rtot;
        stot += wsc[p];
        rtot += wrc[p];
    }
    for (int l = 1; l < r->info.nlevels; ++l) { /* each level's place in the world blocks */
        mpack_level_t *L = &r->ml[l];
        for (int p = 0; p < L->lv.degree; ++p) {
            int w = L->lv.rank0 + p;
            L->sd[p] = wsd[w] + sfill[w];
            L->rd[p] = wrd[w] + rfill[w];
            sfill[w] += L->sb[p];
            rfill[w] += L->rb[p];
        }
    }
    r->ic    = mpi_counts(c, wsc, wsd, wrc, wrd);
    r->src   = a2a_xmalloc((size_t)r->info.local_tokens * tok);
    r->dst   = a2a_xmalloc((size_t)rows_h * rowb);
    r->wsend = a2a_xmalloc(stot);
    r->wrecv = a2a_xmalloc(rtot);
    a2a_fill_seq(c, r->lay, r->src);
    memset(r->dst, 0, (size_t)rows_h * rowb);
    memset(r->wsend, 0, stot);
    memset(r->wrecv, 0, rtot);
    a2a_row_add(c, rows, "mpi+pack", &mpack_ops, r, a2a_offrank_bytes(c, r->lay));
}

/* nspcomm bootstraps through MPI when run under mpirun without NSPCOMM_ROOT:
 * the UCC-style out-of-band allgather, here on MPI_Iallgather. */
static nsp_status_t mpi_oob_allgather(void *sbuf, void *rbuf, size_t msglen, void *info,
                                      void **request)
{
    MPI_Request *req = malloc(sizeof(*req));

    (void)info;
    if (req == NULL) {
        return NSP_ERR_NO_MEMORY;
    }
    if (MPI_Iallgather(sbuf, (int)msglen, MPI_BYTE, rbuf, (int)msglen, MPI_BYTE,
                       MPI_COMM_WORLD, req) != MPI_SUCCESS) {
        free(req);
        return NSP_ERR_BACKEND;
    }
    *request = req;
    return NSP_OK;
}

static nsp_status_t mpi_oob_test(void *request)
{
    int flag = 0;

    if (MPI_Test((MPI_Request *)request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        return NSP_ERR_BACKEND;
    }
    return flag ? NSP_OK : NSP_INPROGRESS;
}

static nsp_status_t mpi_oob_free(void *request)
{
    free(request);
    return NSP_OK;
}

void a2a_mpi_oob(nsp_oob_coll_t *oob)
{
    int r, n;

    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    memset(oob, 0, sizeof(*oob));
    oob->allgather = mpi_oob_allgather;
    oob->req_test  = mpi_oob_test;
    oob->req_free  = mpi_oob_free;
    oob->n_oob_eps = (uint32_t)n;
    oob->oob_ep    = (uint32_t)r;
}
#else
/* Without MPI the methods stay in the table and say why they cannot run. */
static const char *mpi_unavailable(const perf_ctx_t *c)
{
    (void)c;
    return "this build has no MPI (configure found no Open MPI)";
}

static void setup_none(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    (void)c;
    (void)plans;
    (void)rows;
}
#define setup_mpi setup_none
#define setup_mpi_flat setup_none
#define setup_mpack setup_none
#endif

const a2a_method_t a2a_method_mpi = {
    .name = "mpi", .unavailable = mpi_unavailable, .setup = setup_mpi,
    .help = "MPI_Alltoallv on exactly the nested traffic (pre-packed bytes)"};
const a2a_method_t a2a_method_mpi_flat = {
    .name = "mpi-flat", .unavailable = mpi_unavailable, .setup = setup_mpi_flat,
    .help = "MPI_Alltoallv on exactly the flat method's traffic"};
const a2a_method_t a2a_method_mpi_pack = {
    .name = "mpi+pack", .unavailable = mpi_unavailable, .setup = setup_mpack,
    .help = "the nested exchange with MPI: the same pack, one MPI_Alltoallv, the same unpack"};

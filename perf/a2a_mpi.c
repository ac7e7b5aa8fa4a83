/*
 * nsp_a2a_perf methods mpi (MPI_Alltoallv on exactly the nested traffic)
 * and mpi+pack (the nested exchange with MPI as the transport), under
 * mpirun; and the bootstrap of an nspcomm world over MPI (perf/a2a_perf.h).
 */
#include "config.h"

#include "a2a_perf.h"

#ifdef NSP_HAVE_MPI
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

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

static void mpi_call(perf_ctx_t *c, runner_t *r)
{
    int N = c->nranks;

    MPI_Alltoallv(r->tr.send, r->ic, r->ic + N, MPI_BYTE, r->tr.recv, r->ic + 2 * N,
                  r->ic + 3 * N, MPI_BYTE, MPI_COMM_WORLD);
}

void a2a_mpi_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan)
{
    a2a_tp_init(c, r, plan);
    r->name = "mpi";
    r->call = mpi_call;
    r->ic   = mpi_counts(c, r->tr.sc, r->tr.sd, r->tr.rc, r->tr.rd);
}

/*
 * The nested exchange done with MPI as the transport, as a user without
 * nspcomm would: the same host pack of every level into one world buffer
 * (peer blocks, levels ascending inside), one MPI_Alltoallv, the same unpack,
 * level 0 and the own blocks copied directly. Same bytes, same copies.
 */
static void mpack_call(perf_ctx_t *c, runner_t *r)
{
    int                N = c->nranks;
    size_t             rowb = (size_t)c->opts.head_dim * c->opts.elem;
    size_t             tok = (size_t)c->opts.heads * rowb;
    nsp_layout_level_t l0;

    for (int l = 1; l < r->info.nlevels; ++l) {
        mpack_level_t *L = &r->ml[l];
        nsp_pack_s2h(&L->v, c->opts.heads, rowb, r->src + (size_t)L->lv.local_offset * tok,
                     r->wsend, L->sb, L->sd);
    }
    MPI_Alltoallv(r->wsend, r->ic, r->ic + N, MPI_BYTE, r->wrecv, r->ic + 2 * N, r->ic + 3 * N,
                  MPI_BYTE, MPI_COMM_WORLD);
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
}

static double mpack_check(perf_ctx_t *c, runner_t *r)
{
    return a2a_check_head(c, r->lay, r->dst);
}

void a2a_mpack_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan)
{
    int     N = c->nranks;
    size_t  rowb = (size_t)c->opts.head_dim * c->opts.elem;
    size_t  tok = (size_t)c->opts.heads * rowb, stot = 0, rtot = 0;
    size_t *wsc, *wsd, *wrc, *wrd, *sfill, *rfill;
    int64_t rows;

    memset(r, 0, sizeof(*r));
    r->name  = "mpi+pack";
    r->call  = mpack_call;
    r->check = mpack_check;
    PCHECK(c, nsp_layout_create(plan, 0, c->rank, &r->lay), "layout");
    nsp_layout_query(r->lay, &r->info);
    PCHECK(c, nsp_layout_head_rows(r->lay, c->opts.heads, &rows), "head rows");
    r->ml = calloc((size_t)r->info.nlevels, sizeof(*r->ml));
    r->wc = calloc(6 * (size_t)N, sizeof(size_t));
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
    r->dst   = a2a_xmalloc((size_t)rows * rowb);
    r->wsend = a2a_xmalloc(stot);
    r->wrecv = a2a_xmalloc(rtot);
    a2a_fill_seq(c, r->lay, r->src);
    memset(r->dst, 0, (size_t)rows * rowb);
    memset(r->wsend, 0, stot);
    memset(r->wrecv, 0, rtot);
    r->offrank = a2a_offrank_bytes(c, r->lay);
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
/* Without MPI there is nothing to build here (ISO C wants a declaration). */
typedef int a2a_mpi_unused_t;
#endif

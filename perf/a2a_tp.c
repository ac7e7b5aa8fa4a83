/*
 * nsp_a2a_perf methods tp-same and tp-flat: this library's transport
 * alltoallv over the world carrying exactly the nested traffic (same bytes
 * per pair, no pack), or exactly the flat method's (perf/a2a_perf.h).
 */
#include "config.h"

#include "a2a_perf.h"

#include "transport/comm.h"
#include "transport/request.h"

#include <stdlib.h>
#include <string.h>

/* What this rank sends to each world rank in the nested s2h of `lay`:
 * row[p] bytes (caller-zeroed), row[rank] = what it keeps (level 0 and its
 * own block of every level). */
static void exchange_row(const perf_ctx_t *c, const nsp_layout_t *lay, double *row)
{
    nsp_layout_info_t  info;
    nsp_layout_level_t l0;
    size_t             rowb = (size_t)c->opts.head_dim * c->opts.elem;

    nsp_layout_query(lay, &info);
    nsp_layout_level(lay, 0, &l0);
    row[info.rank] += (double)l0.local_tokens * c->opts.heads * (double)rowb;
    for (int l = 1; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        size_t            *sb = a2a_level_s2h_counts(c, lay, l, NSP_PACK_WITH_SELF, &lv);
        for (int p = 0; p < lv.degree; ++p) {
            row[lv.rank0 + p] += (double)sb[p];
        }
        free(sb);
    }
}

/* The nested exchange's bytes between every pair (self: what a rank keeps),
 * as one world alltoallv, with a byte pattern to check. */
void a2a_traffic_make(perf_ctx_t *c, const nsp_plan_t *plan, traffic_t *tr)
{
    int     N = c->nranks;
    double *matrix = calloc((size_t)N * N, sizeof(double));

    memset(tr, 0, sizeof(*tr));
    for (int r = 0; r < N; ++r) { /* every rank computes every row: pure math */
        nsp_layout_t *lay;
        PCHECK(c, nsp_layout_create(plan, 0, r, &lay), "layout");
        exchange_row(c, lay, matrix + (size_t)r * N);
        nsp_layout_free(lay);
    }
    tr->sc = a2a_xmalloc(4 * sizeof(size_t) * (size_t)N);
    tr->sd = tr->sc + N;
    tr->rc = tr->sd + N;
    tr->rd = tr->rc + N;
    for (int p = 0; p < N; ++p) {
        tr->sc[p] = (size_t)matrix[(size_t)c->rank * N + p];
        tr->rc[p] = (size_t)matrix[(size_t)p * N + c->rank];
        tr->sd[p] = tr->stot;
        tr->rd[p] = tr->rtot;
        tr->stot += tr->sc[p];
        tr->rtot += tr->rc[p];
        tr->offrank += p != c->rank ? (double)tr->sc[p] : 0.0;
    }
    tr->send = a2a_xmalloc(tr->stot);
    tr->recv = a2a_xmalloc(tr->rtot);
    memset(tr->recv, 0, tr->rtot);
    for (int p = 0; p < N; ++p) {
        for (size_t k = 0; k < tr->sc[p]; ++k) {
            tr->send[tr->sd[p] + k] = (char)(c->rank * 31 + p * 7 + (int)(k % 251));
        }
    }
    free(matrix);
}

double a2a_traffic_check(const perf_ctx_t *c, const traffic_t *tr)
{
    double wrong = 0;

    for (int p = 0; p < c->nranks; ++p) {
        for (size_t k = 0; k < tr->rc[p]; ++k) {
            wrong += tr->recv[tr->rd[p] + k] != (char)(p * 31 + c->rank * 7 + (int)(k % 251));
        }
    }
    return wrong / (double)c->opts.elem;
}

void a2a_traffic_copies(const perf_ctx_t *c, const traffic_t *tr, a2a_copies_t *out)
{
    memset(out, 0, sizeof(*out));
    out->self = (double)tr->sc[c->rank];
    out->wire = tr->offrank;
}

void a2a_traffic_free(traffic_t *tr)
{
    free(tr->sc);
    free(tr->send);
    free(tr->recv);
    memset(tr, 0, sizeof(*tr));
}

/* ---- the method ----------------------------------------------------------- */

typedef struct tp_same {
    traffic_t tr;
    uint32_t  seq; /* tags of its posts */
} tp_same_t;

static void tp_call(perf_ctx_t *c, void *state, double *phase_s)
{
    tp_same_t         *t = state;
    nsp_tp_comm_t     *w = nsp_comm_tp(c->comm);
    nsp_tp_alltoallv_t a = {.sendbuf = t->tr.send, .sendcounts = t->tr.sc, .sdispls = t->tr.sd,
                            .recvbuf = t->tr.recv, .recvcounts = t->tr.rc, .rdispls = t->tr.rd};
    nsp_request_t     *req;

    (void)phase_s;
    PCHECK(c, w->ops->alltoallv_post(w, &a, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, t->seq++), NULL,
                                     &req), "alltoallv post");
    PCHECK(c, nsp_request_wait(req), "alltoallv wait");
    nsp_request_free(req);
}

static double tp_check(perf_ctx_t *c, void *state)
{
    return a2a_traffic_check(c, &((tp_same_t *)state)->tr);
}

static void tp_free(perf_ctx_t *c, void *state)
{
    (void)c;
    a2a_traffic_free(&((tp_same_t *)state)->tr);
    free(state);
}

static void tp_copies(perf_ctx_t *c, void *state, a2a_copies_t *out)
{
    a2a_traffic_copies(c, &((tp_same_t *)state)->tr, out);
}

static const a2a_row_ops_t tp_ops = {.call = tp_call, .check = tp_check, .free = tp_free,
                                     .copies = tp_copies};

static void add_tp(perf_ctx_t *c, a2a_rows_t *rows, const char *name, const nsp_plan_t *plan)
{
    tp_same_t *t = a2a_xcalloc(sizeof(*t));

    a2a_traffic_make(c, plan, &t->tr);
    a2a_row_add(c, rows, name, &tp_ops, t, t->tr.offrank);
}

static void setup_tp(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_tp(c, rows, "tp-same", plans->nested);
}

static void setup_tp_flat(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_tp(c, rows, "tp-flat", plans->flat);
}

const a2a_method_t a2a_method_tp_same = {
    .name = "tp-same", .setup = setup_tp,
    .help = "nspcomm's transport alltoallv on exactly the nested traffic, no pack"};
const a2a_method_t a2a_method_tp_flat = {
    .name = "tp-flat", .setup = setup_tp_flat,
    .help = "nspcomm's transport alltoallv on exactly the flat method's traffic"};

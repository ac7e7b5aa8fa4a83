/*
 * Ring attention of one ring level (see ring_attn.h for the decomposition
 * and the schedule, docs/design/attention.md for the why).
 */
#include "attn_sp/ring_attn.h"

#include "attn_sp/attn_reduce.h"
#include "common/log.h"
#include "nested_groups/group.h"
#include "transport/request.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What a ring message carries; with the step's low two bits it is the
 * label of the group's ring step (the tag itself comes from the group's
 * ring sequence). At most two steps of one kind are in flight. */
enum { RING_KIND_FWD_KV = 0, RING_KIND_BWD_KV = 1, RING_KIND_BWD_DKV = 2 };

struct nsp_ring_level {
    int            r, j;
    int            nseqs;        /* sequences of the level (spans / 2) */
    int            kv_heads, head_dim;
    nsp_group_t   *group;        /* the level's group (the tree's); the ring is its index
                                    i -> i + shift (mod degree) */
    int            shift;        /* the Ulysses degree u: ring neighbours are u indices apart */
    int64_t       *off;          /* [r][2*nseqs + 1]: span offsets (tokens) in the block of
                                    ring member m, spans in layout order */
    int64_t        max_tokens;   /* largest block of a member */
    void          *scr;          /* scratch of the calls in the ring's memory (KV buffers,
                                    partials, float32 accumulators), kept between them:
                                    scr_bytes */
    size_t         scr_bytes;
    int64_t       *cu;           /* [nseqs + 1] host: the diagonal's kernel offsets */
    const nsp_attn_mem_t   *mem;    /* the memory's buffers, copies (memtype.h) */
    const nsp_reduce_ops_t *reduce; /* its merges, accumulations, conversions */
};

double nsp_thread_cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Offsets of ring member m's spans. */
static const int64_t *member_off(const nsp_ring_level_t *ring, int m)
{
    return ring->off + (size_t)m * (size_t)(2 * ring->nseqs + 1);
}

static int64_t member_tokens(const nsp_ring_level_t *ring, int m)
{
    return member_off(ring, m)[2 * ring->nseqs];
}

/* The ring's group: the tree decides how it is carried. Index i = j*u +
 * (i % u) of a group of degree r*u sends to ((j+1) mod r)*u + (i % u),
 * which is i + u (mod r*u): the group's ring with shift u. */
static nsp_status_t ring_group(nsp_tree_t *tree, const nsp_layout_level_t *lv,
                               nsp_ring_level_t *ring)
{
    NSP_CHECK(nsp_tree_group_get(tree, lv->rank0, lv->degree, &ring->group));
    ring->shift = lv->ulysses;
    return NSP_OK;
}

nsp_status_t nsp_ring_level_create(nsp_tree_t *tree, const nsp_layout_level_t *lv,
                                   int kv_heads, int head_dim, const nsp_attn_mem_t *mem,
                                   const nsp_reduce_ops_t *reduce, nsp_ring_level_t **ring_p)
{
    nsp_ring_level_t *ring;
    nsp_status_t      status;

    if (tree == NULL || lv == NULL || ring_p == NULL || mem == NULL || reduce == NULL ||
        lv->ring < 2 || lv->nseqs % 2 != 0 || kv_heads < 1 || head_dim < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ring attention: not a ring level (ring %d, %d "
                         "spans) or bad heads %d / head_dim %d", lv ? lv->ring : 0,
                         lv ? lv->nseqs : 0, kv_heads, head_dim);
    }
    ring = calloc(1, sizeof(*ring));
    if (ring == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ring attention: cannot allocate");
    }
    ring->r        = lv->ring;
    ring->j        = lv->ring_index;
    ring->nseqs    = lv->nseqs / 2;
    ring->kv_heads = kv_heads;
    ring->head_dim = head_dim;
    ring->mem      = mem;
    ring->reduce   = reduce;
    ring->off      = malloc(sizeof(int64_t) * (size_t)ring->r * (size_t)(lv->nseqs + 1));
    ring->cu       = malloc(sizeof(int64_t) * ((size_t)ring->nseqs + 1));
    if (ring->off == NULL || ring->cu == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "ring attention: cannot allocate the spans of "
                           "%d members", ring->r);
        goto err_free;
    }
    for (int m = 0; m < ring->r; ++m) {
        int64_t *off = ring->off + (size_t)m * (size_t)(lv->nseqs + 1);
        off[0] = 0;
        for (int s = 0; s < ring->nseqs; ++s) {
            int64_t start[2], len[2];
            NSP_CHECK_GOTO(nsp_zigzag_chunks(lv->seq_len[2 * s], ring->r, m, start, len),
                           status, err_free);
            off[2 * s + 1] = off[2 * s] + len[0];
            off[2 * s + 2] = off[2 * s + 1] + len[1];
        }
        ring->max_tokens = off[lv->nseqs] > ring->max_tokens ? off[lv->nseqs]
                                                             : ring->max_tokens;
    }
    for (int k = 0; k <= lv->nseqs; ++k) { /* the layout's spans are ours */
        if (member_off(ring, ring->j)[k] != lv->seq_offset[k]) {
            status = nsp_error(NSP_ERR_INTERNAL, "ring attention: the layout's span %d "
                               "starts at %lld, the zigzag rule says %lld", k,
                               (long long)lv->seq_offset[k],
                               (long long)member_off(ring, ring->j)[k]);
            goto err_free;
        }
    }
    NSP_CHECK_GOTO(ring_group(tree, lv, ring), status, err_free);
    *ring_p = ring;
    return NSP_OK;

err_free:
    nsp_ring_level_free(ring);
    return status;
}

void nsp_ring_level_free(nsp_ring_level_t *ring)
{
    if (ring == NULL) {
        return;
    }
    free(ring->off);
    free(ring->cu);
    if (ring->scr != NULL) {
        ring->mem->release(ring->scr);
    }
    free(ring);
}

/* ---- waiting and posting ------------------------------------------------ */

/* Wait for a ring request, progressing the caller's other exchanges. */
static nsp_status_t ring_wait(nsp_ring_level_io_t *io, nsp_request_t **req)
{
    double       t0 = nsp_now_s();
    nsp_status_t st;

    for (;;) {
        int oidle = 1;
        st = nsp_request_test(*req);
        if (st != NSP_INPROGRESS) {
            break;
        }
        if (io->progress != NULL && (st = io->progress(io->progress_ctx, &oidle)) < 0) {
            break;
        }
        if ((*req)->idle && oidle) {
            sched_yield(); /* more ranks than cores: let the peer run */
        }
    }
    io->wait_s += nsp_now_s() - t0;
    nsp_request_free(*req); /* on error this abandons it: the communicator is broken */
    *req = NULL;
    return st;
}

static nsp_status_t ring_progress(nsp_ring_level_io_t *io)
{
    int idle;

    return io->progress != NULL ? io->progress(io->progress_ctx, &idle) : NSP_OK;
}

/* ---- block geometry ------------------------------------------------------ */

/* Bytes of member m's KV pair [k; v] (or dK; dV) of es-byte elements. */
static size_t kv_bytes(const nsp_ring_level_t *ring, int m, size_t es)
{
    return 2 * (size_t)member_tokens(ring, m) * (size_t)ring->kv_heads *
           (size_t)ring->head_dim * es;
}

/* Elements of one K (or V) block of member m. */
static size_t kv_floats(const nsp_ring_level_t *ring, int m)
{
    return (size_t)member_tokens(ring, m) * (size_t)ring->kv_heads * (size_t)ring->head_dim;
}

/* Post step `step` of a pass around the ring: member m's [k; v] (or [dK;
 * dV]) of es-byte elements goes from sbuf to the next rank while member
 * m-1's arrives in rbuf. */
static nsp_status_t ring_pass(nsp_ring_level_t *ring, nsp_ring_level_io_t *io, int kind,
                              int step, int m, size_t es, const void *sbuf, void *rbuf,
                              nsp_request_t **req)
{
    nsp_group_ring_step_t st = {
        .sendbuf = sbuf, .sendbytes = kv_bytes(ring, m, es), .recvbuf = rbuf,
        .recvbytes = kv_bytes(ring, (m + ring->r - 1) % ring->r, es), .shift = ring->shift,
        .label = (uint32_t)kind | (((uint32_t)step & 0x3u) << 2)};

    NSP_CHECK(nsp_group_ring_post(ring->group, &st, io->proto.stream, req));
    io->bytes_sent += st.sendbytes;
    return NSP_OK;
}

/*
 * The pair of one sequence s at a step where the rank (ring index j) holds
 * member src's KV block: query rows [*q0, *q0 + *qlen) of its own block and
 * key rows [*k0, *k0 + *klen) of src's block (tokens). src != j.
 */
static void step_pair(const nsp_ring_level_t *ring, int causal, int src, int s, int64_t *q0,
                      int64_t *qlen, int64_t *k0, int64_t *klen)
{
    const int64_t *mine = member_off(ring, ring->j), *theirs = member_off(ring, src);

    if (!causal) { /* everything sees everything */
        *q0 = mine[2 * s], *qlen = mine[2 * s + 2] - mine[2 * s];
        *k0 = theirs[2 * s], *klen = theirs[2 * s + 2] - theirs[2 * s];
    } else if (src < ring->j) { /* both query chunks see key chunk src */
        *q0 = mine[2 * s], *qlen = mine[2 * s + 2] - mine[2 * s];
        *k0 = theirs[2 * s], *klen = theirs[2 * s + 1] - theirs[2 * s];
    } else { /* query chunk 2r-1-j sees both key chunks */
        *q0 = mine[2 * s + 1], *qlen = mine[2 * s + 2] - mine[2 * s + 1];
        *k0 = theirs[2 * s], *klen = theirs[2 * s + 2] - theirs[2 * s];
    }
}

/* The kernel batch of one sequence pair (rows from 0) or of the diagonal. */
typedef struct ring_batch {
    nsp_attn_batch_t b;
    int64_t          qoff[2], kvoff[2];
} ring_batch_t;

static void batch_pair(const nsp_ring_level_io_t *io, ring_batch_t *rb, int64_t qlen,
                       int64_t klen)
{
    rb->b               = io->proto;
    rb->b.params.causal = 0;
    rb->b.nseqs         = 1;
    rb->qoff[0] = 0, rb->qoff[1] = qlen;
    rb->kvoff[0] = 0, rb->kvoff[1] = klen;
    rb->b.q_offsets  = rb->qoff;
    rb->b.kv_offsets = rb->kvoff;
    rb->b.max_q_len  = qlen;
    rb->b.max_kv_len = klen;
}

/* The diagonal (step 0): the rank's own block, per sequence its two chunks
 * as one causal sequence. `cu` [nseqs + 1] is filled. */
static void batch_diag(const nsp_ring_level_t *ring, const nsp_ring_level_io_t *io,
                       nsp_attn_batch_t *b, int64_t *cu)
{
    const int64_t *mine = member_off(ring, ring->j);
    int64_t        max = 0;

    for (int s = 0; s <= ring->nseqs; ++s) {
        cu[s] = mine[2 * s];
        if (s > 0 && cu[s] - cu[s - 1] > max) {
            max = cu[s] - cu[s - 1];
        }
    }
    *b            = io->proto;
    b->nseqs      = ring->nseqs;
    b->q_offsets  = cu;
    b->kv_offsets = cu;
    b->max_q_len  = max;
    b->max_kv_len = max;
}

/* ---- scratch ------------------------------------------------------------- */

/*
 * The calls' scratch is one block owned by the ring, grown by the first call
 * that needs more and kept until nsp_ring_level_free(); a call carves its
 * buffers out of it (64-byte aligned). Element sizes: es for what the
 * kernel reads and writes (the wire dtype), 4 for the float32 accumulators.
 */
static size_t carve(size_t *off, size_t bytes)
{
    size_t at = *off;

    *off += (bytes + 63) & ~(size_t)63;
    return at;
}

static nsp_status_t ring_reserve(nsp_ring_level_t *ring, size_t bytes)
{
    return ring->mem->buffer(&ring->scr, &ring->scr_bytes, bytes);
}

/* Byte `off` of the scratch. */
static char *scr_at(const nsp_ring_level_t *ring, size_t off)
{
    return (char *)ring->scr + off;
}

/* What a call reads in the wire dtype: the element type and its size. */
typedef struct ring_dtype {
    nsp_attn_dtype_t dt;
    size_t           es;
    int              f32;  /* FP32: the outputs are their own accumulators */
} ring_dtype_t;

static nsp_status_t ring_dtype_of(const nsp_ring_level_io_t *io, ring_dtype_t *d)
{
    d->dt  = io->proto.dtype;
    d->es  = nsp_reduce_elem_size(d->dt);
    d->f32 = d->dt == NSP_ATTN_FP32;
    if (d->es == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ring attention: dtype %d is not NSP_ATTN_FP32, "
                         "BF16 or FP16", (int)d->dt);
    }
    return NSP_OK;
}

/* Element `elems` of a buffer of es-byte elements. */
static const char *at_c(const void *base, int64_t elems, size_t es)
{
    return (const char *)base + (size_t)elems * es;
}

static char *at_m(void *base, int64_t elems, size_t es)
{
    return (char *)base + (size_t)elems * es;
}

/* ---- forward ------------------------------------------------------------- */

/* Scratch of a forward: two KV buffers, one partial o / lse, the float32
 * running o (not for FP32: o is its own accumulator). */
typedef struct fwd_scratch {
    void    *kv[2];     /* [k; v] of a member: [T_m, n_kv', D] each, wire dtype */
    void    *part_o;    /* [query rows, n_q', D], wire dtype */
    float   *part_lse;  /* [query rows, n_q'] */
    float   *acc_o;     /* [query rows, n_q', D] float32, or NULL (FP32) */
    int64_t *cu;        /* [nseqs + 1] */
} fwd_scratch_t;

static nsp_status_t fwd_scratch_alloc(nsp_ring_level_t *ring, int q_heads,
                                      const ring_dtype_t *d, fwd_scratch_t *s)
{
    size_t kvn = 2 * (size_t)ring->max_tokens * (size_t)ring->kv_heads * (size_t)ring->head_dim;
    size_t rows = (size_t)member_tokens(ring, ring->j) * (size_t)q_heads;
    size_t of = rows * (size_t)ring->head_dim, off = 0, o_kv[2], o_po, o_pl, o_acc;

    o_kv[0] = carve(&off, kvn * d->es);
    o_kv[1] = carve(&off, kvn * d->es);
    o_po    = carve(&off, of * d->es);
    o_pl    = carve(&off, rows * sizeof(float));
    o_acc   = carve(&off, d->f32 ? 0 : of * sizeof(float));
    NSP_CHECK(ring_reserve(ring, off));
    s->kv[0]    = scr_at(ring, o_kv[0]);
    s->kv[1]    = scr_at(ring, o_kv[1]);
    s->part_o   = scr_at(ring, o_po);
    s->part_lse = (float *)(void *)scr_at(ring, o_pl);
    s->acc_o    = d->f32 ? NULL : (float *)(void *)scr_at(ring, o_acc);
    s->cu       = ring->cu;
    return NSP_OK;
}

/* One sequence pair of a step t >= 1: the rank's query rows [q0, q0 + qlen)
 * and block src's key rows [k0, k0 + klen) (tokens), with their kernel
 * batch. */
typedef struct ring_pair {
    int64_t      q0, qlen, k0, klen;
    ring_batch_t rb;
} ring_pair_t;

/* The kernel work of one pair of a step; `arg` carries the step's buffers. */
typedef nsp_status_t (*ring_pair_work_fn)(const nsp_ring_level_t *ring,
                                          const nsp_ring_level_io_t *io, const ring_pair_t *p,
                                          void *arg);

/* Step t >= 1 from block src, pair by pair: `work` on every sequence pair
 * with rows on both sides, its time counted as compute, the ring
 * progressed after each pair so the KV transfer moves while we compute. */
static nsp_status_t step_pairs(nsp_ring_level_t *ring, nsp_ring_level_io_t *io, int src,
                               ring_pair_work_fn work, void *arg)
{
    for (int sq = 0; sq < ring->nseqs; ++sq) {
        ring_pair_t  p;
        double       c0;
        nsp_status_t st;

        step_pair(ring, io->proto.params.causal, src, sq, &p.q0, &p.qlen, &p.k0, &p.klen);
        if (p.qlen == 0 || p.klen == 0) {
            continue;
        }
        batch_pair(io, &p.rb, p.qlen, p.klen);
        c0 = nsp_thread_cpu_s();
        st = work(ring, io, &p, arg);
        io->compute_s += nsp_thread_cpu_s() - c0;
        NSP_CHECK(st);
        NSP_CHECK(ring_progress(io));
    }
    return NSP_OK;
}


/* The buffers of a forward step: block src's k and v [tokens, kv_heads, D],
 * the rank's q [tokens, q_heads, D] (wire dtype), the float32 running o
 * [tokens, q_heads, D] and lse [tokens, q_heads]. */
typedef struct fwd_step_args {
    const void         *k, *v, *q;
    float              *o, *lse;
    fwd_scratch_t      *s;
    const ring_dtype_t *d;
} fwd_step_args_t;

/* One pair of the forward: attend into the partials and merge them. */
static nsp_status_t fwd_pair(const nsp_ring_level_t *ring, const nsp_ring_level_io_t *io,
                             const ring_pair_t *p, void *arg)
{
    const fwd_step_args_t *a  = arg;
    const int              hq = io->proto.params.q_heads, hkv = ring->kv_heads;
    const int              D  = ring->head_dim;
    const size_t           es = a->d->es;
    nsp_status_t           st;

    st = io->kernel->fwd(io->kernel->ctx, &p->rb.b, at_c(a->q, p->q0 * hq * D, es),
                         at_c(a->k, p->k0 * hkv * D, es), at_c(a->v, p->k0 * hkv * D, es),
                         a->s->part_o, a->s->part_lse);
    if (st == NSP_OK) { /* reads the partial in the wire dtype, adds in float32 */
        st = ring->reduce->merge(a->d->dt, p->qlen * hq, D, a->o + p->q0 * hq * D,
                                 a->lse + p->q0 * hq, a->s->part_o, a->s->part_lse,
                                 io->proto.stream);
    }
    return st;
}

/* One step t >= 1 of the forward: attend to the KV block of `src` and merge. */
static nsp_status_t fwd_step(nsp_ring_level_t *ring, nsp_ring_level_io_t *io, int src,
                             const void *kv, const void *q, float *o, float *lse,
                             fwd_scratch_t *s, const ring_dtype_t *d)
{
    fwd_step_args_t a = {kv, at_c(kv, (int64_t)kv_floats(ring, src), d->es), q, o, lse, s, d};

    return step_pairs(ring, io, src, fwd_pair, &a);
}

/* Copy a member's K and V blocks into one buffer [k; v] (on the stream). */
static nsp_status_t pack_kv(const nsp_ring_level_t *ring, const nsp_ring_level_io_t *io,
                            int m, size_t es, const void *k, const void *v, void *kv)
{
    size_t n = kv_floats(ring, m);

    NSP_CHECK(ring->mem->copy(kv, k, n * es, io->proto.stream));
    return ring->mem->copy(at_m(kv, (int64_t)n, es), v, n * es, io->proto.stream);
}

/* The diagonal of the forward into o (wire dtype) and lse, widened into the
 * float32 running o unless FP32. */
static nsp_status_t fwd_diag(nsp_ring_level_t *ring, nsp_ring_level_io_t *io,
                             const ring_dtype_t *d, fwd_scratch_t *s, const void *q,
                             const void *k, const void *v, void *o, float *lse)
{
    size_t           n = (size_t)member_tokens(ring, ring->j) *
                         (size_t)io->proto.params.q_heads * (size_t)ring->head_dim;
    nsp_attn_batch_t diag;
    double           c0 = nsp_thread_cpu_s();
    nsp_status_t     st = NSP_OK;

    batch_diag(ring, io, &diag, s->cu);
    if (member_tokens(ring, ring->j) > 0) {
        st = io->kernel->fwd(io->kernel->ctx, &diag, q, k, v, o, lse);
    }
    if (st == NSP_OK && !d->f32) {
        st = ring->reduce->to_f32(d->dt, n, o, s->acc_o, io->proto.stream);
    }
    io->compute_s += nsp_thread_cpu_s() - c0;
    return st;
}

nsp_status_t nsp_ring_level_fwd(nsp_ring_level_t *ring, nsp_ring_level_io_t *io,
                                const void *q, const void *k, const void *v, void *o,
                                float *lse)
{
    const int      r = ring->r, j = ring->j;
    fwd_scratch_t  s;
    ring_dtype_t   d;
    nsp_request_t *req = NULL;
    float         *acc;
    int            cur = 0;
    nsp_status_t   status;

    NSP_CHECK(ring_dtype_of(io, &d));
    NSP_CHECK(fwd_scratch_alloc(ring, io->proto.params.q_heads, &d, &s));
    acc = d.f32 ? (float *)o : s.acc_o;
    NSP_CHECK(pack_kv(ring, io, j, d.es, k, v, s.kv[cur]));
    /* Step 1's block starts moving before the diagonal is computed. */
    NSP_CHECK_GOTO(ring_pass(ring, io, RING_KIND_FWD_KV, 1, j, d.es, s.kv[cur], s.kv[1 - cur],
                             &req),
                   status, out);
    NSP_CHECK_GOTO(fwd_diag(ring, io, &d, &s, q, k, v, o, lse), status, out);
    for (int t = 1; t < r; ++t) {
        int src = (j - t + r) % r;
        NSP_CHECK_GOTO(ring_wait(io, &req), status, out);
        cur = 1 - cur;
        if (t + 1 < r) { /* pass the block on and receive the next one meanwhile */
            NSP_CHECK_GOTO(ring_pass(ring, io, RING_KIND_FWD_KV, t + 1, src, d.es, s.kv[cur],
                                     s.kv[1 - cur], &req),
                           status, out);
        }
        NSP_CHECK_GOTO(fwd_step(ring, io, src, s.kv[cur], q, acc, lse, &s, &d), status, out);
    }
    /* the one rounding of the merged o (FP32: o is the accumulator) */
    status = ring->reduce->from_f32(d.dt, d.f32 ? 0 : (size_t)member_tokens(ring, j) *
                                        (size_t)io->proto.params.q_heads *
                                        (size_t)ring->head_dim,
                                    acc, o, io->proto.stream);
out:
    if (req != NULL) {
        nsp_request_free(req); /* only on error: abandons it */
    }
    return status;
}

/* ---- backward ------------------------------------------------------------ */

typedef struct bwd_scratch {
    void    *kv[2];    /* [k; v] of a member, wire dtype */
    float   *acc[2];   /* travelling [dk; dv] of a member, float32 (on the wire too) */
    void    *contrib;  /* this rank's [dk; dv] contribution to the held block, wire dtype */
    void    *part_dq;  /* [query rows, n_q', D], wire dtype */
    float   *acc_dq;   /* [query rows, n_q', D] float32, or NULL (FP32: dq itself) */
    int64_t *cu;
} bwd_scratch_t;

static nsp_status_t bwd_scratch_alloc(nsp_ring_level_t *ring, int q_heads,
                                      const ring_dtype_t *d, bwd_scratch_t *s)
{
    size_t kvn = 2 * (size_t)ring->max_tokens * (size_t)ring->kv_heads * (size_t)ring->head_dim;
    size_t qn  = (size_t)member_tokens(ring, ring->j) * (size_t)q_heads * (size_t)ring->head_dim;
    size_t off = 0, o_kv[2], o_acc[2], o_c, o_pdq, o_adq;

    for (int b = 0; b < 2; ++b) {
        o_kv[b]  = carve(&off, kvn * d->es);
        o_acc[b] = carve(&off, kvn * sizeof(float));
    }
    o_c   = carve(&off, kvn * d->es);
    o_pdq = carve(&off, qn * d->es);
    o_adq = carve(&off, d->f32 ? 0 : qn * sizeof(float));
    NSP_CHECK(ring_reserve(ring, off));
    for (int b = 0; b < 2; ++b) {
        s->kv[b]  = scr_at(ring, o_kv[b]);
        s->acc[b] = (float *)(void *)scr_at(ring, o_acc[b]);
    }
    s->contrib = scr_at(ring, o_c);
    s->part_dq = scr_at(ring, o_pdq);
    s->acc_dq  = d->f32 ? NULL : (float *)(void *)scr_at(ring, o_adq);
    s->cu      = ring->cu;
    return NSP_OK;
}

/* The inputs of the backward, the rank's own block (wire dtype, lse float32),
 * and the float32 accumulator of its dq. */
typedef struct bwd_in {
    const void  *q, *o, *dout;
    const float *lse;
    float       *dq;
} bwd_in_t;

/* The buffers of a backward step: block src's k, v and its contribution
 * dk, dv [tokens, kv_heads, D] (wire dtype), the rank's own block in `in`. */
typedef struct bwd_step_args {
    const void         *k, *v;
    void               *dk, *dv;
    const bwd_in_t     *in;
    bwd_scratch_t      *s;
    const ring_dtype_t *d;
} bwd_step_args_t;

/* One pair of the backward: dk, dv of the pair's key rows, its dq added. */
static nsp_status_t bwd_pair(const nsp_ring_level_t *ring, const nsp_ring_level_io_t *io,
                             const ring_pair_t *p, void *arg)
{
    const bwd_step_args_t *a  = arg;
    const bwd_in_t        *in = a->in;
    const int              hq = io->proto.params.q_heads, hkv = ring->kv_heads;
    const int              D  = ring->head_dim;
    const int64_t          q0 = p->q0 * hq * D, k0 = p->k0 * hkv * D; /* elements */
    const size_t           es = a->d->es;
    nsp_status_t           st;

    /* Key rows of different sequences are disjoint: the kernel writes
     * straight into the contribution; query rows go through part_dq. */
    st = io->kernel->bwd(io->kernel->ctx, &p->rb.b, at_c(in->q, q0, es), at_c(a->k, k0, es),
                         at_c(a->v, k0, es), at_c(in->o, q0, es), in->lse + p->q0 * hq,
                         at_c(in->dout, q0, es), a->s->part_dq, at_m(a->dk, k0, es),
                         at_m(a->dv, k0, es));
    if (st == NSP_OK) {
        st = ring->reduce->accumulate(a->d->dt, (size_t)(p->qlen * hq * D), a->s->part_dq,
                                      in->dq + q0, io->proto.stream);
    }
    return st;
}

/* One step t >= 1: the contribution to block src into s->contrib [dk; dv],
 * the queries' share added to dq. */
static nsp_status_t bwd_step(nsp_ring_level_t *ring, nsp_ring_level_io_t *io, int src,
                             const void *kv, const bwd_in_t *in, bwd_scratch_t *s,
                             const ring_dtype_t *d)
{
    const size_t    n = kv_floats(ring, src);
    bwd_step_args_t a = {kv, at_c(kv, (int64_t)n, d->es), s->contrib,
                         at_m(s->contrib, (int64_t)n, d->es), in, s, d};

    /* rows no query sees stay 0 */
    NSP_CHECK(ring->mem->zero(s->contrib, 2 * n * d->es, io->proto.stream));
    return step_pairs(ring, io, src, bwd_pair, &a);
}

/* The diagonal of the backward (step 0): dq and the first contribution to
 * the own block's travelling float32 [dK; dV] in acc. FP32 writes both in
 * place; other dtypes write dq and the contribution in the wire dtype and
 * widen them. */
static nsp_status_t bwd_diag(nsp_ring_level_t *ring, nsp_ring_level_io_t *io,
                             const ring_dtype_t *d, bwd_scratch_t *s, const bwd_in_t *in,
                             const void *k, const void *v, void *dq, float *acc)
{
    size_t           nj = kv_floats(ring, ring->j);
    size_t           nq = (size_t)member_tokens(ring, ring->j) *
                          (size_t)io->proto.params.q_heads * (size_t)ring->head_dim;
    void            *dkv = d->f32 ? (void *)acc : s->contrib;
    nsp_attn_batch_t diag;
    double           c0 = nsp_thread_cpu_s();
    nsp_status_t     st = NSP_OK;

    batch_diag(ring, io, &diag, s->cu);
    if (nj > 0) {
        st = io->kernel->bwd(io->kernel->ctx, &diag, in->q, k, v, in->o, in->lse, in->dout,
                             dq, dkv, at_m(dkv, (int64_t)nj, d->es));
    }
    if (st == NSP_OK && !d->f32) {
        st = ring->reduce->to_f32(d->dt, nq, dq, s->acc_dq, io->proto.stream);
        st = st < 0 ? st : ring->reduce->to_f32(d->dt, 2 * nj, s->contrib, acc,
                                                io->proto.stream);
    }
    io->compute_s += nsp_thread_cpu_s() - c0;
    return st;
}

/* Round the own block's [dK; dV] sum into dk and dv, and (not FP32) the
 * float32 dq into dq: the one rounding of every gradient. */
static nsp_status_t bwd_round(const nsp_ring_level_t *ring, const nsp_ring_level_io_t *io,
                              const ring_dtype_t *d, const bwd_scratch_t *s, const float *acc,
                              void *dq, void *dk, void *dv)
{
    size_t n  = kv_floats(ring, ring->j);
    size_t nq = (size_t)member_tokens(ring, ring->j) * (size_t)io->proto.params.q_heads *
                (size_t)ring->head_dim;

    void *st = io->proto.stream;

    NSP_CHECK(ring->reduce->from_f32(d->dt, n, acc, dk, st));
    NSP_CHECK(ring->reduce->from_f32(d->dt, n, acc + n, dv, st));
    return ring->reduce->from_f32(d->dt, d->f32 ? 0 : nq, s->acc_dq, dq, st);
}

nsp_status_t nsp_ring_level_bwd(nsp_ring_level_t *ring, nsp_ring_level_io_t *io,
                                const void *q, const void *k, const void *v, const void *o,
                                const float *lse, const void *dout, void *dq, void *dk,
                                void *dv)
{
    const int      r = ring->r, j = ring->j;
    bwd_scratch_t  s;
    bwd_in_t       in;
    ring_dtype_t   d;
    nsp_request_t *kv_req = NULL, *dkv_req = NULL;
    int            cur = 0, a = 0;
    double         c0;
    nsp_status_t   status;

    NSP_CHECK(ring_dtype_of(io, &d));
    NSP_CHECK(bwd_scratch_alloc(ring, io->proto.params.q_heads, &d, &s));
    in = (bwd_in_t){.q = q, .o = o, .dout = dout, .lse = lse,
                    .dq = d.f32 ? (float *)dq : s.acc_dq};
    NSP_CHECK(pack_kv(ring, io, j, d.es, k, v, s.kv[cur]));
    NSP_CHECK_GOTO(ring_pass(ring, io, RING_KIND_BWD_KV, 1, j, d.es, s.kv[cur], s.kv[1 - cur],
                             &kv_req),
                   status, out);
    NSP_CHECK_GOTO(bwd_diag(ring, io, &d, &s, &in, k, v, dq, s.acc[a]), status, out);
    NSP_CHECK_GOTO(ring_pass(ring, io, RING_KIND_BWD_DKV, 1, j, sizeof(float), s.acc[a],
                             s.acc[1 - a], &dkv_req),
                   status, out);
    for (int t = 1; t < r; ++t) {
        int src = (j - t + r) % r;
        NSP_CHECK_GOTO(ring_wait(io, &kv_req), status, out);
        cur = 1 - cur;
        if (t + 1 < r) {
            NSP_CHECK_GOTO(ring_pass(ring, io, RING_KIND_BWD_KV, t + 1, src, d.es, s.kv[cur],
                                     s.kv[1 - cur], &kv_req),
                           status, out);
        }
        NSP_CHECK_GOTO(bwd_step(ring, io, src, s.kv[cur], &in, &s, &d), status, out);
        /* The travelling sum of block src has arrived meanwhile: add, pass on
         * (after the last step it goes to its owner, and ours comes back). */
        NSP_CHECK_GOTO(ring_wait(io, &dkv_req), status, out);
        a = 1 - a;
        c0 = nsp_thread_cpu_s();
        status = ring->reduce->accumulate(d.dt, 2 * kv_floats(ring, src), s.contrib, s.acc[a],
                                          io->proto.stream);
        io->compute_s += nsp_thread_cpu_s() - c0;
        NSP_CHECK_GOTO(status, status, out);
        NSP_CHECK_GOTO(ring_pass(ring, io, RING_KIND_BWD_DKV, t + 1, src, sizeof(float),
                                 s.acc[a], s.acc[1 - a], &dkv_req),
                       status, out);
    }
    NSP_CHECK_GOTO(ring_wait(io, &dkv_req), status, out);
    status = bwd_round(ring, io, &d, &s, s.acc[1 - a], dq, dk, dv);
out:
    if (kv_req != NULL) {
        nsp_request_free(kv_req); /* only on error: abandons it */
    }
    if (dkv_req != NULL) {
        nsp_request_free(dkv_req);
    }
    return status;
}

/*
 * The "emu" memory type (memtype.h): host memory over a host transport
 * (UCX) driven as a device, so the device engine's orchestration of the
 * CUDA path runs on a CPU (docs/design/emulated-device.md section 4):
 *
 *   engine   the device engine (nested_a2a_device.c) on the world's
 *            emulated device (devops_emu.c): a stream per level waiting on
 *            the caller's stream, gated opens, done events; the exchange's
 *            bytes move over UCX from the rank's own threads (the host
 *            steps post once the pack ran and enqueue the unpack once the
 *            requests completed: stream threads never call UCX)
 *   pack     the host pack ops (pack_host_ops.c) run in stream order, as
 *            host ops on the level's stream
 *   reduce   the host reductions in stream order on the caller's stream
 *   attn     host buffers; the caller's NULL stream is the device's default
 *            stream; the kernel is a timed kernel of the emulated device
 *            (nsp_emu_timing_attn_s of the call's batch), which in math
 *            mode also runs the given kernel on the stream's thread
 *
 * The world's state (slot NSP_COMM_SLOT_EMU): FILE and the device, made on
 * the first nsp_memtype_of() of a world with NSPCOMM_DEVICE=emu:FILE.
 */
#include "config.h"

#include "attn_sp/memtype_emu.h"

#include "attn_sp/memtype.h"
#include "common/log.h"
#include "transport/comm.h"

#include <stdlib.h>
#include <string.h>

#define EMU_MT_WHAT "emulated device"

/* ---- the world's state -------------------------------------------------------- */

typedef struct emu_world {
    nsp_emu_config_t  cfg;
    nsp_emu_device_t *dev;
} emu_world_t;

static void emu_world_release(void *ptr)
{
    emu_world_t *w = ptr;

    /* drains what is queued; a timeout is logged where it is decided */
    (void)nsp_emu_device_destroy(w->dev);
    free(w);
}

static nsp_status_t emu_world_make(nsp_comm_t *world, const nsp_emu_config_t *cfg)
{
    nsp_comm_slot_t *slot = nsp_comm_slot(world, NSP_COMM_SLOT_EMU);
    nsp_emu_params_t p;
    emu_world_t     *w;
    nsp_status_t     status;

    if (nsp_comm_tp(world)->ops->mem_type != NSP_MEM_HOST) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s (NSPCOMM_DEVICE=emu:%s): the '%s' backend "
                         "does not move host memory; use the UCX backend", EMU_MT_WHAT,
                         cfg->file, nsp_comm_tp(world)->ops->name);
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", EMU_MT_WHAT);
    }
    w->cfg = *cfg;
    memset(&p, 0, sizeof(p));
    p.field_mask     = NSP_EMU_FIELD_MATH | NSP_EMU_FIELD_TRACE;
    p.math           = cfg->math;
    p.trace_capacity = cfg->trace;
    NSP_CHECK_GOTO(nsp_emu_device_create(&p, &w->dev), status, err_free);
    slot->ptr     = w;
    slot->release = emu_world_release;
    NSP_INFO("%s: %s (target %s, here %s, link %s, %s)", EMU_MT_WHAT, cfg->file, cfg->target,
             cfg->here, nsp_emu_link_name(cfg->link), cfg->math ? "math" : "timing only");
    return NSP_OK;
err_free:
    free(w);
    return status;
}

nsp_status_t nsp_memtype_emu_select(nsp_comm_t *world, int *on)
{
    nsp_emu_config_t cfg;

    if (world == NULL || on == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_memtype_emu_select: NULL argument");
    }
    if (nsp_comm_slot(world, NSP_COMM_SLOT_EMU)->ptr != NULL) {
        *on = 1;
        return NSP_OK;
    }
    NSP_CHECK(nsp_emu_config_from_env(getenv("NSPCOMM_DEVICE"), on, &cfg));
    return *on ? emu_world_make(world, &cfg) : NSP_OK;
}

static emu_world_t *emu_world_of(nsp_comm_t *world)
{
    return world != NULL ? nsp_comm_slot(world, NSP_COMM_SLOT_EMU)->ptr : NULL;
}

nsp_status_t nsp_memtype_emu_get(nsp_comm_t *world, nsp_emu_device_t **dev,
                                 const nsp_emu_config_t **cfg)
{
    emu_world_t *w = emu_world_of(world);

    if (w == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: the world is not emulated (set "
                         "NSPCOMM_DEVICE=emu:FILE before its first exchange)", EMU_MT_WHAT);
    }
    if (dev != NULL) {
        *dev = w->dev;
    }
    if (cfg != NULL) {
        *cfg = &w->cfg;
    }
    return NSP_OK;
}

static nsp_status_t emu_device_ctx(nsp_comm_t *world, void **ctx)
{
    nsp_emu_device_t *dev = NULL;

    NSP_CHECK(nsp_memtype_emu_get(world, &dev, NULL));
    *ctx = dev;
    return NSP_OK;
}

/* ---- host ops in stream order -------------------------------------------------- */

enum { OP_PACK_S2H, OP_UNPACK_S2H, OP_PACK_H2S, OP_UNPACK_H2S, OP_COPY_SELF, OP_RELEASE,
       OP_TO_F32, OP_FROM_F32, OP_SUM_REPLICAS, OP_MERGE, OP_ACCUMULATE, OP_COPY, OP_ZERO };

/* One host pack or reduce op, its arguments copied at enqueue (the buffers
 * and count arrays are borrowed: the engine keeps them until the stream
 * ran the op). Freed by the op when it runs, by hop_drop when the device
 * drops it. */
typedef struct emu_hop {
    int                op;
    void              *tables;
    int                heads, nrep, head_dim;
    size_t             row_bytes, n;
    nsp_a2a_replicas_t replicas;
    nsp_a2a_dir_t      dir;
    nsp_attn_dtype_t   dtype;
    const void        *src, *src2;
    void              *dst, *dst2;
    const size_t      *counts, *displs;
    int64_t            rows, row_elems, dst_stride, src_stride, rep_stride;
} emu_hop_t;

static nsp_status_t hop_run_pack(const emu_hop_t *h)
{
    const nsp_pack_ops_t *pk = &nsp_pack_ops_host;

    switch (h->op) {
    case OP_PACK_S2H:
        return pk->pack_s2h(h->tables, h->heads, h->row_bytes, h->src, h->dst, h->counts,
                            h->displs, NULL);
    case OP_UNPACK_S2H:
        return pk->unpack_s2h(h->tables, h->heads, h->row_bytes, h->src, h->counts, h->displs,
                              h->dst, NULL);
    case OP_PACK_H2S:
        return pk->pack_h2s(h->tables, h->heads, h->row_bytes, h->src, h->dst, h->counts,
                            h->displs, NULL);
    case OP_UNPACK_H2S:
        return pk->unpack_h2s(h->tables, h->heads, h->row_bytes, h->replicas, h->src,
                              h->counts, h->displs, h->dst, NULL);
    case OP_COPY_SELF:
        return pk->copy_self(h->tables, h->dir, h->heads, h->row_bytes, h->replicas, h->src,
                             h->dst, NULL);
    default:
        pk->level_release(h->tables, NULL);
        return NSP_OK;
    }
}

static nsp_status_t hop_run_reduce(const emu_hop_t *h)
{
    const nsp_reduce_ops_t *rd = &nsp_reduce_ops_host;

    switch (h->op) {
    case OP_TO_F32:
        return rd->to_f32(h->dtype, h->n, h->src, h->dst, NULL);
    case OP_FROM_F32:
        return rd->from_f32(h->dtype, h->n, h->src, h->dst, NULL);
    case OP_SUM_REPLICAS:
        return rd->sum_replicas(h->dtype, h->rows, h->row_elems, h->dst, h->dst_stride, h->src,
                                h->src_stride, h->nrep, h->rep_stride, NULL);
    case OP_ACCUMULATE:
        return rd->accumulate(h->dtype, h->n, h->src, h->dst, NULL);
    case OP_COPY:
        return nsp_memtype_host.attn->copy(h->dst, h->src, h->n, NULL);
    case OP_ZERO:
        return nsp_memtype_host.attn->zero(h->dst, h->n, NULL);
    default:
        return rd->merge(h->dtype, h->rows, h->head_dim, h->dst, h->dst2, h->src, h->src2,
                         NULL);
    }
}

static nsp_status_t hop_run(void *arg)
{
    emu_hop_t   *h = arg;
    nsp_status_t status = h->op >= OP_TO_F32 ? hop_run_reduce(h) : hop_run_pack(h);

    free(h);
    return status;
}

/* A hop the device dropped (after a sticky error, or a cancel): a release
 * still releases (its tables are host memory), the rest is just freed. */
static void hop_drop(void *arg)
{
    emu_hop_t *h = arg;

    if (h->op == OP_RELEASE) {
        (void)hop_run_pack(h);
    }
    free(h);
}

/* Enqueue *proto on `stream` (the emulated device's). */
static nsp_status_t hop_enqueue(const emu_hop_t *proto, void *stream)
{
    emu_hop_t   *h = malloc(sizeof(*h));
    nsp_status_t status;

    if (h == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a stream op", EMU_MT_WHAT);
    }
    *h     = *proto;
    status = nsp_emu_launch_host_op_owned(stream, hop_run, hop_drop, h);
    if (status != NSP_OK) {
        free(h);
    }
    return status;
}

/* ---- pack ops ---------------------------------------------------------------------- */

static nsp_status_t epk_level_create(const nsp_level_view_t *view, void **tables)
{
    return nsp_pack_ops_host.level_create(view, tables); /* host tables, no stream */
}

static void epk_level_release(void *tables, void *stream)
{
    emu_hop_t h = {.op = OP_RELEASE, .tables = tables};

    if (tables == NULL) {
        return;
    }
    if (stream == NULL || hop_enqueue(&h, stream) != NSP_OK) {
        /* nothing queued on a NULL stream; a refused enqueue: the device is
         * failed or gone and runs nothing more */
        nsp_pack_ops_host.level_release(tables, NULL);
    }
}

static nsp_status_t epk_pack_s2h(void *tables, int heads, size_t row_bytes, const void *chunks,
                                 void *send, const size_t *send_bytes,
                                 const size_t *send_displs, void *stream)
{
    emu_hop_t h = {.op = OP_PACK_S2H, .tables = tables, .heads = heads, .row_bytes = row_bytes,
                   .src = chunks, .dst = send, .counts = send_bytes, .displs = send_displs};

    return hop_enqueue(&h, stream);
}

static nsp_status_t epk_unpack_s2h(void *tables, int heads, size_t row_bytes, const void *recv,
                                   const size_t *recv_bytes, const size_t *recv_displs,
                                   void *block, void *stream)
{
    emu_hop_t h = {.op = OP_UNPACK_S2H, .tables = tables, .heads = heads,
                   .row_bytes = row_bytes, .src = recv, .dst = block, .counts = recv_bytes,
                   .displs = recv_displs};

    return hop_enqueue(&h, stream);
}

static nsp_status_t epk_pack_h2s(void *tables, int heads, size_t row_bytes, const void *block,
                                 void *send, const size_t *send_bytes,
                                 const size_t *send_displs, void *stream)
{
    emu_hop_t h = {.op = OP_PACK_H2S, .tables = tables, .heads = heads, .row_bytes = row_bytes,
                   .src = block, .dst = send, .counts = send_bytes, .displs = send_displs};

    return hop_enqueue(&h, stream);
}

static nsp_status_t epk_unpack_h2s(void *tables, int heads, size_t row_bytes,
                                   nsp_a2a_replicas_t replicas, const void *recv,
                                   const size_t *recv_bytes, const size_t *recv_displs,
                                   void *chunks, void *stream)
{
    emu_hop_t h = {.op = OP_UNPACK_H2S, .tables = tables, .heads = heads,
                   .row_bytes = row_bytes, .replicas = replicas, .src = recv, .dst = chunks,
                   .counts = recv_bytes, .displs = recv_displs};

    return hop_enqueue(&h, stream);
}

static nsp_status_t epk_copy_self(void *tables, nsp_a2a_dir_t dir, int heads, size_t row_bytes,
                                  nsp_a2a_replicas_t replicas, const void *src, void *dst,
                                  void *stream)
{
    emu_hop_t h = {.op = OP_COPY_SELF, .tables = tables, .dir = dir, .heads = heads,
                   .row_bytes = row_bytes, .replicas = replicas, .src = src, .dst = dst};

    return hop_enqueue(&h, stream);
}

static const nsp_pack_ops_t emu_pack = {
    .name          = "emu (host maps in stream order)",
    .level_create  = epk_level_create,
    .level_release = epk_level_release,
    .pack_s2h      = epk_pack_s2h,
    .unpack_s2h    = epk_unpack_s2h,
    .pack_h2s      = epk_pack_h2s,
    .unpack_h2s    = epk_unpack_h2s,
    .copy_self     = epk_copy_self,
};

/* ---- reduce ops -------------------------------------------------------------------- */

static nsp_status_t erd_to_f32(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst,
                               void *stream)
{
    emu_hop_t h = {.op = OP_TO_F32, .dtype = dtype, .n = n, .src = src, .dst = dst};

    return hop_enqueue(&h, stream);
}

static nsp_status_t erd_from_f32(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst,
                                 void *stream)
{
    emu_hop_t h = {.op = OP_FROM_F32, .dtype = dtype, .n = n, .src = src, .dst = dst};

    return hop_enqueue(&h, stream);
}

static nsp_status_t erd_sum_replicas(nsp_attn_dtype_t dtype, int64_t rows, int64_t row_elems,
                                     void *dst, int64_t dst_stride, const void *src,
                                     int64_t src_stride, int nrep, int64_t rep_stride,
                                     void *stream)
{
    emu_hop_t h = {.op = OP_SUM_REPLICAS, .dtype = dtype, .rows = rows,
                   .row_elems = row_elems, .dst = dst, .dst_stride = dst_stride, .src = src,
                   .src_stride = src_stride, .nrep = nrep, .rep_stride = rep_stride};

    return hop_enqueue(&h, stream);
}

static nsp_status_t erd_merge(nsp_attn_dtype_t dtype, int64_t rows, int head_dim, float *o,
                              float *lse, const void *o2, const float *lse2, void *stream)
{
    emu_hop_t h = {.op = OP_MERGE, .dtype = dtype, .rows = rows, .head_dim = head_dim,
                   .dst = o, .dst2 = lse, .src = o2, .src2 = lse2};

    return hop_enqueue(&h, stream);
}

static nsp_status_t erd_accumulate(nsp_attn_dtype_t dtype, size_t n, const void *src,
                                   float *acc, void *stream)
{
    emu_hop_t h = {.op = OP_ACCUMULATE, .dtype = dtype, .n = n, .src = src, .dst = acc};

    return hop_enqueue(&h, stream);
}

static const nsp_reduce_ops_t emu_reduce = {
    .name         = "emu (host reductions in stream order)",
    .to_f32       = erd_to_f32,
    .from_f32     = erd_from_f32,
    .sum_replicas = erd_sum_replicas,
    .merge        = erd_merge,
    .accumulate   = erd_accumulate,
};

/* ---- the timed attention kernel ------------------------------------------------- */

/* What bind keeps for one nested attention: the timing of its heads, the
 * kernel it wraps (math mode), the device. */
typedef struct emu_kernel {
    nsp_attn_kernel_t inner;
    nsp_emu_timing_t  timing;
    nsp_emu_device_t *dev;
    int               math;
} emu_kernel_t;

/* One math-mode call, copied at launch (the driver reuses its offsets). */
typedef struct emu_call {
    const emu_kernel_t *k;
    int                 bwd;
    nsp_attn_batch_t    b;
    const void         *q, *kk, *v, *o, *dout;
    const float        *lse;
    void               *out_o, *dq, *dk, *dv;
    float              *out_lse;
    int64_t             offsets[]; /* [2 (nseqs + 1)]: q, then kv */
} emu_call_t;

static nsp_status_t emu_call_run(void *arg)
{
    emu_call_t        *c = arg;
    const emu_kernel_t *k = c->k;
    nsp_status_t       status;

    if (!c->bwd) {
        status = k->inner.fwd(k->inner.ctx, &c->b, c->q, c->kk, c->v, c->out_o, c->out_lse);
    } else {
        status = k->inner.bwd(k->inner.ctx, &c->b, c->q, c->kk, c->v, c->o, c->lse, c->dout,
                              c->dq, c->dk, c->dv);
    }
    free(c);
    return status;
}

/* A copy of the batch for the stream's thread: own offsets, no stream
 * (the wrapped kernel is a host kernel). */
static emu_call_t *emu_call_new(const emu_kernel_t *k, const nsp_attn_batch_t *b, int bwd)
{
    size_t      n = (size_t)b->nseqs + 1;
    emu_call_t *c = calloc(1, sizeof(*c) + 2 * n * sizeof(int64_t));

    if (c == NULL) {
        return NULL;
    }
    c->k   = k;
    c->bwd = bwd;
    c->b   = *b;
    memcpy(c->offsets, b->q_offsets, n * sizeof(int64_t));
    memcpy(c->offsets + n, b->kv_offsets, n * sizeof(int64_t));
    c->b.q_offsets  = c->offsets;
    c->b.kv_offsets = c->offsets + n;
    c->b.stream     = NULL;
    return c;
}

/* Enqueue the timed kernel of one call on the batch's stream; math mode:
 * with `c` (freed here when the launch is refused). */
static nsp_status_t emu_launch(const emu_kernel_t *k, const nsp_attn_batch_t *b, int bwd,
                               emu_call_t *c)
{
    void        *stream = b->stream != NULL ? b->stream : nsp_emu_default_stream(k->dev);
    double       seconds = 0.0;
    nsp_status_t status;

    status = nsp_emu_timing_attn_s(&k->timing, bwd ? NSP_EMU_PASS_BWD : NSP_EMU_PASS_FWD, b,
                                   &seconds);
    if (status == NSP_OK) {
        status = nsp_emu_stream_set_tag(stream, NSP_EMU_KERNEL_TAG(b->level, bwd));
    }
    if (status == NSP_OK) {
        status = nsp_emu_launch_timed_owned(stream, seconds, c != NULL ? emu_call_run : NULL,
                                            free, c);
    }
    if (status != NSP_OK) {
        free(c);
    }
    return status;
}

static nsp_status_t emu_fwd(void *ctx, const nsp_attn_batch_t *b, const void *q, const void *k,
                            const void *v, void *o, float *lse)
{
    const emu_kernel_t *ek = ctx;
    emu_call_t         *c = NULL;

    if (ek->math) {
        if ((c = emu_call_new(ek, b, 0)) == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a kernel call", EMU_MT_WHAT);
        }
        c->q = q, c->kk = k, c->v = v, c->out_o = o, c->out_lse = lse;
    }
    return emu_launch(ek, b, 0, c);
}

static nsp_status_t emu_bwd(void *ctx, const nsp_attn_batch_t *b, const void *q, const void *k,
                            const void *v, const void *o, const float *lse, const void *dout,
                            void *dq, void *dk, void *dv)
{
    const emu_kernel_t *ek = ctx;
    emu_call_t         *c = NULL;

    if (ek->math) {
        if ((c = emu_call_new(ek, b, 1)) == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a kernel call", EMU_MT_WHAT);
        }
        c->q = q, c->kk = k, c->v = v, c->o = o, c->lse = lse, c->dout = dout;
        c->dq = dq, c->dk = dk, c->dv = dv;
    }
    return emu_launch(ek, b, 1, c);
}

/* ---- nested attention's memory ops -------------------------------------------- */

static nsp_status_t emu_check_kernel(int reference)
{
    (void)reference; /* any host kernel: math mode runs it on the stream's thread */
    return NSP_OK;
}

static nsp_status_t emu_check_level(int level, const nsp_layout_level_t *lv)
{
    if (lv->ring > 1) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s: level %d is a ring group (degree %d, ring "
                         "%d); a ring posts its steps on the device's stream, which the UCX "
                         "transport cannot take, so rings do not run on the emulated device; "
                         "plan without rings (Ulysses groups)",
                         EMU_MT_WHAT, level, lv->degree, lv->ring);
    }
    return NSP_OK;
}

static nsp_status_t emu_check_stream(void *stream)
{
    if (stream != NULL && nsp_emu_stream_device(stream) == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: the stream given is not a stream of the "
                         "emulated device (NULL: its default stream)", EMU_MT_WHAT);
    }
    return NSP_OK;
}

/* Host memory, as the host type's: no call is in flight when a buffer
 * grows, so nothing queued reads the old one. */
static nsp_status_t emu_buffer(void **ptr, size_t *cap, size_t bytes)
{
    return nsp_memtype_host.attn->buffer(ptr, cap, bytes);
}

static void emu_release(void *ptr)
{
    nsp_memtype_host.attn->release(ptr);
}

static nsp_status_t emu_sync(void *stream)
{
    return stream != NULL ? nsp_emu_stream_sync(stream) : NSP_OK;
}

static nsp_status_t emu_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    emu_hop_t h = {.op = OP_COPY, .n = bytes, .src = src, .dst = dst};

    return hop_enqueue(&h, stream);
}

static nsp_status_t emu_zero(void *dst, size_t bytes, void *stream)
{
    emu_hop_t h = {.op = OP_ZERO, .n = bytes, .dst = dst};

    return hop_enqueue(&h, stream);
}

static nsp_status_t emu_bind(nsp_comm_t *world, const nsp_attn_params_t *attn,
                             nsp_attn_kernel_t *kernel, void **stream, void **state)
{
    const nsp_emu_config_t *cfg = NULL;
    emu_kernel_t           *k = calloc(1, sizeof(*k));
    nsp_status_t            status;

    if (k == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", EMU_MT_WHAT);
    }
    NSP_CHECK_GOTO(nsp_memtype_emu_get(world, &k->dev, &cfg), status, err_free);
    NSP_CHECK_GOTO(nsp_emu_config_timing(cfg, attn->q_heads, attn->kv_heads, attn->head_dim,
                                         &k->timing),
                   status, err_free);
    k->inner = *kernel;
    k->math  = cfg->math;
    kernel->fwd = emu_fwd;
    kernel->bwd = k->inner.bwd != NULL ? emu_bwd : NULL;
    kernel->ctx = k;
    *stream     = nsp_emu_default_stream(k->dev);
    *state      = k;
    return NSP_OK;
err_free:
    free(k);
    return status;
}

static void emu_unbind(void *state)
{
    free(state);
}

static const nsp_attn_mem_t emu_attn = {
    .name         = "emu",
    .check_kernel = emu_check_kernel,
    .check_level  = emu_check_level,
    .check_stream = emu_check_stream,
    .buffer       = emu_buffer,
    .release      = emu_release,
    .sync         = emu_sync,
    .copy         = emu_copy,
    .zero         = emu_zero,
    .bind         = emu_bind,
    .unbind       = emu_unbind,
};

const nsp_memtype_t nsp_memtype_emu = {
    .name   = "emu",
    .mem    = NSP_MEM_HOST,
    .engine = &nsp_a2a_engine_device,
    .devops = &nsp_devops_emu,
    .pack   = &emu_pack,
    .reduce = &emu_reduce,
    .attn   = &emu_attn,
    .device = emu_device_ctx,
};

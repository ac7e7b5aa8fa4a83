/*
 * The emulated device (src/streams/emu_device.h), in one process:
 *
 *   async     an enqueue returns while the stream is blocked (a gate)
 *   order     ops of one stream run in enqueue order, on the stream's thread
 *   waits     stream_wait_event: a stream waits for another's record; the
 *             wait takes the record as it was when enqueued (re-recording
 *             later does not release it); never recorded: no wait
 *   events    query before any record, while pending, after
 *   landed    the pattern of an emulated level: a host function delivers
 *             the bytes on one stream, the kernel on another waits for its
 *             event: the kernel starts after the delivery ended (trace) and
 *             (math mode) reads the bytes delivered
 *   kernels   timed kernels last at least what they ask (and not much more);
 *             kernels of two streams never overlap (one shared compute);
 *             two slots let two overlap; the higher priority goes first
 *   math      math mode calls the kernel's function, timing mode never
 *   memory    copies, 256-byte alignment, stream-ordered frees
 *   errors    bad handles and arguments; a failed kernel is sticky: later
 *             work is dropped and refused, queries and syncs report it
 *   owned     an op that owns its argument: drop(arg) runs in place of a
 *             function that does not (timing mode, a sticky error, a cancel
 *             at destroy), never after one that ran, so nothing leaks
 *   destroy   with work pending it drains; past the drain timeout it
 *             cancels (a long kernel cut short, a waiting op dropped) and
 *             says NSP_ERR_TIMEOUT, quickly
 *   trace     kinds, streams, enqueue order, tags, capacity, paging
 *   threads   two devices in two threads at once see only their own work
 *             (scripts/test.sh runs this file under ThreadSanitizer)
 *
 * Timing bounds are one-sided where the load of a shared machine could
 * break them (a kernel never ends early; its end is checked loosely).
 */
#include "streams/emu_device.h"

#include "../tap.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLACK_S 0.5 /* how late a kernel may end on a loaded host */
#define MAX_TRACE 256

/* ---- helpers ----------------------------------------------------------------- */

/* A gate: a host function that blocks its stream until the test opens it. */
typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    int             open;
    int             passed;
} gate_t;

static void gate_init(gate_t *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->open   = 0;
    g->passed = 0;
}

static void gate_fn(void *arg)
{
    gate_t *g = arg;

    pthread_mutex_lock(&g->lock);
    while (!g->open) {
        pthread_cond_wait(&g->cond, &g->lock);
    }
    g->passed = 1;
    pthread_mutex_unlock(&g->lock);
}

static void gate_open(gate_t *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void gate_destroy(gate_t *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

/* An append-only log of small ints, written by host functions. */
typedef struct order_log {
    pthread_mutex_t lock;
    int             ids[64];
    int             n;
    pthread_t       thread[64];
} order_log_t;

typedef struct order_item {
    order_log_t *log;
    int          id;
} order_item_t;

static void order_fn(void *arg)
{
    order_item_t *it = arg;

    pthread_mutex_lock(&it->log->lock);
    it->log->thread[it->log->n] = pthread_self();
    it->log->ids[it->log->n++]  = it->id;
    pthread_mutex_unlock(&it->log->lock);
}

static void order_log_init(order_log_t *log)
{
    memset(log, 0, sizeof(*log));
    pthread_mutex_init(&log->lock, NULL);
}

/* *v read under lock (written by a stream's thread). */
static int locked_read(pthread_mutex_t *lock, const int *v)
{
    int x;

    pthread_mutex_lock(lock);
    x = *v;
    pthread_mutex_unlock(lock);
    return x;
}

static int order_count(order_log_t *log)
{
    return locked_read(&log->lock, &log->n);
}

static nsp_emu_device_t *device(int math, int slots, size_t trace, double drain_s)
{
    nsp_emu_params_t  p;
    nsp_emu_device_t *dev = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = NSP_EMU_FIELD_MATH | NSP_EMU_FIELD_COMPUTE_SLOTS | NSP_EMU_FIELD_TRACE |
                   NSP_EMU_FIELD_DRAIN_TIMEOUT;
    p.math            = math;
    p.compute_slots   = slots;
    p.trace_capacity  = trace;
    p.drain_timeout_s = drain_s;
    if (nsp_emu_device_create(&p, &dev) != NSP_OK) {
        tap_diag("nsp_emu_device_create: %s", nsp_last_error());
        return NULL;
    }
    return dev;
}

/* The trace of dev (all of it, up to MAX_TRACE), count in *n. */
static size_t trace_all(nsp_emu_device_t *dev, nsp_emu_trace_entry_t *tr)
{
    size_t n = 0;

    if (nsp_emu_trace_read(dev, 0, tr, MAX_TRACE, &n) != NSP_OK) {
        return 0;
    }
    return n;
}

/* The trace entry of kind `kind` with tag `tag`, or NULL. */
static const nsp_emu_trace_entry_t *trace_find(const nsp_emu_trace_entry_t *tr, size_t n,
                                               nsp_emu_op_kind_t kind, uint64_t tag)
{
    for (size_t i = 0; i < n; ++i) {
        if (tr[i].kind == kind && tr[i].tag == tag) {
            return &tr[i];
        }
    }
    return NULL;
}

/* ---- async, order ------------------------------------------------------------- */

static void test_async_and_order(void)
{
    nsp_emu_device_t *dev = device(0, 1, 0, 30);
    void             *s;
    gate_t            gate;
    order_log_t       log;
    order_item_t      items[8];
    int               ok = 1;

    if (!tap_ok(dev != NULL, "create a device (defaults but the trace)")) {
        return;
    }
    s = nsp_emu_default_stream(dev);
    tap_is_int(nsp_emu_stream_id(s), 0, "the default stream is number 0");
    gate_init(&gate);
    order_log_init(&log);
    tap_is_int(nsp_emu_launch_host(s, gate_fn, &gate), NSP_OK, "enqueue a gate");
    for (int i = 0; i < 8; ++i) {
        items[i].log = &log;
        items[i].id  = i;
        ok &= nsp_emu_launch_host(s, order_fn, &items[i]) == NSP_OK;
    }
    tap_ok(ok, "enqueue 8 host functions behind the gate: every call returned");
    tap_is_int(order_count(&log), 0, "launch is asynchronous: nothing ran while the stream "
               "is blocked");
    gate_open(&gate);
    tap_is_int(nsp_emu_stream_sync(s), NSP_OK, "sync the stream");
    ok = order_count(&log) == 8;
    for (int i = 0; ok && i < 8; ++i) {
        ok = log.ids[i] == i && pthread_equal(log.thread[i], log.thread[0]) &&
             !pthread_equal(log.thread[i], pthread_self());
    }
    tap_ok(ok, "the 8 ran in enqueue order, all on the stream's own thread");
    tap_is_int(nsp_emu_device_destroy(dev), NSP_OK, "destroy");
    gate_destroy(&gate);
    pthread_mutex_destroy(&log.lock);
}

/* ---- cross-stream waits and events -------------------------------------------------- */

typedef struct cell {
    pthread_mutex_t lock;
    int             value, seen;
} cell_t;

static void cell_write(void *arg)
{
    cell_t *c = arg;

    pthread_mutex_lock(&c->lock);
    c->value = 42;
    pthread_mutex_unlock(&c->lock);
}

static void cell_read(void *arg)
{
    cell_t *c = arg;

    pthread_mutex_lock(&c->lock);
    c->seen = c->value;
    pthread_mutex_unlock(&c->lock);
}

static int cell_seen(cell_t *c)
{
    return locked_read(&c->lock, &c->seen);
}

static void test_waits(void)
{
    nsp_emu_device_t *dev = device(0, 1, MAX_TRACE, 30);
    void             *a = NULL, *b = NULL, *ev = NULL;
    gate_t            gate;
    cell_t            cell = {PTHREAD_MUTEX_INITIALIZER, 0, -1};

    if (dev == NULL || nsp_emu_stream_create(dev, 0, &a) != NSP_OK ||
        nsp_emu_stream_create(dev, 0, &b) != NSP_OK || nsp_emu_event_create(dev, &ev) != NSP_OK) {
        tap_ok(0, "device, two streams, an event: %s", nsp_last_error());
        nsp_emu_device_destroy(dev);
        return;
    }
    gate_init(&gate);
    tap_is_int(nsp_emu_event_query(ev), NSP_OK, "an event never recorded queries NSP_OK");
    tap_is_int(nsp_emu_stream_wait_event(b, ev), NSP_OK, "waiting on it is accepted (no-op)");
    nsp_emu_launch_host(a, gate_fn, &gate);
    nsp_emu_launch_host(a, cell_write, &cell);
    tap_is_int(nsp_emu_event_record(ev, a), NSP_OK, "record the event behind stream A's work");
    tap_is_int(nsp_emu_event_query(ev), NSP_INPROGRESS, "pending: NSP_INPROGRESS");
    tap_is_int(nsp_emu_stream_wait_event(b, ev), NSP_OK, "stream B waits for it");
    nsp_emu_launch_host(b, cell_read, &cell);
    /* a later record of the same event, on the idle default stream */
    tap_is_int(nsp_emu_event_record(ev, nsp_emu_default_stream(dev)), NSP_OK,
               "re-record the event on an idle stream");
    nsp_emu_stream_sync(nsp_emu_default_stream(dev));
    tap_is_int(nsp_emu_event_query(ev), NSP_OK, "the query sees the latest record (ran)");
    usleep(20000);
    tap_is_int(cell_seen(&cell), -1, "B still waits for the record it was given, not the "
               "later one");
    gate_open(&gate);
    tap_is_int(nsp_emu_stream_sync(b), NSP_OK, "sync B");
    tap_is_int(cell_seen(&cell), 42, "B's op ran after A's write");
    nsp_emu_event_destroy(ev);
    tap_is_int(nsp_emu_device_destroy(dev), NSP_OK, "destroy (streams and events with it)");
    gate_destroy(&gate);
}

/* ---- a level's kernel after its bytes landed ------------------------------------- */

typedef struct landing {
    float src[256], dst[256];
    int   checked; /* the kernel's verdict: 1 all bytes there */
} landing_t;

static void deliver_fn(void *arg)
{
    landing_t *l = arg;

    usleep(30000); /* the wire */
    memcpy(l->dst, l->src, sizeof(l->dst));
}

static nsp_status_t kernel_check_fn(void *arg)
{
    landing_t *l = arg;

    l->checked = memcmp(l->dst, l->src, sizeof(l->dst)) == 0;
    return NSP_OK;
}

static void test_landed(void)
{
    nsp_emu_device_t     *dev = device(1, 1, MAX_TRACE, 30);
    void                 *xs = NULL, *ks = NULL, *ev = NULL;
    landing_t            *l = calloc(1, sizeof(*l));
    nsp_emu_trace_entry_t tr[MAX_TRACE];
    const nsp_emu_trace_entry_t *dl, *k;
    size_t                n;

    if (dev == NULL || l == NULL || nsp_emu_stream_create(dev, 0, &xs) != NSP_OK ||
        nsp_emu_stream_create(dev, -1, &ks) != NSP_OK || nsp_emu_event_create(dev, &ev) != NSP_OK) {
        tap_ok(0, "device (math mode), exchange and compute streams, an event");
        nsp_emu_device_destroy(dev);
        free(l);
        return;
    }
    for (int i = 0; i < 256; ++i) {
        l->src[i] = (float)i + 0.5f;
    }
    nsp_emu_stream_set_tag(xs, 1);
    nsp_emu_launch_host(xs, deliver_fn, l);
    nsp_emu_event_record(ev, xs);
    nsp_emu_stream_set_tag(ks, 2);
    nsp_emu_stream_wait_event(ks, ev);
    nsp_emu_launch_timed(ks, 0.01, kernel_check_fn, l);
    tap_is_int(nsp_emu_stream_sync(ks), NSP_OK, "the level's kernel ran");
    tap_ok(l->checked == 1, "the kernel read every byte the exchange delivered");
    n  = trace_all(dev, tr);
    dl = trace_find(tr, n, NSP_EMU_OP_HOST, 1);
    k  = trace_find(tr, n, NSP_EMU_OP_KERNEL, 2);
    tap_ok(dl != NULL && k != NULL && k->t_start >= dl->t_end,
           "trace: the kernel started (%.6f) after the bytes landed (%.6f)",
           k != NULL ? k->t_start : -1.0, dl != NULL ? dl->t_end : -1.0);
    nsp_emu_device_destroy(dev);
    free(l);
}

/* ---- timed kernels -------------------------------------------------------------- */

static void test_kernel_durations(void)
{
    nsp_emu_device_t     *dev = device(0, 1, MAX_TRACE, 30);
    const double          want[3] = {0.05, 0.1, 0.02};
    nsp_emu_trace_entry_t tr[MAX_TRACE];
    nsp_emu_stats_t       st;
    size_t                n;
    int                   ok = 1;

    if (dev == NULL) {
        tap_ok(0, "device");
        return;
    }
    for (int i = 0; i < 3; ++i) {
        nsp_emu_stream_set_tag(nsp_emu_default_stream(dev), (uint64_t)i);
        ok &= nsp_emu_launch_timed(nsp_emu_default_stream(dev), want[i], NULL, NULL) == NSP_OK;
    }
    nsp_emu_stream_sync(nsp_emu_default_stream(dev));
    n = trace_all(dev, tr);
    tap_ok(ok && n == 3, "three timed kernels ran (%zu traced)", n);
    for (size_t i = 0; i < n; ++i) {
        double took = tr[i].t_end - tr[i].t_start;
        tap_ok(took >= tr[i].seconds - 1e-6 && took <= tr[i].seconds + SLACK_S,
               "kernel of %.3f s took %.4f s (at least what it asked, at most %.1f s more)",
               tr[i].seconds, took, SLACK_S);
        tap_ok(i == 0 || tr[i].t_start >= tr[i - 1].t_end, "and started after the one before "
               "it on its stream ended");
    }
    nsp_emu_device_stats(dev, &st);
    tap_ok(st.kernels == 3 && st.kernel_busy_s >= 0.17 - 1e-6, "stats: 3 kernels, %.3f s busy",
           st.kernel_busy_s);
    nsp_emu_device_destroy(dev);
}

/* Kernels of `nstreams` streams (one each, `secs` long): did they overlap? */
static int kernels_overlap(int slots, double secs, int *count)
{
    nsp_emu_device_t     *dev = device(0, slots, MAX_TRACE, 30);
    void                 *s[2] = {NULL, NULL};
    nsp_emu_trace_entry_t tr[MAX_TRACE];
    size_t                n;
    int                   overlap = 0;

    *count = 0;
    if (dev == NULL || nsp_emu_stream_create(dev, 0, &s[0]) != NSP_OK ||
        nsp_emu_stream_create(dev, 0, &s[1]) != NSP_OK) {
        nsp_emu_device_destroy(dev);
        return -1;
    }
    nsp_emu_launch_timed(s[0], secs, NULL, NULL);
    nsp_emu_launch_timed(s[1], secs, NULL, NULL);
    nsp_emu_stream_sync(s[0]);
    nsp_emu_stream_sync(s[1]);
    n = trace_all(dev, tr);
    if (n == 2) {
        overlap = tr[0].t_start < tr[1].t_end && tr[1].t_start < tr[0].t_end;
        *count  = 2;
    }
    nsp_emu_device_destroy(dev);
    return overlap;
}

static void test_kernels_share_compute(void)
{
    int count = 0;

    tap_is_int(kernels_overlap(1, 0.05, &count), 0, "one compute slot (default): kernels of two "
               "streams never overlap");
    tap_is_int(count, 2, "both ran");
    tap_is_int(kernels_overlap(2, 0.3, &count), 1, "two slots: they run at the same time");
}

static void test_priority(void)
{
    nsp_emu_device_t     *dev = device(0, 1, MAX_TRACE, 30);
    void                 *busy = NULL, *lo = NULL, *hi = NULL;
    nsp_emu_trace_entry_t tr[MAX_TRACE];
    const nsp_emu_trace_entry_t *l, *h;
    size_t                n;

    if (dev == NULL || nsp_emu_stream_create(dev, 0, &busy) != NSP_OK ||
        nsp_emu_stream_create(dev, 0, &lo) != NSP_OK ||
        nsp_emu_stream_create(dev, -2, &hi) != NSP_OK) {
        tap_ok(0, "device and three streams");
        nsp_emu_device_destroy(dev);
        return;
    }
    nsp_emu_launch_timed(busy, 0.2, NULL, NULL);
    usleep(20000);
    nsp_emu_stream_set_tag(lo, 1);
    nsp_emu_launch_timed(lo, 0.01, NULL, NULL);
    usleep(20000);
    nsp_emu_stream_set_tag(hi, 2);
    nsp_emu_launch_timed(hi, 0.01, NULL, NULL);
    nsp_emu_stream_sync(lo);
    nsp_emu_stream_sync(hi);
    n = trace_all(dev, tr);
    l = trace_find(tr, n, NSP_EMU_OP_KERNEL, 1);
    h = trace_find(tr, n, NSP_EMU_OP_KERNEL, 2);
    tap_ok(l != NULL && h != NULL && h->t_start < l->t_start,
           "a higher-priority kernel asked for the busy compute later and went first");
    nsp_emu_device_destroy(dev);
}

/* ---- math mode, memory ------------------------------------------------------------- */

static nsp_status_t count_fn(void *arg)
{
    ++*(int *)arg;
    return NSP_OK;
}

static void test_math_mode(void)
{
    int calls[2] = {0, 0};

    for (int math = 0; math < 2; ++math) {
        nsp_emu_device_t *dev = device(math, 1, 0, 30);
        if (dev == NULL) {
            tap_ok(0, "device");
            continue;
        }
        nsp_emu_launch_timed(nsp_emu_default_stream(dev), 0.001, count_fn, &calls[math]);
        nsp_emu_launch_timed(nsp_emu_default_stream(dev), 0.0, NULL, NULL);
        nsp_emu_stream_sync(nsp_emu_default_stream(dev));
        nsp_emu_device_destroy(dev);
    }
    tap_is_int(calls[0], 0, "timing mode never calls the kernel's function");
    tap_is_int(calls[1], 1, "math mode calls it once (a NULL function is just time)");
}

static void test_memory(void)
{
    nsp_emu_device_t *dev = device(0, 1, 0, 30);
    void             *s, *p = NULL, *q = NULL, *z = (void *)1;
    char              src[1000];

    if (dev == NULL) {
        tap_ok(0, "device");
        return;
    }
    s = nsp_emu_default_stream(dev);
    for (int i = 0; i < 1000; ++i) {
        src[i] = (char)(i * 7);
    }
    tap_is_int(nsp_emu_alloc_async(&p, 1000, s), NSP_OK, "alloc_async 1000 bytes");
    tap_is_int(nsp_emu_alloc_async(&q, 1000, s), NSP_OK, "and another");
    tap_ok(p != NULL && ((uintptr_t)p % 256) == 0, "256-byte aligned");
    tap_is_int(nsp_emu_alloc_async(&z, 0, s), NSP_OK, "0 bytes is fine");
    tap_ok(z == NULL, "and gives NULL");
    nsp_emu_memcpy_async(p, src, 1000, s);
    nsp_emu_memcpy_async(q, p, 1000, s); /* stream order: after the first */
    nsp_emu_stream_sync(s);
    tap_ok(q != NULL && memcmp(q, src, 1000) == 0, "two copies in stream order moved the bytes");
    tap_is_int(nsp_emu_free_async(p, s), NSP_OK, "free_async");
    tap_is_int(nsp_emu_free_async(q, s), NSP_OK, "free_async (freed when the stream gets "
               "there; ASan and valgrind see no leak)");
    tap_is_int(nsp_emu_free_async(NULL, s), NSP_OK, "free_async(NULL) is a no-op");
    tap_is_int(nsp_emu_device_destroy(dev), NSP_OK, "destroy drains the frees");
}

/* ---- errors ------------------------------------------------------------------------- */

static void test_bad_arguments(void)
{
    nsp_emu_params_t  p;
    nsp_emu_device_t *dev = NULL, *other = NULL;
    void             *ev = NULL, *oev = NULL, *s = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask    = NSP_EMU_FIELD_COMPUTE_SLOTS;
    p.compute_slots = 0;
    tap_is_int(nsp_emu_device_create(&p, &dev), NSP_ERR_INVALID_ARG, "0 compute slots refused");
    p.field_mask = NSP_EMU_FIELD_MATH;
    p.math       = 2;
    tap_is_int(nsp_emu_device_create(&p, &dev), NSP_ERR_INVALID_ARG, "math = 2 refused");
    p.field_mask      = NSP_EMU_FIELD_DRAIN_TIMEOUT;
    p.drain_timeout_s = -1;
    tap_is_int(nsp_emu_device_create(&p, &dev), NSP_ERR_INVALID_ARG, "a negative drain "
               "timeout refused");
    tap_is_int(nsp_emu_device_create(NULL, NULL), NSP_ERR_INVALID_ARG, "NULL out refused");
    if (nsp_emu_device_create(NULL, &dev) != NSP_OK || nsp_emu_device_create(NULL, &other) != NSP_OK ||
        nsp_emu_event_create(dev, &ev) != NSP_OK || nsp_emu_event_create(other, &oev) != NSP_OK) {
        tap_ok(0, "two devices with an event each");
        goto out;
    }
    s = nsp_emu_default_stream(dev);
    tap_is_int(nsp_emu_launch_host(ev, gate_fn, NULL), NSP_ERR_INVALID_ARG,
               "an event passed as a stream is refused");
    tap_is_int(nsp_emu_event_query(s), NSP_ERR_INVALID_ARG, "a stream passed as an event too");
    tap_is_int(nsp_emu_launch_timed(NULL, 0.1, NULL, NULL), NSP_ERR_INVALID_ARG, "NULL stream");
    tap_is_int(nsp_emu_launch_timed(s, -1, NULL, NULL), NSP_ERR_INVALID_ARG, "negative seconds");
    tap_is_int(nsp_emu_launch_host(s, NULL, NULL), NSP_ERR_INVALID_ARG, "NULL host function");
    tap_is_int(nsp_emu_memcpy_async(NULL, s, 4, s), NSP_ERR_INVALID_ARG, "NULL copy target");
    tap_is_int(nsp_emu_event_record(oev, s), NSP_ERR_INVALID_ARG, "recording another "
               "device's event on this device's stream is refused");
    tap_is_int(nsp_emu_stream_wait_event(s, oev), NSP_ERR_INVALID_ARG, "so is waiting on it");
    tap_ok(strstr(nsp_last_error(), "different emulated devices") != NULL,
           "the message says why: %s", nsp_last_error());
out:
    nsp_emu_device_destroy(dev);
    nsp_emu_device_destroy(other);
}

static void sync_self_fn(void *arg)
{
    void **ctx = arg;

    ctx[1] = (void *)(intptr_t)nsp_emu_stream_sync(ctx[0]);
}

static void test_destroyed_stream(void)
{
    nsp_emu_device_t *dev = device(0, 1, 0, 30);
    void             *s = NULL, *ctx[2] = {NULL, NULL};
    order_log_t       log;
    order_item_t      item = {&log, 7};

    order_log_init(&log);
    if (dev == NULL || nsp_emu_stream_create(dev, 0, &s) != NSP_OK) {
        tap_ok(0, "device and a stream");
        nsp_emu_device_destroy(dev);
        return;
    }
    ctx[0] = s;
    nsp_emu_launch_host(s, sync_self_fn, ctx);
    nsp_emu_launch_timed(s, 0.05, NULL, NULL);
    nsp_emu_launch_host(s, order_fn, &item);
    nsp_emu_stream_destroy(s);
    tap_is_int(nsp_emu_launch_host(s, order_fn, &item), NSP_ERR_INVALID_ARG, "a destroyed "
               "stream takes no more work");
    nsp_emu_stream_destroy(nsp_emu_default_stream(dev)); /* ignored */
    tap_is_int(nsp_emu_stream_sync(nsp_emu_default_stream(dev)), NSP_OK, "the default stream "
               "cannot be destroyed");
    tap_is_int(nsp_emu_device_destroy(dev), NSP_OK, "device destroy");
    tap_is_int(order_count(&log), 1, "what the destroyed stream held still ran");
    tap_is_int((int)(intptr_t)ctx[1], NSP_ERR_INVALID_ARG, "a host function syncing its own "
               "stream is refused (it would wait for itself)");
    pthread_mutex_destroy(&log.lock);
}

static nsp_status_t fail_fn(void *arg)
{
    (void)arg;
    return NSP_ERR_INVALID_ARG;
}

static void test_sticky_error(void)
{
    nsp_emu_device_t *dev = device(1, 1, MAX_TRACE, 30);
    void             *a = NULL, *b = NULL, *ev = NULL, *mem = malloc(64);
    order_log_t       log;
    order_item_t      item = {&log, 1};
    gate_t            gate;

    order_log_init(&log);
    gate_init(&gate);
    if (dev == NULL || nsp_emu_stream_create(dev, 0, &a) != NSP_OK ||
        nsp_emu_stream_create(dev, 0, &b) != NSP_OK || nsp_emu_event_create(dev, &ev) != NSP_OK) {
        tap_ok(0, "device (math mode), two streams, an event");
        nsp_emu_device_destroy(dev);
        free(mem);
        return;
    }
    nsp_emu_launch_host(b, gate_fn, &gate); /* b blocked while a's kernel fails */
    nsp_emu_launch_host(b, order_fn, &item);
    nsp_emu_launch_timed(a, 0.0, fail_fn, NULL);
    nsp_emu_event_record(ev, a);
    tap_is_int(nsp_emu_stream_sync(a), NSP_ERR_INVALID_ARG, "sync reports the failed kernel's "
               "status");
    tap_ok(strstr(nsp_last_error(), "failed") != NULL, "with a message: %s", nsp_last_error());
    tap_is_int(nsp_emu_event_query(ev), NSP_ERR_INVALID_ARG, "the event query reports it");
    tap_is_int(nsp_emu_launch_host(a, order_fn, &item), NSP_ERR_INVALID_ARG, "new work is "
               "refused");
    tap_is_int(nsp_emu_free_async(mem, a), NSP_OK, "a free is still accepted (and frees)");
    gate_open(&gate);
    tap_is_int(nsp_emu_stream_sync(b), NSP_ERR_INVALID_ARG, "another stream's sync reports it");
    tap_is_int(order_count(&log), 0, "work queued on that stream was dropped");
    tap_is_int(nsp_emu_device_destroy(dev), NSP_OK, "destroy after the error (nothing left)");
    pthread_mutex_destroy(&log.lock);
    gate_destroy(&gate);
}

/* ---- ops that own their argument ------------------------------------------------------- */

/* What an owned argument saw: its function ran, or its drop (atomics: the
 * stream's thread writes, the test reads after a sync or destroy). */
typedef struct owned {
    int ran, dropped;
} owned_t;

static nsp_status_t owned_run(void *arg)
{
    __atomic_add_fetch(&((owned_t *)arg)->ran, 1, __ATOMIC_SEQ_CST);
    return NSP_OK;
}

static void owned_drop(void *arg)
{
    __atomic_add_fetch(&((owned_t *)arg)->dropped, 1, __ATOMIC_SEQ_CST);
}

static int owned_get(const int *v)
{
    return __atomic_load_n(v, __ATOMIC_SEQ_CST);
}

/* Run or drop, each exactly once, in every way an op can end. */
static void test_owned(void)
{
    owned_t           timing = {0, 0}, math = {0, 0}, host = {0, 0};
    owned_t           k_after = {0, 0}, h_after = {0, 0}, k_cancel = {0, 0};
    nsp_emu_device_t *dev;
    void             *a = NULL, *b = NULL;
    gate_t            gate;

    for (int m = 0; m < 2; ++m) { /* timing mode drops, math mode runs */
        owned_t *o = m ? &math : &timing;
        dev = device(m, 1, 0, 30);
        if (dev == NULL) {
            tap_ok(0, "device");
            continue;
        }
        nsp_emu_launch_timed_owned(nsp_emu_default_stream(dev), 0.0, owned_run, owned_drop, o);
        if (m) {
            nsp_emu_launch_host_op_owned(nsp_emu_default_stream(dev), owned_run, owned_drop,
                                         &host);
        }
        nsp_emu_stream_sync(nsp_emu_default_stream(dev));
        nsp_emu_device_destroy(dev);
    }
    tap_ok(timing.ran == 0 && timing.dropped == 1, "timing mode: an owned kernel's drop ran in "
           "place of its function (ran %d, dropped %d)", timing.ran, timing.dropped);
    tap_ok(math.ran == 1 && math.dropped == 0, "math mode: its function ran, the drop did not "
           "(ran %d, dropped %d)", math.ran, math.dropped);
    tap_ok(host.ran == 1 && host.dropped == 0, "an owned host op that ran: no drop (ran %d, "
           "dropped %d)", host.ran, host.dropped);

    /* a sticky error: what was queued behind it is dropped, drops run */
    dev = device(1, 1, 0, 30);
    gate_init(&gate);
    if (dev == NULL || nsp_emu_stream_create(dev, 0, &a) != NSP_OK ||
        nsp_emu_stream_create(dev, 0, &b) != NSP_OK) {
        tap_ok(0, "device (math mode), two streams");
    } else {
        nsp_emu_launch_host(b, gate_fn, &gate); /* b blocked while a's kernel fails */
        nsp_emu_launch_timed_owned(b, 0.0, owned_run, owned_drop, &k_after);
        nsp_emu_launch_host_op_owned(b, owned_run, owned_drop, &h_after);
        nsp_emu_launch_timed(a, 0.0, fail_fn, NULL);
        nsp_emu_stream_sync(a);
        gate_open(&gate);
        tap_is_int(nsp_emu_stream_sync(b), NSP_ERR_INVALID_ARG, "after a failed kernel the "
                   "owned ops behind it are dropped");
        tap_ok(owned_get(&k_after.ran) == 0 && owned_get(&k_after.dropped) == 1 &&
               owned_get(&h_after.ran) == 0 && owned_get(&h_after.dropped) == 1,
               "and their drops ran once each, the functions never (kernel %d/%d, host op "
               "%d/%d)", k_after.ran, k_after.dropped, h_after.ran, h_after.dropped);
    }
    nsp_emu_device_destroy(dev);
    gate_destroy(&gate);

    /* a cancel at destroy: the owned kernel behind a 30 s one is dropped */
    dev = device(1, 1, 0, 0.2);
    if (dev == NULL) {
        tap_ok(0, "device (drain timeout 0.2 s)");
        return;
    }
    nsp_emu_launch_timed(nsp_emu_default_stream(dev), 30.0, NULL, NULL);
    nsp_emu_launch_timed_owned(nsp_emu_default_stream(dev), 0.0, owned_run, owned_drop,
                               &k_cancel);
    tap_is_int(nsp_emu_device_destroy(dev), NSP_ERR_TIMEOUT, "destroy past the drain timeout "
               "cancels");
    tap_ok(k_cancel.ran == 0 && k_cancel.dropped == 1, "the owned kernel it dropped had its "
           "drop run (ran %d, dropped %d)", k_cancel.ran, k_cancel.dropped);
}

/* ---- destroy with work pending ----------------------------------------------------------- */

static void test_destroy_drains(void)
{
    nsp_emu_device_t *dev = device(0, 1, 0, 30);
    void             *s = NULL;
    order_log_t       log;
    order_item_t      item = {&log, 1};
    double            t0;

    order_log_init(&log);
    if (dev == NULL || nsp_emu_stream_create(dev, 0, &s) != NSP_OK) {
        tap_ok(0, "device and a stream");
        nsp_emu_device_destroy(dev);
        return;
    }
    nsp_emu_launch_timed(s, 0.1, NULL, NULL);
    nsp_emu_launch_host(s, order_fn, &item);
    t0 = nsp_emu_now();
    tap_is_int(nsp_emu_device_destroy(dev), NSP_OK, "destroy with a kernel and a host function "
               "queued: NSP_OK");
    tap_ok(nsp_emu_now() - t0 >= 0.1 - 1e-6, "it drained: waited for the kernel (%.3f s)",
           nsp_emu_now() - t0);
    tap_is_int(order_count(&log), 1, "and the host function behind it ran");
    pthread_mutex_destroy(&log.lock);
}

static void test_destroy_cancels(void)
{
    nsp_emu_device_t *dev = device(0, 1, 0, 0.2);
    void             *a = NULL, *b = NULL, *ev = NULL;
    order_log_t       log;
    order_item_t      item = {&log, 1};
    double            t0, took;

    order_log_init(&log);
    if (dev == NULL || nsp_emu_stream_create(dev, 0, &a) != NSP_OK ||
        nsp_emu_stream_create(dev, 0, &b) != NSP_OK || nsp_emu_event_create(dev, &ev) != NSP_OK) {
        tap_ok(0, "device (drain timeout 0.2 s), two streams, an event");
        nsp_emu_device_destroy(dev);
        return;
    }
    nsp_emu_launch_timed(a, 30.0, NULL, NULL);
    nsp_emu_event_record(ev, a);
    nsp_emu_launch_host(a, order_fn, &item);
    nsp_emu_stream_wait_event(b, ev);
    nsp_emu_launch_host(b, order_fn, &item);
    t0 = nsp_emu_now();
    tap_is_int(nsp_emu_device_destroy(dev), NSP_ERR_TIMEOUT, "destroy with a 30 s kernel and "
               "work behind it: NSP_ERR_TIMEOUT past the drain timeout");
    took = nsp_emu_now() - t0;
    tap_ok(strstr(nsp_last_error(), "dropped") != NULL, "the message says what was dropped: %s",
           nsp_last_error());
    tap_ok(took < 0.2 + 5.0, "and returned in %.2f s (the kernel cut short, the waiting "
           "stream released), not after 30 s", took);
    tap_is_int(order_count(&log), 0, "the work behind them was dropped, not run");
    pthread_mutex_destroy(&log.lock);
}

/* ---- trace ------------------------------------------------------------------------------- */

static void test_trace(void)
{
    nsp_emu_device_t     *dev = device(0, 1, 4, 30);
    void                 *s = NULL, *ev = NULL, *buf = malloc(16);
    nsp_emu_trace_entry_t tr[MAX_TRACE];
    nsp_emu_stats_t       st;
    size_t                n = 0, m = 0;
    char                  src[16] = {0};
    const nsp_emu_op_kind_t kinds[4] = {NSP_EMU_OP_KERNEL, NSP_EMU_OP_COPY, NSP_EMU_OP_RECORD,
                                        NSP_EMU_OP_WAIT};
    int                   ok = 1;

    if (dev == NULL || buf == NULL || nsp_emu_stream_create(dev, 3, &s) != NSP_OK ||
        nsp_emu_event_create(dev, &ev) != NSP_OK) {
        tap_ok(0, "device (trace of 4), a stream, an event");
        nsp_emu_device_destroy(dev);
        free(buf);
        return;
    }
    nsp_emu_stream_set_tag(s, 77);
    nsp_emu_launch_timed(s, 0.001, NULL, NULL);
    nsp_emu_memcpy_async(buf, src, 16, s);
    nsp_emu_event_record(ev, s);
    nsp_emu_stream_wait_event(s, ev);
    nsp_emu_free_async(buf, s);
    nsp_emu_stream_sync(s);
    n = trace_all(dev, tr);
    tap_is_int((int64_t)n, 4, "a trace of capacity 4 kept the first 4 of 5 ops");
    for (size_t i = 0; i < n; ++i) {
        ok &= tr[i].seq == i && tr[i].tag == 77 && tr[i].stream == nsp_emu_stream_id(s) &&
              tr[i].status == NSP_OK && tr[i].t_enqueue <= tr[i].t_start &&
              tr[i].t_start <= tr[i].t_end && tr[i].kind == kinds[i];
    }
    tap_ok(ok, "kinds kernel, copy, record, wait in enqueue order; the stream, the tag, "
           "ordered timestamps");
    tap_ok(n == 4 && tr[1].bytes == 16 && tr[0].seconds == 0.001, "the copy's bytes and the "
           "kernel's seconds");
    nsp_emu_trace_read(dev, 2, tr, 10, &m);
    tap_is_int((int64_t)m, 2, "reading from entry 2 gives the last 2");
    nsp_emu_trace_read(dev, 9, tr, 10, &m);
    tap_is_int((int64_t)m, 0, "past the end: none");
    nsp_emu_device_stats(dev, &st);
    tap_ok(st.ops_done == 5 && st.trace_dropped == 1, "stats: 5 ops done, 1 not traced");
    tap_is_str(nsp_emu_op_name(NSP_EMU_OP_WAIT), "wait", "op names");
    nsp_emu_device_destroy(dev);
}

/* ---- two devices in two threads ------------------------------------------------------------ */

typedef struct worker {
    int             id;
    int             ok;
    uint64_t        ops, kernels;
    size_t          traced;
    uint64_t        first_seq;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t             *w   = arg;
    nsp_emu_device_t     *dev = device(0, 1, MAX_TRACE, 30);
    void                 *a = NULL, *b = NULL, *ev = NULL;
    nsp_emu_trace_entry_t tr[MAX_TRACE];
    nsp_emu_stats_t       st;

    w->ok = dev != NULL && nsp_emu_stream_create(dev, 0, &a) == NSP_OK &&
            nsp_emu_stream_create(dev, 1, &b) == NSP_OK && nsp_emu_event_create(dev, &ev) == NSP_OK;
    for (int i = 0; w->ok && i < 10 + w->id; ++i) {
        w->ok = nsp_emu_launch_timed(a, 0.002, NULL, NULL) == NSP_OK &&
                nsp_emu_event_record(ev, a) == NSP_OK && nsp_emu_stream_wait_event(b, ev) == NSP_OK &&
                nsp_emu_launch_timed(b, 0.001, NULL, NULL) == NSP_OK;
    }
    w->ok = w->ok && nsp_emu_stream_sync(a) == NSP_OK && nsp_emu_stream_sync(b) == NSP_OK &&
            nsp_emu_event_query(ev) == NSP_OK && nsp_emu_device_stats(dev, &st) == NSP_OK;
    if (w->ok) {
        w->ops       = st.ops_done;
        w->kernels   = st.kernels;
        w->traced    = trace_all(dev, tr);
        w->first_seq = tr[0].seq;
    }
    w->ok = nsp_emu_device_destroy(dev) == NSP_OK && w->ok;
    return NULL;
}

static void test_two_devices(void)
{
    pthread_t th[2];
    worker_t  w[2];

    for (int i = 0; i < 2; ++i) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].id = i;
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < 2; ++i) {
        pthread_join(th[i], NULL);
    }
    for (int i = 0; i < 2; ++i) {
        uint64_t rounds = 10 + (uint64_t)i;
        tap_ok(w[i].ok, "thread %d: its own device, streams, events, kernels, syncs", i);
        tap_ok(w[i].ops == 4 * rounds && w[i].kernels == 2 * rounds &&
                   w[i].traced == 4 * rounds && w[i].first_seq == 0,
               "thread %d: its device counted only its own %llu ops (%llu kernels)", i,
               (unsigned long long)w[i].ops, (unsigned long long)w[i].kernels);
    }
}

int main(void)
{
    test_async_and_order();
    test_waits();
    test_landed();
    test_kernel_durations();
    test_kernels_share_compute();
    test_priority();
    test_math_mode();
    test_memory();
    test_bad_arguments();
    test_destroyed_stream();
    test_sticky_error();
    test_owned();
    test_destroy_drains();
    test_destroy_cancels();
    test_trace();
    test_two_devices();
    return tap_done();
}

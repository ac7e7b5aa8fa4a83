/*
 * Every ops table of the build has every entry set (docs/design.md §3: an
 * implementation that cannot do something says so with a function that
 * returns NSP_ERR_UNSUPPORTED, never a NULL):
 *
 *   - the registry of memory types (src/attn_sp/memtype.h): each entry
 *     built into this library names its engine, device operations, pack
 *     kernels, reductions and nested attention's memory ops, and each of
 *     those tables is walked entry by entry through its X-macro list (the
 *     lists are checked against the structs at compile time:
 *     common/table.h), the two engines too;
 *   - the transport backends of the build (nsp_tp_count / nsp_tp_at: ucx,
 *     and nccl in a --with-nccl build), entry by entry;
 *   - the registry answers: a name it does not know is NSP_ERR_NOT_FOUND, a
 *     known one this build lacks NSP_ERR_UNSUPPORTED saying how to build it;
 *   - host memory's device operations refuse with a message, not a crash.
 * One process, no transport started.
 */
#include "config.h"

#include "attn_sp/memtype.h"
#include "common/log.h"
#include "transport/transport.h"

#include "../tap.h"

#include <string.h>

/* tap_ok on every entry of one table: X-macro list `list` over `t`. */
#define CHECK_ENTRY(entry)                                                               \
    tap_ok(t->entry != NULL, "%s %s: %s is set", what, t->name, #entry);                 \
    ++n;
#define WALK(table, list)                                                                \
    do {                                                                                 \
        int n = 0;                                                                       \
        __typeof__(table) t = (table);                                                   \
        if (!tap_ok(t != NULL && t->name != NULL, "%s: the table and its name are set", \
                    what)) {                                                             \
            break;                                                                       \
        }                                                                                \
        list(CHECK_ENTRY)                                                                \
        tap_is_int(n, NSP_TABLE_COUNT(list), "%s %s: %d entries walked", what, t->name,  \
                   n);                                                                   \
    } while (0)

static void walk_memtype(const nsp_memtype_t *m)
{
    const char *what;

    tap_ok(m->name != NULL && m->engine != NULL && m->devops != NULL && m->pack != NULL &&
               m->reduce != NULL && m->attn != NULL,
           "memory type %s: engine, devops, pack, reduce and attn tables set",
           m->name != NULL ? m->name : "?");
    what = "engine of";
    WALK(m->engine, NSP_A2A_ENGINE_ENTRIES);
    what = "devops of";
    WALK(m->devops, NSP_DEVOPS_ENTRIES);
    what = "pack ops of";
    WALK(m->pack, NSP_PACK_OPS_ENTRIES);
    what = "reduce ops of";
    WALK(m->reduce, NSP_REDUCE_OPS_ENTRIES);
    what = "attention memory ops of";
    WALK(m->attn, NSP_ATTN_MEM_ENTRIES);
}

static void walk_registry(void)
{
    int                  n = nsp_memtype_count();
    const nsp_memtype_t *found = NULL;

    tap_ok(n >= 1 && nsp_memtype_at(0) == &nsp_memtype_host, "the host memory type is built "
           "and first (%d built)", n);
    for (int i = 0; i < n; ++i) {
        const nsp_memtype_t *m = nsp_memtype_at(i);
        walk_memtype(m);
        tap_ok(nsp_memtype_find(m->name, &found) == NSP_OK && found == m,
               "nsp_memtype_find(\"%s\") finds it", m->name);
    }
    tap_ok(nsp_memtype_at(n) == NULL && nsp_memtype_at(-1) == NULL, "no entry past the table");
    tap_is_int(nsp_memtype_find("quantum", &found), NSP_ERR_NOT_FOUND,
               "an unknown memory type: %s", nsp_last_error());
#ifdef NSP_HAVE_CUDA
    tap_ok(nsp_memtype_find("cuda", &found) == NSP_OK && found == &nsp_memtype_cuda &&
               found->engine == &nsp_a2a_engine_device,
           "a --with-cuda build has the cuda memory type, on the device engine");
#else
    tap_is_int(nsp_memtype_find("cuda", &found), NSP_ERR_UNSUPPORTED,
               "a build without CUDA: cuda is known but not built: %s", nsp_last_error());
    tap_ok(strstr(nsp_last_error(), "--with-cuda") != NULL, "and the message says how");
#endif
}

static void walk_engines(void)
{
    const char *what = "engine";

    WALK(&nsp_a2a_engine_host, NSP_A2A_ENGINE_ENTRIES);
    WALK(&nsp_a2a_engine_device, NSP_A2A_ENGINE_ENTRIES);
}

#define TP_CHECK(entry)                                                                  \
    tap_ok(ops->entry != NULL, "transport %s: %s is set", ops->name, #entry);
#define TP_ENTRIES(X)                                                                    \
    X(world_create) X(world_wrap) X(split) X(destroy) X(alltoallv_post)             \
    X(alltoallv_iov_post) X(sendrecv_post) \
    X(progress) X(allgather) X(barrier) X(mem_alloc) X(mem_free) X(mem_find)             \
    X(mem_group_mapped) X(mem_peer_ptr)
_Static_assert(sizeof(nsp_tp_ops_t) == offsetof(nsp_tp_ops_t, world_create) +
                                           NSP_TABLE_COUNT(TP_ENTRIES) * sizeof(void (*)(void)),
               "TP_ENTRIES lists every entry of nsp_tp_ops_t");

static void walk_transports(void)
{
    const nsp_tp_ops_t *found = NULL;

    tap_ok(nsp_tp_count() >= 1 && nsp_tp_at(0) == &nsp_tp_ucx_ops && nsp_tp_at(-1) == NULL &&
               nsp_tp_at(nsp_tp_count()) == NULL,
           "%d transport(s) built, ucx first", nsp_tp_count());
    for (int i = 0; i < nsp_tp_count(); ++i) {
        const nsp_tp_ops_t *ops = nsp_tp_at(i);
        tap_ok(ops->name != NULL && nsp_tp_find(ops->name, &found) == NSP_OK && found == ops,
               "transport %s: named, and found by its name", ops->name);
        TP_ENTRIES(TP_CHECK)
    }
#ifndef NSP_HAVE_NCCL
    tap_is_int(nsp_tp_find("nccl", &found), NSP_ERR_UNSUPPORTED,
               "a build without NCCL: nccl is known but not built: %s", nsp_last_error());
#endif
}

/* Host memory has no device streams: every device operation says so. */
static void host_devops_refuse(void)
{
    const nsp_devops_t *d = nsp_memtype_host.devops;
    void               *p = NULL;
    int                 dev = 0;

    tap_is_int(d->stream_create(NULL, 0, &p), NSP_ERR_UNSUPPORTED, "host memory: stream_create "
               "refused: %s", nsp_last_error());
    tap_ok(p == NULL && strstr(nsp_last_error(), "host memory") != NULL,
           "and nothing made, the message names host memory");
    tap_is_int(d->device_current(NULL, &dev) | d->event_create(NULL, &p) | d->event_query(NULL) |
                   d->alloc_async(NULL, &p, 1, NULL) | d->launch_host(NULL, NULL, NULL),
               NSP_ERR_UNSUPPORTED, "host memory: the other device operations refused too");
    d->stream_destroy(NULL);
    d->event_destroy(NULL);
    d->pool_destroy(NULL);
}

int main(void)
{
    walk_registry();
    walk_engines();
    walk_transports();
    host_devops_refuse();
    return tap_done();
}

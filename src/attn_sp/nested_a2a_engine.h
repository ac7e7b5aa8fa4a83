/*
 * Engines of the nested all-to-all: what moves one memory type's levels,
 * named by the memory type's entry (memtype.h), behind the one
 * engine-neutral handle of nested_a2a_common.h:
 *
 *   host     host memory over a host transport (UCX): pack, exchange,
 *            unpack on the CPU (nested_a2a_host.c); levels whose group
 *            shares mapped memory read the peers' sources in place when
 *            params.mapped = 1 (nested_a2a_mapped.c)
 *   device   memory of a device with streams (devops.h): one stream per
 *            level waiting on the caller's stream, the memory type's pack
 *            kernels, events completing the level requests
 *            (nested_a2a_device.c): the CUDA memory type's engine, written
 *            against the device operations only
 *
 * The handle (nested_a2a_handle.c) does what every engine needs: the
 * checks and the agreement of create, the levels derived once (views,
 * groups, tags, head shares), the level requests, the level queues, the
 * lifecycle of starts. An engine derives its own part once at create too
 * (parts, counts, scratch sizes, device tables, events), so that start
 * only binds buffers and posts. Every entry is set; what an engine cannot
 * do returns NSP_ERR_UNSUPPORTED with a message. Engines call the shared
 * helpers of nested_a2a_common.h, never the public entry points, so no
 * call goes back up (scripts/check-structure.py).
 */
#ifndef NSP_ATTN_SP_NESTED_A2A_ENGINE_H_
#define NSP_ATTN_SP_NESTED_A2A_ENGINE_H_

#include "nspcomm.h"
#include "common/table.h"

typedef struct nsp_a2a_engine {
    const char *name;
    /** Local checks of a create before its collective agreement (the
     *  memory the world moves, levels of `layout` the engine cannot run,
     *  parameters it refuses); a2a holds the parameters, its levels are not
     *  derived yet. */
    nsp_status_t (*check)(const nsp_a2a_t *a2a, const nsp_layout_t *layout);
    /** Derive, once, what this engine keeps for the handle (a2a->eng, each
     *  level's eng and parts): counts, scratch, device tables, events.
     *  Sets a2a->max_steps (steps of a level's queue). Freed by release,
     *  also after a failed derive. */
    nsp_status_t (*derive)(nsp_a2a_t *a2a);
    /** Start: a2a->src, dst, stream, post_seq and every level's src, dst
     *  and request are bound, the queues empty. Push each level's steps
     *  and post what can go now; ungated levels are under way at return.
     *  On error the handle disarms. */
    nsp_status_t (*start)(nsp_a2a_t *a2a);
    /** Level `level` of the running gated start was opened (its `open`
     *  flag is set): enqueue what waits for it. The handle progresses the
     *  queues next. */
    nsp_status_t (*open)(nsp_a2a_t *a2a, int level);
    /** The start is over (its last request freed, or it failed): abandon
     *  what is still in flight and give back what the start took. */
    void (*disarm)(nsp_a2a_t *a2a);
    /** Free what derive made (NULL members allowed). */
    void (*release)(nsp_a2a_t *a2a);
} nsp_a2a_engine_t;

#define NSP_A2A_ENGINE_ENTRIES(X) X(check) X(derive) X(start) X(open) X(disarm) X(release)
NSP_TABLE_COMPLETE(nsp_a2a_engine_t, check, NSP_A2A_ENGINE_ENTRIES);

extern const nsp_a2a_engine_t nsp_a2a_engine_host;
extern const nsp_a2a_engine_t nsp_a2a_engine_device;

#endif /* NSP_ATTN_SP_NESTED_A2A_ENGINE_H_ */

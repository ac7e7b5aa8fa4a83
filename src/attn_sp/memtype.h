/*
 * Memory types: one entry per kind of memory a world's buffers live in,
 * holding everything the SP primitives do differently on it, chosen in one
 * place (nsp_memtype_of, memtype.c):
 *
 *   host   host memory over a host transport (UCX): the host engine of the
 *          nested all-to-all, host buffers and kernels (memtype_host.c)
 *   cuda   device memory over a device transport (NCCL): the device engine
 *          on the CUDA runtime, CUDA kernels (memtype_cuda.c, CUDA builds;
 *          a build without CUDA has no entry, and asking for it says how to
 *          build it)
 *   emu    host memory over a host transport (UCX) driven as a device: the
 *          device engine on the emulated device of the world (devops_emu.c,
 *          memtype_emu.c), host pack and reduce ops run in stream order,
 *          timed attention kernels; chosen only by NSPCOMM_DEVICE=emu:FILE
 *          (never the default; emu_config.h)
 *
 * An entry's tables are all set, and every entry of every table is set:
 * what a memory type cannot do is a function returning NSP_ERR_UNSUPPORTED
 * with a message (tests/a2a/test_tables.c walks them all). A new memory
 * type is one file defining its nsp_memtype_t plus one line in memtype.c's
 * table (docs/design/extending.md).
 */
#ifndef NSP_ATTN_SP_MEMTYPE_H_
#define NSP_ATTN_SP_MEMTYPE_H_

#include "nspcomm.h"
#include "attn_sp/attn_mem.h"
#include "attn_sp/attn_reduce.h"
#include "attn_sp/nested_a2a_engine.h"
#include "attn_sp/pack_ops.h"
#include "streams/devops.h"
#include "transport/transport.h"

typedef struct nsp_memtype {
    const char             *name;    /**< "host", "cuda", "emu": messages, nsp_memtype_find() */
    nsp_mem_type_t          mem;     /**< the transports it serves (nsp_tp_ops_t.mem_type) */
    const nsp_a2a_engine_t *engine;  /**< the nested all-to-all's engine */
    const nsp_devops_t     *devops;  /**< streams, events, copies, stream-ordered memory */
    const nsp_pack_ops_t   *pack;    /**< a level's pack/unpack kernels (device engine) */
    const nsp_reduce_ops_t *reduce;  /**< nested attention's reductions */
    const nsp_attn_mem_t   *attn;    /**< nested attention's buffers, checks and sync */
    /** The device context of `world` for the devops entries that take one
     *  (*ctx: NULL on host and CUDA memory; the world's emulated device on
     *  emu, owned by the world). Errors: those of making it. */
    nsp_status_t (*device)(nsp_comm_t *world, void **ctx);
} nsp_memtype_t;

/** The memory type of `world`: "emu" when NSPCOMM_DEVICE=emu:FILE is set
 *  (the world's emulated device is made on the first call, from FILE),
 *  else the entry serving its transport's memory. Errors:
 *  NSP_ERR_UNSUPPORTED (none built for it: the message says how to build
 *  one; emu on a transport that does not move host memory),
 *  NSP_ERR_INVALID_ARG (NULL; NSPCOMM_DEVICE malformed, or FILE: the
 *  message names the key), NSP_ERR_IO (FILE unreadable). */
nsp_status_t nsp_memtype_of(nsp_comm_t *world, const nsp_memtype_t **memtype);

/** The entry called `name`. Errors: NSP_ERR_NOT_FOUND (unknown: the
 *  message lists the known ones), NSP_ERR_UNSUPPORTED (known, not built). */
nsp_status_t nsp_memtype_find(const char *name, const nsp_memtype_t **memtype);

/** Entries built into this library (for the tests that walk them). */
int                  nsp_memtype_count(void);
const nsp_memtype_t *nsp_memtype_at(int i);

extern const nsp_memtype_t nsp_memtype_host;
extern const nsp_memtype_t nsp_memtype_cuda; /* CUDA builds only */
extern const nsp_memtype_t nsp_memtype_emu;


#endif /* NSP_ATTN_SP_MEMTYPE_H_ */

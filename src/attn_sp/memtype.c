/*
 * The registry of memory types (memtype.h): the entries built into this
 * library, and the one place that chooses a world's.
 */
#include "config.h"

#include "attn_sp/memtype.h"

#include "attn_sp/memtype_emu.h"
#include "common/log.h"
#include "transport/comm.h"

#include <string.h>

/* Entries built into this library, one line each. For a transport's memory
 * the first entry serving it is the default ("emu" serves host memory too,
 * but only a world with NSPCOMM_DEVICE=emu:FILE gets it). */
static const nsp_memtype_t *const memtypes[] = {
    &nsp_memtype_host,
#ifdef NSP_HAVE_CUDA
    &nsp_memtype_cuda,
#endif
    &nsp_memtype_emu,
};

/* Every memory type nspcomm knows, built or not, with how to get it. */
static const struct {
    const char    *name;
    nsp_mem_type_t mem;
    const char    *how;
} memtypes_known[] = {
    {"host", NSP_MEM_HOST, "it is always built with the communication layer"},
    {"cuda", NSP_MEM_CUDA, "configure --with-cuda (and --with-nccl for its transport)"},
    {"emu", NSP_MEM_HOST, "it is always built with the communication layer"},
};

#define MEMTYPES_N ((int)(sizeof(memtypes) / sizeof(memtypes[0])))
#define KNOWN_N    ((int)(sizeof(memtypes_known) / sizeof(memtypes_known[0])))

int nsp_memtype_count(void)
{
    return MEMTYPES_N;
}

const nsp_memtype_t *nsp_memtype_at(int i)
{
    return i >= 0 && i < MEMTYPES_N ? memtypes[i] : NULL;
}

nsp_status_t nsp_memtype_find(const char *name, const nsp_memtype_t **memtype)
{
    if (name == NULL || memtype == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_memtype_find: NULL argument");
    }
    for (int i = 0; i < MEMTYPES_N; ++i) {
        if (strcmp(memtypes[i]->name, name) == 0) {
            *memtype = memtypes[i];
            return NSP_OK;
        }
    }
    for (int i = 0; i < KNOWN_N; ++i) {
        if (strcmp(memtypes_known[i].name, name) == 0) {
            return nsp_error(NSP_ERR_UNSUPPORTED, "memory type '%s' is not built into this "
                             "library: %s", name, memtypes_known[i].how);
        }
    }
    return nsp_error(NSP_ERR_NOT_FOUND, "unknown memory type '%s': use \"host\", \"cuda\" or \"emu\"",
                     name);
}

nsp_status_t nsp_memtype_of(nsp_comm_t *world, const nsp_memtype_t **memtype)
{
    const nsp_tp_ops_t *ops;
    int                 emu = 0;

    if (world == NULL || memtype == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_memtype_of: NULL argument");
    }
    NSP_CHECK(nsp_memtype_emu_select(world, &emu)); /* NSPCOMM_DEVICE=emu:FILE */
    if (emu) {
        *memtype = &nsp_memtype_emu;
        return NSP_OK;
    }
    ops = nsp_comm_tp(world)->ops;
    for (int i = 0; i < MEMTYPES_N; ++i) {
        if (memtypes[i]->mem == ops->mem_type) {
            *memtype = memtypes[i];
            return NSP_OK;
        }
    }
    for (int i = 0; i < KNOWN_N; ++i) {
        if (memtypes_known[i].mem == ops->mem_type) {
            return nsp_error(NSP_ERR_UNSUPPORTED, "the '%s' backend moves %s memory, which this "
                             "library was built without: %s", ops->name,
                             memtypes_known[i].name, memtypes_known[i].how);
        }
    }
    return nsp_error(NSP_ERR_UNSUPPORTED, "the '%s' backend moves memory of type %d, which no "
                     "memory type of this library serves", ops->name, (int)ops->mem_type);
}

/*
 * The "emu" memory type (memtype.h, memtype_emu.c): what a world selected
 * with NSPCOMM_DEVICE=emu:FILE keeps (its emulated device and FILE), and
 * what tests and tools read of it. Internal.
 */
#ifndef NSP_ATTN_SP_MEMTYPE_EMU_H_
#define NSP_ATTN_SP_MEMTYPE_EMU_H_

#include "nspcomm.h"
#include "streams/emu_config.h"
#include "streams/emu_device.h"

#include <stdint.h>

/** The trace tag of an emulated attention kernel of tree level `level`
 *  (bwd 1: the backward pass): set on the caller's stream by the kernel. */
#define NSP_EMU_KERNEL_TAG(level, bwd) \
    (UINT64_C(0x4b45524e00000000) | ((uint64_t)(bwd) << 16) | (uint64_t)(unsigned)(level))
#define NSP_EMU_KERNEL_TAG_MASK UINT64_C(0xffffffff00000000)

/**
 * Is `world` emulated? The first call reads NSPCOMM_DEVICE: emu:FILE makes
 * the world's emulated device (kept in the world, freed by
 * nsp_comm_destroy: drained first) and *on = 1; unset: *on = 0. Later calls
 * answer from the world. Errors: nsp_emu_config_from_env's,
 * NSP_ERR_UNSUPPORTED (the world's transport does not move host memory),
 * nsp_emu_device_create's.
 */
nsp_status_t nsp_memtype_emu_select(nsp_comm_t *world, int *on);

/** The world's emulated device and configuration (borrowed from the world),
 *  once selected. Errors: NSP_ERR_INVALID_ARG (NULL; not emulated). */
nsp_status_t nsp_memtype_emu_get(nsp_comm_t *world, nsp_emu_device_t **dev,
                                 const nsp_emu_config_t **cfg);

#endif /* NSP_ATTN_SP_MEMTYPE_EMU_H_ */

/*
 * The emulated device's selection (internal; docs/design/emulated-device.md
 * section 4): NSPCOMM_DEVICE=emu:FILE, FILE a small JSON object
 *
 *   {"target": "h100",              a cluster preset, or a cluster file
 *    "here":   "calibrated.json",   a cluster file of this machine (its
 *                                   link's bandwidth: nsp_calibrate's)
 *    "link":   "inter",             "inter" (default) or "intra"
 *    "math":   false,               true: kernels also compute (slow)
 *    "trace":  0}                   ops each rank's device traces (tests)
 *
 * Relative paths in FILE are relative to FILE's directory. Unknown keys
 * are refused (a typo must not silently pick a default). Never the
 * default: with NSPCOMM_DEVICE unset nothing here runs.
 */
#ifndef NSP_STREAMS_EMU_CONFIG_H_
#define NSP_STREAMS_EMU_CONFIG_H_

#include "nspcomm.h"
#include "streams/emu_timing.h"

#include <stddef.h>

#define NSP_EMU_PATH_MAX 1024

typedef struct nsp_emu_config {
    char           file[NSP_EMU_PATH_MAX];   /**< FILE as given */
    char           target[NSP_EMU_PATH_MAX]; /**< a preset name, or a resolved path */
    int            target_is_file;
    char           here[NSP_EMU_PATH_MAX];   /**< resolved path */
    nsp_emu_link_t link;
    int            math;
    size_t         trace;
} nsp_emu_config_t;

/**
 * Read NSPCOMM_DEVICE's value `value` (NULL or "": not set, *on = 0).
 * "emu:FILE" loads FILE into *cfg and sets *on = 1. Errors:
 * NSP_ERR_INVALID_ARG (any other value, or what nsp_emu_config_load
 * refuses), NSP_ERR_IO, NSP_ERR_PARSE.
 */
nsp_status_t nsp_emu_config_from_env(const char *value, int *on, nsp_emu_config_t *cfg);

/**
 * Load FILE (see the header comment). On error *cfg is not written.
 * Errors: NSP_ERR_IO (FILE unreadable), NSP_ERR_PARSE (not JSON, not an
 * object, a key of the wrong type: file, line and key named),
 * NSP_ERR_INVALID_ARG (a missing "target" or "here", an unknown key, a
 * link other than inter/intra, a negative trace).
 */
nsp_status_t nsp_emu_config_load(const char *file, nsp_emu_config_t *cfg);

/**
 * The timing of `cfg` for kernels of a model with these heads: the target
 * (preset or file) and here loaded, nsp_emu_timing_init. Errors: those of
 * nsp_cluster_preset, nsp_cluster_load, nsp_emu_timing_init.
 */
nsp_status_t nsp_emu_config_timing(const nsp_emu_config_t *cfg, int q_heads, int kv_heads,
                                   int head_dim, nsp_emu_timing_t *timing);

/** "inter" or "intra". */
const char *nsp_emu_link_name(nsp_emu_link_t link);

#endif /* NSP_STREAMS_EMU_CONFIG_H_ */

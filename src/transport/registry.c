/*
 * The registry of backends: their ops tables by name (nsp_tp_find), and
 * what to do for a known backend this build lacks.
 */
#include "config.h"

#include "transport/transport.h"

#include "common/log.h"
#ifdef NSP_HAVE_NCCL
#include "transport/nccl.h"
#endif

#include <string.h>

/* Backends built into this library. The NCCL backend adds its entry here. */
static const nsp_tp_ops_t *const tp_backends[] = {
    &nsp_tp_ucx_ops,
#ifdef NSP_HAVE_NCCL
    &nsp_tp_nccl_ops,
#endif
};

/* Every backend nspcomm knows, built or not, with how to get it. */
static const struct {
    const char *name;
    const char *how;
} tp_known[] = {
    {"ucx",  "it is always built with the communication layer"},
    {"nccl", "reconfigure with --with-cuda --with-nccl on a machine with CUDA and NCCL"},
};

int nsp_tp_count(void)
{
    return (int)(sizeof(tp_backends) / sizeof(tp_backends[0]));
}

const nsp_tp_ops_t *nsp_tp_at(int i)
{
    return i >= 0 && i < nsp_tp_count() ? tp_backends[i] : NULL;
}

nsp_status_t nsp_tp_find(const char *name, const nsp_tp_ops_t **ops)
{
    size_t nbuilt = sizeof(tp_backends) / sizeof(tp_backends[0]);
    size_t nknown = sizeof(tp_known) / sizeof(tp_known[0]);

    if (name == NULL || ops == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tp_find: NULL argument");
    }
    for (size_t i = 0; i < nbuilt; ++i) {
        if (strcmp(tp_backends[i]->name, name) == 0) {
            *ops = tp_backends[i];
            return NSP_OK;
        }
    }
    for (size_t i = 0; i < nknown; ++i) {
        if (strcmp(tp_known[i].name, name) == 0) {
            return nsp_error(NSP_ERR_UNSUPPORTED,
                             "backend '%s' is not built into this library: %s", name,
                             tp_known[i].how);
        }
    }
    return nsp_error(NSP_ERR_NOT_FOUND,
                     "unknown backend '%s' (config.backend or NSPCOMM_BACKEND): use \"ucx\" or "
                     "\"nccl\"",
                     name);
}

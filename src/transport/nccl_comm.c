/*
 * nsp_comm_from_nccl(): a public communicator around a framework's
 * ncclComm_t (include/nspcomm.h section 4). Built into every libnspcomm;
 * without NCCL it says how to get it.
 */
#include "config.h"

#include "transport/comm.h"

#include "common/log.h"

#include <stdlib.h>

#ifdef NSP_HAVE_NCCL

#include "transport/nccl.h"

/* Allgather host identities over the new world and place every rank. */
static nsp_status_t from_nccl_place(nsp_comm_t *comm)
{
    char         mine[NSP_HOST_ID_BYTES];
    char        *all;
    nsp_status_t status;

    NSP_CHECK(nsp_topo_host_id(mine));
    all = malloc((size_t)comm->size * NSP_HOST_ID_BYTES);
    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nsp_comm_from_nccl: no memory for %d host "
                                            "identities",
                         comm->size);
    }
    NSP_CHECK_GOTO(comm->ops->allgather(comm->world, mine, all, NSP_HOST_ID_BYTES), status,
                   out_free);
    status = nsp_topo_place_ranks(all, comm->size, comm->places, &comm->nnodes);
out_free:
    free(all);
    return status;
}

nsp_status_t nsp_comm_from_nccl(nsp_comm_t **out, void *nccl_comm, const nsp_config_t *config)
{
    nsp_config_t    cfg;
    nsp_tp_params_t params;
    nsp_comm_t     *comm;
    nsp_status_t    status;

    if (out == NULL || nccl_comm == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_comm_from_nccl: comm (%p) and the ncclComm_t (%p) must not be "
                         "NULL",
                         (void *)out, nccl_comm);
    }
    NSP_CHECK(nsp_config_resolve(config, &cfg));
    params.timeout_s   = cfg.timeout_s;
    params.cuda_device = cfg.cuda_device;
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nsp_comm_from_nccl: no memory");
    }
    comm->ops       = &nsp_tp_nccl_ops;
    comm->timeout_s = cfg.timeout_s;
    NSP_CHECK_GOTO(comm->ops->world_wrap(nccl_comm, &params, &comm->world), status, err_free);
    comm->rank   = comm->world->rank;
    comm->size   = comm->world->size;
    comm->places = calloc((size_t)comm->size, sizeof(*comm->places));
    if (comm->places == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nsp_comm_from_nccl: no memory for %d places",
                           comm->size);
        goto err_destroy_world;
    }
    NSP_CHECK_GOTO(from_nccl_place(comm), status, err_destroy_world);
    {
        const nsp_topo_place_t *me = &comm->places[comm->rank];
        NSP_INFO("comm: rank %d of %d over nccl (wrapped ncclComm_t), node %d of %d, local rank "
                 "%d of %d, timeout %.1f s",
                 comm->rank, comm->size, me->node, comm->nnodes, me->local_rank, me->local_size,
                 comm->timeout_s);
    }
    *out = comm;
    return NSP_OK;
err_destroy_world:
    comm->ops->destroy(comm->world);
    free(comm->places);
err_free:
    free(comm);
    return status;
}

#else /* !NSP_HAVE_NCCL */

nsp_status_t nsp_comm_from_nccl(nsp_comm_t **out, void *nccl_comm, const nsp_config_t *config)
{
    /* Whatever the arguments: what a caller must fix first is the build. */
    (void)out;
    (void)nccl_comm;
    (void)config;
    return nsp_error(NSP_ERR_UNSUPPORTED,
                     "nsp_comm_from_nccl: this libnspcomm was built without NCCL; reconfigure "
                     "with --with-cuda --with-nccl (CUDA toolkit and NCCL >= 2.18, by default "
                     "under /usr/local/cuda; --with-nccl=DIR elsewhere) and rebuild");
}

#endif /* NSP_HAVE_NCCL */

/*
 * The public communicator: configuration, the three ways to bootstrap a
 * world (unique id, out-of-band callbacks, launcher environment), placement
 * queries, and destroy.
 */
#include "transport/comm.h"

#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSP_DEFAULT_TIMEOUT_S 60.0
/* The first version of nsp_config_t ends after cuda_device. */
#define NSP_CONFIG_V1_SIZE (offsetof(nsp_config_t, cuda_device) + sizeof(int))

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

static nsp_status_t config_timeout_from_env(double *timeout_s)
{
    const char *text = getenv("NSPCOMM_TIMEOUT");
    char       *end;
    double      v;

    *timeout_s = NSP_DEFAULT_TIMEOUT_S;
    if (text == NULL || text[0] == '\0') {
        return NSP_OK;
    }
    errno = 0;
    v     = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v > 0) || !isfinite(v)) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "NSPCOMM_TIMEOUT=%s is not a positive number of seconds", text);
    }
    *timeout_s = v;
    return NSP_OK;
}

nsp_status_t nsp_config_resolve(const nsp_config_t *user, nsp_config_t *out)
{
    nsp_config_t cfg = NSP_CONFIG_INITIALIZER;

    if (user != NULL) {
        if (user->magic != NSP_CONFIG_MAGIC) {
            return nsp_error(NSP_ERR_INVALID_ARG,
                             "config magic is 0x%08x, not NSP_CONFIG_MAGIC (0x%08x): initialise "
                             "nsp_config_t with NSP_CONFIG_INITIALIZER before setting fields",
                             user->magic, NSP_CONFIG_MAGIC);
        }
        if (user->size < NSP_CONFIG_V1_SIZE || user->size > 65536) {
            return nsp_error(NSP_ERR_INVALID_ARG,
                             "config size is %zu bytes; a valid nsp_config_t has %zu or more "
                             "(this library: %zu): initialise it with NSP_CONFIG_INITIALIZER",
                             user->size, (size_t)NSP_CONFIG_V1_SIZE, sizeof(nsp_config_t));
        }
        /* Fields the caller's header did not have keep their defaults; fields
         * of a newer header are ignored. */
        memcpy(&cfg, user, user->size < sizeof(cfg) ? user->size : sizeof(cfg));
        cfg.size = sizeof(cfg);
        if (user->version > NSP_VERSION_CODE) {
            NSP_DEBUG("config from a newer nspcomm (version %u > %u): its new fields are "
                      "ignored",
                      user->version, NSP_VERSION_CODE);
        }
    }
    if (cfg.backend == NULL || cfg.backend[0] == '\0') {
        const char *env = getenv("NSPCOMM_BACKEND");
        cfg.backend     = env != NULL && env[0] != '\0' ? env : "ucx";
    }
    if (!(cfg.timeout_s > 0) || !isfinite(cfg.timeout_s)) {
        NSP_CHECK(config_timeout_from_env(&cfg.timeout_s));
    }
    *out = cfg;
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Creation                                                                 */
/* ------------------------------------------------------------------------ */

/* Allgather host identities through the bootstrap and place every rank. */
static nsp_status_t comm_place(nsp_comm_t *comm, nsp_bootstrap_t *bs)
{
    char         mine[NSP_HOST_ID_BYTES];
    char        *all;
    nsp_status_t status;

    NSP_CHECK(nsp_topo_host_id(mine));
    all = malloc((size_t)comm->size * NSP_HOST_ID_BYTES);
    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "comm: no memory for %d host identities",
                         comm->size);
    }
    NSP_CHECK_GOTO(nsp_bootstrap_allgather(bs, mine, all, NSP_HOST_ID_BYTES), status, out_free);
    status = nsp_topo_place_ranks(all, comm->size, comm->places, &comm->nnodes);
out_free:
    free(all);
    return status;
}

/* Build the communicator over an open bootstrap (collective over it). */
static nsp_status_t comm_create(nsp_bootstrap_t *bs, const nsp_config_t *cfg,
                                const nsp_tp_ops_t *ops, nsp_comm_t **out)
{
    nsp_tp_params_t params = {cfg->timeout_s, cfg->cuda_device};
    nsp_comm_t     *comm;
    nsp_status_t    status;

    comm = calloc(1, sizeof(*comm));
    if (comm == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "comm: no memory");
    }
    comm->ops       = ops;
    comm->rank      = bs->rank;
    comm->size      = bs->nranks;
    comm->timeout_s = cfg->timeout_s;
    comm->places    = calloc((size_t)bs->nranks, sizeof(*comm->places));
    if (comm->places == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "comm: no memory for %d places", bs->nranks);
        goto err_free_comm;
    }
    NSP_CHECK_GOTO(comm_place(comm, bs), status, err_free_comm);
    NSP_CHECK_GOTO(ops->world_create(bs, &params, &comm->world), status, err_free_comm);
    {
        const nsp_topo_place_t *me = &comm->places[comm->rank];
        NSP_INFO("comm: rank %d of %d over %s (%s bootstrap), node %d of %d, local rank %d of "
                 "%d, timeout %.1f s",
                 comm->rank, comm->size, ops->name, bs->ops->name, me->node, comm->nnodes,
                 me->local_rank, me->local_size, comm->timeout_s);
    }
    *out = comm;
    return NSP_OK;
err_free_comm:
    free(comm->places);
    free(comm);
    return status;
}

/* Run comm_create and close the bootstrap either way. */
static nsp_status_t comm_create_and_close(nsp_bootstrap_t *bs, const nsp_config_t *cfg,
                                          const nsp_tp_ops_t *ops, nsp_comm_t **out)
{
    nsp_status_t status = comm_create(bs, cfg, ops, out);

    nsp_bootstrap_close(bs, status == NSP_OK);
    return status;
}

nsp_status_t nsp_comm_init_rank(nsp_comm_t **comm, int nranks, nsp_unique_id_t id, int rank,
                                const nsp_config_t *config)
{
    const nsp_tp_ops_t *ops;
    nsp_config_t        cfg;
    nsp_bootstrap_t    *bs = NULL;
    nsp_status_t        status;

    if (comm == NULL || nranks < 1 || rank < 0 || rank >= nranks) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_comm_init_rank: rank %d of %d ranks (comm %p): need comm != NULL "
                         "and 0 <= rank < nranks",
                         rank, nranks, (void *)comm);
    }
    NSP_CHECK(nsp_config_resolve(config, &cfg));
    NSP_CHECK(nsp_tp_find(cfg.backend, &ops));
    NSP_CHECK(nsp_bootstrap_tcp_join(&id, rank, nranks, cfg.timeout_s, &bs));
    status = comm_create_and_close(bs, &cfg, ops, comm);
    if (status == NSP_OK) {
        /* If this process serves the rendezvous, let it finish with the others. */
        nsp_bootstrap_tcp_wait_server(&id, nsp_now_s() + cfg.timeout_s);
    }
    return status;
}

nsp_status_t nsp_comm_init_oob(nsp_comm_t **comm, const nsp_oob_coll_t *oob,
                               const nsp_config_t *config)
{
    const nsp_tp_ops_t *ops;
    nsp_config_t        cfg;
    nsp_bootstrap_t    *bs = NULL;

    if (comm == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_init_oob: comm is NULL");
    }
    NSP_CHECK(nsp_config_resolve(config, &cfg));
    NSP_CHECK(nsp_tp_find(cfg.backend, &ops));
    NSP_CHECK(nsp_bootstrap_oob_create(oob, cfg.timeout_s, &bs));
    return comm_create_and_close(bs, &cfg, ops, comm);
}

/* Read a non-negative integer variable; 1 if found, 0 if unset. */
static nsp_status_t env_int(const char *name, int *value, int *found)
{
    const char *text = getenv(name);
    char       *end;
    long        v;

    *found = 0;
    if (text == NULL || text[0] == '\0') {
        return NSP_OK;
    }
    errno = 0;
    v     = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0 || v > (1L << 24)) {
        return nsp_error(NSP_ERR_PARSE, "%s=%s is not a rank or rank count", name, text);
    }
    *value = (int)v;
    *found = 1;
    return NSP_OK;
}

/* Rank and size from the first launcher whose variables are both set;
 * *source = its rank variable, or NULL (and NSP_OK) when none is set. */
static nsp_status_t env_rank_size_find(int *rank, int *size, const char **source)
{
    static const char *const vars[][2] = {
        {"NSPCOMM_RANK",         "NSPCOMM_NRANKS"},
        {"RANK",                 "WORLD_SIZE"}, /* torchrun */
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK",             "PMI_SIZE"},
        {"SLURM_PROCID",         "SLURM_NTASKS"},
    };

    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); ++i) {
        int have_rank, have_size;
        NSP_CHECK(env_int(vars[i][0], rank, &have_rank));
        NSP_CHECK(env_int(vars[i][1], size, &have_size));
        if (have_rank && have_size) {
            if (*size < 1 || *rank >= *size) {
                return nsp_error(NSP_ERR_PARSE, "%s=%d and %s=%d: need 0 <= rank < size",
                                 vars[i][0], *rank, vars[i][1], *size);
            }
            *source = vars[i][0];
            return NSP_OK;
        }
    }
    *source = NULL;
    return NSP_OK;
}

/* As env_rank_size_find, but no launcher at all is an error. */
static nsp_status_t env_rank_size(int *rank, int *size, const char **source)
{
    NSP_CHECK(env_rank_size_find(rank, size, source));
    if (*source != NULL) {
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_NOT_FOUND,
                     "nsp_comm_init_env: no rank and size in the environment: set "
                     "NSPCOMM_RANK/NSPCOMM_NRANKS or run under torchrun (RANK/WORLD_SIZE), mpirun "
                     "(OMPI_COMM_WORLD_RANK/SIZE), an MPICH-style PMI (PMI_RANK/PMI_SIZE) or "
                     "srun (SLURM_PROCID/SLURM_NTASKS)");
}

/* The NSPCOMM_ROOT rendezvous's secret: NSPCOMM_TOKEN or NSPCOMM_TOKEN_FILE
 * (loopback only without either; see nsp_bootstrap_tcp_root_secure). */
static nsp_status_t env_token(nsp_unique_id_t *id)
{
    return nsp_bootstrap_tcp_root_secure(id, getenv("NSPCOMM_TOKEN"),
                                         getenv("NSPCOMM_TOKEN_FILE"));
}

/* Launcher names of env_rank_size's table, by its rank variable. */
static const char *launcher_name(const char *rank_var)
{
    static const char *const names[][2] = {
        {"NSPCOMM_RANK", "nspcomm"}, {"RANK", "torchrun"}, {"OMPI_COMM_WORLD_RANK", "mpirun"},
        {"PMI_RANK", "pmi"},         {"SLURM_PROCID", "srun"},
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        if (strcmp(rank_var, names[i][0]) == 0) {
            return names[i][1];
        }
    }
    return rank_var;
}

nsp_status_t nsp_launcher_detect(const char **name, int *rank, int *size)
{
    const char *source = NULL;
    int         r = 0, n = 0;

    if (name == NULL || rank == NULL || size == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_launcher_detect: an output is NULL");
    }
    NSP_CHECK(env_rank_size_find(&r, &n, &source));
    *name = source != NULL ? launcher_name(source) : NULL;
    *rank = r;
    *size = n;
    return NSP_OK;
}

/*
 * torchrun's rendezvous, when NSPCOMM_ROOT is not set: MASTER_ADDR and, as
 * port, NSPCOMM_PORT or else MASTER_PORT + 1 (torchrun's own store listens
 * on MASTER_PORT). Writes "host:port" into buf[len]; *root = buf, or NULL
 * when MASTER_ADDR is unset. LOCAL_RANK/LOCAL_WORLD_SIZE are only checked
 * (placement comes from the host identities).
 */
static nsp_status_t env_torchrun_root(char *buf, size_t len, const char **root)
{
    const char *addr = getenv("MASTER_ADDR");
    int         port = 0, have_port, local_rank = 0, local_size = 0, have_lr, have_ls;

    *root = NULL;
    if (addr == NULL || addr[0] == '\0') {
        return NSP_OK;
    }
    NSP_CHECK(env_int("NSPCOMM_PORT", &port, &have_port));
    if (!have_port) {
        NSP_CHECK(env_int("MASTER_PORT", &port, &have_port));
        if (!have_port) {
            return nsp_error(NSP_ERR_NOT_FOUND, "nsp_comm_init_env: MASTER_ADDR=%s is set but "
                             "neither NSPCOMM_PORT nor MASTER_PORT", addr);
        }
        port += 1;
    }
    if (port < 1 || port > 65535) {
        return nsp_error(NSP_ERR_PARSE, "nsp_comm_init_env: rendezvous port %d (NSPCOMM_PORT, "
                         "or MASTER_PORT + 1) is not a TCP port", port);
    }
    NSP_CHECK(env_int("LOCAL_RANK", &local_rank, &have_lr));
    NSP_CHECK(env_int("LOCAL_WORLD_SIZE", &local_size, &have_ls));
    if (have_lr && have_ls && local_rank >= local_size) {
        return nsp_error(NSP_ERR_PARSE, "LOCAL_RANK=%d and LOCAL_WORLD_SIZE=%d: need "
                         "LOCAL_RANK < LOCAL_WORLD_SIZE", local_rank, local_size);
    }
    if ((size_t)snprintf(buf, len, "%s:%d", addr, port) >= len) {
        return nsp_error(NSP_ERR_PARSE, "nsp_comm_init_env: MASTER_ADDR=%s is too long", addr);
    }
    *root = buf;
    return NSP_OK;
}

nsp_status_t nsp_comm_init_env(nsp_comm_t **comm, const nsp_config_t *config)
{
    char                torchrun_root[320];
    const char         *root   = getenv("NSPCOMM_ROOT");
    const char         *source = NULL;
    const nsp_tp_ops_t *ops;
    nsp_config_t        cfg;
    nsp_unique_id_t     id;
    int                 rank = 0, size = 0;

    if (comm == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_init_env: comm is NULL");
    }
    NSP_CHECK(env_rank_size(&rank, &size, &source));
    /* Refuse a bad config before rank 0 starts serving the port. */
    NSP_CHECK(nsp_config_resolve(config, &cfg));
    NSP_CHECK(nsp_tp_find(cfg.backend, &ops));
    if (root == NULL || root[0] == '\0') {
        NSP_CHECK(env_torchrun_root(torchrun_root, sizeof torchrun_root, &root));
    }
    if (root == NULL) {
        return nsp_error(NSP_ERR_NOT_FOUND,
                         "nsp_comm_init_env: NSPCOMM_ROOT is not set: export "
                         "NSPCOMM_ROOT=host:port, the host of rank 0 and a free port, to every "
                         "rank (under torchrun: MASTER_ADDR and MASTER_PORT + 1 or NSPCOMM_PORT)");
    }
    NSP_CHECK(nsp_unique_id_from_string(root, &id));
    NSP_CHECK(env_token(&id));
    if (rank == 0) {
        /* Rank 0 serves on the named address and port. */
        NSP_CHECK(nsp_bootstrap_tcp_serve(&id));
    }
    NSP_DEBUG("nsp_comm_init_env: rank %d of %d from %s, rendezvous %s", rank, size, source,
              root);
    return nsp_comm_init_rank(comm, size, id, rank, &cfg);
}

/* ------------------------------------------------------------------------ */
/* Queries and destroy                                                      */
/* ------------------------------------------------------------------------ */

nsp_tp_comm_t *nsp_comm_tp(const nsp_comm_t *comm)
{
    return comm->world;
}

nsp_status_t nsp_comm_destroy(nsp_comm_t *comm)
{
    if (comm == NULL) {
        return NSP_OK;
    }
    if (comm->ntrees > 0) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_comm_destroy: %u trees still use this communicator: "
                         "nsp_tree_destroy them first",
                         comm->ntrees);
    }
    for (int k = 0; k < NSP_COMM_NSLOTS; ++k) {
        if (comm->slots[k].ptr != NULL && comm->slots[k].release != NULL) {
            comm->slots[k].release(comm->slots[k].ptr);
        }
    }
    comm->ops->destroy(comm->world);
    free(comm->places);
    free(comm);
    return NSP_OK;
}

nsp_comm_slot_t *nsp_comm_slot(nsp_comm_t *comm, int id)
{
    return &comm->slots[id];
}

uint32_t nsp_comm_seq(const nsp_comm_t *comm)
{
    return comm->seq;
}

void nsp_comm_seq_next(nsp_comm_t *comm)
{
    ++comm->seq;
}

nsp_status_t nsp_comm_rank(const nsp_comm_t *comm, int *rank)
{
    if (comm == NULL || rank == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_rank: NULL argument");
    }
    *rank = comm->rank;
    return NSP_OK;
}

nsp_status_t nsp_comm_size(const nsp_comm_t *comm, int *size)
{
    if (comm == NULL || size == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_size: NULL argument");
    }
    *size = comm->size;
    return NSP_OK;
}

nsp_status_t nsp_comm_place(const nsp_comm_t *comm, int rank, int *node, int *local_rank,
                            int *local_size)
{
    if (comm == NULL || rank < 0 || rank >= comm->size) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_place: rank %d of %d (comm %p)", rank,
                         comm != NULL ? comm->size : 0, (const void *)comm);
    }
    if (node != NULL) {
        *node = comm->places[rank].node;
    }
    if (local_rank != NULL) {
        *local_rank = comm->places[rank].local_rank;
    }
    if (local_size != NULL) {
        *local_size = comm->places[rank].local_size;
    }
    return NSP_OK;
}

nsp_status_t nsp_comm_nnodes(const nsp_comm_t *comm, int *nnodes)
{
    if (comm == NULL || nnodes == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_nnodes: NULL argument");
    }
    *nnodes = comm->nnodes;
    return NSP_OK;
}

nsp_status_t nsp_comm_backend(const nsp_comm_t *comm, const char **name)
{
    if (comm == NULL || name == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_backend: NULL argument");
    }
    *name = comm->ops->name;
    return NSP_OK;
}

nsp_status_t nsp_comm_barrier(nsp_comm_t *comm)
{
    if (comm == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_barrier: comm is NULL");
    }
    return comm->ops->barrier(comm->world);
}

nsp_status_t nsp_comm_allgather(nsp_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t bytes)
{
    if (comm == NULL || (bytes > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_comm_allgather: NULL argument");
    }
    return comm->ops->allgather(comm->world, sendbuf, recvbuf, bytes);
}

nsp_status_t nsp_mem_alloc(nsp_comm_t *comm, size_t bytes, void **ptr)
{
    if (comm == NULL || ptr == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_mem_alloc: NULL comm or ptr");
    }
    return comm->ops->mem_alloc(comm->world, bytes, ptr);
}

nsp_status_t nsp_mem_free(nsp_comm_t *comm, void *ptr)
{
    if (comm == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_mem_free: NULL comm");
    }
    return comm->ops->mem_free(comm->world, ptr);
}

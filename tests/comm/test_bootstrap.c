/*
 * Bootstrap and communicator lifecycle over real processes: unique id,
 * out-of-band callbacks and launcher environment with 1, 2, 4 and 8 ranks;
 * id strings; config errors; placement from host identities; a rendezvous
 * where a rank never comes (timeout, never a hang) or ranks disagree.
 */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 40.0

/* ------------------------------------------------------------------------ */
/* What every rank checks once it has a communicator                        */
/* ------------------------------------------------------------------------ */

static int check_comm(nsp_comm_t *comm, int rank, int nranks)
{
    int          r = -1, n = -1, nnodes = -1, node = -1, local = -1, lsize = -1;
    int         *all;
    const char  *backend = NULL;
    nsp_status_t st;

    if (nsp_comm_rank(comm, &r) != NSP_OK || nsp_comm_size(comm, &n) != NSP_OK || r != rank ||
        n != nranks) {
        mp_note("rank/size %d/%d, want %d/%d", r, n, rank, nranks);
        return 2;
    }
    if (nsp_comm_backend(comm, &backend) != NSP_OK || strcmp(backend, "ucx") != 0) {
        mp_note("backend %s, want ucx", backend != NULL ? backend : "(null)");
        return 3;
    }
    nsp_comm_nnodes(comm, &nnodes);
    nsp_comm_place(comm, rank, &node, &local, &lsize);
    if (nnodes != 1 || node != 0 || local != rank || lsize != nranks) {
        mp_note("placement: nnodes %d node %d local %d/%d, want 1 0 %d/%d", nnodes, node, local,
                lsize, rank, nranks);
        return 4;
    }
    st = nsp_comm_barrier(comm);
    if (st != NSP_OK) {
        return cu_fail("barrier", st);
    }
    all = calloc((size_t)nranks, sizeof(int));
    st  = nsp_comm_allgather(comm, &rank, all, sizeof(int));
    for (int i = 0; st == NSP_OK && i < nranks; ++i) {
        if (all[i] != i) {
            mp_note("allgather slot %d holds %d", i, all[i]);
            free(all);
            return 5;
        }
    }
    free(all);
    return st == NSP_OK ? 0 : cu_fail("allgather", st);
}

/* A rank's verdict on the communicator that its init call `what` returned
 * (status st): check_comm on it, then destroy it. */
static int check_and_destroy(nsp_status_t st, const char *what, nsp_comm_t *comm, int rank,
                             int nranks)
{
    int rc;

    if (st != NSP_OK) {
        return cu_fail(what, st);
    }
    rc = check_comm(comm, rank, nranks);
    nsp_comm_destroy(comm);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Unique id                                                                */
/* ------------------------------------------------------------------------ */

static int rank_init_uid(int rank, int nranks, void *arg)
{
    const nsp_unique_id_t *id  = arg;
    nsp_config_t           cfg = cu_config(20.0);
    nsp_comm_t            *comm = NULL;
    nsp_status_t           st;
    int                    rc;

    st = nsp_comm_init_rank(&comm, nranks, *id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("nsp_comm_init_rank", st);
    }
    rc = check_comm(comm, rank, nranks);
    st = nsp_comm_destroy(comm);
    return rc != 0 ? rc : (st == NSP_OK ? 0 : cu_fail("destroy", st));
}

static void test_unique_id(int nranks)
{
    nsp_unique_id_t id;
    mp_result_t     res;
    char            text[NSP_UNIQUE_ID_STRLEN] = "";

    /* The id is made after the fork (mp_run_uid) and left in `id` too. */
    memset(&id, 0, sizeof(id));
    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_init_uid, &id, &id, &res);
    if (!tap_is_int(nsp_unique_id_to_string(&id, text, sizeof(text)), NSP_OK,
                    "nsp_get_unique_id for %d ranks (%s)", nranks, text)) {
        mp_diag(&res);
        return;
    }
    tap_ok(mp_all_ok(&res), "unique id: %d ranks init, query, barrier, allgather, destroy "
                            "(%.2f s)",
           nranks, res.elapsed_s);
}

/* Rank 0 is the process that created the id (the usual NCCL pattern):
 * the id goes to the others through a pipe, as a string. */
typedef struct uid_pipe {
    int fds[MP_MAX_RANKS][2];
} uid_pipe_t;

static int rank_init_uid_rank0(int rank, int nranks, void *arg)
{
    uid_pipe_t     *p = arg;
    nsp_unique_id_t id;
    char            text[NSP_UNIQUE_ID_STRLEN] = "";
    nsp_config_t    cfg  = cu_config(20.0);
    nsp_comm_t     *comm = NULL;
    nsp_status_t    st;

    if (rank == 0) {
        if (nsp_get_unique_id(&id) != NSP_OK ||
            nsp_unique_id_to_string(&id, text, sizeof(text)) != NSP_OK) {
            return cu_fail("rank 0 id", NSP_ERR_INTERNAL);
        }
        for (int r = 1; r < nranks; ++r) {
            if (write(p->fds[r][1], text, sizeof(text)) != (ssize_t)sizeof(text)) {
                return 6;
            }
        }
    } else {
        if (read(p->fds[rank][0], text, sizeof(text)) != (ssize_t)sizeof(text)) {
            return 7;
        }
        st = nsp_unique_id_from_string(text, &id);
        if (st != NSP_OK) {
            return cu_fail("nsp_unique_id_from_string", st);
        }
    }
    st = nsp_comm_init_rank(&comm, nranks, id, rank, &cfg);
    return check_and_destroy(st, "nsp_comm_init_rank", comm, rank, nranks);
}

static void test_unique_id_from_rank0(int nranks)
{
    uid_pipe_t  p;
    mp_result_t res;

    for (int r = 0; r < nranks; ++r) {
        if (pipe(p.fds[r]) != 0) {
            tap_ok(0, "pipe");
            return;
        }
    }
    mp_run(nranks, RUN_TIMEOUT_S, rank_init_uid_rank0, &p, &res);
    for (int r = 0; r < nranks; ++r) {
        close(p.fds[r][0]);
        close(p.fds[r][1]);
    }
    tap_ok(mp_all_ok(&res), "unique id made by rank 0 and passed as a string: %d ranks",
           nranks);
}

/* ------------------------------------------------------------------------ */
/* Out-of-band callbacks                                                    */
/* ------------------------------------------------------------------------ */

static int rank_init_oob(int rank, int nranks, void *arg)
{
    shm_oob_t      *oob = arg;
    shm_oob_rank_t  state;
    nsp_oob_coll_t  coll;
    nsp_config_t    cfg  = cu_config(20.0);
    nsp_comm_t     *comm = NULL;
    nsp_status_t    st;

    shm_oob_coll(oob, rank, &state, &coll);
    st = nsp_comm_init_oob(&comm, &coll, &cfg);
    return check_and_destroy(st, "nsp_comm_init_oob", comm, rank, nranks);
}

static void test_oob(int nranks)
{
    shm_oob_t  *oob = shm_oob_create(nranks, 64 * 1024);
    mp_result_t res;

    mp_run(nranks, RUN_TIMEOUT_S, rank_init_oob, oob, &res);
    tap_ok(mp_all_ok(&res), "oob callbacks over shared memory: %d ranks (%.2f s)", nranks,
           res.elapsed_s);
    shm_oob_destroy(oob);
}

/* ------------------------------------------------------------------------ */
/* Launcher environment                                                     */
/* ------------------------------------------------------------------------ */

typedef struct env_case {
    const char *rank_var;
    const char *size_var;
    char        root[64];
    const char *token; /* NSPCOMM_TOKEN of every rank, NULL: none */
} env_case_t;

static int rank_init_env(int rank, int nranks, void *arg)
{
    const env_case_t *c = arg;
    char              value[16];
    nsp_config_t      cfg  = cu_config(20.0);
    nsp_comm_t       *comm = NULL;
    nsp_status_t      st;

    snprintf(value, sizeof(value), "%d", rank);
    setenv(c->rank_var, value, 1);
    snprintf(value, sizeof(value), "%d", nranks);
    setenv(c->size_var, value, 1);
    setenv("NSPCOMM_ROOT", c->root, 1);
    if (c->token != NULL) {
        setenv("NSPCOMM_TOKEN", c->token, 1);
    }
    st = nsp_comm_init_env(&comm, &cfg);
    return check_and_destroy(st, "nsp_comm_init_env", comm, rank, nranks);
}

/* A port that was free a moment ago (the kernel picks it). */
static int free_port(void)
{
    struct sockaddr_in sa  = {0};
    socklen_t          len = sizeof(sa);
    int                fd  = socket(AF_INET, SOCK_STREAM, 0);
    int                port;

    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        port = 0;
    } else {
        port = ntohs(sa.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

static void test_env(const char *rank_var, const char *size_var, const char *host, int nranks,
                     const char *token)
{
    env_case_t  c = {rank_var, size_var, "", token};
    mp_result_t res;

    snprintf(c.root, sizeof(c.root), "%s:%d", host, free_port());
    mp_run(nranks, RUN_TIMEOUT_S, rank_init_env, &c, &res);
    tap_ok(mp_all_ok(&res), "nsp_comm_init_env with %s/%s, NSPCOMM_ROOT=%s%s: %d ranks",
           rank_var, size_var, c.root, token != NULL ? ", NSPCOMM_TOKEN" : "", nranks);
}

static void test_env_missing(void)
{
    nsp_comm_t  *comm = NULL;
    nsp_status_t st;

    unsetenv("NSPCOMM_RANK");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("SLURM_PROCID");
    st = nsp_comm_init_env(&comm, NULL);
    tap_is_int(st, NSP_ERR_NOT_FOUND, "init_env without launcher variables: NOT_FOUND");
    tap_ok(strstr(nsp_last_error(), "OMPI_COMM_WORLD_RANK") != NULL,
           "... and the message lists the variables tried");
    setenv("NSPCOMM_RANK", "0", 1);
    setenv("NSPCOMM_NRANKS", "1", 1);
    unsetenv("NSPCOMM_ROOT");
    st = nsp_comm_init_env(&comm, NULL);
    tap_is_int(st, NSP_ERR_NOT_FOUND, "init_env without NSPCOMM_ROOT: NOT_FOUND");
    setenv("NSPCOMM_RANK", "x3", 1);
    st = nsp_comm_init_env(&comm, NULL);
    tap_is_int(st, NSP_ERR_PARSE, "init_env with NSPCOMM_RANK=x3: PARSE");
    unsetenv("NSPCOMM_RANK");
    unsetenv("NSPCOMM_NRANKS");
    tap_ok(comm == NULL, "no communicator written on errors");
}

/* ------------------------------------------------------------------------ */
/* Placement from host identities                                           */
/* ------------------------------------------------------------------------ */

/* Ranks [0, n/2) claim host "node-a", the others "node-b". */
static int rank_two_nodes(int rank, int nranks, void *arg)
{
    const nsp_unique_id_t *id   = arg;
    nsp_config_t           cfg  = cu_config(20.0);
    nsp_comm_t            *comm = NULL;
    nsp_status_t           st;
    int                    nnodes = 0, half = nranks / 2;

    setenv("NSPCOMM_HOST_ID", rank < half ? "node-a" : "node-b", 1);
    st = nsp_comm_init_rank(&comm, nranks, *id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("init", st);
    }
    nsp_comm_nnodes(comm, &nnodes);
    for (int r = 0; r < nranks; ++r) {
        int node, local, lsize;
        nsp_comm_place(comm, r, &node, &local, &lsize);
        if (node != (r >= half) || local != r % half || lsize != half) {
            mp_note("rank %d placed at node %d local %d/%d", r, node, local, lsize);
            nsp_comm_destroy(comm);
            return 2;
        }
    }
    nsp_comm_destroy(comm);
    if (nnodes != 2) {
        mp_note("%d nodes, want 2", nnodes);
        return 3;
    }
    return 0;
}

static void test_two_nodes(void)
{
    nsp_unique_id_t id;
    mp_result_t     res;

    mp_run_uid(4, RUN_TIMEOUT_S, rank_two_nodes, &id, &id, &res);
    tap_ok(mp_all_ok(&res), "NSPCOMM_HOST_ID fakes 2 nodes of 2: every rank sees the same "
                            "placement");
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

static void test_id_strings(void)
{
    nsp_unique_id_t id, back;
    char            text[NSP_UNIQUE_ID_STRLEN], again[NSP_UNIQUE_ID_STRLEN];
    char            small[8];

    tap_is_int(nsp_get_unique_id(&id), NSP_OK, "nsp_get_unique_id");
    tap_is_int(nsp_unique_id_to_string(&id, text, sizeof(text)), NSP_OK, "id to string: %s",
               text);
    tap_is_int(nsp_unique_id_from_string(text, &back), NSP_OK, "string back to id");
    nsp_unique_id_to_string(&back, again, sizeof(again));
    tap_is_str(again, text, "round trip keeps address, port and nonce");
    tap_is_int(nsp_unique_id_to_string(&id, small, sizeof(small)), NSP_ERR_INVALID_ARG,
               "to_string into 8 bytes: INVALID_ARG");
    tap_is_int(nsp_unique_id_from_string("localhost:4242", &back), NSP_OK,
               "HOST:PORT without nonce parses (NSPCOMM_ROOT form)");
    tap_is_int(nsp_unique_id_from_string("nonsense", &back), NSP_ERR_PARSE, "'nonsense': PARSE");
    tap_is_int(nsp_unique_id_from_string("1.2.3.4:99999", &back), NSP_ERR_PARSE,
               "port 99999: PARSE");
    tap_is_int(nsp_unique_id_from_string("1.2.3.4:80:xyz", &back), NSP_ERR_PARSE,
               "bad nonce: PARSE");
    tap_is_int(nsp_unique_id_from_string("no-such-host.invalid:80", &back), NSP_ERR_NOT_FOUND,
               "unresolvable host: NOT_FOUND");
    memset(&back, 0, sizeof(back));
    tap_is_int(nsp_unique_id_to_string(&back, text, sizeof(text)), NSP_ERR_INVALID_ARG,
               "zeroed id is not an id: INVALID_ARG");
}

static void test_config_errors(void)
{
    nsp_unique_id_t id;
    nsp_config_t    cfg  = NSP_CONFIG_INITIALIZER;
    nsp_comm_t     *comm = NULL;
    nsp_status_t    st;

    nsp_get_unique_id(&id);
    cfg.magic = 0x12345678u;
    st        = nsp_comm_init_rank(&comm, 1, id, 0, &cfg);
    tap_is_int(st, NSP_ERR_INVALID_ARG, "config with a bad magic: INVALID_ARG");
    tap_ok(strstr(nsp_last_error(), "NSP_CONFIG_INITIALIZER") != NULL,
           "... and the message says to use NSP_CONFIG_INITIALIZER: %s", nsp_last_error());
    cfg      = (nsp_config_t)NSP_CONFIG_INITIALIZER;
    cfg.size = 8;
    tap_is_int(nsp_comm_init_rank(&comm, 1, id, 0, &cfg), NSP_ERR_INVALID_ARG,
               "config with size 8: INVALID_ARG");
    cfg         = (nsp_config_t)NSP_CONFIG_INITIALIZER;
    cfg.backend = "carrier-pigeon";
    tap_is_int(nsp_comm_init_rank(&comm, 1, id, 0, &cfg), NSP_ERR_NOT_FOUND,
               "unknown backend: NOT_FOUND");
    cfg.backend = "nccl";
    st          = nsp_comm_init_rank(&comm, 1, id, 0, &cfg);
    tap_ok(st == NSP_ERR_UNSUPPORTED || st == NSP_OK,
           "backend nccl: UNSUPPORTED when not built (got %s)", nsp_status_string(st));
    if (st == NSP_OK) {
        nsp_comm_destroy(comm);
        comm = NULL;
    }
    tap_is_int(nsp_comm_init_rank(&comm, 4, id, 4, NULL), NSP_ERR_INVALID_ARG,
               "rank 4 of 4: INVALID_ARG");
    tap_is_int(nsp_comm_init_rank(&comm, 0, id, 0, NULL), NSP_ERR_INVALID_ARG,
               "0 ranks: INVALID_ARG");
    tap_is_int(nsp_comm_init_rank(NULL, 1, id, 0, NULL), NSP_ERR_INVALID_ARG,
               "NULL comm: INVALID_ARG");
    setenv("NSPCOMM_TIMEOUT", "soon", 1);
    tap_is_int(nsp_comm_init_rank(&comm, 1, id, 0, NULL), NSP_ERR_INVALID_ARG,
               "NSPCOMM_TIMEOUT=soon: INVALID_ARG");
    unsetenv("NSPCOMM_TIMEOUT");
    tap_ok(comm == NULL, "no communicator written on errors");
}

/* Last, because it starts UCX in this process and nothing may fork after. */
static void test_in_process(void)
{
    nsp_unique_id_t id;
    nsp_config_t    cfg  = NSP_CONFIG_INITIALIZER;
    nsp_comm_t     *comm = NULL;
    nsp_status_t    st;

    nsp_get_unique_id(&id);
    setenv("NSPCOMM_UCX_ERR_MODE", "sometimes", 1);
    st = nsp_comm_init_rank(&comm, 1, id, 0, &cfg);
    tap_is_int(st, NSP_ERR_INVALID_ARG, "NSPCOMM_UCX_ERR_MODE=sometimes: INVALID_ARG");
    unsetenv("NSPCOMM_UCX_ERR_MODE");
    nsp_get_unique_id(&id);
    cfg.timeout_s = 10.0;
    st            = nsp_comm_init_rank(&comm, 1, id, 0, &cfg);
    tap_is_int(st, NSP_OK, "1 rank in this very process (the id's server): OK");
    tap_is_int(nsp_comm_destroy(comm), NSP_OK, "destroy");
}

/* Rank nranks-1 never comes: the others must fail with TIMEOUT, in time. */
static int rank_missing(int rank, int nranks, void *arg)
{
    const nsp_unique_id_t *id   = arg;
    nsp_config_t           cfg  = cu_config(2.0);
    nsp_comm_t            *comm = NULL;
    nsp_status_t           st;
    double                 t0 = mp_now();
    char                   want[32];

    if (rank == nranks - 1) {
        return 0; /* never joins */
    }
    st = nsp_comm_init_rank(&comm, nranks, *id, rank, &cfg);
    mp_set_value(0, mp_now() - t0);
    if (st == NSP_OK) {
        nsp_comm_destroy(comm);
        mp_note("init succeeded without rank %d", nranks - 1);
        return 2;
    }
    if (st != NSP_ERR_TIMEOUT) {
        return cu_fail("expected NSP_ERR_TIMEOUT", st);
    }
    snprintf(want, sizeof(want), "rank(s) %d ", nranks - 1);
    if (strstr(nsp_last_error(), want) == NULL) {
        mp_note("message does not name the missing rank: %s", nsp_last_error());
        return 3;
    }
    mp_note("%s", nsp_last_error());
    return 0;
}

static void test_missing_rank(void)
{
    nsp_unique_id_t id;
    mp_result_t     res;
    double          worst = 0;

    mp_run_uid(4, 20.0, rank_missing, &id, &id, &res);
    for (int r = 0; r < 3; ++r) {
        worst = res.rank[r].value[0] > worst ? res.rank[r].value[0] : worst;
    }
    tap_ok(mp_all_ok(&res), "a rank never joins: the others get NSP_ERR_TIMEOUT naming it");
    tap_ok(worst > 1.5 && worst < 2.0 + 3.0,
           "... after the timeout (2 s), not a hang: slowest rank %.2f s", worst);
    tap_diag("message: %s", res.rank[0].note);
}

/* Same through the OOB path: the last endpoint never calls init. */
static int rank_missing_oob(int rank, int nranks, void *arg)
{
    shm_oob_t     *oob = arg;
    shm_oob_rank_t state;
    nsp_oob_coll_t coll;
    nsp_config_t   cfg  = cu_config(2.0);
    nsp_comm_t    *comm = NULL;
    nsp_status_t   st;
    double         t0 = mp_now();

    if (rank == nranks - 1) {
        return 0;
    }
    shm_oob_coll(oob, rank, &state, &coll);
    st = nsp_comm_init_oob(&comm, &coll, &cfg);
    mp_set_value(0, mp_now() - t0);
    if (st != NSP_ERR_TIMEOUT) {
        if (st == NSP_OK) {
            nsp_comm_destroy(comm);
        }
        return cu_fail("expected NSP_ERR_TIMEOUT", st);
    }
    return 0;
}

static void test_missing_rank_oob(void)
{
    shm_oob_t  *oob = shm_oob_create(3, 4096);
    mp_result_t res;

    mp_run(3, 20.0, rank_missing_oob, oob, &res);
    tap_ok(mp_all_ok(&res) && res.rank[0].value[0] < 2.0 + 2.0,
           "oob: an endpoint never calls init: the others get NSP_ERR_TIMEOUT (%.2f s)",
           res.rank[0].value[0]);
    shm_oob_destroy(oob);
}

/* The process that created the id is gone before the ranks arrive: they
 * cannot reach the rendezvous and fail with TIMEOUT, not a hang. */
static int rank_orphaned(int rank, int nranks, void *arg)
{
    const nsp_unique_id_t *id   = arg;
    nsp_config_t           cfg  = cu_config(1.5);
    nsp_comm_t            *comm = NULL;
    nsp_status_t           st   = nsp_comm_init_rank(&comm, nranks, *id, rank, &cfg);

    if (st == NSP_OK) {
        nsp_comm_destroy(comm);
        return 2;
    }
    mp_note("%s", nsp_last_error());
    return st == NSP_ERR_TIMEOUT ? 0 : 3;
}

/* A short-lived process creates an id, hands it over and exits. */
static int make_id_and_exit(int rank, int nranks, void *arg)
{
    nsp_unique_id_t *shared = arg;

    return nsp_get_unique_id(shared) == NSP_OK ? 0 : 1;
}

static void test_orphaned_id(void)
{
    nsp_unique_id_t *id = mp_shared_alloc(sizeof(*id));
    mp_result_t      res;

    mp_run(1, 10.0, make_id_and_exit, id, &res);
    mp_run(2, 20.0, rank_orphaned, id, &res);
    tap_ok(mp_all_ok(&res), "the id's creator exited: ranks get NSP_ERR_TIMEOUT (%.2f s)",
           res.elapsed_s);
    tap_diag("%s", res.rank[0].note);
    mp_shared_free(id, sizeof(*id));
}

/* Ranks disagree on nranks: MISMATCH, not a hang. */
static int rank_bad_nranks(int rank, int nranks, void *arg)
{
    const nsp_unique_id_t *id   = arg;
    nsp_config_t           cfg  = cu_config(5.0);
    nsp_comm_t            *comm = NULL;
    nsp_status_t           st;

    /* Rank 1 believes in a world of 3; let rank 0 join first. */
    if (rank == 1) {
        usleep(300 * 1000);
    }
    st = nsp_comm_init_rank(&comm, rank == 1 ? nranks + 1 : nranks, *id, rank, &cfg);
    if (st == NSP_OK) {
        nsp_comm_destroy(comm);
        return 2;
    }
    mp_note("%s: %s", nsp_status_string(st), nsp_last_error());
    return st == NSP_ERR_MISMATCH ? 0 : 3;
}

static void test_bad_nranks(void)
{
    nsp_unique_id_t id;
    mp_result_t     res;

    mp_run_uid(2, 20.0, rank_bad_nranks, &id, &id, &res);
    tap_ok(mp_all_ok(&res), "ranks pass different nranks: both get NSP_ERR_MISMATCH");
}

int main(void)
{
    setenv("UCX_LOG_FILE", "stderr", 0);
    for (int n = 1; n <= 8; n *= 2) {
        test_unique_id(n);
    }
    test_unique_id_from_rank0(4);
    test_oob(2);
    test_oob(4);
    test_oob(8);
    test_env("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "127.0.0.1", 4, NULL);
    test_env("PMI_RANK", "PMI_SIZE", "localhost", 2, NULL);
    test_env("SLURM_PROCID", "SLURM_NTASKS", "127.0.0.1", 3, NULL);
    test_env("NSPCOMM_RANK", "NSPCOMM_NRANKS", "127.0.0.1", 3, "a-job-secret-of-32-characters-ok");
    test_two_nodes();
    test_missing_rank();
    test_missing_rank_oob();
    test_bad_nranks();
    test_orphaned_id();
    /* In this process, so after every fork: the ids made here are never
     * used up, and a rank forked beside their live rendezvous threads could
     * inherit a lock one of them holds (see mp_run_made). */
    test_id_strings();
    test_config_errors();
    test_env_missing();
    test_in_process();
    return tap_done();
}

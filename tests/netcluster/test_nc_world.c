/*
 * Ranks on the nodes of a namespace cluster (run by test_netcluster.sh under
 * NSP_NETCLUSTER, from the hub namespace; NSPCOMM_HOST_ID unset):
 *   world K: the world sees K nodes of n / K ranks, each node named by its
 *            own hostname, and the default tree is 1..n/K inside a node, then
 *            the degrees across nodes;
 *   linkdown K IFNAME: ranks ring-exchange over the whole world until the
 *            parent takes IFNAME (a node's uplink, in the hub) down; every
 *            rank must fail with NSP_ERR_TIMEOUT or NSP_ERR_PEER_FAILED
 *            within the timeout, and no rank, sysv shared memory segment or
 *            process is left behind.
 */
#include "../mp.h"
#include "../tap.h"
#include "nspcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 8
#define TIMEOUT_S 3.0
#define RING_BYTES (4u << 20)

typedef struct nc_case {
    nsp_unique_id_t id;
    int             nodes;
    double         *down_at; /* shared: when the parent took the link down (mp_now) */
} nc_case_t;

/* The checks of one rank in the `world` case. */
static int rank_world(int rank, int nranks, void *arg)
{
    const nc_case_t *c = arg;
    nsp_comm_t      *comm;
    nsp_tree_t      *tree;
    char             host[64] = "", want[64];
    int              node, local, lsize, nnodes, nlevels, deg, rc = 1;
    int              per = nranks / c->nodes;

    if (mp_comm_tree(&c->id, rank, nranks, 30.0, 0, &comm, &tree) != 0) {
        return 2;
    }
    gethostname(host, sizeof(host) - 1);
    snprintf(want, sizeof(want), "n%d", rank / per);
    if (strlen(host) < strlen(want) || strcmp(host + strlen(host) - strlen(want), want) != 0) {
        FAIL("hostname %s does not end in %s", host, want);
    }
    if (nsp_comm_nnodes(comm, &nnodes) != NSP_OK || nnodes != c->nodes ||
        nsp_comm_place(comm, rank, &node, &local, &lsize) != NSP_OK || node != rank / per ||
        local != rank % per || lsize != per) {
        FAIL("place: %d nodes, node %d local %d of %d (want %d nodes, node %d, %d of %d)",
             nnodes, node, local, lsize, c->nodes, rank / per, rank % per, per);
    }
    /* degrees 1, 2, .., per inside the node, then 2 per, .., nranks */
    nsp_tree_nlevels(tree, &nlevels);
    for (int l = 0, want_deg = 1; l < nlevels; ++l, want_deg *= 2) {
        if (nsp_tree_degree(tree, l, &deg) != NSP_OK || deg != want_deg) {
            FAIL("tree level %d has degree %d, want %d", l, deg, want_deg);
        }
        mp_set_value(0, deg);
    }
    rc = 0;
out:
    mp_comm_tree_free(comm, tree);
    return rc;
}

/* Ring steps over the world until one fails; value[0] = when (mp_now). */
static int rank_linkdown(int rank, int nranks, void *arg)
{
    const nc_case_t *c = arg;
    nsp_comm_t      *comm;
    nsp_tree_t      *tree;
    unsigned char   *buf = malloc(2 * (size_t)RING_BYTES);
    nsp_status_t     st  = NSP_OK;
    int              nlevels, steps = 0, rc = 1;
    double           t_end;

    if (buf == NULL || mp_comm_tree(&c->id, rank, nranks, TIMEOUT_S, 0, &comm, &tree) != 0) {
        free(buf);
        return 2;
    }
    memset(buf, rank, 2 * (size_t)RING_BYTES);
    nsp_tree_nlevels(tree, &nlevels);
    t_end = mp_now() + 30.0;
    while (st == NSP_OK && mp_now() < t_end) {
        st = nsp_ring_step(tree, nlevels - 1, buf, buf + RING_BYTES, RING_BYTES, 1,
                           (uint32_t)steps++);
    }
    mp_set_value(0, mp_now());
    mp_set_value(1, steps);
    mp_set_value(2, (double)getpid());
    if (st != NSP_ERR_TIMEOUT && st != NSP_ERR_PEER_FAILED) {
        FAIL("after %d steps: %s (%s), want TIMEOUT or PEER_FAILED", steps,
             nsp_status_string(st), nsp_last_error());
    }
    mp_note("after %d steps: %s", steps, nsp_status_string(st));
    rc = 0;
out:
    mp_comm_tree_free(comm, tree);
    free(buf);
    return rc;
}

/* 1 if /proc/sysvipc/shm lists a segment created by one of res's ranks. */
static int sysv_left(const mp_result_t *res)
{
    char  line[512];
    FILE *f    = fopen("/proc/sysvipc/shm", "r");
    int   left = 0;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        long key, id, perms, size, cpid;
        if (sscanf(line, "%ld %ld %lo %ld %ld", &key, &id, &perms, &size, &cpid) != 5) {
            continue;
        }
        for (int r = 0; r < res->nranks; ++r) {
            left |= cpid == (long)res->rank[r].value[2];
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return left;
}

static void test_world(int nodes)
{
    nc_case_t   c = {.nodes = nodes};
    mp_result_t res;

    fflush(stdout);
    mp_run_uid(NRANKS, 60.0, rank_world, &c, &c.id, &res);
    if (!tap_ok(mp_all_ok(&res), "%d nodes x %d ranks: hostnames, placement and the tree "
                                 "(1..%d inside a node, then across) from the real nodes",
                nodes, NRANKS / nodes, NRANKS / nodes)) {
        mp_diag(&res);
    }
}

static void test_linkdown(int nodes, const char *ifname)
{
    nc_case_t   c = {.nodes = nodes};
    mp_result_t res;
    char        cmd[128];
    double      worst = 0;
    pid_t       pid;

    c.down_at = mp_shared_alloc(sizeof(double));
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        /* the link goes down 1.5 s in, while the ranks are mid-exchange */
        usleep(1500 * 1000);
        snprintf(cmd, sizeof(cmd), "ip link set %s down", ifname);
        *c.down_at = mp_now();
        _exit(system(cmd) == 0 ? 0 : 1);
    }
    mp_run_uid(NRANKS, 60.0, rank_linkdown, &c, &c.id, &res);
    waitpid(pid, NULL, 0);
    if (!tap_ok(mp_all_ok(&res), "%d nodes: uplink %s down mid-exchange: every rank fails "
                                 "with TIMEOUT or PEER_FAILED (%.1f s)",
                nodes, ifname, res.elapsed_s)) {
        mp_diag(&res);
    }
    for (int r = 0; r < NRANKS; ++r) {
        double t = res.rank[r].value[0] - *c.down_at;
        worst    = t > worst ? t : worst;
    }
    tap_ok(*c.down_at > 0 && worst < TIMEOUT_S + 5.0,
           "%d nodes: the last rank failed %.1f s after the link went down (timeout %.0f s)",
           nodes, worst, TIMEOUT_S);
    tap_ok(!sysv_left(&res), "%d nodes: no sysv segment of a rank left behind", nodes);
    mp_shared_free(c.down_at, sizeof(double));
}

int main(int argc, char **argv)
{
    int nodes = argc > 2 ? atoi(argv[2]) : 0;

    if (argc < 3 || nodes < 1 || NRANKS % nodes != 0 || getenv("NSP_NETCLUSTER") == NULL) {
        fprintf(stderr, "usage (under netcluster.sh run): %s world K | linkdown K IFNAME\n",
                argv[0]);
        return 2;
    }
    setenv("UCX_LOG_FILE", "stderr", 0);
    if (strcmp(argv[1], "world") == 0) {
        test_world(nodes);
    } else if (strcmp(argv[1], "linkdown") == 0 && argc > 3) {
        test_linkdown(nodes, argv[3]);
    } else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    return tap_done();
}

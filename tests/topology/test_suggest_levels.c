/* Suggested level degrees (src/topology/suggest_levels.c), alone and from placements
 * of faked hosts (NSPCOMM_HOST_ID). */
#include "nspcomm.h"
#include "common/log.h"
#include "../tap.h"
#include "topology/topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void format(const int *v, int n, char *text, size_t size)
{
    size_t used = 0;

    text[0] = '\0';
    for (int i = 0; i < n && used + 1 < size; ++i) {
        used += (size_t)snprintf(text + used, size - used, "%s%d", i ? "," : "", v[i]);
    }
}

/* suggest_levels(...) must give exactly `want` ("1,2,4,8"). */
static void check_levels(int nranks, int per_node, int domain, int max_degree, const char *want,
                         const char *why)
{
    int  degrees[NSP_TOPO_MAX_LEVELS];
    int  n = 0;
    char got[512];

    if (!tap_is_int(nsp_topology_suggest_levels(nranks, per_node, domain, max_degree, degrees,
                                                NSP_TOPO_MAX_LEVELS, &n),
                    NSP_OK, "levels(%d ranks, %d/node, domain %d, max %d) ok", nranks, per_node,
                    domain, max_degree)) {
        tap_diag("%s", nsp_last_error());
    }
    format(degrees, n, got, sizeof(got));
    tap_is_str(got, want, "%s", why);
}

static void test_fixed_cases(void)
{
    check_levels(8, 8, 8, 0, "1,2,4,8", "1 node of 8 GPUs: up to the node");
    check_levels(16, 8, 8, 0, "1,2,4,8,16", "2 nodes of 8: node level 8, then 16");
    check_levels(32, 8, 8, 0, "1,2,4,8,16,32", "4 nodes of 8: 1,2,4,8,16,32 with 8 = node");
    check_levels(32, 8, 8, 16, "1,2,4,8,16", "max degree 16 (heads) cuts the top");
    check_levels(32, 8, 8, 12, "1,2,4,8", "max degree 12 keeps the largest chain member below");
    check_levels(32, 8, 8, 1, "1", "max degree 1: only the rank itself");
    check_levels(1, 1, 0, 0, "1", "one rank");
    check_levels(7, 7, 0, 0, "1,7", "a prime node size: one jump");
    check_levels(24, 8, 8, 0, "1,2,4,8,24", "3 nodes of 8: above the node by x3");
    check_levels(48, 8, 8, 0, "1,2,4,8,16,48", "6 nodes of 8: x2 then x3");
    check_levels(12, 12, 6, 0, "1,2,6,12", "domain 6 inside a node of 12 is a level");
    check_levels(12, 12, 0, 0, "1,2,4,12", "without a domain the node of 12 doubles first");
    check_levels(16, 8, 16, 0, "1,2,4,8,16", "a domain larger than the node is not used");
    check_levels(24, 8, 3, 0, "1,2,4,8,24", "a domain that does not divide the node is not used");
    check_levels(64, 16, 8, 0, "1,2,4,8,16,32,64", "domain 8 in nodes of 16");
    check_levels(20, 8, 8, 0, "1,2,4,20", "8 per node does not divide 20: node block 4");
    check_levels(4, 8, 8, 0, "1,2,4", "fewer ranks than a node");
    check_levels(96, 6, 6, 0, "1,2,6,12,24,48,96", "nodes of 6: 2, 6, then doubling");
}

static int is_member(const int *v, int n, int x)
{
    for (int i = 0; i < n; ++i) {
        if (v[i] == x) {
            return 1;
        }
    }
    return 0;
}

static int gcd_int(int a, int b)
{
    return b == 0 ? a : gcd_int(b, a % b);
}

/* Invariants over many shapes: starts at 1, ascending, each divides the next,
 * all divide nranks, none above the limit, each either inside the node block
 * (divides it) or made of whole blocks (a multiple of it), and the node block
 * and a nesting domain appear whenever they are within the limit. */
static void test_invariants(void)
{
    unsigned seed = 12345;
    int      bad = 0;
    int      cases = 0;

    for (int t = 0; t < 5000; ++t) {
        int degrees[NSP_TOPO_MAX_LEVELS];
        int n = 0;
        int nodes, per_node, nranks, domain, max_degree, block, limit;
        int ok;

        seed = seed * 1103515245u + 12345u;
        nodes = 1 + (int)(seed >> 8) % 64;
        per_node = 1 + (int)(seed >> 16) % 16;
        nranks = nodes * per_node - (int)((seed >> 4) % 3 == 0 ? (seed >> 20) % per_node : 0);
        domain = (int)(seed >> 12) % 10;
        max_degree = (seed >> 24) % 4 == 0 ? (int)(seed >> 6) % 200 : 0;
        if (nranks < 1) {
            nranks = 1;
        }
        if (nsp_topology_suggest_levels(nranks, per_node, domain, max_degree, degrees,
                                        NSP_TOPO_MAX_LEVELS, &n) != NSP_OK) {
            ++bad;
            continue;
        }
        ++cases;
        block = gcd_int(per_node, nranks);
        limit = max_degree > 0 && max_degree < nranks ? max_degree : nranks;
        ok = n >= 1 && degrees[0] == 1;
        for (int i = 0; ok && i < n; ++i) {
            ok = nranks % degrees[i] == 0 && degrees[i] <= limit &&
                 (block % degrees[i] == 0 || degrees[i] % block == 0) &&
                 (i == 0 || (degrees[i] > degrees[i - 1] && degrees[i] % degrees[i - 1] == 0));
        }
        ok = ok && (block > limit || is_member(degrees, n, block));
        ok = ok && (domain < 2 || block % domain != 0 || domain > limit ||
                    is_member(degrees, n, domain));
        ok = ok && (limit < nranks || degrees[n - 1] == nranks);
        if (!ok && bad++ < 5) {
            char text[512];

            format(degrees, n, text, sizeof(text));
            tap_diag("nranks %d per_node %d domain %d max %d -> %s", nranks, per_node, domain,
                     max_degree, text);
        }
    }
    tap_is_int(bad, 0, "invariants hold for %d random shapes", cases);
}

static void test_errors(void)
{
    int degrees[NSP_TOPO_MAX_LEVELS];
    int n = -3;

    tap_is_int(nsp_topology_suggest_levels(32, 8, 8, 0, degrees, 3, &n), NSP_ERR_INVALID_ARG,
               "capacity 3 is too small for 6 levels");
    tap_ok(strstr(nsp_last_error(), "1,2,4,8,16,32") != NULL && n == -3,
           "the message gives the levels; nlevels untouched: %s", nsp_last_error());
    tap_is_int(nsp_topology_suggest_levels(0, 8, 8, 0, degrees, 32, &n), NSP_ERR_INVALID_ARG,
               "0 ranks rejected");
    tap_is_int(nsp_topology_suggest_levels(8, 0, 8, 0, degrees, 32, &n), NSP_ERR_INVALID_ARG,
               "0 ranks per node rejected");
    tap_is_int(nsp_topology_suggest_levels(8, 8, -1, 0, degrees, 32, &n), NSP_ERR_INVALID_ARG,
               "negative domain rejected");
    tap_is_int(nsp_topology_suggest_levels(8, 8, 8, -4, degrees, 32, &n), NSP_ERR_INVALID_ARG,
               "negative max degree rejected");
    tap_is_int(nsp_topology_suggest_levels(8, 8, 8, 0, NULL, 32, &n), NSP_ERR_INVALID_ARG,
               "NULL degrees rejected");
}

/*
 * The path the communicator takes: each rank's identity from
 * nsp_topo_host_id() (faked per rank with NSPCOMM_HOST_ID), placement, node
 * block, levels. `host_of` gives each rank's fake host; domain = GPUs/host.
 */
static void check_cluster(const char *name, const int *host_of, int nranks, int domain,
                          int want_nodes, int want_block, const char *want)
{
    char             *ids = calloc((size_t)nranks, NSP_HOST_ID_BYTES);
    nsp_topo_place_t *places = calloc((size_t)nranks, sizeof(*places));
    int               degrees[NSP_TOPO_MAX_LEVELS];
    int               n = 0, nnodes = 0, block = 0, ok = 1;
    char              got[512];

    for (int r = 0; r < nranks; ++r) {
        char fake[32];

        snprintf(fake, sizeof(fake), "gpu-node-%02d", host_of[r]);
        setenv("NSPCOMM_HOST_ID", fake, 1);
        ok &= nsp_topo_host_id(ids + (size_t)r * NSP_HOST_ID_BYTES) == NSP_OK;
    }
    unsetenv("NSPCOMM_HOST_ID");
    tap_ok(ok, "%s: host ids from NSPCOMM_HOST_ID", name);
    tap_is_int(nsp_topo_place_ranks(ids, nranks, places, &nnodes), NSP_OK, "%s: placed", name);
    tap_is_int(nnodes, want_nodes, "%s: %d nodes detected", name, want_nodes);
    tap_is_int(nsp_topo_node_block(places, nranks, &block), NSP_OK, "%s: node block", name);
    tap_is_int(block, want_block, "%s: node block %d", name, want_block);
    tap_is_int(nsp_topo_levels_for_places(places, nranks, domain, 0, degrees,
                                          NSP_TOPO_MAX_LEVELS, &n),
               NSP_OK, "%s: levels", name);
    format(degrees, n, got, sizeof(got));
    tap_is_str(got, want, "%s: levels %s", name, want);
    free(places);
    free(ids);
}

static void test_clusters(void)
{
    int host_of[64];
    int n;

    for (int r = 0; r < 32; ++r) {
        host_of[r] = r / 8;
    }
    check_cluster("1 node x 8 GPUs", host_of, 8, 8, 1, 8, "1,2,4,8");
    check_cluster("2 nodes x 8 GPUs", host_of, 16, 8, 2, 8, "1,2,4,8,16");
    check_cluster("4 nodes x 8 GPUs", host_of, 32, 8, 4, 8, "1,2,4,8,16,32");

    n = 0;
    for (int r = 0; r < 8; ++r) host_of[n++] = 0;
    for (int r = 0; r < 8; ++r) host_of[n++] = 1;
    for (int r = 0; r < 4; ++r) host_of[n++] = 2;
    check_cluster("non-uniform 8+8+4", host_of, n, 8, 3, 4, "1,2,4,20");
    n = 0;
    for (int r = 0; r < 8; ++r) host_of[n++] = 0;
    for (int r = 0; r < 6; ++r) host_of[n++] = 1;
    check_cluster("non-uniform 8+6", host_of, n, 8, 2, 2, "1,2,14");
    for (int r = 0; r < 16; ++r) {
        host_of[r] = r % 2;
    }
    check_cluster("round-robin over 2 hosts", host_of, 16, 8, 2, 1, "1,2,4,8,16");
    for (int r = 0; r < 32; ++r) {
        host_of[r] = 3 - r / 8; /* hosts listed in reverse: still whole blocks */
    }
    check_cluster("4 nodes, hosts in reverse order", host_of, 32, 8, 4, 8, "1,2,4,8,16,32");
}

int main(void)
{
    nsp_log_set_level(NSP_LOG_ERROR);
    test_fixed_cases();
    test_invariants();
    test_errors();
    test_clusters();
    return tap_done();
}

/* Host identities, rank placement and node blocks (src/topology/place.c). */
#include "nspcomm.h"
#include "common/log.h"
#include "../tap.h"
#include "topology/topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ids[nranks][NSP_HOST_ID_BYTES]: rank r lives on host "host<node_of[r]>". */
static char *make_ids(const int *node_of, int nranks)
{
    char *ids = calloc((size_t)nranks, NSP_HOST_ID_BYTES);

    for (int r = 0; ids != NULL && r < nranks; ++r) {
        snprintf(ids + (size_t)r * NSP_HOST_ID_BYTES, NSP_HOST_ID_BYTES, "host%d/boot",
                 node_of[r]);
    }
    return ids;
}

static void test_host_id(void)
{
    char        id1[NSP_HOST_ID_BYTES];
    char        id2[NSP_HOST_ID_BYTES];
    char        host[256] = "";
    char        too_long[NSP_HOST_ID_BYTES + 8];
    FILE       *boot = fopen("/proc/sys/kernel/random/boot_id", "r");
    char        boot_id[64] = "";
    nsp_status_t st;

    unsetenv("NSPCOMM_HOST_ID");
    gethostname(host, sizeof(host) - 1);
    if (boot != NULL) {
        if (fgets(boot_id, sizeof(boot_id), boot) == NULL) {
            boot_id[0] = '\0';
        }
        boot_id[strcspn(boot_id, "\n")] = '\0';
        fclose(boot);
    }
    tap_is_int(nsp_topo_host_id(id1), NSP_OK, "host id of this host");
    tap_is_int(nsp_topo_host_id(id2), NSP_OK, "host id again");
    tap_ok(memcmp(id1, id2, NSP_HOST_ID_BYTES) == 0, "the same host gives the same id ('%s')",
           id1);
    tap_ok(strncmp(id1, host, strlen(host)) == 0, "it starts with the hostname '%s'", host);
    if (boot_id[0] != '\0') {
        tap_ok(strstr(id1, boot_id) != NULL, "it contains the boot id %s", boot_id);
    } else {
        tap_skip(1, "no readable boot_id on this host");
    }
    tap_ok(memchr(id1, '\0', NSP_HOST_ID_BYTES) != NULL, "it is NUL-terminated");

    setenv("NSPCOMM_HOST_ID", "fake-node-3", 1);
    tap_is_int(nsp_topo_host_id(id1), NSP_OK, "NSPCOMM_HOST_ID accepted");
    tap_is_str(id1, "fake-node-3", "NSPCOMM_HOST_ID overrides the id");
    tap_ok(id1[NSP_HOST_ID_BYTES - 1] == '\0' && id1[20] == '\0', "and it is NUL-padded");

    memset(too_long, 'x', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    setenv("NSPCOMM_HOST_ID", too_long, 1);
    memcpy(id2, "untouched", 10);
    st = nsp_topo_host_id(id2);
    tap_is_int(st, NSP_ERR_INVALID_ARG, "an NSPCOMM_HOST_ID of %zu chars is rejected",
               strlen(too_long));
    tap_ok(strstr(nsp_last_error(), "NSPCOMM_HOST_ID") != NULL, "the message names the variable");
    tap_is_str(id2, "untouched", "and the output is not written");
    unsetenv("NSPCOMM_HOST_ID");
    tap_is_int(nsp_topo_host_id(NULL), NSP_ERR_INVALID_ARG, "NULL id is rejected");
}

static void test_format_host_id(void)
{
    const char *boot = "b5ce93ca-d1b0-4e98-9915-a637be369b0c";
    const char *long_a = "gpu-cluster-rack-17-node-0001.datacenter-west.example.com";
    const char *long_b = "gpu-cluster-rack-17-node-0002.datacenter-west.example.com";
    char        id_a[NSP_HOST_ID_BYTES];
    char        id_b[NSP_HOST_ID_BYTES];

    tap_is_int(nsp_topo_format_host_id("n1", boot, id_a), NSP_OK, "format a short id");
    tap_is_str(id_a, "n1/b5ce93ca-d1b0-4e98-9915-a637be369b0c", "short hostname kept whole");
    nsp_topo_format_host_id(long_a, boot, id_a);
    nsp_topo_format_host_id(long_b, boot, id_b);
    tap_is_int((int64_t)strlen(id_a), NSP_HOST_ID_BYTES - 1, "a long hostname fills 63 chars");
    tap_ok(strstr(id_a, boot) != NULL && strchr(id_a, '~') != NULL,
           "it keeps the whole boot id and marks the cut with '~': %s", id_a);
    tap_ok(strcmp(id_a, id_b) != 0, "long hostnames differing only after the cut stay distinct");
    nsp_topo_format_host_id(long_a, "", id_a);
    tap_ok(strlen(id_a) == strlen(long_a) && strncmp(id_a, long_a, strlen(long_a)) == 0,
           "no boot id: the hostname alone (%zu chars fit)", strlen(long_a));
    tap_is_int(nsp_topo_format_host_id("", boot, id_a), NSP_ERR_INVALID_ARG,
               "an empty hostname is rejected");
}

/* Check places against the expected node of every rank (node numbering by
 * first appearance is computed here independently, O(n^2)). */
static void check_places(const char *name, const int *node_of, int nranks, int want_nnodes)
{
    char             *ids = make_ids(node_of, nranks);
    nsp_topo_place_t *places = calloc((size_t)nranks, sizeof(*places));
    int               nnodes = -1;
    int               bad = 0;

    tap_is_int(nsp_topo_place_ranks(ids, nranks, places, &nnodes), NSP_OK, "%s: placed", name);
    tap_is_int(nnodes, want_nnodes, "%s: %d nodes", name, want_nnodes);
    for (int r = 0; r < nranks; ++r) {
        int first_index = 0, seen = 0, local = 0, size = 0;

        /* node index = number of distinct hosts first seen before rank r's host */
        for (int q = 0; q < nranks; ++q) {
            int first = 1;

            for (int p = 0; p < q; ++p) {
                first &= node_of[p] != node_of[q];
            }
            if (first && node_of[q] == node_of[r]) {
                first_index = seen;
            }
            seen += first;
            if (node_of[q] == node_of[r]) {
                local += q < r;
                ++size;
            }
        }
        if (places[r].node != first_index || places[r].local_rank != local ||
            places[r].local_size != size) {
            if (bad++ < 3) {
                tap_diag("%s: rank %d got node %d local %d/%d, want %d %d/%d", name, r,
                         places[r].node, places[r].local_rank, places[r].local_size,
                         first_index, local, size);
            }
        }
    }
    tap_is_int(bad, 0, "%s: node, local rank and local size of every rank", name);
    free(places);
    free(ids);
}

static void test_place_shapes(void)
{
    int node_of[64];

    for (int nodes = 1; nodes <= 4; nodes *= 2) {
        char name[64];

        for (int r = 0; r < 8 * nodes; ++r) {
            node_of[r] = r / 8;
        }
        snprintf(name, sizeof(name), "%d node(s) of 8", nodes);
        check_places(name, node_of, 8 * nodes, nodes);
    }
    for (int r = 0; r < 16; ++r) {
        node_of[r] = r % 2; /* round-robin over two hosts */
    }
    check_places("round-robin over 2 hosts", node_of, 16, 2);
    {
        int odd[] = {7, 7, 3, 3, 3, 9, 7, 9, 9, 9, 9};
        check_places("uneven, out of order", odd, 11, 3);
    }
    node_of[0] = 42;
    check_places("one rank", node_of, 1, 1);
}

static void test_place_values(void)
{
    int              node_of[] = {5, 5, 2, 5, 2};
    char            *ids = make_ids(node_of, 5);
    nsp_topo_place_t places[5];
    int              nnodes = 0;

    nsp_topo_place_ranks(ids, 5, places, &nnodes);
    tap_ok(places[0].node == 0 && places[2].node == 1 && places[3].node == 0,
           "nodes numbered by first appearance (host5 -> 0, host2 -> 1)");
    tap_ok(places[3].local_rank == 2 && places[3].local_size == 3 &&
           places[4].local_rank == 1 && places[4].local_size == 2,
           "local ranks follow rank order within a node");

    nnodes = -7;
    memset(ids + 2 * NSP_HOST_ID_BYTES, 0, NSP_HOST_ID_BYTES);
    tap_is_int(nsp_topo_place_ranks(ids, 5, places, &nnodes), NSP_ERR_INVALID_ARG,
               "an empty identity is rejected");
    tap_ok(strstr(nsp_last_error(), "rank 2") != NULL, "the message names rank 2: %s",
           nsp_last_error());
    memset(ids + 2 * NSP_HOST_ID_BYTES, 'a', NSP_HOST_ID_BYTES);
    tap_is_int(nsp_topo_place_ranks(ids, 5, places, &nnodes), NSP_ERR_INVALID_ARG,
               "an identity without NUL is rejected");
    tap_is_int(nnodes, -7, "outputs untouched on error");
    tap_is_int(nsp_topo_place_ranks(ids, 0, places, &nnodes), NSP_ERR_INVALID_ARG,
               "nranks 0 is rejected");
    tap_is_int(nsp_topo_place_ranks(NULL, 5, places, &nnodes), NSP_ERR_INVALID_ARG,
               "NULL ids are rejected");
    free(ids);
}

static int block_of(const int *node_of, int nranks)
{
    char             *ids = make_ids(node_of, nranks);
    nsp_topo_place_t *places = calloc((size_t)nranks, sizeof(*places));
    int               nnodes, block = -1;

    if (nsp_topo_place_ranks(ids, nranks, places, &nnodes) != NSP_OK ||
        nsp_topo_node_block(places, nranks, &block) != NSP_OK) {
        block = -1;
    }
    free(places);
    free(ids);
    return block;
}

static void test_node_block(void)
{
    int node_of[64];
    int n;

    for (int r = 0; r < 32; ++r) {
        node_of[r] = r / 8;
    }
    tap_is_int(block_of(node_of, 32), 8, "4 nodes of 8: block 8");
    tap_is_int(block_of(node_of, 8), 8, "1 node of 8: block 8");
    n = 0;
    for (int r = 0; r < 8; ++r) node_of[n++] = 0;
    for (int r = 0; r < 8; ++r) node_of[n++] = 1;
    for (int r = 0; r < 4; ++r) node_of[n++] = 2;
    tap_is_int(block_of(node_of, n), 4, "nodes of 8,8,4: block 4");
    n = 0;
    for (int r = 0; r < 8; ++r) node_of[n++] = 0;
    for (int r = 0; r < 6; ++r) node_of[n++] = 1;
    tap_is_int(block_of(node_of, n), 2, "nodes of 8,6: block 2 (a block of 6 would straddle)");
    for (int r = 0; r < 16; ++r) {
        node_of[r] = r % 2;
    }
    tap_is_int(block_of(node_of, 16), 1, "round-robin ranks: block 1");
    for (int r = 0; r < 12; ++r) {
        node_of[r] = (r / 4) % 2; /* A A A A B B B B A A A A */
    }
    tap_is_int(block_of(node_of, 12), 4, "blocks of 4 alternating hosts: block 4");
    tap_is_int(nsp_topo_node_block(NULL, 4, &n), NSP_ERR_INVALID_ARG, "NULL places rejected");
}

int main(void)
{
    nsp_log_set_level(NSP_LOG_ERROR);
    test_host_id();
    test_format_host_id();
    test_place_shapes();
    test_place_values();
    test_node_block();
    return tap_done();
}

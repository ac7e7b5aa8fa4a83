/*
 * Host identity and rank placement: which ranks share a node.
 *
 * Pure functions over the allgathered identities, so one process can test any
 * cluster shape (NSPCOMM_HOST_ID fakes several hosts on one machine).
 */
#include "topology/topology.h"

#include "common/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"

/* 64-bit FNV-1a of a string: shortens a hostname too long to keep whole. */
static uint64_t fnv1a64(const char *text)
{
    uint64_t hash = 1469598103934665603ull;

    for (; *text != '\0'; ++text) {
        hash ^= (unsigned char)*text;
        hash *= 1099511628211ull;
    }
    return hash;
}

/* Read the kernel boot id (a UUID, 36 chars) into boot_id[size]; "" if the
 * file is missing (not Linux, or a restricted container). */
static void read_boot_id(char *boot_id, size_t size)
{
    FILE  *file = fopen(BOOT_ID_PATH, "r");
    size_t len;

    boot_id[0] = '\0';
    if (file == NULL) {
        NSP_DEBUG("cannot read %s (%s): host identity is the hostname alone", BOOT_ID_PATH,
                  strerror(errno));
        return;
    }
    if (fgets(boot_id, (int)size, file) == NULL) {
        boot_id[0] = '\0';
    }
    fclose(file);
    len = strcspn(boot_id, "\r\n");
    boot_id[len] = '\0';
}

nsp_status_t nsp_topo_format_host_id(const char *host, const char *boot_id,
                                     char id[NSP_HOST_ID_BYTES])
{
    char   hash[18];
    size_t boot_len;
    size_t room;
    size_t host_len;
    size_t len;

    if (host == NULL || boot_id == NULL || id == NULL || host[0] == '\0') {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topo_format_host_id: need a non-empty "
                         "hostname and non-NULL boot_id and id");
    }
    /* A boot id is a UUID (36 chars); cap it so the hostname keeps some room. */
    boot_len = strnlen(boot_id, NSP_TOPO_BOOT_ID_MAX);
    /* room for the hostname: 63 chars minus "/" and the boot id */
    room = NSP_HOST_ID_BYTES - 1 - (boot_len > 0 ? 1 + boot_len : 0);
    host_len = strlen(host);
    memset(id, 0, NSP_HOST_ID_BYTES);
    if (host_len <= room) {
        memcpy(id, host, host_len);
        len = host_len;
    } else {
        /* first room - 17 characters, then "~" and 16 hex digits of the hash */
        snprintf(hash, sizeof(hash), "~%016llx", (unsigned long long)fnv1a64(host));
        memcpy(id, host, room - 17);
        memcpy(id + room - 17, hash, 17);
        len = room;
    }
    if (boot_len > 0) {
        id[len] = '/';
        memcpy(id + len + 1, boot_id, boot_len);
    }
    return NSP_OK;
}

/* "hostname/boot-id" of this host. */
static nsp_status_t make_host_id(char id[NSP_HOST_ID_BYTES])
{
    char host[256];
    char boot_id[64];

    if (gethostname(host, sizeof(host)) != 0) {
        return nsp_error(NSP_ERR_IO, "gethostname failed (%s): set NSPCOMM_HOST_ID to a "
                         "name unique to this host", strerror(errno));
    }
    host[sizeof(host) - 1] = '\0';
    read_boot_id(boot_id, sizeof(boot_id));
    return nsp_topo_format_host_id(host, boot_id, id);
}

nsp_status_t nsp_topo_host_id(char id[NSP_HOST_ID_BYTES])
{
    const char *fake;

    if (id == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topo_host_id: id is NULL");
    }
    fake = getenv("NSPCOMM_HOST_ID");
    if (fake != NULL && fake[0] != '\0') {
        if (strlen(fake) >= NSP_HOST_ID_BYTES) {
            return nsp_error(NSP_ERR_INVALID_ARG, "NSPCOMM_HOST_ID='%s' has %zu characters; "
                             "use at most %d", fake, strlen(fake), NSP_HOST_ID_BYTES - 1);
        }
        memset(id, 0, NSP_HOST_ID_BYTES);
        memcpy(id, fake, strlen(fake));
        return NSP_OK;
    }
    return make_host_id(id);
}

/* ---- placement ----------------------------------------------------------- */

/* Sort key for placement: identity, then rank. */
typedef struct rank_key {
    const char *id;
    int         rank;
} rank_key_t;

static int compare_rank_keys(const void *a, const void *b)
{
    const rank_key_t *ka = a;
    const rank_key_t *kb = b;
    int               cmp = strncmp(ka->id, kb->id, NSP_HOST_ID_BYTES);

    if (cmp != 0) {
        return cmp;
    }
    return (ka->rank > kb->rank) - (ka->rank < kb->rank);
}

static nsp_status_t check_ids(const char *ids, int nranks)
{
    for (int r = 0; r < nranks; ++r) {
        const char *id = ids + (size_t)r * NSP_HOST_ID_BYTES;

        if (id[0] == '\0') {
            return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topo_place_ranks: rank %d has an "
                             "empty host identity (was nsp_topo_host_id called on it?)", r);
        }
        if (memchr(id, '\0', NSP_HOST_ID_BYTES) == NULL) {
            return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topo_place_ranks: host identity of "
                             "rank %d is not NUL-terminated within %d bytes", r,
                             NSP_HOST_ID_BYTES);
        }
    }
    return NSP_OK;
}

/*
 * Sorting (id, rank) puts each host's ranks together in rank order, so a run
 * of equal ids is one node and the position in the run is the local rank;
 * the run's first rank orders the nodes. O(n log n) for any n.
 */
nsp_status_t nsp_topo_place_ranks(const char *ids, int nranks, nsp_topo_place_t *places,
                                  int *nnodes)
{
    rank_key_t  *keys;
    int         *run_node;   /* [nranks]: node index of the run starting at key i */
    int          count = 0;
    nsp_status_t status;

    if (ids == NULL || places == NULL || nnodes == NULL || nranks < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topo_place_ranks: ids=%p places=%p "
                         "nnodes=%p nranks=%d (need non-NULL pointers and nranks >= 1)",
                         (const void *)ids, (void *)places, (void *)nnodes, nranks);
    }
    NSP_CHECK(check_ids(ids, nranks));

    keys = calloc((size_t)nranks, sizeof(*keys));
    run_node = calloc((size_t)nranks, sizeof(*run_node));
    if (keys == NULL || run_node == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nsp_topo_place_ranks: no memory for %d ranks",
                           nranks);
        goto out_free;
    }
    for (int r = 0; r < nranks; ++r) {
        keys[r].id = ids + (size_t)r * NSP_HOST_ID_BYTES;
        keys[r].rank = r;
    }
    qsort(keys, (size_t)nranks, sizeof(*keys), compare_rank_keys);

    /* Node index by first appearance: mark each run's first rank, then number
     * the marked ranks in rank order. */
    for (int r = 0; r < nranks; ++r) {
        run_node[r] = -1;
    }
    for (int i = 0; i < nranks; ++i) {
        if (i == 0 || strncmp(keys[i].id, keys[i - 1].id, NSP_HOST_ID_BYTES) != 0) {
            run_node[keys[i].rank] = 0;
        }
    }
    for (int r = 0; r < nranks; ++r) {
        if (run_node[r] == 0) {
            run_node[r] = count++;
        }
    }

    for (int begin = 0; begin < nranks;) {
        int end = begin + 1;

        while (end < nranks && strncmp(keys[end].id, keys[begin].id, NSP_HOST_ID_BYTES) == 0) {
            ++end;
        }
        for (int i = begin; i < end; ++i) {
            nsp_topo_place_t *place = &places[keys[i].rank];

            place->node = run_node[keys[begin].rank];
            place->local_rank = i - begin;
            place->local_size = end - begin;
        }
        begin = end;
    }
    *nnodes = count;
    status = NSP_OK;

out_free:
    free(run_node);
    free(keys);
    return status;
}

static int gcd_int(int a, int b)
{
    while (b != 0) {
        int t = a % b;

        a = b;
        b = t;
    }
    return a;
}

/*
 * A block of `block` consecutive ranks [k*block, (k+1)*block) stays inside one
 * node iff every node boundary (a rank whose node differs from the previous
 * rank's) is a multiple of block; it is complete iff block divides nranks.
 * So the largest such block is gcd(nranks, all boundaries).
 */
nsp_status_t nsp_topo_node_block(const nsp_topo_place_t *places, int nranks, int *block)
{
    int g;

    if (places == NULL || block == NULL || nranks < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topo_node_block: places=%p block=%p "
                         "nranks=%d (need non-NULL pointers and nranks >= 1)",
                         (const void *)places, (void *)block, nranks);
    }
    g = nranks;
    for (int r = 1; r < nranks; ++r) {
        if (places[r].node != places[r - 1].node) {
            g = gcd_int(g, r);
        }
    }
    *block = g;
    return NSP_OK;
}

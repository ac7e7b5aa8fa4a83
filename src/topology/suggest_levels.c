/*
 * Suggested level degrees of the nested tree (docs/design.md §1, §2): a pure function
 * of the rank count, the node block and the NVLink domain size.
 *
 * A level of degree d groups ranks [k*d, (k+1)*d). The degrees ascend from 1,
 * each divides the next (so groups nest), and the NVLink domain and the node
 * block appear as levels, so the levels up to the node never leave a node and
 * the levels above it are made of whole nodes.
 */
#include "topology/topology.h"

#include "common/log.h"

#include <stdio.h>
#include <string.h>

static int gcd_int(int a, int b)
{
    while (b != 0) {
        int t = a % b;

        a = b;
        b = t;
    }
    return a;
}

/* Smallest prime factor of n >= 2. */
static int smallest_factor(int n)
{
    for (int f = 2; (long long)f * f <= n; ++f) {
        if (n % f == 0) {
            return f;
        }
    }
    return n;
}

/*
 * Append the chain from `from` (already in out) up to `to` (from divides to):
 * multiply by the prime factors of to/from, smallest first, so the steps are
 * 2, 2, ..., then 3, ... (e.g. 8 -> 48: 16, 48). Stops above `limit`.
 */
static void append_chain(int from, int to, int limit, int *out, int *count)
{
    int value = from;
    int rest = to / from;

    while (rest > 1) {
        int f = smallest_factor(rest);

        value *= f;
        rest /= f;
        if (value > limit) {
            return;
        }
        out[(*count)++] = value;
    }
}

static void format_levels(const int *degrees, int count, char *text, size_t size)
{
    size_t used = 0;

    text[0] = '\0';
    for (int i = 0; i < count && used + 1 < size; ++i) {
        int n = snprintf(text + used, size - used, "%s%d", i > 0 ? "," : "", degrees[i]);

        if (n < 0) {
            break;
        }
        used += (size_t)n;
    }
}

nsp_status_t nsp_topology_suggest_levels(int nranks, int ranks_per_node, int gpus_per_domain,
                                         int max_degree, int *degrees, int capacity,
                                         int *nlevels)
{
    int  chain[NSP_TOPO_MAX_LEVELS]; /* at most 1 + log2(INT_MAX) entries */
    int  count = 0;
    int  limit;
    int  block;
    int  domain = 0;
    char text[NSP_TOPO_MAX_LEVELS * 12];

    if (nranks < 1 || ranks_per_node < 1 || gpus_per_domain < 0 || max_degree < 0 ||
        degrees == NULL || nlevels == NULL || capacity < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topology_suggest_levels: nranks=%d "
                         "ranks_per_node=%d gpus_per_domain=%d max_degree=%d degrees=%p "
                         "capacity=%d nlevels=%p (need nranks, ranks_per_node, capacity >= 1, "
                         "gpus_per_domain, max_degree >= 0, non-NULL outputs)", nranks,
                         ranks_per_node, gpus_per_domain, max_degree, (void *)degrees, capacity,
                         (void *)nlevels);
    }
    limit = (max_degree > 0 && max_degree < nranks) ? max_degree : nranks;

    /* Groups must be complete and inside a node: a block that does not divide
     * nranks would leave a partial group, so keep the largest one that does. */
    block = gcd_int(ranks_per_node, nranks);
    if (block != ranks_per_node) {
        NSP_DEBUG("levels: %d ranks per node do not divide %d ranks; node block %d", ranks_per_node,
                  nranks, block);
    }
    /* The NVLink domain is a level only if it nests inside the node block;
     * a domain at least as large as the block adds nothing we can align to. */
    if (gpus_per_domain > 1 && gpus_per_domain < block && block % gpus_per_domain == 0) {
        domain = gpus_per_domain;
    } else if (gpus_per_domain > 1 && gpus_per_domain != block) {
        NSP_DEBUG("levels: NVLink domain of %d GPUs does not nest in a node block of %d ranks; "
                  "not used as a level", gpus_per_domain, block);
    }

    chain[count++] = 1;
    if (domain > 1) {
        append_chain(1, domain, limit, chain, &count);
        append_chain(domain, block, limit, chain, &count);
    } else {
        append_chain(1, block, limit, chain, &count);
    }
    if (block <= limit) {
        append_chain(block, nranks, limit, chain, &count);
    }

    format_levels(chain, count, text, sizeof(text));
    if (count > capacity) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topology_suggest_levels: %d levels (%s) do "
                         "not fit in capacity %d; pass NSP_TOPO_MAX_LEVELS", count, text,
                         capacity);
    }
    memcpy(degrees, chain, (size_t)count * sizeof(*chain));
    *nlevels = count;
    NSP_INFO("levels for %d ranks (node block %d, NVLink domain level %d, largest allowed "
             "%d): %s", nranks, block, domain > 1 ? domain : block, limit, text);
    return NSP_OK;
}

nsp_status_t nsp_topo_levels_for_places(const nsp_topo_place_t *places, int nranks,
                                        int gpus_per_domain, int max_degree, int *degrees,
                                        int capacity, int *nlevels)
{
    int block;
    int min_local;
    int max_local;

    NSP_CHECK(nsp_topo_node_block(places, nranks, &block));
    min_local = max_local = places[0].local_size;
    for (int r = 1; r < nranks; ++r) {
        min_local = places[r].local_size < min_local ? places[r].local_size : min_local;
        max_local = places[r].local_size > max_local ? places[r].local_size : max_local;
    }
    if (block < min_local && gcd_int(min_local, nranks) == min_local && min_local == max_local) {
        NSP_WARN("ranks are not numbered node by node (nodes of %d ranks, node block %d): "
                 "levels above %d ranks cross nodes; number ranks node by node for "
                 "node-aligned levels", min_local, block, block);
    } else if (min_local != max_local) {
        NSP_INFO("nodes hold %d to %d ranks: node-aligned levels up to %d ranks", min_local,
                 max_local, block);
    }
    return nsp_topology_suggest_levels(nranks, block, gpus_per_domain, max_degree, degrees,
                                       capacity, nlevels);
}

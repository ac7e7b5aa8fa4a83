/*
 * nsp_topo: print this host's topology (or an hwloc XML's) and the level
 * degrees nspcomm would suggest for clusters of such hosts.
 *
 *   nsp_topo [--xml FILE] [--nodes N] [--ranks-per-node G] [--max-degree H]
 */
#include "nspcomm.h"
#include "nsp_opt.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *xml;
    int         nodes;           /* 0: print 1, 2, 4 and 8 nodes */
    int         ranks_per_node;  /* 0: GPUs of the host, or its cores without GPUs */
    int         max_degree;      /* 0: no limit */
} options_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: nsp_topo [--xml FILE] [--nodes N] [--ranks-per-node G] [--max-degree H]\n"
            "  --xml FILE          read an hwloc XML (lstopo --of xml) instead of this host\n"
            "                      (HWLOC_XMLFILE works too)\n"
            "  --nodes N           suggest levels for N nodes (default: 1, 2, 4, 8)\n"
            "  --ranks-per-node G  ranks per node (default: the host's NVIDIA GPUs, or its\n"
            "                      cores when it has none)\n"
            "  --max-degree H      largest degree allowed, e.g. the head count (default: none)\n");
}

/* A count in [0, 2^24] (checked: tools/nsp_opt.h); 0 or -1. */
static int parse_positive(const char *text, const char *name, int *value)
{
    return nsp_opt_int("nsp_topo", name, text, 0, 1 << 24, value) == NSP_OK ? 0 : -1;
}

static int parse_options(int argc, char **argv, options_t *opt)
{
    static const struct option longopts[] = {
        {"xml", required_argument, NULL, 'x'},
        {"nodes", required_argument, NULL, 'n'},
        {"ranks-per-node", required_argument, NULL, 'g'},
        {"max-degree", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c;

    memset(opt, 0, sizeof(*opt));
    while ((c = getopt_long(argc, argv, "x:n:g:m:h", longopts, NULL)) != -1) {
        int rc = 0;

        switch (c) {
        case 'x': opt->xml = optarg; break;
        case 'n': rc = parse_positive(optarg, "--nodes", &opt->nodes); break;
        case 'g': rc = parse_positive(optarg, "--ranks-per-node", &opt->ranks_per_node); break;
        case 'm': rc = parse_positive(optarg, "--max-degree", &opt->max_degree); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc != 0) {
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "nsp_topo: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    return 0;
}

static int print_levels(int nodes, int per_node, int domain, int max_degree)
{
    int  degrees[NSP_TOPO_MAX_LEVELS];
    int  nlevels = 0;
    int  ranks = nodes * per_node;
    char text[NSP_TOPO_MAX_LEVELS * 12] = "";

    if (nsp_topology_suggest_levels(ranks, per_node, domain, max_degree, degrees,
                                    NSP_TOPO_MAX_LEVELS, &nlevels) != NSP_OK) {
        fprintf(stderr, "nsp_topo: %s\n", nsp_last_error());
        return -1;
    }
    for (int i = 0; i < nlevels; ++i) {
        size_t used = strlen(text);

        snprintf(text + used, sizeof(text) - used, "%s%d", i ? "," : "", degrees[i]);
    }
    printf("%7d %7d  %s\n", nodes, ranks, text);
    return 0;
}

int main(int argc, char **argv)
{
    options_t                 opt;
    nsp_topology_t           *topo;
    const nsp_topo_summary_t *summary;
    int                       per_node;
    int                       rc = 0;
    char                      max_text[16] = "none";

    if (parse_options(argc, argv, &opt) != 0) {
        return 2;
    }
    if (nsp_topology_load(opt.xml, &topo) != NSP_OK ||
        nsp_topology_summary(topo, &summary) != NSP_OK) {
        fprintf(stderr, "nsp_topo: %s\n", nsp_last_error());
        return 1;
    }
    if (nsp_topology_print(topo, stdout) != NSP_OK) {
        rc = 1;
        goto out_free;
    }
    per_node = opt.ranks_per_node > 0 ? opt.ranks_per_node
               : summary->ngpus > 0  ? summary->ngpus
               : summary->cores > 0  ? summary->cores
                                     : 1;
    if (opt.max_degree > 0) {
        snprintf(max_text, sizeof(max_text), "%d", opt.max_degree);
    }
    printf("\n# suggested levels: %d ranks per node, NVLink domain %d GPUs, max degree %s\n",
           per_node, summary->gpus_per_domain, max_text);
    printf("#%6s %7s  %s\n", "nodes", "ranks", "levels");
    if (opt.nodes > 0) {
        rc |= print_levels(opt.nodes, per_node, summary->gpus_per_domain, opt.max_degree) != 0;
    } else {
        for (int nodes = 1; nodes <= 8; nodes *= 2) {
            rc |= print_levels(nodes, per_node, summary->gpus_per_domain, opt.max_degree) != 0;
        }
    }
out_free:
    nsp_topology_free(topo);
    return rc;
}

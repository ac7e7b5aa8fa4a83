/* A human summary of a topology, to a stream or to the log at INFO. */
#include "topology/topology.h"

#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>

/* Where lines go: a stream, or the log when stream is NULL. */
typedef struct printer {
    FILE *stream;
    int   failed;  /* a write to stream failed */
} printer_t;

static void emit(printer_t *p, const char *fmt, ...) NSP_PRINTF_(2, 3);

static void emit(printer_t *p, const char *fmt, ...)
{
    char    line[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (p->stream != NULL) {
        p->failed |= fprintf(p->stream, "%s\n", line) < 0;
    } else {
        NSP_INFO("%s", line);
    }
}

static void emit_gpu(printer_t *p, const nsp_topo_summary_t *s, int g)
{
    const nsp_topo_gpu_t *gpu = &s->gpus[g];
    char                  cuda[16];

    if (gpu->cuda_device >= 0) {
        snprintf(cuda, sizeof(cuda), "%d", gpu->cuda_device);
    } else {
        snprintf(cuda, sizeof(cuda), "-");
    }
    emit(p, "  gpu %d  %s  [%04x:%04x] class %04x  cuda %s  numa %d  package %d  cpus %s  "
         "nic %s (%s)%s%s", g, gpu->bus_id, gpu->vendor_id, gpu->device_id, gpu->class_id, cuda,
         gpu->numa_node, gpu->package, gpu->local_cpus[0] ? gpu->local_cpus : "-",
         gpu->nic >= 0 ? s->nics[gpu->nic].name : "-", nsp_topo_locality_name(gpu->nic_locality),
         gpu->name[0] ? "  " : "", gpu->name);
}

nsp_status_t nsp_topology_print(const nsp_topology_t *topo, FILE *out)
{
    const nsp_topo_summary_t *s;
    printer_t                 p = {out, 0};

    NSP_CHECK(nsp_topology_summary(topo, &s));
    emit(&p, "host %s (%s)", s->hostname[0] ? s->hostname : "?", s->source);
    emit(&p, "  %d packages, %d NUMA nodes, %d cores, %d PUs", s->packages, s->numa_nodes,
         s->cores, s->pus);
    emit(&p, "  %d NVIDIA GPUs (taken as one NVLink domain of %d: hwloc cannot see NVLink), "
         "%d NICs", s->ngpus, s->gpus_per_domain, s->nnics);
    for (int g = 0; g < s->ngpus; ++g) {
        emit_gpu(&p, s, g);
    }
    for (int n = 0; n < s->nnics; ++n) {
        const nsp_topo_nic_t *nic = &s->nics[n];

        emit(&p, "  nic %d  %-10s %-6s netdev %-10s bus %-12s numa %d  package %d", n, nic->name,
             nic->rdma ? "rdma" : "net", nic->netdev[0] ? nic->netdev : "-",
             nic->bus_id[0] ? nic->bus_id : "-", nic->numa_node, nic->package);
    }
    if (p.failed) {
        return nsp_error(NSP_ERR_IO, "nsp_topology_print: writing the summary failed");
    }
    return NSP_OK;
}

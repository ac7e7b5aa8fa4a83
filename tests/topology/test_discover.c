/* Host discovery (src/topology/discover.c) from the XML fixtures of this
 * directory, from HWLOC_XMLFILE, from malformed files, and from this host. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "config.h"

#include "nspcomm.h"
#include "common/log.h"
#include "../tap.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TOPO_FIXTURE_DIR
#define TOPO_FIXTURE_DIR "tests/topology"
#endif

static char fixture_dir[1024];

static const char *fixture(const char *name)
{
    static char path[1200];

    snprintf(path, sizeof(path), "%s/%s", fixture_dir, name);
    return path;
}

static nsp_topology_t *load_fixture(const char *name, const nsp_topo_summary_t **s)
{
    nsp_topology_t *topo = NULL;

    if (!tap_is_int(nsp_topology_load(fixture(name), &topo), NSP_OK, "load %s", name)) {
        tap_diag("%s", nsp_last_error());
        return NULL;
    }
    tap_is_int(nsp_topology_summary(topo, s), NSP_OK, "%s: summary", name);
    return topo;
}

static void check_levels_for(const nsp_topo_summary_t *s, int nodes, const char *want)
{
    int  degrees[NSP_TOPO_MAX_LEVELS];
    int  n = 0;
    char got[256] = "";

    nsp_topology_suggest_levels(nodes * s->ngpus, s->ngpus, s->gpus_per_domain, 0, degrees,
                                NSP_TOPO_MAX_LEVELS, &n);
    for (int i = 0; i < n; ++i) {
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%d", i ? "," : "", degrees[i]);
    }
    tap_is_str(got, want, "%d node(s) of this fixture: levels %s", nodes, want);
}

static void test_h100(void)
{
    static const char *const bus_ids[8] = {"0000:1a:00.0", "0000:1b:00.0", "0000:42:00.0",
                                           "0000:43:00.0", "0000:9a:00.0", "0000:9b:00.0",
                                           "0000:c2:00.0", "0000:c3:00.0"};
    static const char *const nic_names[5] = {"eno1", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"};
    const nsp_topo_summary_t *s;
    nsp_topology_t           *topo = load_fixture("h100-2s-8gpu.xml", &s);
    int                       bad_bus = 0, bad_kind = 0, bad_numa = 0, bad_nic = 0;

    if (topo == NULL) {
        return;
    }
    tap_is_str(s->hostname, "h100-node", "h100: hostname from the XML");
    tap_ok(s->from_xml && strstr(s->source, "h100-2s-8gpu.xml") != NULL, "h100: source %s",
           s->source);
    tap_is_int(s->packages, 2, "h100: 2 packages");
    tap_is_int(s->numa_nodes, 2, "h100: 2 NUMA nodes");
    tap_is_int(s->cores, 112, "h100: 112 cores");
    tap_is_int(s->pus, 224, "h100: 224 PUs");
    tap_is_int(s->ngpus, 8, "h100: 8 NVIDIA GPUs (the ASPEED VGA is not one)");
    tap_is_int(s->gpus_per_domain, 8, "h100: NVLink domain taken as the 8 GPUs");
    tap_is_int(s->nnics, 5, "h100: 5 NICs (4 ConnectX-7 + management Ethernet)");
    if (s->ngpus != 8 || s->nnics != 5) {
        nsp_topology_free(topo);
        return;
    }
    for (int g = 0; g < 8; ++g) {
        const nsp_topo_gpu_t *gpu = &s->gpus[g];

        bad_bus += strcmp(gpu->bus_id, bus_ids[g]) != 0;
        bad_kind += gpu->vendor_id != 0x10de || gpu->device_id != 0x2330 ||
                    gpu->class_id != 0x0302 || gpu->cuda_device != -1;
        bad_numa += gpu->numa_node != g / 4 || gpu->package != g / 4;
        bad_nic += gpu->nic != 1 + g / 2 || gpu->nic_locality != NSP_TOPO_LOCALITY_PCI_SWITCH;
    }
    tap_is_int(bad_bus, 0, "h100: GPU bus ids in PCI order (%s ... %s)", bus_ids[0], bus_ids[7]);
    tap_is_int(bad_kind, 0, "h100: vendor 10de, device 2330, class 0302, no CUDA ordinal (XML)");
    tap_is_int(bad_numa, 0, "h100: GPUs 0-3 on NUMA 0 / package 0, GPUs 4-7 on NUMA 1 / pkg 1");
    tap_is_int(bad_nic, 0, "h100: GPUs 2k, 2k+1 use mlx5_k behind their PCIe switch");
    tap_is_str(s->gpus[0].local_cpus, "0-55,112-167", "h100: GPU 0 local CPUs");
    tap_is_str(s->gpus[7].local_cpus, "56-111,168-223", "h100: GPU 7 local CPUs");
    tap_is_str(s->gpus[3].name, "GH100 [H100 SXM5 80GB]", "h100: PCI device name");
    for (int n = 0; n < 5; ++n) {
        tap_is_str(s->nics[n].name, nic_names[n], "h100: NIC %d is %s", n, nic_names[n]);
    }
    tap_ok(!s->nics[0].rdma && strcmp(s->nics[0].netdev, "eno1") == 0,
           "h100: eno1 is a plain network NIC");
    tap_ok(s->nics[1].rdma && strcmp(s->nics[1].netdev, "ibp28s0") == 0 &&
               strcmp(s->nics[1].bus_id, "0000:1c:00.0") == 0,
           "h100: mlx5_0 is RDMA, netdev ibp28s0, bus 0000:1c:00.0 (one NIC, two OS devices)");
    tap_ok(s->nics[3].numa_node == 1 && s->nics[3].package == 1, "h100: mlx5_2 on NUMA 1");
    check_levels_for(s, 1, "1,2,4,8");
    check_levels_for(s, 2, "1,2,4,8,16");
    check_levels_for(s, 4, "1,2,4,8,16,32");
    nsp_topology_free(topo);
}

static void test_pcie(void)
{
    const nsp_topo_summary_t *s;
    nsp_topology_t           *topo = load_fixture("pcie-2numa-4gpu.xml", &s);
    static const unsigned     classes[4] = {0x0300, 0x0300, 0x0302, 0x0302};
    int                       bad = 0;

    if (topo == NULL) {
        return;
    }
    tap_ok(s->packages == 1 && s->numa_nodes == 2 && s->cores == 32 && s->pus == 32,
           "pcie: 1 package, 2 NUMA nodes, 32 cores");
    tap_is_int(s->ngpus, 4, "pcie: 4 GPUs, class 0300 VGA ones included");
    tap_is_int(s->nnics, 2, "pcie: 2 NICs");
    if (s->ngpus != 4 || s->nnics != 2) {
        nsp_topology_free(topo);
        return;
    }
    for (int g = 0; g < 4; ++g) {
        bad += s->gpus[g].class_id != classes[g] || s->gpus[g].numa_node != g / 2 ||
               s->gpus[g].package != 0;
    }
    tap_is_int(bad, 0, "pcie: classes 0300,0300,0302,0302; NUMA 0,0,1,1; package 0");
    tap_ok(s->gpus[0].nic == 0 && s->gpus[1].nic == 1 &&
               s->gpus[0].nic_locality == NSP_TOPO_LOCALITY_HOST_BRIDGE,
           "pcie: GPUs on NUMA 0 spread over the two NICs of their host bridge");
    tap_ok(s->gpus[2].nic == 0 && s->gpus[3].nic == 1 &&
               s->gpus[2].nic_locality == NSP_TOPO_LOCALITY_PACKAGE,
           "pcie: GPUs on NUMA 1 reach them across NUMA (package locality), spread too");
    tap_is_str(nsp_topo_locality_name(s->gpus[2].nic_locality), "package", "locality name");
    nsp_topology_free(topo);
}

static void test_nogpu(void)
{
    const nsp_topo_summary_t *s;
    nsp_topology_t           *topo = load_fixture("host-1s-nogpu.xml", &s);

    if (topo == NULL) {
        return;
    }
    tap_ok(s->packages == 1 && s->numa_nodes == 1 && s->cores == 8 && s->pus == 16,
           "nogpu: 1 package, 1 NUMA node, 8 cores, 16 PUs");
    tap_is_int(s->ngpus, 0, "nogpu: no GPU (the BMC VGA is not NVIDIA)");
    tap_is_int(s->gpus_per_domain, 0, "nogpu: no NVLink domain");
    tap_ok(s->nnics == 1 && strcmp(s->nics[0].name, "enp1s0") == 0 && !s->nics[0].rdma &&
               s->nics[0].numa_node == 0,
           "nogpu: one Ethernet NIC enp1s0 on NUMA 0");
    nsp_topology_free(topo);
}

/* A copy of the first `keep` bytes of a fixture in a temporary file; with
 * at_line, cut back to the end of the last whole line (tags stay whole, so
 * hwloc's own parser must find the error). */
static int write_truncated(const char *name, long keep, int at_line, char *path, size_t size)
{
    FILE *in = fopen(fixture(name), "rb");
    FILE *out;
    int   fd;
    char *buf;

    snprintf(path, size, "/tmp/nsp_topo_trunc_XXXXXX");
    fd = mkstemp(path);
    if (in == NULL || fd < 0) {
        if (in != NULL) {
            fclose(in);
        }
        return -1;
    }
    out = fdopen(fd, "wb");
    buf = malloc((size_t)keep);
    if (out == NULL || buf == NULL || fread(buf, 1, (size_t)keep, in) != (size_t)keep) {
        free(buf);
        fclose(in);
        if (out != NULL) {
            fclose(out);
        }
        return -1;
    }
    while (at_line && keep > 0 && buf[keep - 1] != '\n') {
        --keep;
    }
    fwrite(buf, 1, (size_t)keep, out);
    free(buf);
    fclose(in);
    fclose(out);
    return 0;
}

static void expect_error(const char *path, nsp_status_t want, const char *needle,
                         const char *what)
{
    nsp_topology_t *topo = (nsp_topology_t *)&topo; /* must stay untouched */

    tap_is_int(nsp_topology_load(path, &topo), want, "%s: %s", what, nsp_status_string(want));
    tap_ok(strstr(nsp_last_error(), needle) != NULL, "%s: message says '%s': %s", what, needle,
           nsp_last_error());
    tap_ok(topo == (nsp_topology_t *)&topo, "%s: output untouched", what);
}

static void test_errors(void)
{
    char path[64];

    expect_error("/nonexistent/topo.xml", NSP_ERR_IO, "/nonexistent/topo.xml", "missing file");
    expect_error(fixture("bad-not-xml.xml"), NSP_ERR_PARSE, "not an hwloc topology",
                 "not XML at all");
    expect_error(fixture("bad-no-complete.xml"), NSP_ERR_PARSE, "complete_cpuset",
                 "object without complete_cpuset (would crash hwloc 2.9)");
    expect_error(fixture("bad-no-complete.xml"), NSP_ERR_PARSE, "line 4", "it names the line");
    if (write_truncated("h100-2s-8gpu.xml", 20000, 0, path, sizeof(path)) == 0) {
        expect_error(path, NSP_ERR_PARSE, "unterminated", "XML cut inside a tag");
        unlink(path);
    } else {
        tap_skip(3, "cannot write a temporary file");
    }
    if (write_truncated("h100-2s-8gpu.xml", 20000, 1, path, sizeof(path)) == 0) {
        expect_error(path, NSP_ERR_PARSE, "hwloc cannot parse", "XML cut between lines");
        unlink(path);
    } else {
        tap_skip(3, "cannot write a temporary file");
    }
    if (write_truncated("host-1s-nogpu.xml", 0, 0, path, sizeof(path)) == 0) {
        expect_error(path, NSP_ERR_PARSE, path, "empty file");
        unlink(path);
    } else {
        tap_skip(3, "cannot write a temporary file");
    }
    tap_is_int(nsp_topology_load(NULL, NULL), NSP_ERR_INVALID_ARG, "NULL output rejected");
    tap_is_int(nsp_topology_summary(NULL, NULL), NSP_ERR_INVALID_ARG, "summary of NULL rejected");
    tap_is_int(nsp_topology_print(NULL, stdout), NSP_ERR_INVALID_ARG, "print of NULL rejected");
    nsp_topology_free(NULL);
    tap_ok(1, "free(NULL) is a no-op");
}

static void test_env_and_print(void)
{
    nsp_topology_t           *topo = NULL;
    const nsp_topo_summary_t *s;
    FILE                     *out;
    char                      text[8192] = "";
    size_t                    len;

    setenv("HWLOC_XMLFILE", fixture("h100-2s-8gpu.xml"), 1);
    tap_is_int(nsp_topology_load(NULL, &topo), NSP_OK, "HWLOC_XMLFILE: loaded");
    if (topo != NULL && nsp_topology_summary(topo, &s) == NSP_OK) {
        tap_ok(s->ngpus == 8 && s->from_xml && strstr(s->source, "HWLOC_XMLFILE") != NULL,
               "HWLOC_XMLFILE: 8 GPUs, source '%s'", s->source);
        out = tmpfile();
        tap_is_int(nsp_topology_print(topo, out), NSP_OK, "print to a stream");
        rewind(out);
        len = fread(text, 1, sizeof(text) - 1, out);
        text[len] = '\0';
        fclose(out);
        tap_ok(strstr(text, "gpu 7  0000:c3:00.0") != NULL && strstr(text, "mlx5_3") != NULL &&
                   strstr(text, "2 packages, 2 NUMA nodes, 112 cores, 224 PUs") != NULL,
               "the printed summary lists counts, GPUs and NICs");
        tap_is_int(nsp_topology_print(topo, NULL), NSP_OK, "print to the log at INFO");
    } else {
        tap_skip(4, "HWLOC_XMLFILE load failed: %s", nsp_last_error());
    }
    nsp_topology_free(topo);
    setenv("HWLOC_XMLFILE", fixture("bad-no-complete.xml"), 1);
    topo = NULL;
    tap_is_int(nsp_topology_load(NULL, &topo), NSP_ERR_PARSE,
               "HWLOC_XMLFILE pointing to a bad file: a parse error, no crash");
    unsetenv("HWLOC_XMLFILE");
}

/* An XML declared to be this system (HWLOC_THISSYSTEM=1) goes through CUDA
 * matching: without a device (or with other bus ids) GPUs stay unmatched,
 * and nothing fails. */
static void test_thissystem_xml(void)
{
    nsp_topology_t           *topo = NULL;
    const nsp_topo_summary_t *s;
    int                       bad = 0;

    setenv("HWLOC_THISSYSTEM", "1", 1);
    tap_is_int(nsp_topology_load(fixture("h100-2s-8gpu.xml"), &topo), NSP_OK,
               "XML with HWLOC_THISSYSTEM=1 loads (CUDA matching runs)");
    unsetenv("HWLOC_THISSYSTEM");
    if (topo == NULL || nsp_topology_summary(topo, &s) != NSP_OK) {
        tap_skip(1, "load failed");
        return;
    }
    for (int g = 0; g < s->ngpus; ++g) {
        bad += s->gpus[g].cuda_device < -1;
    }
    tap_is_int(bad, 0, "CUDA ordinals are -1 or valid for all %d GPUs", s->ngpus);
    nsp_topology_free(topo);
}

/* The human summary as TAP diagnostics (what this host looks like). */
static void diag_summary(const nsp_topology_t *topo)
{
    char  *text = NULL;
    size_t size = 0;
    FILE  *out = open_memstream(&text, &size);

    if (out == NULL) {
        return;
    }
    nsp_topology_print(topo, out);
    fclose(out);
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        tap_diag("%s", line);
    }
    free(text);
}

static void test_this_host(void)
{
    nsp_topology_t           *topo = NULL;
    const nsp_topo_summary_t *s;
    cpu_set_t                 mask;
    int                       allowed = 0;
    int                       bad = 0;

    unsetenv("HWLOC_XMLFILE");
    if (!tap_is_int(nsp_topology_load(NULL, &topo), NSP_OK, "this host: loaded")) {
        tap_diag("%s", nsp_last_error());
        return;
    }
    nsp_topology_summary(topo, &s);
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
        allowed = CPU_COUNT(&mask);
    }
    tap_ok(!s->from_xml && strcmp(s->source, "this host") == 0, "this host: source");
    tap_ok(s->packages >= 1 && s->numa_nodes >= 1 && s->cores >= 1 && s->pus >= s->cores,
           "this host: %d packages, %d NUMA nodes, %d cores, %d PUs", s->packages,
           s->numa_nodes, s->cores, s->pus);
    tap_ok(s->pus >= allowed, "this host: at least the %d PUs this process may run on", allowed);
    for (int g = 0; g < s->ngpus; ++g) {
        unsigned d, b, v, f;

        bad += sscanf(s->gpus[g].bus_id, "%4x:%2x:%2x.%1x", &d, &b, &v, &f) != 4 ||
               strlen(s->gpus[g].bus_id) != 12;
    }
    tap_is_int(bad, 0, "this host: %d GPU bus ids well formed", s->ngpus);
    if (s->ngpus == 0) {
        tap_skip(1, "no NVIDIA GPU on this host: CUDA matching not exercised");
    } else {
#ifdef NSP_HAVE_CUDA
        int matched = 0;

        for (int g = 0; g < s->ngpus; ++g) {
            matched += s->gpus[g].cuda_device >= 0;
        }
        if (getenv("CUDA_VISIBLE_DEVICES") == NULL) {
            tap_is_int(matched, s->ngpus, "this host: every GPU matched to a CUDA ordinal");
        } else {
            tap_ok(matched <= s->ngpus, "this host: %d of %d GPUs visible to CUDA", matched,
                   s->ngpus);
        }
#else
        tap_skip(1, "built without CUDA: GPUs keep cuda_device -1");
#endif
    }
    diag_summary(topo);
    nsp_topology_free(topo);
}

int main(void)
{
    const char *src = getenv("NSP_TOP_SRCDIR");

    nsp_log_set_level(NSP_LOG_ERROR);
    if (src != NULL && src[0] != '\0') {
        snprintf(fixture_dir, sizeof(fixture_dir), "%s/tests/topology", src);
    } else {
        snprintf(fixture_dir, sizeof(fixture_dir), "%s", TOPO_FIXTURE_DIR);
    }
    test_h100();
    test_pcie();
    test_nogpu();
    test_errors();
    test_env_and_print();
    test_thissystem_xml();
    test_this_host();
    return tap_done();
}

/*
 * Host discovery with hwloc: counts, NVIDIA GPUs, NICs, and for each GPU its
 * NUMA node, package and nearest NIC. From this host or an hwloc XML file.
 *
 * hwloc reports errors as -1 with errno; they are translated here, at the
 * boundary, into nsp_status_t with the errno text in the message.
 */
#include "config.h"

#include "topology/topology.h"

#include "common/log.h"

#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NSP_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define NVIDIA_VENDOR_ID   0x10deu
#define PCI_CLASS_VGA      0x0300u
#define PCI_CLASS_3D       0x0302u
#define XML_MAX_BYTES      (64u << 20) /* refuse anything larger: not a topology */

struct nsp_topology {
    hwloc_topology_t   hw;
    nsp_topo_summary_t summary;
    nsp_topo_gpu_t    *gpus;     /* [summary.ngpus] */
    nsp_topo_nic_t    *nics;     /* [summary.nnics] */
    hwloc_obj_t       *gpu_objs; /* [ngpus]: the PCI device of each GPU */
    hwloc_obj_t       *nic_objs; /* [nnics]: the PCI device, or the OS device if not PCI */
};

/* ---- reading and checking an XML file ------------------------------------ */

static nsp_status_t read_file(const char *path, char **text, size_t *len)
{
    FILE        *file = fopen(path, "rb");
    char        *buf;
    long         size;
    nsp_status_t status = NSP_OK;

    if (file == NULL) {
        return nsp_error(NSP_ERR_IO, "cannot open topology XML '%s': %s", path,
                         strerror(errno));
    }
    if (fseek(file, 0, SEEK_END) != 0 || (size = ftell(file)) < 0 || fseek(file, 0, SEEK_SET)) {
        status = nsp_error(NSP_ERR_IO, "cannot read topology XML '%s': %s", path,
                           strerror(errno));
        goto out_close;
    }
    if ((unsigned long)size > XML_MAX_BYTES) {
        status = nsp_error(NSP_ERR_PARSE, "topology XML '%s' has %ld bytes, more than %u: not "
                           "an hwloc topology", path, size, XML_MAX_BYTES);
        goto out_close;
    }
    buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "no memory for topology XML '%s' (%ld bytes)",
                           path, size);
        goto out_close;
    }
    if (fread(buf, 1, (size_t)size, file) != (size_t)size) {
        status = nsp_error(NSP_ERR_IO, "short read on topology XML '%s'", path);
        free(buf);
        goto out_close;
    }
    buf[size] = '\0';
    *text = buf;
    *len = (size_t)size;
out_close:
    fclose(file);
    return status;
}

/* Does the tag [tag, end) carry attribute `name` (preceded by blank)? */
static int tag_has_attr(const char *tag, const char *end, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = tag + 1; p + n <= end; ++p) { /* tag[0] is '<': p[-1] is safe */
        if ((p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '\r') &&
            strncmp(p, name, n) == 0 && p[n] == '=') {
            return 1;
        }
    }
    return 0;
}

static int line_of(const char *text, const char *pos)
{
    int line = 1;

    for (const char *p = text; p < pos; ++p) {
        line += *p == '\n';
    }
    return line;
}

/*
 * hwloc 2.9 dereferences NULL when an object has a cpuset but no
 * complete_cpuset (same for nodesets), so refuse such files here with a
 * message instead of letting hwloc crash the process.
 */
static nsp_status_t check_xml(const char *path, const char *text)
{
    const char *tag;

    if (strstr(text, "<topology") == NULL) {
        return nsp_error(NSP_ERR_PARSE, "'%s' is not an hwloc topology XML (no <topology> "
                         "element); write one with `lstopo --of xml FILE`", path);
    }
    for (tag = strstr(text, "<object"); tag != NULL; tag = strstr(tag + 1, "<object")) {
        const char *end = strchr(tag, '>');
        static const char *const pairs[][2] = {{"cpuset", "complete_cpuset"},
                                               {"nodeset", "complete_nodeset"}};

        if (end == NULL) {
            return nsp_error(NSP_ERR_PARSE, "topology XML '%s' line %d: unterminated <object> "
                             "tag", path, line_of(text, tag));
        }
        for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); ++i) {
            if (tag_has_attr(tag, end, pairs[i][0]) && !tag_has_attr(tag, end, pairs[i][1])) {
                return nsp_error(NSP_ERR_PARSE, "topology XML '%s' line %d: object has %s but "
                                 "no %s (hwloc 2.9 crashes on such files); add the attribute "
                                 "or re-export with `lstopo --of xml`", path,
                                 line_of(text, tag), pairs[i][0], pairs[i][1]);
            }
        }
    }
    return NSP_OK;
}

/* ---- hwloc setup ---------------------------------------------------------- */

/*
 * On this host, leave out hwloc plugins we do not need: "pci" (libpciaccess,
 * which leaks; hwloc's Linux backend reads the same PCI tree from sysfs),
 * "opencl" and "gl" (they load vendor drivers or open an X display). Only
 * the PCI device names (from pci.ids) are lost.
 */
static nsp_status_t skip_host_plugins(hwloc_topology_t hw)
{
#if HWLOC_API_VERSION >= 0x00020100
    static const char *const skip[] = {"pci", "opencl", "gl"};

    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); ++i) {
        if (hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                          skip[i]) != 0) {
            return nsp_error(NSP_ERR_BACKEND, "hwloc cannot leave out its '%s' component: %s",
                             skip[i], strerror(errno));
        }
    }
#else
    (void)hw;
#endif
    return NSP_OK;
}

static nsp_status_t hwloc_open(const char *xml_path, hwloc_topology_t *out)
{
    hwloc_topology_t hw;
    char            *text = NULL;
    size_t           len = 0;
    nsp_status_t     status;

    if (xml_path != NULL) {
        NSP_CHECK(read_file(xml_path, &text, &len));
        NSP_CHECK_GOTO(check_xml(xml_path, text), status, out_free_text);
    }
    if (hwloc_topology_init(&hw) != 0) {
        status = nsp_error(NSP_ERR_BACKEND, "hwloc_topology_init failed: %s", strerror(errno));
        goto out_free_text;
    }
    /* GPUs and NICs are I/O objects, which hwloc drops by default. */
    if (hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
        status = nsp_error(NSP_ERR_BACKEND, "hwloc cannot keep I/O devices: %s",
                           strerror(errno));
        goto err_destroy;
    }
    if (text == NULL) {
        NSP_CHECK_GOTO(skip_host_plugins(hw), status, err_destroy);
    }
    if (text != NULL && hwloc_topology_set_xmlbuffer(hw, text, (int)len + 1) != 0) {
        status = nsp_error(NSP_ERR_PARSE, "hwloc cannot parse topology XML '%s': %s (run "
                           "`HWLOC_XML_VERBOSE=1 lstopo --input %s` to see why)", xml_path,
                           strerror(errno), xml_path);
        goto err_destroy;
    }
    if (hwloc_topology_load(hw) != 0) {
        if (text != NULL) {
            status = nsp_error(NSP_ERR_PARSE, "hwloc cannot load topology XML '%s': %s (run "
                               "`HWLOC_XML_VERBOSE=1 lstopo --input %s` to see why)", xml_path,
                               strerror(errno), xml_path);
        } else {
            status = nsp_error(NSP_ERR_BACKEND, "hwloc cannot discover this host: %s",
                               strerror(errno));
        }
        goto err_destroy;
    }
    free(text);
    *out = hw;
    return NSP_OK;

err_destroy:
    hwloc_topology_destroy(hw);
out_free_text:
    free(text);
    return status;
}

/* ---- locality ------------------------------------------------------------- */

/* How many objects of `type` (NUMA nodes or packages) share NUMA nodes or
 * CPUs with `within`; *last gets the OS index of the last one. */
static int count_near(hwloc_topology_t hw, hwloc_obj_type_t type, hwloc_obj_t within, int *last)
{
    hwloc_obj_t it = NULL;
    int         count = 0;

    while ((it = hwloc_get_next_obj_by_type(hw, type, it)) != NULL) {
        int near = type == HWLOC_OBJ_NUMANODE
                       ? hwloc_bitmap_intersects(it->nodeset, within->nodeset)
                       : hwloc_bitmap_intersects(it->cpuset, within->cpuset);

        if (near) {
            *last = it->os_index == HWLOC_UNKNOWN_INDEX ? (int)it->logical_index
                                                        : (int)it->os_index;
            ++count;
        }
    }
    return count;
}

/* OS index of the only NUMA node / package near an I/O object (through its
 * first non-I/O ancestor); -1 if none or several. */
static int only_local(hwloc_topology_t hw, hwloc_obj_t obj, hwloc_obj_type_t type)
{
    hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(hw, obj);
    int         index = -1;

    if (near == NULL || near->cpuset == NULL || near->nodeset == NULL) {
        return -1;
    }
    return count_near(hw, type, near, &index) == 1 ? index : -1;
}

/* Lowest common ancestor of a and b (hwloc's own helper needs normal objects),
 * and the number of tree edges between them through it. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b, int *hops)
{
    int up_a = 0;

    for (hwloc_obj_t x = a; x != NULL; x = x->parent, ++up_a) {
        int up_b = 0;

        for (hwloc_obj_t y = b; y != NULL; y = y->parent, ++up_b) {
            if (x == y) {
                *hops = up_a + up_b;
                return x;
            }
        }
    }
    *hops = -1;
    return NULL;
}

static nsp_topo_locality_t locality_between(hwloc_topology_t hw, hwloc_obj_t a, hwloc_obj_t b,
                                            int *hops)
{
    hwloc_obj_t lca = common_ancestor(a, b, hops);
    int         index;

    if (lca == NULL) {
        return NSP_TOPO_LOCALITY_SYSTEM;
    }
    if (lca->type == HWLOC_OBJ_PCI_DEVICE) {
        return NSP_TOPO_LOCALITY_PCI_SWITCH;
    }
    if (lca->type == HWLOC_OBJ_BRIDGE) {
        return lca->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST
                   ? NSP_TOPO_LOCALITY_HOST_BRIDGE
                   : NSP_TOPO_LOCALITY_PCI_SWITCH;
    }
    lca = hwloc_get_non_io_ancestor_obj(hw, lca);
    if (lca == NULL || lca->cpuset == NULL || lca->nodeset == NULL) {
        return NSP_TOPO_LOCALITY_SYSTEM;
    }
    if (count_near(hw, HWLOC_OBJ_NUMANODE, lca, &index) == 1) {
        return NSP_TOPO_LOCALITY_NUMA;
    }
    if (count_near(hw, HWLOC_OBJ_PACKAGE, lca, &index) == 1) {
        return NSP_TOPO_LOCALITY_PACKAGE;
    }
    return NSP_TOPO_LOCALITY_SYSTEM;
}

/* ---- GPUs ----------------------------------------------------------------- */

static int is_nvidia_gpu(hwloc_obj_t pci)
{
    return pci->attr->pcidev.vendor_id == NVIDIA_VENDOR_ID &&
           (pci->attr->pcidev.class_id == PCI_CLASS_3D ||
            pci->attr->pcidev.class_id == PCI_CLASS_VGA);
}

static void format_bus_id(hwloc_obj_t pci, char bus_id[NSP_TOPO_BUS_ID_BYTES])
{
    snprintf(bus_id, NSP_TOPO_BUS_ID_BYTES, "%04x:%02x:%02x.%01x",
             (unsigned)pci->attr->pcidev.domain & 0xffffu, pci->attr->pcidev.bus,
             pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

static void copy_name(char *dst, const char *src)
{
    snprintf(dst, NSP_TOPO_NAME_BYTES, "%s", src != NULL ? src : "");
}

static void fill_gpu(hwloc_topology_t hw, hwloc_obj_t pci, nsp_topo_gpu_t *gpu)
{
    hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(hw, pci);

    memset(gpu, 0, sizeof(*gpu));
    format_bus_id(pci, gpu->bus_id);
    gpu->vendor_id = pci->attr->pcidev.vendor_id;
    gpu->device_id = pci->attr->pcidev.device_id;
    gpu->class_id = pci->attr->pcidev.class_id;
    copy_name(gpu->name, hwloc_obj_get_info_by_name(pci, "PCIDevice"));
    gpu->cuda_device = -1;
    gpu->numa_node = only_local(hw, pci, HWLOC_OBJ_NUMANODE);
    gpu->package = only_local(hw, pci, HWLOC_OBJ_PACKAGE);
    if (near != NULL && near->cpuset != NULL &&
        hwloc_bitmap_list_snprintf(gpu->local_cpus, sizeof(gpu->local_cpus), near->cpuset) >=
            (int)sizeof(gpu->local_cpus)) {
        /* cut in the middle of a range: mark it rather than mislead */
        memcpy(gpu->local_cpus + sizeof(gpu->local_cpus) - 4, "...", 4);
    }
    gpu->nic = -1;
    gpu->nic_locality = NSP_TOPO_LOCALITY_NONE;
}

static int compare_pci(hwloc_obj_t a, hwloc_obj_t b)
{
    const struct hwloc_pcidev_attr_s *x = &a->attr->pcidev;
    const struct hwloc_pcidev_attr_s *y = &b->attr->pcidev;

    if (x->domain != y->domain) {
        return x->domain < y->domain ? -1 : 1;
    }
    if (x->bus != y->bus) {
        return x->bus < y->bus ? -1 : 1;
    }
    if (x->dev != y->dev) {
        return x->dev < y->dev ? -1 : 1;
    }
    return (x->func > y->func) - (x->func < y->func);
}

static int compare_pci_objs(const void *a, const void *b)
{
    return compare_pci(*(const hwloc_obj_t *)a, *(const hwloc_obj_t *)b);
}

static nsp_status_t find_gpus(nsp_topology_t *topo)
{
    hwloc_obj_t pci = NULL;
    int         count = 0;

    while ((pci = hwloc_get_next_pcidev(topo->hw, pci)) != NULL) {
        count += is_nvidia_gpu(pci);
    }
    if (count == 0) {
        return NSP_OK;
    }
    topo->gpus = calloc((size_t)count, sizeof(*topo->gpus));
    topo->gpu_objs = calloc((size_t)count, sizeof(*topo->gpu_objs));
    if (topo->gpus == NULL || topo->gpu_objs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "no memory for %d GPUs", count);
    }
    count = 0;
    while ((pci = hwloc_get_next_pcidev(topo->hw, pci)) != NULL) {
        if (is_nvidia_gpu(pci)) {
            topo->gpu_objs[count++] = pci;
        }
    }
    qsort(topo->gpu_objs, (size_t)count, sizeof(*topo->gpu_objs), compare_pci_objs);
    for (int i = 0; i < count; ++i) {
        fill_gpu(topo->hw, topo->gpu_objs[i], &topo->gpus[i]);
    }
    topo->summary.ngpus = count;
    return NSP_OK;
}

/* ---- NICs ----------------------------------------------------------------- */

static int is_nic_osdev(hwloc_obj_t osdev)
{
    return osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
           osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

/* The object a NIC is keyed by: its PCI device, or the OS device itself. */
static hwloc_obj_t nic_key(hwloc_obj_t osdev)
{
    return (osdev->parent != NULL && osdev->parent->type == HWLOC_OBJ_PCI_DEVICE)
               ? osdev->parent
               : osdev;
}

static int compare_nic_keys(const void *pa, const void *pb)
{
    hwloc_obj_t a = *(const hwloc_obj_t *)pa;
    hwloc_obj_t b = *(const hwloc_obj_t *)pb;
    int         a_pci = a->type == HWLOC_OBJ_PCI_DEVICE;
    int         b_pci = b->type == HWLOC_OBJ_PCI_DEVICE;

    if (a_pci != b_pci) {
        return a_pci ? -1 : 1;
    }
    if (a_pci) {
        return compare_pci(a, b);
    }
    return strcmp(a->name != NULL ? a->name : "", b->name != NULL ? b->name : "");
}

/* Merge one OS device into its NIC: the verbs name wins as `name`. */
static void add_osdev_to_nic(hwloc_obj_t osdev, nsp_topo_nic_t *nic)
{
    const char *name = osdev->name != NULL ? osdev->name : "";

    if (osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
        if (!nic->rdma) {
            copy_name(nic->name, name);
        }
        nic->rdma = 1;
    } else {
        if (nic->netdev[0] == '\0') {
            copy_name(nic->netdev, name);
        }
        if (nic->name[0] == '\0') {
            copy_name(nic->name, name);
        }
    }
}

static nsp_status_t find_nics(nsp_topology_t *topo)
{
    hwloc_obj_t osdev = NULL;
    int         nkeys = 0;
    int         count = 0;

    while ((osdev = hwloc_get_next_osdev(topo->hw, osdev)) != NULL) {
        nkeys += is_nic_osdev(osdev);
    }
    if (nkeys == 0) {
        return NSP_OK;
    }
    topo->nic_objs = calloc((size_t)nkeys, sizeof(*topo->nic_objs));
    topo->nics = calloc((size_t)nkeys, sizeof(*topo->nics));
    if (topo->nic_objs == NULL || topo->nics == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "no memory for %d network devices", nkeys);
    }
    /* one NIC per distinct key (a PCI function with ib0 and mlx5_0 is one NIC) */
    while ((osdev = hwloc_get_next_osdev(topo->hw, osdev)) != NULL) {
        hwloc_obj_t key = nic_key(osdev);
        int         seen = 0;

        if (!is_nic_osdev(osdev)) {
            continue;
        }
        for (int i = 0; i < count; ++i) {
            seen |= topo->nic_objs[i] == key;
        }
        if (!seen) {
            topo->nic_objs[count++] = key;
        }
    }
    qsort(topo->nic_objs, (size_t)count, sizeof(*topo->nic_objs), compare_nic_keys);
    for (int i = 0; i < count; ++i) {
        nsp_topo_nic_t *nic = &topo->nics[i];
        hwloc_obj_t     key = topo->nic_objs[i];

        if (key->type == HWLOC_OBJ_PCI_DEVICE) {
            format_bus_id(key, nic->bus_id);
        }
        nic->numa_node = only_local(topo->hw, key, HWLOC_OBJ_NUMANODE);
        nic->package = only_local(topo->hw, key, HWLOC_OBJ_PACKAGE);
        while ((osdev = hwloc_get_next_osdev(topo->hw, osdev)) != NULL) {
            if (is_nic_osdev(osdev) && nic_key(osdev) == key) {
                add_osdev_to_nic(osdev, nic);
            }
        }
    }
    topo->summary.nnics = count;
    return NSP_OK;
}

/*
 * Nearest NIC of each GPU. Score: RDMA NICs before plain network ones, then
 * closer locality, then fewer PCI hops; among equals the NIC serving the
 * fewest GPUs so far, then the lowest index, so GPUs spread over NICs that
 * are equally near (two GPUs and two NICs on one host bridge: one each).
 */
static nsp_status_t match_nics(nsp_topology_t *topo)
{
    int  nnics = topo->summary.nnics;
    int *load;

    if (nnics == 0 || topo->summary.ngpus == 0) {
        return NSP_OK;
    }
    load = calloc((size_t)nnics, sizeof(*load));
    if (load == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "no memory to match %d NICs", nnics);
    }
    for (int g = 0; g < topo->summary.ngpus; ++g) {
        int                 best = -1;
        int                 best_hops = 0;
        nsp_topo_locality_t best_loc = NSP_TOPO_LOCALITY_NONE;

        for (int n = 0; n < nnics; ++n) {
            int                 hops;
            nsp_topo_locality_t loc =
                locality_between(topo->hw, topo->gpu_objs[g], topo->nic_objs[n], &hops);
            int better;

            if (best < 0) {
                better = 1;
            } else if (topo->nics[n].rdma != topo->nics[best].rdma) {
                better = topo->nics[n].rdma;
            } else if (loc != best_loc) {
                better = loc < best_loc;
            } else if (hops != best_hops) {
                better = hops < best_hops;
            } else {
                better = load[n] < load[best];
            }
            if (better) {
                best = n;
                best_loc = loc;
                best_hops = hops;
            }
        }
        NSP_DEBUG("GPU %s: nearest NIC %s (%s, %d hops, %d GPUs before it)",
                  topo->gpus[g].bus_id, topo->nics[best].name, nsp_topo_locality_name(best_loc),
                  best_hops, load[best]);
        topo->gpus[g].nic = best;
        topo->gpus[g].nic_locality = best_loc;
        ++load[best];
    }
    free(load);
    return NSP_OK;
}

/* ---- CUDA ordinals -------------------------------------------------------- */

#ifdef NSP_HAVE_CUDA
static void match_cuda(nsp_topology_t *topo)
{
    int         ndev = 0;
    cudaError_t err;

    if (topo->summary.ngpus == 0 || !hwloc_topology_is_thissystem(topo->hw)) {
        return; /* an XML describes another host: its GPUs are not ours */
    }
    err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess) {
        NSP_DEBUG("no CUDA ordinals for %d GPUs: cudaGetDeviceCount: %s", topo->summary.ngpus,
                  cudaGetErrorString(err));
        (void)cudaGetLastError();
        return;
    }
    for (int dev = 0; dev < ndev; ++dev) {
        char     bus_id[32];
        unsigned domain, bus, slot, func;
        char     ours[NSP_TOPO_BUS_ID_BYTES];

        if (cudaDeviceGetPCIBusId(bus_id, (int)sizeof(bus_id), dev) != cudaSuccess ||
            sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &func) != 4) {
            (void)cudaGetLastError();
            continue;
        }
        snprintf(ours, sizeof(ours), "%04x:%02x:%02x.%01x", domain & 0xffffu, bus & 0xffu,
                 slot & 0xffu, func & 0xfu);
        for (int g = 0; g < topo->summary.ngpus; ++g) {
            if (strcmp(topo->gpus[g].bus_id, ours) == 0) {
                topo->gpus[g].cuda_device = dev;
            }
        }
    }
}
#else
static void match_cuda(nsp_topology_t *topo)
{
    (void)topo; /* built without CUDA: ordinals stay -1 */
}
#endif

/* ---- public API ----------------------------------------------------------- */

static void fill_counts(nsp_topology_t *topo, const char *xml_path, int from_env)
{
    nsp_topo_summary_t *s = &topo->summary;
    hwloc_obj_t         root = hwloc_get_root_obj(topo->hw);

    copy_name(s->hostname, hwloc_obj_get_info_by_name(root, "HostName"));
    if (xml_path == NULL) {
        snprintf(s->source, sizeof(s->source), "this host");
    } else {
        snprintf(s->source, sizeof(s->source), "%s%s", xml_path,
                 from_env ? " (HWLOC_XMLFILE)" : "");
    }
    s->from_xml = xml_path != NULL;
    s->pus = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_PU);
    s->cores = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_CORE);
    s->packages = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_PACKAGE);
    s->numa_nodes = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_NUMANODE);
}

nsp_status_t nsp_topology_load(const char *xml_path, nsp_topology_t **out)
{
    nsp_topology_t *topo;
    const char     *env = getenv("HWLOC_XMLFILE");
    int             from_env = 0;
    nsp_status_t    status;

    if (out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topology_load: topo is NULL");
    }
    if (xml_path == NULL && env != NULL && env[0] != '\0') {
        xml_path = env; /* load it ourselves, so it is checked like any XML */
        from_env = 1;
    }
    topo = calloc(1, sizeof(*topo));
    if (topo == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "no memory for a topology");
    }
    NSP_CHECK_GOTO(hwloc_open(xml_path, &topo->hw), status, err_free);
    fill_counts(topo, xml_path, from_env);
    NSP_CHECK_GOTO(find_gpus(topo), status, err_free);
    NSP_CHECK_GOTO(find_nics(topo), status, err_free);
    NSP_CHECK_GOTO(match_nics(topo), status, err_free);
    match_cuda(topo);
    topo->summary.gpus = topo->gpus;
    topo->summary.nics = topo->nics;
    topo->summary.gpus_per_domain = topo->summary.ngpus;
    NSP_INFO("topology of %s (%s): %d packages, %d NUMA nodes, %d cores, %d PUs, %d NVIDIA "
             "GPUs, %d NICs", topo->summary.hostname[0] ? topo->summary.hostname : "?",
             topo->summary.source, topo->summary.packages, topo->summary.numa_nodes,
             topo->summary.cores, topo->summary.pus, topo->summary.ngpus, topo->summary.nnics);
    *out = topo;
    return NSP_OK;

err_free:
    nsp_topology_free(topo);
    return status;
}

void nsp_topology_free(nsp_topology_t *topo)
{
    if (topo == NULL) {
        return;
    }
    if (topo->hw != NULL) {
        hwloc_topology_destroy(topo->hw);
    }
    free(topo->gpus);
    free(topo->nics);
    free(topo->gpu_objs);
    free(topo->nic_objs);
    free(topo);
}

nsp_status_t nsp_topology_summary(const nsp_topology_t *topo, const nsp_topo_summary_t **summary)
{
    if (topo == NULL || summary == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_topology_summary: topo=%p summary=%p",
                         (const void *)topo, (void *)summary);
    }
    *summary = &topo->summary;
    return NSP_OK;
}

const char *nsp_topo_locality_name(nsp_topo_locality_t locality)
{
    switch (locality) {
    case NSP_TOPO_LOCALITY_NONE:        return "none";
    case NSP_TOPO_LOCALITY_PCI_SWITCH:  return "pci-switch";
    case NSP_TOPO_LOCALITY_HOST_BRIDGE: return "host-bridge";
    case NSP_TOPO_LOCALITY_NUMA:        return "numa";
    case NSP_TOPO_LOCALITY_PACKAGE:     return "package";
    case NSP_TOPO_LOCALITY_SYSTEM:      return "system";
    }
    return "unknown";
}

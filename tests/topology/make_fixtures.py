#!/usr/bin/env python3
"""Write the hwloc XML fixtures of tests/topology (run from anywhere).

The fixtures are hand-designed machines, written in hwloc 2 XML so that
hwloc 2.9 loads them (`lstopo --input FILE` shows them):

  h100-2s-8gpu.xml     2 sockets x 56 cores x 2 threads, 1 NUMA node per socket,
                       8 NVIDIA H100 SXM5 (10de:2330, class 0302) behind 4 PCIe
                       switches, each switch also holding one ConnectX-7 (mlx5_N,
                       with its IPoIB netdev), plus a management Ethernet NIC and
                       an ASPEED BMC VGA (a display device that is not a GPU).
  host-1s-nogpu.xml    1 socket x 8 cores x 2 threads, one Ethernet NIC, BMC VGA.
  pcie-2numa-4gpu.xml  1 socket split in 2 NUMA nodes (Groups); 2 RTX 6000 Ada
                       (class 0300) on NUMA 0, 2 L40S (class 0302) on NUMA 1,
                       2 ConnectX-6 NICs on NUMA 0's host bridge (no switch).

Every object with a cpuset/nodeset also carries complete_cpuset/
complete_nodeset: hwloc 2.9 crashes on load without them.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def bitmap(bits):
    """hwloc bitmap text: 32-bit hex words, most significant first."""
    bits = set(bits)
    if not bits:
        return "0x0"
    words = []
    for w in range(max(bits) // 32, -1, -1):
        value = sum(1 << (b - 32 * w) for b in bits if 32 * w <= b < 32 * (w + 1))
        words.append("0x%08x" % value)
    return ",".join(words)


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0
        self.depth = 0

    def next_gp(self):
        self.gp += 1
        return self.gp

    def emit(self, text):
        self.lines.append("  " * self.depth + text)

    def open(self, attrs, leaf=False):
        text = "<object " + " ".join('%s="%s"' % kv for kv in attrs) + "%s>" % ("/" if leaf else "")
        self.emit(text)
        if not leaf:
            self.depth += 1

    def close(self):
        self.depth -= 1
        self.emit("</object>")

    def info(self, name, value):
        self.emit('<info name="%s" value="%s"/>' % (name, value))

    def sets(self, cpus, nodes, allowed=False):
        attrs = [("cpuset", bitmap(cpus)), ("complete_cpuset", bitmap(cpus))]
        if allowed:
            attrs.append(("allowed_cpuset", bitmap(cpus)))
        attrs += [("nodeset", bitmap(nodes)), ("complete_nodeset", bitmap(nodes))]
        if allowed:
            attrs.append(("allowed_nodeset", bitmap(nodes)))
        return attrs

    # ---- normal and memory objects ----
    def machine(self, cpus, nodes, hostname):
        self.open([("type", "Machine"), ("os_index", "0")] + self.sets(cpus, nodes, True)
                  + [("gp_index", self.next_gp())])
        for name, value in [("Backend", "Linux"), ("OSName", "Linux"), ("HostName", hostname),
                            ("Architecture", "x86_64"), ("hwlocVersion", "2.9.0")]:
            self.info(name, value)

    def package(self, index, cpus, nodes, model):
        self.open([("type", "Package"), ("os_index", index)] + self.sets(cpus, nodes)
                  + [("gp_index", self.next_gp())])
        self.info("CPUModel", model)

    def group(self, cpus, nodes):
        self.open([("type", "Group"), ("os_index", "0")] + self.sets(cpus, nodes)
                  + [("gp_index", self.next_gp()), ("kind", "1000"), ("subkind", "0")])

    def numa(self, index, cpus, mem_bytes):
        self.open([("type", "NUMANode"), ("os_index", index)] + self.sets(cpus, [index])
                  + [("gp_index", self.next_gp()), ("local_memory", mem_bytes)], leaf=True)

    def core(self, index, pus, node):
        self.open([("type", "Core"), ("os_index", index)] + self.sets(pus, [node])
                  + [("gp_index", self.next_gp())])
        for pu in pus:
            self.open([("type", "PU"), ("os_index", pu)] + self.sets([pu], [node])
                      + [("gp_index", self.next_gp())], leaf=True)
        self.close()

    # ---- I/O objects ----
    def host_bridge(self, first_bus, last_bus):
        self.open([("type", "Bridge"), ("gp_index", self.next_gp()), ("bridge_type", "0-1"),
                   ("depth", "0"), ("bridge_pci", "0000:[%02x-%02x]" % (first_bus, last_bus))])

    def pci_bridge(self, busid, depth, first_bus, last_bus):
        self.open([("type", "Bridge"), ("gp_index", self.next_gp()), ("bridge_type", "1-1"),
                   ("depth", depth), ("bridge_pci", "0000:[%02x-%02x]" % (first_bus, last_bus)),
                   ("pci_busid", busid), ("pci_type", "0604 [1000:c030] [1000:a064] b0"),
                   ("pci_link_speed", "31.507692")])

    def pcidev(self, busid, klass, vendor, device, sub, rev, vendor_name, device_name,
               speed="31.507692", leaf=False):
        self.open([("type", "PCIDev"), ("gp_index", self.next_gp()), ("pci_busid", busid),
                   ("pci_type", "%04x [%04x:%04x] [%s] %02x" % (klass, vendor, device, sub, rev)),
                   ("pci_link_speed", speed)])
        self.info("PCIVendor", vendor_name)
        self.info("PCIDevice", device_name)
        if leaf:
            self.close()

    def osdev(self, name, kind, infos=()):
        self.open([("type", "OSDev"), ("gp_index", self.next_gp()), ("name", name),
                   ("osdev_type", kind)])
        for key, value in infos:
            self.info(key, value)
        self.close()

    def text(self):
        return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'
                '<topology version="2.0">\n'
                + "\n".join("  " + line for line in self.lines)
                + "\n</topology>\n")


OSDEV_NETWORK = 2
OSDEV_OPENFABRICS = 3


def ethernet(w, busid, netdev, vendor=0x8086, device=0x1533, name="I210 Gigabit Network Connection"):
    w.pcidev(busid, 0x0200, vendor, device, "15d9:1533", 0x03, "Intel Corporation", name, "0.250000")
    w.osdev(netdev, OSDEV_NETWORK, [("Address", "3c:ec:ef:00:00:%02x" % (len(w.lines) % 256))])
    w.close()


def connectx(w, busid, index, netdev, device=0x1021, name="MT2910 Family [ConnectX-7]"):
    w.pcidev(busid, 0x0207, 0x15b3, device, "15b3:0041", 0x00, "Mellanox Technologies", name)
    w.osdev(netdev, OSDEV_NETWORK, [("Address", "00:00:10:29:fe:80:00:00:00:00:00:00:%02x" % index)])
    w.osdev("mlx5_%d" % index, OSDEV_OPENFABRICS,
            [("NodeGUID", "a088:c203:00%02x:0001" % index), ("Port1State", "4"),
             ("Port1LinkLayer", "InfiniBand")])
    w.close()


def bmc_vga(w, busid):
    w.pcidev(busid, 0x0300, 0x1a03, 0x2000, "15d9:1c48", 0x52, "ASPEED Technology, Inc.",
             "ASPEED Graphics Family", "0.000000", leaf=True)


def h100_node():
    """2 sockets, 8 H100 SXM5 behind 4 PCIe switches with 4 ConnectX-7."""
    w = Writer()
    cores_per_pkg, pkgs = 56, 2
    npus = cores_per_pkg * pkgs * 2

    def pus_of_pkg(p):
        # Linux numbering: first threads 0..111, second threads 112..223
        first = range(p * cores_per_pkg, (p + 1) * cores_per_pkg)
        return list(first) + [c + cores_per_pkg * pkgs for c in first]

    w.machine(range(npus), range(pkgs), "h100-node")
    nic = 0
    for p in range(pkgs):
        cpus = pus_of_pkg(p)
        w.package(p, cpus, [p], "Intel(R) Xeon(R) Platinum 8480C")
        w.numa(p, cpus, 1099511627776)
        for c in range(cores_per_pkg):
            cpu = p * cores_per_pkg + c
            w.core(c, [cpu, cpu + cores_per_pkg * pkgs], p)
        if p == 0:
            # management: Ethernet NIC and BMC VGA on their own host bridge
            w.host_bridge(0x00, 0x03)
            ethernet(w, "0000:01:00.0", "eno1")
            w.pci_bridge("0000:00:1c.0", 1, 0x02, 0x03)
            w.pci_bridge("0000:02:00.0", 2, 0x03, 0x03)
            bmc_vga(w, "0000:03:00.0")
            w.close()
            w.close()
            w.close()
        # two PCIe switches per socket; each: GPU, GPU, NIC on its downstream ports
        for base in ([0x18, 0x40] if p == 0 else [0x98, 0xc0]):
            w.host_bridge(base, base + 0x07)
            w.pci_bridge("0000:%02x:00.0" % base, 1, base + 1, base + 4)       # upstream port
            for port, kind in enumerate(["gpu", "gpu", "nic"]):
                bus = base + 2 + port
                w.pci_bridge("0000:%02x:%02x.0" % (base + 1, port), 2, bus, bus)  # downstream
                busid = "0000:%02x:00.0" % bus
                if kind == "gpu":
                    w.pcidev(busid, 0x0302, 0x10de, 0x2330, "10de:16c1", 0xa1, "NVIDIA Corporation",
                             "GH100 [H100 SXM5 80GB]", leaf=True)
                else:
                    connectx(w, busid, nic, "ibp%ds0" % bus)
                    nic += 1
                w.close()
            w.close()
            w.close()
        w.close()
    w.close()
    return w.text()


def nogpu_host():
    """1 socket x 8 cores x 2 threads, one Ethernet NIC, BMC VGA, no GPU."""
    w = Writer()
    w.machine(range(16), [0], "cpu-node")
    w.package(0, range(16), [0], "AMD EPYC 4344P 8-Core Processor")
    w.numa(0, range(16), 68719476736)
    for c in range(8):
        w.core(c, [c, c + 8], 0)
    w.host_bridge(0x00, 0x03)
    ethernet(w, "0000:01:00.0", "enp1s0")
    w.pci_bridge("0000:00:08.0", 1, 0x03, 0x03)
    bmc_vga(w, "0000:03:00.0")
    w.close()
    w.close()
    w.close()
    w.close()
    return w.text()


def pcie_2numa_node():
    """1 socket, 2 NUMA nodes; GPUs on both, both NICs on NUMA 0, no switches."""
    w = Writer()
    w.machine(range(32), [0, 1], "pcie-node")
    w.package(0, range(32), [0, 1], "AMD EPYC 9354 32-Core Processor")
    for g in range(2):
        cpus = list(range(16 * g, 16 * g + 16))
        w.group(cpus, [g])
        w.numa(g, cpus, 274877906944)
        for c in cpus:
            w.core(c, [c], g)
        if g == 0:
            w.host_bridge(0x40, 0x4f)
            for dev, bus in enumerate([0x41, 0x42]):
                w.pci_bridge("0000:40:%02x.0" % (dev + 1), 1, bus, bus)
                w.pcidev("0000:%02x:00.0" % bus, 0x0300, 0x10de, 0x26b1, "10de:16a1", 0xa1,
                         "NVIDIA Corporation", "AD102GL [RTX 6000 Ada Generation]", leaf=True)
                w.close()
            for index, bus in enumerate([0x43, 0x44]):
                w.pci_bridge("0000:40:%02x.0" % (index + 3), 1, bus, bus)
                connectx(w, "0000:%02x:00.0" % bus, index, "ibp%ds0" % bus, device=0x101b,
                         name="MT28908 Family [ConnectX-6]")
                w.close()
            w.close()
        else:
            w.host_bridge(0xc0, 0xcf)
            for dev, bus in enumerate([0xc1, 0xc2]):
                w.pci_bridge("0000:c0:%02x.0" % (dev + 1), 1, bus, bus)
                w.pcidev("0000:%02x:00.0" % bus, 0x0302, 0x10de, 0x26b9, "10de:1851", 0xa1,
                         "NVIDIA Corporation", "AD102GL [L40S]", leaf=True)
                w.close()
            w.close()
        w.close()
    w.close()
    w.close()
    return w.text()


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else HERE
    for name, text in [("h100-2s-8gpu.xml", h100_node()), ("host-1s-nogpu.xml", nogpu_host()),
                       ("pcie-2numa-4gpu.xml", pcie_2numa_node())]:
        with open(os.path.join(outdir, name), "w") as out:
            out.write(text)
    # Malformed inputs: an object without complete_cpuset (crashes hwloc 2.9
    # unless caught), and a file that is not XML at all.
    with open(os.path.join(outdir, "bad-no-complete.xml"), "w") as out:
        out.write(nogpu_host().replace(' complete_cpuset="0x0000ffff"', "", 1))
    with open(os.path.join(outdir, "bad-not-xml.xml"), "w") as out:
        out.write("this is not an hwloc topology\n<<<\n")


if __name__ == "__main__":
    main()

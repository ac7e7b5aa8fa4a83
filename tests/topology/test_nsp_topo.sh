#!/bin/sh
# perf/nsp_topo on the XML fixtures: prints the summary and suggested levels,
# and fails cleanly (exit 1, message, no crash) on a malformed XML.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
tool="$top_builddir/perf/nsp_topo"
fixtures="$top_srcdir/tests/topology"

if [ ! -x "$tool" ]; then
    echo "1..0 # SKIP $tool not built"
    exit 0
fi
out=$("$tool" --xml "$fixtures/h100-2s-8gpu.xml" 2>&1)
check "nsp_topo --xml h100 fixture succeeds" test $? -eq 0
check "it prints 8 GPUs and 5 NICs" sh -c 'echo "$1" | grep -q "8 NVIDIA GPUs" && echo "$1" | grep -q "5 NICs"' _ "$out"
check "GPU 0 at 0000:1a:00.0 uses mlx5_0 behind its switch" sh -c 'echo "$1" | grep "gpu 0 " | grep -q "0000:1a:00.0.*nic mlx5_0 (pci-switch)"' _ "$out"
check "4 nodes: levels 1,2,4,8,16,32" sh -c 'echo "$1" | grep -Eq "^ +4 +32  1,2,4,8,16,32$"' _ "$out"
out=$("$tool" --xml "$fixtures/h100-2s-8gpu.xml" --nodes 3 --max-degree 16 2>&1)
check "--nodes 3 --max-degree 16: 1,2,4,8" sh -c 'echo "$1" | grep -Eq "^ +3 +24  1,2,4,8$"' _ "$out"
out=$(HWLOC_XMLFILE="$fixtures/host-1s-nogpu.xml" "$tool" 2>&1)
check "HWLOC_XMLFILE works: no GPU, 8 cores" sh -c 'echo "$1" | grep -q "0 NVIDIA GPUs" && echo "$1" | grep -q "8 cores"' _ "$out"
out=$("$tool" --xml "$fixtures/bad-no-complete.xml" 2>&1)
rc=$?
check "malformed XML: exit status 1 (got $rc)" test $rc -eq 1
check "malformed XML: the message names complete_cpuset" sh -c 'echo "$1" | grep -q "no complete_cpuset"' _ "$out"
"$tool" --nodes x >/dev/null 2>&1
rc=$?
check "bad option value: exit status 2 (got $rc)" test $rc -eq 2
out=$("$tool" 2>&1)
check "this host: nsp_topo succeeds" test $? -eq 0
echo "$out" | sed 's/^/# /'
echo "1..$n"
exit $fail

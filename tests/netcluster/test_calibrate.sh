#!/bin/sh
# perf/nsp_calibrate on 4 forked local ranks: it writes a cluster file that
# nsp_cluster_load reads back (the tool loads it and says so) and that holds
# every key with where it came from; bad options exit 2.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
tool="$top_builddir/perf/nsp_calibrate"
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr
unset NSP_NETCLUSTER
if [ ! -x "$tool" ]; then
    echo "1..0 # SKIP $tool not built"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tool" --ranks 4 --bytes 65536 --reps 2 --kernel-tokens 2048 --out "$tmp/c.json" --name t4 >"$tmp/out" 2>"$tmp/err"
rc=$?
sed 's/^/# /' "$tmp/out"
[ $rc -eq 0 ] || grep -v WARN "$tmp/err" | tail -5 | sed 's/^/# stderr: /'
check "nsp_calibrate --ranks 4 succeeds (exit $rc)" test $rc -eq 0
check "it loads its file back with nsp_cluster_load" grep -q "nsp_cluster_load reads it back: t4, 4 ranks, 4 per node" "$tmp/out"
check "the file: every key, its _from, levels 2 and 4 inside the node" \
    python3 "$top_srcdir/tests/netcluster/check_cluster.py" "$tmp/c.json" 4 4
"$tool" --reps 0 >/dev/null 2>&1
rc=$?
check "--reps 0 is refused with exit 2 (got $rc)" test $rc -eq 2
echo "1..$n"
exit $fail

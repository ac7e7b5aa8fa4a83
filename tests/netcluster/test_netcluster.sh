#!/bin/sh
# Multi-node tests on a namespace cluster (scripts/netcluster.sh): 2 nodes x 4
# ranks and 4 nodes x 2 ranks, each node a network + UTS + mount namespace
# with a shaped veth uplink. The existing multi-rank test programs run
# unchanged from the hub namespace; their forked ranks enter their node
# (NSP_NETCLUSTER, tools/nc_enter.c), so shared memory serves a node and tcp
# over the shaped link crosses nodes. No NSPCOMM_HOST_ID anywhere.
# Needs root (CI runs as root); skips with the reason otherwise.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
nc="$top_srcdir/scripts/netcluster.sh"
P="nt$$-"
unset NSPCOMM_HOST_ID
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr

if [ "$(id -u)" != 0 ]; then
    echo "1..0 # SKIP needs root (network, UTS and mount namespaces, tc)"
    exit 0
fi
why=$("$nc" up -p "$P" -k 1 2>&1 >/dev/null)
rc=$?
"$nc" down -p "$P" >/dev/null 2>&1
if [ $rc -ne 0 ]; then
    echo "1..0 # SKIP cannot make namespaces here: $(echo "$why" | tail -1)"
    exit 0
fi
trap '"$nc" down -p "$P" >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM
log=$(mktemp)

# sub DESCRIPTION PROGRAM ARGS...: run a TAP program in the hub; ok when it
# exits 0 with no "not ok" (its lines become diagnostics).
sub() {
    desc=$1
    shift
    "$nc" exec -p "$P" hub "$@" >"$log.out" 2>"$log" </dev/null
    rc=$?
    sed 's/^/#   /' "$log.out"
    if [ $rc -ne 0 ] || grep -q "^not ok" "$log.out" || ! grep -q "^ok" "$log.out"; then
        tail -20 "$log" | sed 's/^/#   stderr: /'
        check "$desc (exit $rc)" false
    else
        check "$desc" true
    fi
}

# lanes_ok K: every rank's transport report (ucx_report.c) says shared
# memory (no tcp) to its own node and tcp alone to the other nodes.
lanes_ok() {
    python3 - "$1" "$log" <<'EOF'
import re, sys
k, lines = int(sys.argv[1]), [l for l in open(sys.argv[2]) if "reaches (peer" in l]
bad = []
for l in lines:
    me = int(re.search(r"rank (\d+) of (\d+)", l).group(1))
    for peer, star, lanes in re.findall(r"(\d+)(\*?):\{([^}]*)\}", l.split(") ", 1)[1]):
        tls = {t.split("/")[0] for t in lanes.split()}
        remote = int(peer) * k // 8 != me * k // 8
        if remote != bool(star) or (remote and tls != {"tcp"}) or (not remote and "tcp" in tls):
            bad.append("rank %d -> %s: %s%s" % (me, peer, lanes, " (other host)" if star else ""))
print("# %d reports, %d wrong %s" % (len(lines), len(bad), bad[:3]))
sys.exit(0 if len(lines) == 8 and not bad else 1)
EOF
}

for k in 2 4; do
    per=$((8 / k))
    if ! "$nc" up -p "$P" -k "$k" >/dev/null 2>"$log"; then
        sed 's/^/# /' "$log"
        check "$k nodes: netcluster.sh up" false
        continue
    fi
    rm -f "$log".rank.*
    NSPCOMM_LOG_LEVEL=INFO NSPCOMM_LOG_FILE="$log.rank.%p" \
        sub "$k nodes x $per ranks: real hostnames, placement, tree" \
        "$top_builddir/tests/netcluster/test_nc_world" world "$k"
    cat "$log".rank.* >"$log" 2>/dev/null
    check "$k nodes: UCX reaches its node by shared memory, the others by tcp alone" lanes_ok "$k"
    sub "$k nodes x $per ranks: nested all-to-all against the reference" \
        "$top_builddir/tests/a2a/test_a2a_mp" 8
    sub "$k nodes: ring exchange (8, 6 and 4 ranks)" "$top_builddir/tests/comm/test_ring"
    sub "$k nodes x $per ranks: nested attention against the single-process reference" \
        "$top_builddir/tests/nested_attn/test_nested_attn_mp" 8
    if [ "$k" = 2 ]; then
        "$nc" exec -p "$P" hub "$top_builddir/perf/nsp_calibrate" --ranks 8 --bytes 65536 --kernel-tokens 2048 \
            --reps 2 --out "$log.cal.json" >"$log.out" 2>"$log"
        sed 's/^/#   /' "$log.out"
        check "2 nodes: nsp_calibrate measures levels 2, 4 inside a node and 8 across" \
            python3 "$top_srcdir/tests/netcluster/check_cluster.py" "$log.cal.json" 8 4
    fi
    sub "$k nodes: an uplink taken down mid-exchange fails every rank in time" \
        "$top_builddir/tests/netcluster/test_nc_world" linkdown "$k" "${P}1h"
    left=$(for ns in $(ip netns list | awk '{print $1}' | grep "^$P"); do ip netns pids "$ns"; done)
    check "$k nodes: no process left in the namespaces ($(echo $left))" test -z "$left"
    "$nc" down -p "$P" >/dev/null 2>&1
    check "$k nodes: netcluster.sh down leaves no namespace" \
        sh -c '! ip netns list | grep -q "^$1"' _ "$P"
done
"$nc" down -p "$P" >/dev/null 2>&1
check "down twice is safe" "$nc" down -p "$P"
rm -f "$log" "$log.out" "$log".rank.* "$log.cal.json"
echo "1..$n"
exit $fail

#!/bin/sh
# The nested all-to-all moved as runs (no pack, no unpack) over real
# processes: tests/a2a/test_a2a_mp (random nested and disjoint plans on 2,
# 4 and 8 ranks, both directions, replicas first and summed, Q- and KV-like
# tensors, odd sizes, checked against the independent reference) with
# every level that can move as runs doing so (NSPCOMM_A2A_IOV_MIN=0: its
# head rows are a few bytes), over both paths of the UCX backend (same-host
# copies with process_vm_readv/writev, and UCX's iov datatype with
# NSPCOMM_UCX_CMA=off), and with runs off (every level packed). The debug
# log must show levels moving as runs where they should, and none where
# they should not. TAP output.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
mp="$top_builddir/tests/a2a/test_a2a_mp"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

all_ok() { # the TAP of the run: a plan line, and no "not ok"
    grep -q "^1\.\.[1-9]" "$out" && ! grep -q "^not ok" "$out"
}
runs_seen() { grep -q "as runs" "$out"; }
no_runs() { ! grep -q "as runs" "$out"; }

for mode in cma ucx off; do
    case $mode in
    cma) env="NSPCOMM_A2A_IOV_MIN=0" ;;
    ucx) env="NSPCOMM_A2A_IOV_MIN=0 NSPCOMM_UCX_CMA=off" ;;
    off) env="NSPCOMM_A2A_IOV_MIN=off" ;;
    esac
    env $env NSPCOMM_LOG_LEVEL=DEBUG UCX_LOG_FILE=stderr "$mp" >"$out" 2>&1
    check "test_a2a_mp with $env: every case right" all_ok
    if [ "$mode" = off ]; then
        check "... no level moved as runs" no_runs
    else
        check "... levels moved as runs" runs_seen
    fi
    all_ok || grep "^not ok" "$out" | sed 's/^/# /'
done
echo "1..$n"
exit $fail

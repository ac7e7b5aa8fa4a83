#!/bin/sh
# Every number checked: each tool given a bad value must exit with status 2
# and one message that names the option (or the file) and what is allowed,
# before it runs, allocates or forks (tools/nsp_opt.h). Under the ASan build
# the same cases run with leak detection on: a leak or an ASan/UBSan report
# fails the case (its exit status is then not 2, and the report is matched).
# TAP output. The cases are the table of docs/design/reliability.md.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh"
b=$top_builddir
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"base": "h100", "ranks": 1073741824}\n' >"$tmp/huge-cluster.json"
export UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n
# Leak checks on in the ASan build; harmless elsewhere.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
# The memory refusals must not depend on this machine's memory.
export NSPCOMM_TOOL_MEM_LIMIT=4G

BAD_ENV=
# expect RC TOOL FRAGMENT ARGS...: TOOL ARGS exits with RC within 60 s, its
# stderr holds FRAGMENT, and no sanitizer spoke.
expect() {
    want_rc=$1 tool=$2 want=$3
    shift 3
    n=$((n + 1))
    if [ ! -x "$b/$tool" ]; then
        echo "ok $n # SKIP $tool not built"
        return
    fi
    # shellcheck disable=SC2086 # BAD_ENV: VAR=VALUE words for this case
    timeout 60 env $BAD_ENV "$b/$tool" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq "$want_rc" ] && grep -qF -- "$want" "$tmp/err" &&
        ! grep -qE "Sanitizer|runtime error" "$tmp/err"; then
        echo "ok $n - $(basename "$tool") $*: exit $rc, \"$(grep -F -- "$want" "$tmp/err" |
            head -n 1 | head -c 150)\""
    else
        echo "not ok $n - $(basename "$tool") $*: exit $rc (want $want_rc and \"$want\")"
        grep -v "UCX  WARN" "$tmp/err" | sed 's/^/# /' | head -n 20
        fail=1
    fi
}
# bad TOOL FRAGMENT ARGS...: refused before the run (exit 2).
bad() { expect 2 "$@"; }
# fails TOOL FRAGMENT ARGS...: a value only the ranks can judge (exit 1);
# the ranks free their world, with its UCX endpoints, on the way out.
fails() { expect 1 "$@"; }

sim=perf/nsp_sim
bad $sim "more than the 16777216 sequences" --tokens-per-rank 1e12
bad $sim "--tokens-per-rank 9e18: expected an integer in 1..1099511627776" --tokens-per-rank 9e18
bad $sim "--ranks 99999999999: expected an integer in 1..1048576" --ranks 99999999999
bad $sim "--batches 1000000000: expected an integer in 1..1000000" --batches 1000000000
bad $sim "cluster key \"ranks\" must be in [1, 1.04858e+06], got 1073741824" \
    --cluster-file "$tmp/huge-cluster.json"
bad $sim "--ranks 0: expected an integer" --ranks 0
bad $sim "--cluster-file /nonexistent.json: cannot read it" --cluster-file /nonexistent.json
bad $sim "--model-file /tmp: cannot read it: not a regular file" --model-file /tmp
bad $sim "--max-len abc: expected an integer" --max-len abc
bad $sim "--seed -1: expected an integer in 0.." --seed -1
bad $sim "--time-limit 0: expected a number in (0, 86400]" --time-limit 0
bad $sim "'bogus' is not one of: static, disjoint, nested" --planners static,bogus
bad $sim "--json /nonexistent/x: cannot write it: directory /nonexistent does not exist" \
    --json /nonexistent/x
bad $sim "--svg /nonexistent/x.svg: cannot write it" --svg /nonexistent/x.svg
bad $sim "unexpected argument" extra
bad $sim "needs about 16.0 GiB, more than the limit of 4.0 GiB (NSPCOMM_TOOL_MEM_LIMIT)" \
    --ranks 1048576 --tokens-per-rank 1
plan=perf/nsp_plan_perf
bad $plan "--seqs 2e9: expected an integer in 1..16777216" --seqs 2e9
bad $plan "more than the 16777216 sequences" --tokens 1e15
bad $plan "--ranks 0: expected an integer in 1..1048576" --ranks 0
bad $plan "--repeats 0: expected an integer in 1..1000000" --repeats 0
bad $plan "--time-limit nan: expected a number" --time-limit nan
bad $plan "'bogus' is not one of" --planners bogus
bad $plan "'nested' is given twice" --planners nested,nested
bad $plan "--json /nonexistent/x: cannot write it" --json /nonexistent/x
a2a=perf/nsp_a2a_perf
bad $a2a "--ranks 0: expected an integer in 1..256" --ranks 0
bad $a2a "--ranks 257: expected an integer in 1..256" --ranks 257
bad $a2a "--heads 0: expected an integer in 1..4096" --heads 0
bad $a2a "--head-dim -1: expected an integer in 1..65536" --head-dim -1
bad $a2a "-f 0: expected a number in [1, 1024]" -f 0
bad $a2a "-n 0: expected an integer in 1..1000000" -n 0
bad $a2a "-w -1: expected an integer in 0..1000000" -w -1
bad $a2a "-c 2: expected an integer in 0..1" -c 2
bad $a2a "-b 1X: expected a whole number of bytes" -b 1X
bad $a2a "-e 1.5: expected a whole number of bytes" -e 1.5
bad $a2a "-e 1024 is below -b 1048576" -e 1K
bad $a2a "--elem 3: expected one of: 2, 4" --elem 3
bad $a2a "--methods bogus: 'bogus' is not one of: nested, nested-oneshot, serial" --methods bogus
bad $a2a "-J /nonexistent/x: cannot write it: directory /nonexistent does not exist" \
    -J /nonexistent/x
bad $a2a "--workload /nonexistent: cannot read it" --workload /nonexistent
bad $a2a "--tokens-per-rank 9e18: expected an integer in 1..1073741824" --tokens-per-rank 9e18
bad $a2a "--timeout 0: expected a number in (0, 1e+06]" --timeout 0
bad $a2a "unknown model preset" --model bogus
bad $a2a "needs about" --ranks 4 -b 1G -e 1G
BAD_ENV=NSPCOMM_NRANKS=0
bad $a2a "NSPCOMM_NRANKS 0: expected an integer in 1..1048576"
BAD_ENV=
printf 'abc\n' >"$tmp/bad-workload.txt"
small="--ranks 2 -b 64K -e 64K -n 2 -w 1"
# shellcheck disable=SC2086
fails $a2a "rank 0: --round: the plan has" $small --round 99
# shellcheck disable=SC2086
fails $a2a "is not a length" $small --workload "$tmp/bad-workload.txt"
# shellcheck disable=SC2086
fails $a2a "cannot shard 3 heads" $small --cluster h800 --heads 3
topo=perf/nsp_topo
bad $topo "--nodes -1: expected an integer in 0..16777216" --nodes -1
bad $topo "--ranks-per-node x: expected an integer" --ranks-per-node x
demo=tools/nsp_demo
bad $demo "--ranks 1: expected an integer in 2.." --ranks 1
bad $demo "--heads 8/3: NKV = 3 does not divide NQ = 8" --heads 8/3
bad $demo "--heads (NKV) 0: expected an integer in 1..4096" --heads 8/0
bad $demo "--tokens-per-rank 1e12: expected an integer in 1..100000000" --tokens-per-rank 1e12
bad $demo "--json /nonexistent/x: cannot write it" --json /nonexistent/x
bad $demo "--cluster-file /nonexistent.json: cannot read it" --cluster-file /nonexistent.json
bad $demo "--timeout 0: expected a number in [1, 1e+06]" --timeout 0
echo "1..$n"
exit $fail

#!/usr/bin/env bash
# Build the libFuzzer harnesses of tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined) straight from the sources, run each
# for FUZZ_SECONDS (default 60) from its committed corpus, and print one row
# per target: executions, coverage (libFuzzer's cov = edges, ft = features),
# corpus size. Fails on any finding (crash, leak, timeout, out-of-memory,
# UBSan report, harness abort); the input is left in build-fuzz/ as
# <target>-crash-* etc.: fix the bug, copy the input into
# tests/fuzz/corpus/<target>/ (make check then replays it), rerun.
# FUZZ_TARGETS="json rdv" picks targets; FUZZ_CC the compiler (clang-14).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-60}
cc=${FUZZ_CC:-clang-14}
targets=${FUZZ_TARGETS:-json plan model_cluster workload rdv}
out=build-fuzz
mkdir -p "$out"
cflags=(-g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -fno-omit-frame-pointer -Iinclude -Isrc -Wall -Wno-unused-parameter)
common=(src/common/status.c src/common/log.c src/common/json.c)
# The whole planner library (the validation reads the planner table, which
# names every planner), without the MILP solvers: an empty config.h
# (build-fuzz/config.h) defines no NSP_HAVE_*, so milp_table.c lists none
# and the disjoint planner takes its greedy path.
planner=()
for f in src/planner/*.c; do
    case $f in src/planner/milp_cbc.c|src/planner/milp_glpk.c) ;; *) planner+=("$f") ;; esac
done
: > "$out/config.h"
cflags+=(-I"$out")

build() { # target -> build-fuzz/fuzz_<target>
    local t=$1 srcs=()
    case $t in
        rdv) srcs=(src/transport/rdv_wire.c) ;;
        json) srcs=("${common[@]}") ;;
        *) srcs=("${common[@]}" "${planner[@]}") ;;
    esac
    "$cc" "${cflags[@]}" -o "$out/fuzz_$t" "tests/fuzz/fuzz_$t.c" "${srcs[@]}" -lcrypto -lm -pthread
}

failed=0
summary="$out/summary.txt"
printf '%-14s %10s %10s %7s %7s %7s %s\n' target executions exec/s cov ft corpus result | tee "$summary"
for t in $targets; do
    build "$t"
    work="$out/corpus-$t"
    rm -rf "$work"; mkdir -p "$work"
    log="$out/fuzz_$t.log"
    rc=0
    NSPCOMM_LOG_FILE=/dev/null UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$out/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/$t-" \
        "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    result=ok
    if [ "$rc" -ne 0 ]; then
        result="FINDING (exit $rc, see $log)"
        failed=1
    fi
    printf '%-14s %10s %10s %7s %7s %7s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}" "$result" | tee -a "$summary"
done
if [ "$failed" -ne 0 ]; then
    echo "fuzz: findings above; inputs in $out/ (see the head of tests/fuzz/run.sh)" >&2
    for t in $targets; do grep -m3 -E 'ERROR|SUMMARY|runtime error' "$out/fuzz_$t.log" >&2 || true; done
    exit 1
fi
echo "fuzz: ${seconds} s per target, no finding"

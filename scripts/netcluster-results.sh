#!/usr/bin/env bash
# The namespace-cluster results of the README (docs/netcluster.md): for each
# link rate, a 2-node x 4-rank cluster (scripts/netcluster.sh), calibrated by
# perf/nsp_calibrate, then the demo (static, disjoint, nested; levels
# pipelined and serial side by side) planned with that calibration.
#   scripts/netcluster-results.sh [--build DIR] [--out DIR] [--reps R] [RATE...]
# Needs root. Writes DIR/cal-RATE.json, DIR/demo-RATE[-nothread].json and
# prints the tables (scripts/netcluster_table.py).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
out=$top/out/netcluster
reps=3
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) break ;;
    esac
done
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(4gbit 2gbit 1gbit 500mbit)
mkdir -p "$out"
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr
run() { # run RATE SUFFIX [ENV...]: calibrate and demo on a fresh cluster
    local rate=$1 suffix=$2
    shift 2
    env "$@" "$top/scripts/netcluster.sh" run -p "ncr$$-" -k 2 -r "$rate" sh -c '
        "$1/perf/nsp_calibrate" --ranks 8 --out "$2/cal-$3$4.json" --name "netcluster-2x4-$3" \
            --elem-bytes 4 --gemm kernel --reps 5 >"$2/cal-$3$4.txt" 2>/dev/null &&
        "$1/examples/nsp_demo" --no-tcp --batches 1 --reps "$5" --quiet \
            --cluster-file "$2/cal-$3$4.json" --json "$2/demo-$3$4.json" --svg "" \
            >"$2/demo-$3$4.txt" 2>"$2/demo-$3$4.err"' _ "$build" "$out" "$rate" "$suffix" "$reps"
}
for rate in "${rates[@]}"; do
    echo "# $rate" >&2
    run "$rate" ""
done
echo "# ${rates[-1]} without the progress thread" >&2
run "${rates[-1]}" "-nothread" NSPCOMM_PROGRESS_THREAD=off
python3 "$top/scripts/netcluster_table.py" "$out" "${rates[@]}"

#!/usr/bin/env bash
# The namespace-cluster results of the README (docs/netcluster.md): for each
# link rate, a 2-node x 4-rank cluster (scripts/netcluster.sh), calibrated by
# perf/nsp_calibrate, then the demo (static, disjoint, nested; levels
# pipelined and serial side by side) planned with that calibration.
#   scripts/netcluster-results.sh [--build DIR] [--out DIR] [--reps R]
#                                 [--shape KxG] [--no-nothread] [RATE...]
# --shape: K nodes x G ranks per node (default 2x4, the issue's row; others,
# e.g. 2x1 where no core runs more than one rank, get the suffix -KxG).
# Needs root. Writes DIR/cal-RATE[-KxG].json, DIR/demo-RATE[-KxG][-nothread].json
# and prints the tables (scripts/netcluster_table.py).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
out=$top/out/netcluster
reps=3
shape=2x4
nothread=1
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --no-nothread) nothread=0; shift ;;
    *) break ;;
    esac
done
case $shape in
[1-9]x[1-9] | [1-9]x[1-9][0-9]) ;;
*) echo "netcluster-results: --shape KxG, e.g. 2x4 (got '$shape')" >&2; exit 2 ;;
esac
nodes=${shape%x*}
ranks=$((nodes * ${shape#*x}))
tag=""
[ "$shape" = 2x4 ] || tag="-$shape"
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(4gbit 2gbit 1gbit 500mbit)
mkdir -p "$out"
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr
run() { # run RATE SUFFIX [ENV...]: calibrate and demo on a fresh cluster
    local rate=$1 suffix=$2
    shift 2
    # INFO on stderr (demo-*.err): each rank's transports and, at its end,
    # where its progress went (the progress thread's CPU and polls)
    env NSPCOMM_LOG_LEVEL=INFO "$@" "$top/scripts/netcluster.sh" run -p "ncr$$-" -k "$nodes" \
        -r "$rate" sh -c '
        "$1/perf/nsp_calibrate" --ranks "$6" --out "$2/cal-$3$4.json" --name "netcluster-$7-$3" \
            --elem-bytes 4 --gemm kernel --reps 5 >"$2/cal-$3$4.txt" 2>/dev/null &&
        "$1/examples/nsp_demo" --ranks "$6" --no-tcp --batches 1 --reps "$5" --quiet \
            --cluster-file "$2/cal-$3$4.json" --json "$2/demo-$3$4.json" --svg "" \
            >"$2/demo-$3$4.txt" 2>"$2/demo-$3$4.err"' _ "$build" "$out" "$rate" "$suffix" "$reps" \
        "$ranks" "$shape"
}
keys=()
for rate in "${rates[@]}"; do
    echo "# $rate ($shape, load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    run "$rate" "$tag"
    keys+=("$rate$tag")
done
if [ "$nothread" = 1 ]; then
    echo "# ${rates[-1]} without the progress thread" >&2
    run "${rates[-1]}" "$tag-nothread" NSPCOMM_PROGRESS_THREAD=off
    keys+=("${rates[-1]}$tag-nothread")
fi
python3 "$top/scripts/netcluster_table.py" "$out" "${keys[@]}"

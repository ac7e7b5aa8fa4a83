#!/usr/bin/env bash
# The namespace-cluster results (docs/results-cluster.md; the cluster: docs/guide/netcluster.md): for each
# link rate, a 2-node x 4-rank cluster (scripts/netcluster.sh), calibrated by
# perf/nsp_calibrate, then the demo (static, disjoint, nested; levels
# pipelined and serial side by side) planned with that calibration.
#   scripts/netcluster-results.sh [--build DIR] [--out DIR] [--reps R]
#                                 [--shape KxG] [--no-nothread] [--eta1]
#                                 [--before DIR] [RATE...]
# --shape: K nodes x G ranks per node (default 2x4, the issue's row; others,
# e.g. 2x1 where no core runs more than one rank, get the suffix -KxG).
# --eta1: per rate, the demo once more with the calibrated file's overlap set
# to 1 (-eta1): the planners then send long sequences across nodes, so the
# pipelining of an inter-node level is measured even where the calibrated
# eta keeps every group inside a node (same batch, same checks).
# --before DIR: per rate, on the same cluster, DIR's perf/nsp_calibrate and
# tools/nsp_demo too (another build, e.g. the base of a change to the
# calibration or the model: -before), the two builds in alternating order.
# The cluster prefix is NSP_NC_PREFIX if set (default ncr<pid>-).
# Needs root. Writes DIR/cal-RATE[-KxG].json, DIR/demo-RATE[-KxG][-nothread].json
# and prints the tables (scripts/netcluster_table.py).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
out=$top/out/netcluster
reps=3
shape=2x4
nothread=1
eta1=0
before=""
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --no-nothread) nothread=0; shift ;;
    --eta1) eta1=1; shift ;;
    --before) before=$(cd "$2" && pwd); shift 2 ;;
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
    env NSPCOMM_LOG_LEVEL=INFO "$@" "$top/scripts/netcluster.sh" run -p "${NSP_NC_PREFIX:-ncr$$-}" \
        -k "$nodes" -r "$rate" sh -c '
        b=$1 o=$2 key=$3$4 reps=$5 n=$6 shape=$7 eta1=$8 before=$9 flip=${10}
        demo() { # demo BUILD KEY: the demo of BUILD planned with cal-KEY.json
            d=$1/tools/nsp_demo   # examples/nsp_demo in builds before it moved
            [ -x "$d" ] || d=$1/examples/nsp_demo
            "$d" --ranks "$n" --no-tcp --batches 1 --reps "$reps" --quiet \
                --cluster-file "$o/cal-$2.json" --json "$o/demo-$2.json" --svg "" \
                >"$o/demo-$2.txt" 2>"$o/demo-$2.err"
        }
        pass() { # pass BUILD KEY: calibrate with BUILD, then its demo
            "$1/perf/nsp_calibrate" --ranks "$n" --out "$o/cal-$2.json" \
                --name "netcluster-$shape-$2" --elem-bytes 4 --gemm kernel --reps 5 \
                >"$o/cal-$2.txt" 2>/dev/null && demo "$1" "$2"
        }
        if [ -n "$before" ] && [ "$flip" = 1 ]; then
            pass "$before" "$key-before" || exit
        fi
        pass "$b" "$key" || exit
        if [ -n "$before" ] && [ "$flip" = 0 ]; then
            pass "$before" "$key-before" || exit
        fi
        [ "$eta1" = 1 ] || exit 0
        sed "s/\"overlap\": [-0-9][-0-9.e+]*/\"overlap\": 1/" "$o/cal-$key.json" >"$o/cal-$key-eta1.json"
        demo "$b" "$key-eta1"' _ "$build" "$out" "$rate" "$suffix" "$reps" "$ranks" "$shape" \
        "$eta1" "$before" "${flip:-0}"
}
keys=()
flip=0
for rate in "${rates[@]}"; do
    echo "# $rate ($shape, load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    run "$rate" "$tag"
    echo "# $rate done (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    [ -z "$before" ] || keys+=("$rate$tag-before")
    flip=$((1 - flip))
    keys+=("$rate$tag")
    [ "$eta1" = 0 ] || keys+=("$rate$tag-eta1")
done
if [ "$nothread" = 1 ]; then
    echo "# ${rates[-1]} without the progress thread" >&2
    eta1=0 before="" run "${rates[-1]}" "$tag-nothread" NSPCOMM_PROGRESS_THREAD=off
    keys+=("${rates[-1]}$tag-nothread")
fi
python3 "$top/scripts/netcluster_table.py" "$out" "${keys[@]}"

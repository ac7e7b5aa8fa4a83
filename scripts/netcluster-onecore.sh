#!/usr/bin/env bash
# One core per rank, real kernels, a real wire (docs/guide/netcluster.md, "One core per rank"):
# a namespace cluster of 2 nodes x 1 rank (scripts/netcluster.sh), each rank
# pinned to its own CPU (-c, NSP_LAUNCH_CPUS), the uplinks shaped to RATE.
# Per rate: nsp_calibrate on that cluster, then the demo planned with that
# calibration, in wall time, on two workloads, repeated and interleaved:
#   demo      the demo's own batches (--workload default, --batches B)
#   longtail  one long-tailed batch (--lengths): a sequence longer than a
#             rank's memory (so it needs both ranks) and short ones that fit
#             on one, as the planners plan it
#   longtail1 the same batch with a one-round nested plan in the nested
#             planner's place (--nested-plan; written by onecore_table.py:
#             the long sequence on both ranks, the short ones on one rank
#             each in the same round, so level 0 computes while level 1's
#             exchange moves), the plan the cost model prices lowest and
#             the nested planner does not find (docs/results-cluster.md, "The namespace cluster")
# A rank's memory is the demo's rule (--mem-from-ratio: 1.25 x 4096 tokens),
# not the calibrated file's (the host's RAM), so the long sequence cannot
# stay on one rank. Every demo run has --reps R timed steps per (planner,
# mode), planners and modes in rotating order, every result checked against
# the reference; the runs alternate the two workloads' order. Prints the
# table and writes OUT/onecore.json (scripts/onecore_table.py).
#
#   scripts/netcluster-onecore.sh [--build DIR] [--out DIR] [--reps R] [--runs K]
#                                 [--batches B] [--cpus LIST] [--lengths L1,L2,...]
#                                 [RATE...]
# Defaults: build/, out/onecore/, 5 reps, 2 runs, 1 demo batch, CPUs 0,1,
# the long-tailed batch below, rates 100mbit (the long sequence's exchange
# a little above its attention) and 1gbit (about a quarter of it): docs/
# netcluster.md section 8.1; about 12 and 5 minutes. Needs root. The
# cluster prefix is NSP_NC_PREFIX if set (default nc1c<pid>-).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
out=$top/out/onecore
reps=5
runs=2
batches=1
cpus=0,1
# 10112 tokens: 5632 > a rank's 5120 (--tokens-per-rank 4096 x --mem-ratio
# 1.25), the rest a tail of 1536 down to 64 (4480 tokens, 2240 per rank).
lengths=5632,1536,1024,768,512,256,128,128,64,64
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    -*) echo "netcluster-onecore: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    *) break ;;
    esac
done
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(100mbit 1gbit)
for x in "$reps" "$runs" "$batches"; do
    case $x in '' | *[!0-9]* | 0) echo "netcluster-onecore: --reps/--runs/--batches need a count >= 1" >&2; exit 2 ;; esac
done
[ -x "$build/tools/nsp_demo" ] && [ -x "$build/perf/nsp_calibrate" ] ||
    { echo "netcluster-onecore: build first (scripts/build.sh): no $build/tools/nsp_demo" >&2; exit 2; }
mkdir -p "$out"
for rate in "${rates[@]}"; do # this run's rates start afresh; others' files stay
    rm -f "$out/cal-$rate".* "$out/demo-$rate"-* "$out/load-$rate.txt" "$out/plan-$rate"-*
done
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n

# The load average every 5 s while the script runs (stopped on exit).
sampler=""
stop_sampler() { [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true; }
trap stop_sampler EXIT
(while :; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 5; done) >>"$out/load-all.txt" &
sampler=$!

for rate in "${rates[@]}"; do
    echo "# $rate (2 nodes x 1 rank, CPUs $cpus; load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    # INFO on stderr (*.err): each rank's transports, its progress thread's CPU
    env NSPCOMM_LOG_LEVEL=INFO "$top/scripts/netcluster.sh" run -p "${NSP_NC_PREFIX:-nc1c$$-}" \
        -k 2 -r "$rate" -c "$cpus" sh -c '
        b=$1 o=$2 rate=$3 reps=$4 runs=$5 batches=$6 lengths=$7 top=$8
        plan=$o/plan-$rate-oneround.json
        load() { cut -d" " -f1 /proc/loadavg; }
        demo() { # demo KEY FLAGS...: one demo run, its load before and after
            key=$1 rc=0; shift
            l0=$(load)
            "$b/tools/nsp_demo" --ranks 2 --no-tcp --reps "$reps" --quiet --mem-from-ratio \
                --cluster-file "$o/cal-$rate.json" --json "$o/demo-$key.json" --svg "" \
                "$@" >"$o/demo-$key.txt" 2>"$o/demo-$key.err" || rc=$?
            echo "$key $l0 $(load)" >>"$o/load-$rate.txt"
            return "$rc"
        }
        longtail() { # the plans of the planners, then the one-round nested plan
            demo "$rate-longtail-$1" --lengths "$lengths" || return
            [ -e "$plan" ] || python3 "$top/scripts/onecore_table.py" --one-round-plan \
                "$o/demo-$rate-longtail-$1.json" "$plan" 5120 || return
            demo "$rate-longtail1-$1" --lengths "$lengths" --nested-plan "$plan"
        }
        "$b/perf/nsp_calibrate" --ranks 2 --out "$o/cal-$rate.json" --name "onecore-2x1-$rate" \
            --elem-bytes 4 --gemm kernel --reps 5 >"$o/cal-$rate.txt" 2>"$o/cal-$rate.err" || exit
        for r in $(seq 1 "$runs"); do
            if [ $((r % 2)) = 1 ]; then
                demo "$rate-demo-$r" --batches "$batches" || exit
                longtail "$r" || exit
            else
                longtail "$r" || exit
                demo "$rate-demo-$r" --batches "$batches" || exit
            fi
        done' _ "$build" "$out" "$rate" "$reps" "$runs" "$batches" "$lengths" "$top"
    echo "# $rate done (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done
stop_sampler
sampler=""
python3 "$top/scripts/onecore_table.py" "$out" "${rates[@]}"

#!/usr/bin/env bash
# Emulated compute on the namespace cluster (docs/design/emulated-device.md
# section 4; docs/results-cluster.md, "Emulated compute"): more ranks than cores,
# every kernel taking the time a target GPU would (scaled to this wire),
# every byte of every exchange over UCX between namespace nodes.
#
# Per shape KxG (K nodes x G ranks, scripts/netcluster.sh) and RATE (the
# uplinks shaped to it), on a fresh cluster:
#   1. nsp_calibrate on that cluster: this wire's bw_inter, hence the scale
#      (target bw_inter / this one) written into the emulation FILE;
#   2. math check (first rate of each shape): the demo at tiny sizes with
#      "math": true, every run checked against the single-process reference;
#   3. the demo with --device emu:FILE ("math": false) on two workloads:
#        demo      the demo's own batch (--batches 1, its default sizes: 4096
#                  tokens per rank, a rank holds 1.25 x that, --mem-from-ratio)
#        longtail  one long-tailed batch (--lengths): a sequence of N x 1024
#                  tokens (needs half the ranks: a rank holds 1.25 x 2048)
#                  beside N/2 x 1024, N x 512 and 2N x 128-token ones
#      planners static, disjoint, nested, megatron, levels pipelined and
#      serial, --reps R timed steps each in rotating order (the demo's).
# Then scripts/emu_table.py writes OUT/emu.txt (the table), OUT/emu.json
# (nspcomm-emu-results-v1) and OUT/emu.svg, all titled "emulated compute".
#
#   scripts/emu-results.sh [--build DIR] [--out DIR] [--shapes 2x4,4x4] [--reps R]
#                          [--target h100] [RATE...]
# Defaults: build/, out/emu/, shapes 2x4 and 4x4, 3 reps, target h100, rates
# 1gbit and 250mbit. Needs root (namespaces). Prefix NSP_NC_PREFIX (default
# emu<pid>-). The load average is sampled every 5 s into OUT/load-all.txt and
# before/after every demo run into OUT/load.txt.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
out=$top/out/emu
shapes=2x4,4x4
reps=3
target=h100
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    -*) echo "emu-results: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    *) break ;;
    esac
done
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1gbit 250mbit)
case $reps in '' | *[!0-9]* | 0) echo "emu-results: --reps needs a count >= 1" >&2; exit 2 ;; esac
[ -x "$build/tools/nsp_demo" ] && [ -x "$build/perf/nsp_calibrate" ] ||
    { echo "emu-results: build first (scripts/build.sh): no $build/tools/nsp_demo" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/cal-* "$out"/demo-* "$out"/emu-*.json "$out/load.txt" "$out/load-all.txt"
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n

sampler=""
stop_sampler() { [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true; }
trap stop_sampler EXIT
(while :; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 5; done) >>"$out/load-all.txt" &
sampler=$!

first_rate=${rates[0]}
for shape in ${shapes//,/ }; do
    nodes=${shape%x*} per=${shape#*x}
    case "$nodes$per" in '' | *[!0-9]*) echo "emu-results: bad shape $shape (KxG)" >&2; exit 2 ;; esac
    n=$((nodes * per))
    for rate in "${rates[@]}"; do
        math=0
        [ "$rate" = "$first_rate" ] && math=1
        echo "# $shape at $rate ($n ranks on $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
        "$top/scripts/netcluster.sh" run -p "${NSP_NC_PREFIX:-emu$$-}" -k "$nodes" -r "$rate" sh -c '
            b=$1 o=$2 key=$3 n=$4 reps=$5 target=$6 math=$7
            load() { cut -d" " -f1 /proc/loadavg; }
            demo() { # demo NAME FLAGS...: one demo run, its load before and after
                name=$1; shift
                l0=$(load)
                "$b/tools/nsp_demo" --ranks "$n" --no-tcp --quiet --svg "" \
                    --cluster-file "$o/cal-$key.json" --json "$o/demo-$key-$name.json" \
                    "$@" >"$o/demo-$key-$name.txt" 2>"$o/demo-$key-$name.err" || return
                echo "$key-$name $l0 $(load)" >>"$o/load.txt"
            }
            "$b/perf/nsp_calibrate" --ranks "$n" --out "$o/cal-$key.json" --name "emu-$key" \
                --elem-bytes 4 --gemm kernel --reps 3 >"$o/cal-$key.txt" 2>"$o/cal-$key.err" || exit
            printf "{\"target\": \"%s\", \"here\": \"cal-%s.json\", \"math\": false}\n" \
                "$target" "$key" >"$o/emu-$key.json"
            if [ "$math" = 1 ]; then
                printf "{\"target\": \"%s\", \"here\": \"cal-%s.json\", \"math\": true}\n" \
                    "$target" "$key" >"$o/emu-$key-math.json"
                demo math --device "emu:$o/emu-$key-math.json" --heads 4/2 --head-dim 16 \
                    --tokens-per-rank 256 --max-len 1024 --scale 4 --batches 1 --reps 1 || exit
            fi
            lengths=$(python3 -c "import sys; n = int(sys.argv[1]); print(\",\".join(map(str,
                [n * 1024] + [1024] * (n // 2) + [512] * n + [128] * (2 * n))))" "$n")
            common="--device emu:$o/emu-$key.json --reps $reps --mem-from-ratio"
            # shellcheck disable=SC2086
            demo demo $common --batches 1 || exit
            # shellcheck disable=SC2086
            demo longtail $common --tokens-per-rank 2048 --lengths "$lengths" || exit
        ' _ "$build" "$out" "$shape-$rate" "$n" "$reps" "$target" "$math"
        echo "# $shape at $rate done (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    done
done
stop_sampler
sampler=""
python3 "$top/scripts/emu_table.py" "$out" --shapes "$shapes" "${rates[@]}"

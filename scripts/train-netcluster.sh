#!/usr/bin/env bash
# The PyTorch training run (examples/torch/train_nsp.py) on the
# network-namespace cluster (scripts/netcluster.sh, docs/guide/netcluster.md):
# K nodes x R ranks, every uplink shaped to RATE. One torchrun per node
# inside its namespaces (torchrun --nnodes K --node-rank i, rendezvous on
# node 0's address 198.18.0.1); gloo (the gradient all-reduce) and UCX's
# tcp (nspcomm's exchanges between nodes) both cross the shaped links;
# inside a node UCX uses shared memory. The planner's cluster file is
# measured first on the same cluster by perf/nsp_calibrate (float32).
#
#   scripts/train-netcluster.sh [-p PREFIX] [-k NODES] [-n RANKS_PER_NODE]
#                               [-r RATE] [-o OUT] [-P PRESET] [-s STEPS]
#                               [-e TARGET] [-- train_nsp.py options]
#
# Defaults: prefix nsptrain-, 2 nodes x 4 ranks, 1gbit, out/netcluster-train,
# preset default (-P long: long-context training, docs/results.md, "Training"),
# 10 steps per planner. -e TARGET: emulated compute (train_nsp.py --device
# emu:OUT/emu-RATE.json, docs/design/emulated-device.md): the attention
# kernels take the time TARGET (a cluster preset such as h100, or a cluster
# file) would take, scaled by TARGET's bw_inter over this cluster's
# calibrated one; timing mode (no math, no correctness check).
# Needs root (exits 77 otherwise). The cluster is torn down on exit. Exits
# nonzero when a correctness check of the run fails. Python: $NSP_PYTHON, or
# the checkout's .venv (scripts/setup-python.sh); the library: ./build, or
# $NSPCOMM_BUILD_DIR.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
prefix=nsptrain- nodes=2 per_node=4 rate=1gbit out=$top/out/netcluster-train preset=default
steps=10 target=
while getopts "p:k:n:r:o:P:s:e:" opt; do
    case $opt in
    p) prefix=$OPTARG ;;
    k) nodes=$OPTARG ;;
    n) per_node=$OPTARG ;;
    r) rate=$OPTARG ;;
    o) out=$OPTARG ;;
    P) preset=$OPTARG ;;
    s) steps=$OPTARG ;;
    e) target=$OPTARG ;;
    *) echo "usage: see the header of $0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" != "--" ] || shift
if [ "$(id -u)" != 0 ]; then
    echo "train-netcluster: needs root (network namespaces, tc)" >&2
    exit 77
fi
py=${NSP_PYTHON:-$top/.venv/bin/python}
[ -x "$py" ] || bash "$top/scripts/setup-python.sh"
build=${NSPCOMM_BUILD_DIR:-$top/build}
mkdir -p "$out"
export NSPCOMM_BUILD_DIR=$build PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH}
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1
nc() { bash "$top/scripts/netcluster.sh" "$@"; }
nc up -p "$prefix" -k "$nodes" -r "$rate" >/dev/null
trap 'nc down -p "$prefix" >/dev/null 2>&1 || true' EXIT INT TERM

# the cluster file: per-level bandwidth and latency of this cluster, float32
# bytes (the example exchanges float32); its kernel rates are replaced by
# the example's own measurement of the model's GEMMs and attention kernel
cal=$out/cal-$rate.json
nc exec -p "$prefix" hub "$build/perf/nsp_calibrate" --ranks $((nodes * per_node)) \
    --out "$cal" --name "netcluster-${nodes}x${per_node}-$rate" --elem-bytes 4 \
    --gemm kernel --reps 3 >"$out/cal-$rate.txt" 2>&1

device=()
if [ -n "$target" ]; then
    # "here" is relative to the file: the calibration just made
    printf '{"target": "%s", "here": "cal-%s.json", "math": false}\n' "$target" "$rate" \
        >"$out/emu-$rate.json"
    device=(--device "emu:$out/emu-$rate.json")
fi

port=$((20000 + RANDOM % 20000))
pids=()
for i in $(seq 0 $((nodes - 1))); do
    # gloo on the node's uplink (each namespace also has lo)
    GLOO_SOCKET_IFNAME=eth0 NSPCOMM_SOCKET_IFNAME=eth0 \
        nc exec -p "$prefix" "$i" "$py" -m torch.distributed.run --nnodes "$nodes" \
        --node-rank "$i" --nproc-per-node "$per_node" --master-addr 198.18.0.1 \
        --master-port "$port" "$top/examples/torch/train_nsp.py" --steps "$steps" \
        --preset "$preset" --cluster "$cal" --out "$out" ${device[@]+"${device[@]}"} "$@" >"$out/node$i.log" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
sed -n '/^# compute/p; /^# planner/,$p' "$out/node0.log"
[ "$rc" = 0 ] || { echo "train-netcluster: a node exited $rc (logs: $out/node*.log)" >&2; tail -20 "$out"/node*.log >&2; }
exit "$rc"

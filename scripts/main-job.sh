#!/usr/bin/env bash
# The main job on its embedded default (README command 1 ends here): the
# demo of nested sequence-parallel attention on 8 local ranks over UCX
# (docs/guide/demo.md). It calibrates this machine, plans batches of a real
# workload with static, disjoint and nested, runs one attention layer
# forward + backward per plan on forked ranks, checks every rank's outputs
# against the single-process reference, and prints the table (measured
# beside predicted). Writes out/demo.json, out/demo.svg and
# out/demo-cluster.json. Extra flags go to the demo (e.g. --batches 1).
# Exit status: the demo's (1 when a correctness check failed).
set -euo pipefail
cd "$(dirname "$0")/.."
demo=build/tools/nsp_demo
if [ ! -x "$demo" ]; then
    echo "main job: $demo is missing: run scripts/build.sh first" >&2
    exit 1
fi
mkdir -p out
# The demo finds data/workloads/ through NSPCOMM_DATA_DIR wherever the
# checkout is.
NSPCOMM_DATA_DIR="$PWD/data" exec "$demo" \
    --json out/demo.json --svg out/demo.svg --cluster-out out/demo-cluster.json "$@"

#!/bin/sh
# The training run (examples/torch/train_nsp.py) end to end, short: 4 ranks
# under torchrun on loopback, 2 steps per planner, 2 layers. Its own
# correctness checks (step-0 loss and gradients against one process, the
# planners' loss curves) decide its exit status; this test also checks the
# JSON it writes, and runs the long-context preset's cost model alone
# (--predict-only --preset long, one process, 3 batches). Skips like tests/python/test_python.sh (no torch, an ASan
# build); NSP_REQUIRE_TORCH=1 turns a missing torch into a failure.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
need="torch"
. "$top_srcdir/tests/python/torch_env.sh" # py; skips without torch
echo "1..5"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsp_train_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
port=$(( 20000 + $$ % 20000 ))
UCX_MEM_EVENTS=no UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1 NSPCOMM_TIMEOUT=60 \
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m torch.distributed.run --nproc-per-node 4 --master-port "$port" \
    "$top_srcdir/examples/torch/train_nsp.py" --steps 2 --layers 2 --out "$tmp" \
    >"$tmp/log" 2>&1
rc=$?
grep -E "^# (check|nested vs|loss curve)" "$tmp/log" | sed 's/^/# /'
[ $rc -eq 0 ] || tail -20 "$tmp/log" | sed 's/^/# /'
check "4 ranks, 2 steps per planner: the run's correctness checks pass (exit $rc)" test $rc -eq 0
check "it printed its step-0 and loss-curve check" grep -q "^# check: step-0 loss and every gradient match" "$tmp/log"
check "train_nsp.json parses and has every planner" "$py" -c "
import json, sys
d = json.load(open(sys.argv[1]))
text = json.dumps(d)
sys.exit(0 if all(p in text for p in ('static', 'disjoint', 'nested', 'megatron')) else 1)
" "$tmp/train_nsp.json"
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" "$top_srcdir/examples/torch/train_nsp.py" --predict-only --preset long --steps 3 \
    --cluster "$top_srcdir/examples/torch/clusters/netcluster-2x4-1gbit.json" --rates 8e10,2.5e10 \
    --out "$tmp" >"$tmp/predict.log" 2>&1
rc=$?
[ $rc -eq 0 ] || tail -20 "$tmp/predict.log" | sed 's/^/# /'
check "--predict-only --preset long: every planner predicted (exit $rc)" \
    grep -q "^# nested vs megatron: [0-9.]*x predicted" "$tmp/predict.log"
check "predict.json: the preset's workload and a positive step time per planner" "$py" -c "
import json, sys
d = json.load(open(sys.argv[1]))
ok = d['args']['workload'].endswith('wikipedia-flexsp.txt') and d['args']['max_len'] == 4096
ok = ok and all(d['planners'][k]['mean_pred_s'] > 0 for k in ('static', 'disjoint', 'nested', 'megatron'))
sys.exit(0 if ok else 1)
" "$tmp/predict.json"
exit $fail

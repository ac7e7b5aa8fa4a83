#!/bin/sh
# The training run (examples/torch/train_nsp.py) end to end, short: 4 ranks
# under torchrun on loopback, 2 steps per planner, 2 layers. Its own
# correctness checks (step-0 loss and gradients against one process, the
# planners' loss curves) decide its exit status; this test also checks the
# JSON it writes, and runs the long-context preset's cost model alone
# (--predict-only --preset long, one process, 3 batches), and the emulated
# device (--device emu:FILE, docs/design/emulated-device.md): math mode
# passes the same checks and gives the plain run's losses, timing mode
# runs on the emulated device and says so in its output and JSON;
# --timed-linear (the linear layers timed too) is refused without timing
# mode, sleeps its FLOPs at the emulated GEMM rate with zeros out, and a
# run with it says so. Skips like tests/python/test_python.sh (no torch, an
# ASan build); NSP_REQUIRE_TORCH=1 turns a missing torch into a failure.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
need="torch"
. "$top_srcdir/tests/python/torch_env.sh" # py; skips without torch
echo "1..12"
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
# --device emu:FILE: the attention on the emulated device (h100 timing scaled
# to the shipped 1 Gbit/s calibration). Math mode: every check runs and
# the losses are the plain run's (same seed, batches, weights; only the
# plan and summation order may differ); timing mode: no math, so no check,
# but the world runs the emulated device (its INFO line) and every output
# says so.
here="$top_srcdir/examples/torch/clusters/netcluster-2x4-1gbit.json"
case $here in /*) ;; *) here="$PWD/$here" ;; esac
printf '{"target": "h100", "here": "%s", "math": true}\n' "$here" >"$tmp/emu-math.json"
printf '{"target": "h100", "here": "%s"}\n' "$here" >"$tmp/emu-timing.json"
emu_run() { # emu_run NAME FILE PORT STEPS
    mkdir -p "$tmp/$1"
    UCX_MEM_EVENTS=no UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1 NSPCOMM_TIMEOUT=60 \
    NSPCOMM_LOG_LEVEL=INFO NSPCOMM_BUILD_DIR="$top_builddir" \
    PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
        "$py" -m torch.distributed.run --nproc-per-node 4 --master-port "$3" \
        "$top_srcdir/examples/torch/train_nsp.py" --steps "$4" --layers 2 --planners static,nested \
        --device "emu:$2" --out "$tmp/$1" >"$tmp/$1.log" 2>&1
}
emu_run math "$tmp/emu-math.json" $((port + 1)) 2
rc=$?
[ $rc -eq 0 ] || tail -20 "$tmp/math.log" | sed 's/^/# /'
check "--device emu:FILE, math mode: exit $rc, on the emulated device, checks pass, labelled" sh -c '
    test "$1" -eq 0 && grep -q "emulated device: .*, math)" "$2" &&
    grep -q "^# check: step-0 loss and every gradient match.*EMULATED COMPUTE (h100 x" "$2"' \
    _ $rc "$tmp/math.log"
check "math mode: compute emulated in the JSON, losses those of the plain run (1e-4)" "$py" -c "
import json, sys
e, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
c = e['compute']
ok = c['kind'] == 'emulated' and c['math'] is True and c['target'] == 'h100' and c['scale'] > 1
for k in ('static', 'nested'):
    a, b = e['planners'][k]['loss'], p['planners'][k]['loss']
    print('# %s: emulated math %s, CPU %s' % (k, a, b))
    ok = ok and len(a) == len(b) == 2 and all(abs(x - y) <= 1e-4 * abs(y) for x, y in zip(a, b))
sys.exit(0 if ok else 1)
" "$tmp/math/train_nsp.json" "$tmp/train_nsp.json"
emu_run timing "$tmp/emu-timing.json" $((port + 2)) 1
rc=$?
[ $rc -eq 0 ] || tail -20 "$tmp/timing.log" | sed 's/^/# /'
check "--device emu:FILE, timing mode: exit $rc, on the emulated device, says no check ran" sh -c '
    test "$1" -eq 0 && grep -q "emulated device: .*, timing only)" "$2" &&
    grep -q "^# check: not run: emulated compute in timing mode" "$2" &&
    ! grep -q "^# check: step-0" "$2"' _ $rc "$tmp/timing.log"
check "timing mode: every step line, table header, the SVG and the (strict) JSON say emulated compute" \
    "$py" -c "
import json, sys
log = open(sys.argv[2]).read().splitlines()
steps = [l for l in log if ' step ' in l and ' loss ' in l and not l.startswith('[')]
heads = [l for l in log if l.startswith('# planner ')]
ok = len(steps) == 2 and all('[emulated compute, loss not meaningful]' in l for l in steps)
ok = ok and len(heads) == 2 and all('EMULATED COMPUTE (h100 x' in l for l in heads)
def strict(c):  # NaN/Infinity are not JSON
    sys.exit('# train_nsp.json has %s' % c)
c = json.load(open(sys.argv[1]), parse_constant=strict)['compute']
ok = ok and c['kind'] == 'emulated' and c['math'] is False and c['link'] == 'inter'
ok = ok and 'EMULATED COMPUTE (h100 x' in open(sys.argv[3]).read()
sys.exit(0 if ok else 1)
" "$tmp/timing/train_nsp.json" "$tmp/timing.log" "$tmp/timing/train_nsp.svg"
# --timed-linear: refused without emulated timing mode (plain, math mode)
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" "$top_srcdir/examples/torch/train_nsp.py" --predict-only --timed-linear --steps 1 \
    --out "$tmp" >"$tmp/tl-plain.log" 2>&1
rc1=$?
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" "$top_srcdir/examples/torch/train_nsp.py" --predict-only --timed-linear --steps 1 \
    --device "emu:$tmp/emu-math.json" --out "$tmp" >"$tmp/tl-math.log" 2>&1
rc2=$?
check "--timed-linear without timing mode: refused with the reason (exit $rc1, $rc2)" sh -c '
    test "$1" -ne 0 && test "$2" -ne 0 &&
    grep -q "timed-linear needs emulated compute in timing mode" "$3" &&
    grep -q "timed-linear needs emulated compute in timing mode" "$4"' \
    _ $rc1 $rc2 "$tmp/tl-plain.log" "$tmp/tl-math.log"
check "TimedLinear: zeros of the right shape, sleeps 2 N in out / rate forward and twice back" \
    env NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -c "
import sys, time, torch
sys.argv = ['train_nsp']
sys.path.insert(0, '$top_srcdir/examples/torch')
import train_nsp as t
m = t.time_linears(torch.nn.Sequential(torch.nn.Linear(64, 32)), 2 * 50 * 64 * 32 / 0.05)
x = torch.randn(50, 64, requires_grad=True)
t0 = time.monotonic(); y = m(x); fwd = time.monotonic() - t0
t0 = time.monotonic(); y.sum().backward(); bwd = time.monotonic() - t0
w = m[0].weight
print('# forward %.3f s (0.05), backward %.3f s (0.10)' % (fwd, bwd))
ok = tuple(y.shape) == (50, 32) and not y.any() and fwd >= 0.05 and bwd >= 0.10
ok = ok and tuple(x.grad.shape) == (50, 64) and not x.grad.any() and tuple(w.grad.shape) == (32, 64)
sys.exit(0 if ok else 1)
"
printf '{"target": "h100", "here": "%s"}\n' "$here" >"$tmp/emu-tl.json"
mkdir -p "$tmp/tl"
UCX_MEM_EVENTS=no UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1 NSPCOMM_TIMEOUT=60 \
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m torch.distributed.run --nproc-per-node 4 --master-port $((port + 3)) \
    "$top_srcdir/examples/torch/train_nsp.py" --steps 1 --layers 2 --planners static,nested \
    --device "emu:$tmp/emu-tl.json" --timed-linear --out "$tmp/tl" >"$tmp/tl.log" 2>&1
rc=$?
[ $rc -eq 0 ] || tail -20 "$tmp/tl.log" | sed 's/^/# /'
check "--timed-linear run: exit $rc, its header and JSON say the linear layers are timed" \
    "$py" -c "
import json, sys
log = open(sys.argv[2]).read()
c = json.load(open(sys.argv[1]))['compute']
ok = sys.argv[3] == '0' and 'timing only, linear layers timed)' in log
ok = ok and 'the attention kernels and the linear layers (' in log
ok = ok and c['linear'] == 'timed' and c['gemm_flops'] > 0 and c['math'] is False
sys.exit(0 if ok else 1)
" "$tmp/tl/train_nsp.json" "$tmp/tl.log" $rc
exit $fail

#!/bin/sh
# The Hugging Face example (examples/hf/train_hf.py) end to end, short: a
# transformers Qwen3-MoE on 2 ranks under torchrun on loopback, 2 steps of
# static, nested and nested with every layer checkpointed, and --self-test
# (step 0 replayed with one rank's attention 1% off must fail the step-0
# check; replayed with every sequence on rank 0, the other rank passing a
# padding row, it must pass). The run's own checks (step-0 loss and
# gradients against one process with transformers' SDPA, loss curves)
# decide its exit status; this test also reads its JSON. Skips like
# tests/python/test_python.sh (no torch or transformers, an ASan build);
# NSP_REQUIRE_TORCH=1 turns a missing one into a failure.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
need="torch transformers"
. "$top_srcdir/tests/python/torch_env.sh" # py; skips without torch, transformers
echo "1..6"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsp_hf_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
port=$(( 20000 + ($$ + 7919) % 20000 ))
UCX_MEM_EVENTS=no UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1 NSPCOMM_TIMEOUT=60 HF_HUB_OFFLINE=1 \
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m torch.distributed.run --nproc-per-node 2 --master-port "$port" \
    "$top_srcdir/examples/hf/train_hf.py" --steps 2 --planners static,nested,nested+ckpt \
    --rates 2e9,8e8 --self-test --out "$tmp" >"$tmp/log" 2>&1
rc=$?
grep -E "^# (check|self-test|loss curve)" "$tmp/log" | sed 's/^/# /'
[ $rc -eq 0 ] || tail -20 "$tmp/log" | sed 's/^/# /'
check "2 ranks, 2 steps of 3 planners: the run's checks pass (exit $rc)" test $rc -eq 0
check "it printed its step-0 and loss-curve check" \
    grep -q "^# check: step-0 loss and every gradient match" "$tmp/log"
check "the self-test's 1% error was caught" grep -q "^# self-test: .*1% off.*: caught$" "$tmp/log"
check "ranks without tokens (padding rows) match the single process" \
    grep -q "^# self-test: every sequence on rank 0.*: pass$" "$tmp/log"
check "train_hf.json: every planner, step-0 errors within 1e-4" "$py" -c "
import json, sys
d = json.load(open(sys.argv[1]))
p = d['planners']
ok = set(p) == {'static', 'nested', 'nested+ckpt'} and not d['failed']
ok = ok and all(p[k]['step0']['worst_grad_err'] <= 1e-4 and p[k]['step0']['loss_err'] <= 1e-4
                for k in p)
sys.exit(0 if ok else 1)
" "$tmp/train_hf.json"
check "the checkpointed run recomputed the attention (it sent more bytes)" "$py" -c "
import json, sys
p = json.load(open(sys.argv[1]))['planners']
b = lambda k: sum(p[k]['bytes'].values())  # noqa: E731
sys.exit(0 if b('nested') > 0 and b('nested+ckpt') > b('nested') else 1)
" "$tmp/train_hf.json"
exit $fail

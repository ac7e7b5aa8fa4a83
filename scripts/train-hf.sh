#!/usr/bin/env bash
# The Hugging Face example (examples/hf/train_hf.py, examples/hf/README.md):
# transformers' Qwen3-MoE, small and random, on 4 local ranks with torchrun,
# 10 steps of each planner by default, with --self-test. Prints the tables
# (step time per planner, bytes per level, the step-0 and loss-curve checks)
# with the load average before and after, and writes out/hf/train_hf.json
# and .svg. Exits nonzero if a check fails. Options go to train_hf.py, e.g.
# scripts/train-hf.sh --steps 20 --planners static,nested,nested+ckpt.
# NSP_TRAIN_RANKS: ranks (default 4); NSP_PYTHON: a Python with torch and
# transformers (default: the checkout's .venv, made by scripts/setup-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${NSP_PYTHON:-.venv/bin/python}
[ -x "$py" ] || bash scripts/setup-python.sh
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1
export HF_HUB_OFFLINE=1
port=$(( 20000 + RANDOM % 20000 ))
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
"$py" -m torch.distributed.run --nproc-per-node "${NSP_TRAIN_RANKS:-4}" --master-port "$port" \
    examples/hf/train_hf.py --steps 10 --self-test --out out/hf "$@" || status=$?
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status

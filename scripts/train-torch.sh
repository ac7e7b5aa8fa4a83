#!/usr/bin/env bash
# The PyTorch training run (examples/torch/train_nsp.py, docs/guide/pytorch.md §6)
# on 8 local ranks with torchrun: a short version by default (10 steps per
# planner, about 2 minutes on the 2-core machine), run after the main job
# by scripts/setup-and-run.sh. The long run: scripts/train-torch.sh --steps 50.
# Over UCX tcp: UCX_TLS=self,tcp scripts/train-torch.sh. On the namespace
# cluster (root): scripts/train-netcluster.sh.
# Exits nonzero if a correctness check fails. Writes out/train_nsp.{json,svg}.
set -euo pipefail
cd "$(dirname "$0")/.."
# NSP_PYTHON: a Python with torch (default: the checkout's .venv)
py=${NSP_PYTHON:-.venv/bin/python}
[ -x "$py" ] || bash scripts/setup-python.sh
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1
port=$(( 20000 + RANDOM % 20000 ))
exec "$py" -m torch.distributed.run --nproc-per-node "${NSP_TRAIN_RANKS:-8}" --master-port "$port" \
    examples/torch/train_nsp.py --steps 10 --out out "$@"

#!/usr/bin/env bash
# README command 1: install packages, build, and run the main job on its
# embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/setup-python.sh   # torch + the nspcomm package into .venv (PyPI)
bash scripts/main-job.sh "$@"
bash scripts/train-torch.sh   # the short PyTorch training run (docs/guide/pytorch.md)

#!/usr/bin/env bash
# Configure and build nspcomm in ./build (CUDA and NCCL when /usr/local/cuda
# has them). Used by the README's commands; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
[ -x configure ] || ./autogen.sh
opts=()
if [ -x /usr/local/cuda/bin/nvcc ]; then opts+=(--with-cuda=/usr/local/cuda); fi
if [ -f /usr/local/cuda/include/nccl.h ] || [ -f /usr/include/nccl.h ]; then opts+=(--with-nccl=/usr/local/cuda); fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure "${opts[@]}" "$@"
make -j"$jobs"

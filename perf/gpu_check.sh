#!/usr/bin/env bash
# perf/gpu_check.sh — check nspcomm's GPU code on a machine with an NVIDIA GPU,
# in a few minutes, from a checkout (docs/guide/gpu.md).
#
#   bash perf/gpu_check.sh [--quick]
#
# A thin wrapper over the project's own build: it finds nvcc and NCCL,
# configures a build tree with them (./configure --with-cuda --with-nccl into
# $NSP_GPU_CHECK_DIR, default _build-gpucheck/; an existing one is reused),
# builds the GPU tests and perf/gpu_check there (make gpu-check-programs) and
# runs them (perf/gpu_check_run.sh, what `make gpu-check` runs), each step
# announced with its elapsed time:
#   1. tests/gpu/test_pack_map      the kernels' index maps vs pack.c (CPU)
#   2. tests/gpu/test_pack_cuda     CUDA kernels vs pack.c, bit-exact, random views
#   3. tests/gpu/test_streams_cuda  one stream per level, completing separately
#   4. tests/gpu/test_nccl_backend  one-rank NCCL world and tree: split,
#                                   alltoallv, sendrecv, allgather, barrier,
#                                   nsp_comm_from_nccl on ncclCommInitAll, the
#                                   nested all-to-all's device engine on CUDA
#   5. perf/gpu_check               kernels on realistic shapes: bit-exact, GB/s
#   6. tests/gpu/test_reduce_map    the device reductions' element math and the
#                                   memory types' tables (CPU)
#   7. tests/gpu/test_reduce_cuda   replica-sum and merge kernels vs their host
#                                   twins (fp32, bf16, fp16)
#   8. tests/gpu/test_nattn_cuda    nested attention on device memory, one rank:
#                                   the gated device exchange, forward + backward
#                                   (saved and stateless) vs the host reference,
#                                   fp32 within 1e-5 and bf16 within 1.6e-2; the
#                                   CUDA reduce ops' dK/dV conversions vs the host
#                                   ones, bit for bit; with 2+ GPUs, two ranks,
#                                   bf16 backward with replicated KV heads
#   9. perf/gpu_check_torch.py      the PyTorch op on CUDA tensors vs its CPU
#                                   path (fp32, bf16, fp16; forward, backward)
# and prints a PASS/FAIL summary; the exit status is non-zero if any step
# failed (a test that skips for want of a GPU counts as a failure here).
# Without a usable GPU it still builds everything (so the build is checked),
# says so, and exits 77 (skip) without running the GPU steps.
#
# Needs what the library's build needs (README, docs/guide/gpu.md): gcc, make,
# pkg-config, UCX (libucx-dev), hwloc (libhwloc-dev), OpenSSL's libcrypto
# (libssl-dev), autoconf/automake/libtool unless ./configure exists; and the
# CUDA toolkit (nvcc) and NCCL (headers and library: a toolkit's, a
# distribution package, or a pip wheel nvidia-nccl-*, whose lone
# libnccl.so.2 gets a libnccl.so link in the build tree).
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_HOME (default: found
# under CUDA_HOME, /usr or /usr/local), NSP_GPU_CHECK_DIR, and $OUT: when
# set, the logs are copied there.
set -u -o pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
t_start=$(date +%s)
quick=()
[ "${1:-}" = "--quick" ] && quick=(--quick)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
build=${NSP_GPU_CHECK_DIR:-$top/_build-gpucheck}
logs=$build/gpu-check-logs
jobs=$(nproc 2>/dev/null || echo 4)
results=()

step() { echo; echo "== [$(( $(date +%s) - t_start )) s] $*"; }
record() { # name rc
    if [ "$2" -eq 0 ]; then results+=("PASS  $1"); else results+=("FAIL  $1 (exit $2)"); fi
}
fail_now() { # name rc: a step the others need failed
    record "$1" "$2"
    echo
    echo "== summary ($(( $(date +%s) - t_start )) s)"
    for r in "${results[@]}"; do echo "  $r"; done
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && [ -d "$logs" ]; then cp -r "$logs" "$OUT/" 2>/dev/null; fi
    echo "gpu_check.sh: FAIL"; exit 1
}

# ---------------------------------------------------------------------------
step "environment"
mkdir -p "$logs"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,mig.mode.current --format=csv 2>&1 | head -5
else
    echo "nvidia-smi: not found"
fi
NVCC=$CUDA_HOME/bin/nvcc
if [ ! -x "$NVCC" ]; then NVCC=$(command -v nvcc || true); fi
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
    echo "no nvcc under $CUDA_HOME/bin or on PATH: set CUDA_HOME"; fail_now "find nvcc" 1
fi
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
"$NVCC" --version | tail -2
record "find nvcc" 0
nccl_inc=""; nccl_lib=""
# NCCL from a toolkit, a Debian/Ubuntu package, or a pip wheel (nvidia-nccl-*).
wheel_dirs=$(ls -d /usr/local/lib/python3*/*-packages/nvidia/nccl /usr/lib/python3*/*-packages/nvidia/nccl \
             "$HOME"/.local/lib/python3*/site-packages/nvidia/nccl 2>/dev/null)
for d in ${NCCL_HOME:-} "$CUDA_HOME" /usr /usr/local $wheel_dirs; do
    [ -z "$d" ] && continue
    if [ -z "$nccl_inc" ] && [ -f "$d/include/nccl.h" ]; then nccl_inc=$d/include; fi
    for l in "$d/lib64" "$d/lib" "$d/lib/x86_64-linux-gnu" "$d/lib/aarch64-linux-gnu"; do
        if [ -z "$nccl_lib" ] && { [ -e "$l/libnccl.so" ] || [ -e "$l/libnccl.so.2" ]; }; then nccl_lib=$l; fi
    done
done
if [ -z "$nccl_inc" ] || [ -z "$nccl_lib" ]; then
    echo "NCCL not found (nccl.h: '${nccl_inc}', libnccl: '${nccl_lib}'): set NCCL_HOME"
    fail_now "find NCCL" 1
fi
echo "NCCL: $(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$nccl_inc/nccl.h" | awk '{printf "%s ", $3}')(header $nccl_inc, library $nccl_lib)"
record "find NCCL" 0
${CC:-gcc} --version | head -1
echo "build dir: $build ($jobs jobs)"

# ---------------------------------------------------------------------------
step "configure: ./configure --with-cuda --with-nccl (the project's build)"
# configure wants NCCL_HOME/include/nccl.h and NCCL_HOME/lib{,64}/libnccl.so:
# one prefix of links in the build tree covers every layout found above.
nccl_prefix=$build/nccl-prefix
mkdir -p "$nccl_prefix/lib"
ln -sfn "$nccl_inc" "$nccl_prefix/include"
for f in "$nccl_lib"/libnccl.so*; do ln -sf "$f" "$nccl_prefix/lib/"; done
[ -e "$nccl_prefix/lib/libnccl.so" ] || ln -sf "$nccl_lib/libnccl.so.2" "$nccl_prefix/lib/libnccl.so"
ln -sfn lib "$nccl_prefix/lib64"
if [ ! -f "$build/Makefile" ]; then
    if [ ! -x "$top/configure" ]; then
        if ! command -v autoreconf >/dev/null 2>&1; then
            echo "no ./configure and no autoreconf: install autoconf, automake and libtool, or"
            echo "run ./autogen.sh on a machine that has them and bring the checkout here"
            fail_now "configure" 1
        fi
        (cd "$top" && ./autogen.sh) > "$logs/autogen.log" 2>&1 || {
            tail -20 "$logs/autogen.log"; fail_now "configure (autogen.sh)" 1; }
    fi
    (cd "$build" && "$top/configure" --with-cuda="$CUDA_HOME" --with-nccl="$nccl_prefix") \
        > "$logs/configure.log" 2>&1 || {
        echo "  configure failed; its last lines:"; tail -20 "$logs/configure.log"
        fail_now "configure" 1; }
    grep -A8 'configuration summary' "$logs/configure.log" | head -9
else
    echo "  reusing $build (configured before; remove it to configure again)"
fi
record "configure" 0

# ---------------------------------------------------------------------------
step "build: make gpu-check-programs (the library, the GPU tests, perf/gpu_check)"
if ! make -C "$build" -j"$jobs" gpu-check-programs > "$logs/build.log" 2>&1; then
    echo "  the build failed; its last lines:"; grep -E 'error|Error' "$logs/build.log" | head -20
    tail -10 "$logs/build.log"
    fail_now "build (make gpu-check-programs)" 1
fi
echo "  built (log: $logs/build.log)"
record "build (make gpu-check-programs)" 0

# ---------------------------------------------------------------------------
NSP_GPU_CHECK_T0=$t_start NSP_GPU_CHECK_NAME=gpu_check.sh \
NSP_GPU_CHECK_PRIOR=$(printf '%s\n' "${results[@]}") \
    exec bash "$top/perf/gpu_check_run.sh" "$build" "${quick[@]}"

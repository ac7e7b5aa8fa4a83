#!/usr/bin/env bash
# perf/gpu_check_run.sh — run nspcomm's GPU checks from a configured build
# tree (docs/guide/gpu.md). `make gpu-check` builds the programs with the
# project's own build and runs this; perf/gpu_check.sh configures a build
# tree first on a bare checkout.
#
#   bash perf/gpu_check_run.sh BUILD_DIR [--quick]
#
# Steps, each announced with its elapsed time, all from BUILD_DIR:
#   1. tests/gpu/test_pack_map      the kernels' index maps vs pack.c (CPU)
#   2. tests/gpu/test_pack_cuda     CUDA kernels vs pack.c, bit-exact, random views
#   3. tests/gpu/test_streams_cuda  one stream per level (the CUDA device
#                                   operations), completing separately
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
#   9. perf/gpu_check_torch.py      the PyTorch op on CUDA tensors (2 ranks, or 1
#                                   on a one-GPU machine; fp32, bf16, fp16;
#                                   forward and backward) against its CPU path,
#                                   with the checkout's .venv python, else
#                                   $NSP_PYTHON, else python3; without torch
#                                   there it is a failure that says how to install
#                                   it (bash scripts/setup-python.sh), unless
#                                   NSP_GPU_CHECK_TORCH=0 leaves the step out
# and prints a PASS/FAIL summary; the exit status is non-zero if any step
# failed (a test that skips for want of a GPU counts as a failure here).
# Without a usable GPU it says so and exits 77 (skip) without running the
# GPU steps; a program missing from the build (not configured --with-cuda
# --with-nccl, or not built) is a failure. Environment: $OUT: when set, the
# logs are copied there; NSPCOMM_TIMEOUT (default 60 here).
set -u -o pipefail
if [ $# -lt 1 ] || [ ! -f "$1/Makefile" ]; then
    echo "usage: $0 BUILD_DIR [--quick]   (BUILD_DIR: a configured nspcomm build tree)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
quick=0
[ "${2:-}" = "--quick" ] && quick=1
logs=$build/gpu-check-logs
t_start=${NSP_GPU_CHECK_T0:-$(date +%s)}
results=()
failed=0
name=${NSP_GPU_CHECK_NAME:-gpu-check}
mkdir -p "$logs"

step() { echo; echo "== [$(( $(date +%s) - t_start )) s] $*"; }
record() { # name rc
    if [ "$2" -eq 0 ]; then results+=("PASS  $1"); else results+=("FAIL  $1 (exit $2)"); failed=1; fi
}
summary() {
    for r in "${results[@]}"; do echo "  $r"; done
}
copy_logs() {
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp -r "$logs" "$OUT/" 2>/dev/null; fi
}
finish() {
    echo
    echo "== summary ($(( $(date +%s) - t_start )) s)"
    summary
    copy_logs
    if [ "$failed" -eq 0 ]; then echo "$name: PASS"; exit 0; fi
    echo "$name: FAIL"; exit 1
}
# The steps perf/gpu_check.sh ran before (find nvcc, NCCL, configure, build)
# come as summary lines in NSP_GPU_CHECK_PRIOR, one per line.
while IFS= read -r line; do
    [ -n "$line" ] && results+=("$line")
done <<< "${NSP_GPU_CHECK_PRIOR:-}"

# ---------------------------------------------------------------------------
step "programs in $build"
progs="tests/gpu/test_pack_map tests/gpu/test_pack_cuda tests/gpu/test_streams_cuda \
tests/gpu/test_nccl_backend perf/gpu_check tests/gpu/test_reduce_map tests/gpu/test_reduce_cuda \
tests/gpu/test_nattn_cuda"
missing=""
for p in $progs; do [ -x "$build/$p" ] || missing="$missing $p"; done
if [ -n "$missing" ]; then
    echo "  not built:$missing"
    if ! grep -q '^#define NSP_HAVE_CUDA 1' "$build/config.h" 2>/dev/null ||
       ! grep -q '^#define NSP_HAVE_NCCL 1' "$build/config.h" 2>/dev/null; then
        echo "  this build tree is not configured --with-cuda --with-nccl"
    else
        echo "  run 'make gpu-check-programs' in $build first"
    fi
    record "GPU programs built" 1
else
    echo "  all 8 built"
    record "GPU programs built" 0
fi

# ---------------------------------------------------------------------------
step "device"
# The device probe: test_streams_cuda's plan line (cudaGetDeviceCount), or
# without it nvidia-smi.
reason=""
if [ -x "$build/tests/gpu/test_streams_cuda" ]; then
    reason=$("$build/tests/gpu/test_streams_cuda" 2>/dev/null | grep '^1\.\.0 # SKIP' | sed 's/^1\.\.0 # SKIP //')
elif ! nvidia-smi -L >/dev/null 2>&1; then
    reason="nvidia-smi lists no GPU (and test_streams_cuda is not built)"
fi
if [ -n "$reason" ]; then
    echo "no usable CUDA device here: $reason"
    echo "$name: SKIP (built everything; nothing was run on a GPU)"
    summary
    copy_logs
    [ "$failed" -eq 0 ] || { echo "$name: FAIL (the build failed)"; exit 1; }
    exit 77
fi

# ---------------------------------------------------------------------------
# Run one TAP program: print it, count results; a skip of the whole file is
# a failure here (this script runs where a GPU is expected).
run_tap() { # name seconds program...
    local name=$1 secs=$2; shift 2
    local log=$logs/$name.log rc
    if [ ! -x "$1" ]; then echo "  not built"; record "$name" 127; return; fi
    timeout "$secs" "$@" > "$log" 2> "$logs/$name.stderr"; rc=$?
    grep -E '^(not ok|ok .*# SKIP|1\.\.0|#)' "$log" | head -40
    local nok nnot
    nok=$(grep -c '^ok ' "$log"); nnot=$(grep -c '^not ok ' "$log")
    echo "  $nok ok, $nnot not ok, exit $rc$( [ $rc -eq 124 ] && echo ' (timed out after '"$secs"' s)')"
    if grep -q '^1\.\.0' "$log"; then echo "  skipped as a whole: no usable GPU?"; rc=77;
    elif grep -q '^ok .*# SKIP' "$log"; then echo "  some checks skipped: no usable GPU?"; rc=77; fi
    if [ "$nnot" -gt 0 ] && [ $rc -eq 0 ]; then rc=1; fi
    if [ $rc -ne 0 ]; then echo "  --- last stderr lines:"; tail -15 "$logs/$name.stderr"; fi
    record "$name" $rc
}

export NSPCOMM_TIMEOUT=${NSPCOMM_TIMEOUT:-60}
# As make check: UCX logs to stderr, no memory hooks.
export UCX_LOG_FILE=${UCX_LOG_FILE:-stderr} UCX_MEM_EVENTS=${UCX_MEM_EVENTS:-no}
export UCX_WARN_UNUSED_ENV_VARS=n
# NCCL's bootstrap listens on a network interface; on a machine whose only
# interface that is up is loopback, say so (one rank needs nothing more).
if [ -z "${NCCL_SOCKET_IFNAME:-}" ]; then
    up=""
    for i in /sys/class/net/*; do
        n=${i##*/}; [ "$n" = lo ] && continue
        [ "$(cat "$i/operstate" 2>/dev/null)" = up ] && up="$up $n"
    done
    if [ -z "$up" ]; then export NCCL_SOCKET_IFNAME=lo; echo "(no interface up but lo: NCCL_SOCKET_IFNAME=lo)"; fi
fi
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
g=$build/tests/gpu

step "1/9 tests/gpu/test_pack_map: the kernels' index maps vs pack.c, on the CPU"
run_tap test_pack_map 120 "$g/test_pack_map"

step "2/9 tests/gpu/test_pack_cuda: CUDA kernels vs pack.c, bit-exact, 300 random views"
run_tap test_pack_cuda 180 "$g/test_pack_cuda"

step "3/9 tests/gpu/test_streams_cuda: one stream per level, completing separately"
run_tap test_streams_cuda 60 "$g/test_streams_cuda"

step "4/9 tests/gpu/test_nccl_backend: one-rank NCCL world and tree, nsp_comm_from_nccl, device all-to-all"
run_tap test_nccl_backend 180 "$g/test_nccl_backend"

step "5/9 perf/gpu_check: kernels on realistic shapes, bit-exact and timed"
perf_args=()
[ $quick -eq 1 ] && perf_args=(--quick)
if [ -x "$build/perf/gpu_check" ]; then
    timeout 180 "$build/perf/gpu_check" "${perf_args[@]}" 2>&1 | tee "$logs/gpu_check.log"
    record "perf/gpu_check" "${PIPESTATUS[0]}"
else
    record "perf/gpu_check" 127
fi

step "6/9 tests/gpu/test_reduce_map: the reductions' element math and the memory types' tables, on the CPU"
run_tap test_reduce_map 60 "$g/test_reduce_map"

step "7/9 tests/gpu/test_reduce_cuda: replica-sum and merge kernels vs their host twins"
run_tap test_reduce_cuda 60 "$g/test_reduce_cuda"

step "8/9 tests/gpu/test_nattn_cuda: nested attention on device memory (one rank; two with 2+ GPUs) vs the host reference"
run_tap test_nattn_cuda 240 "$g/test_nattn_cuda"

step "9/9 perf/gpu_check_torch.py: the PyTorch op on CUDA tensors vs its CPU path"
top=$(cd "$(dirname "$0")/.." && pwd)
py=${NSP_PYTHON:-}
[ -z "$py" ] && [ -x "$top/.venv/bin/python" ] && py=$top/.venv/bin/python
py=${py:-python3}
if [ "${NSP_GPU_CHECK_TORCH:-1}" = 0 ]; then
    echo "  left out (NSP_GPU_CHECK_TORCH=0)"
    results+=("SKIP  perf/gpu_check_torch.py (NSP_GPU_CHECK_TORCH=0)")
elif ! "$py" -c "import torch" >/dev/null 2>&1; then
    echo "  no torch for $py: bash scripts/setup-python.sh installs it into .venv (or set NSP_PYTHON)"
    record "perf/gpu_check_torch.py (torch for $py)" 1
else
    NSPCOMM_BUILD_DIR=$build PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}" \
        timeout 600 "$py" "$top/perf/gpu_check_torch.py" --out "$logs" 2>&1 | tee "$logs/gpu_check_torch.log"
    record "perf/gpu_check_torch.py" "${PIPESTATUS[0]}"
fi

finish

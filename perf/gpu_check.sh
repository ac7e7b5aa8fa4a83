#!/usr/bin/env bash
# perf/gpu_check.sh — check nspcomm's GPU code on a machine with an NVIDIA GPU,
# in a few minutes, from a bare checkout (docs/gpu.md).
#
#   bash perf/gpu_check.sh [--quick]
#
# It needs the CUDA toolkit (nvcc) and NCCL (headers and library), gcc and
# make-free shell tools; NOT UCX, hwloc or autotools: it compiles what the
# checks need straight with gcc and nvcc into $NSP_GPU_CHECK_DIR (default
# _build-gpucheck/), then runs, each step announced with its elapsed time:
#   1. tests/gpu/test_pack_map      the kernels' index maps vs pack.c (CPU)
#   2. tests/gpu/test_pack_cuda     CUDA kernels vs pack.c, bit-exact, random views
#   3. tests/gpu/test_streams_cuda  one stream per level, completing separately
#   4. tests/gpu/test_nccl_backend  one-rank NCCL world and tree: split,
#                                   alltoallv, sendrecv, allgather, barrier,
#                                   nsp_comm_from_nccl on ncclCommInitAll, the
#                                   nested all-to-all's CUDA path
#   5. perf/gpu_check               kernels on realistic shapes: bit-exact, GB/s
#   6. tests/gpu/test_reduce_map    the device reductions' element math and the
#                                   memory tables of nested attention (CPU)
#   7. tests/gpu/test_reduce_cuda   replica-sum and merge kernels vs their host
#                                   twins (fp32, bf16, fp16)
#   8. tests/gpu/test_nattn_cuda    nested attention on device memory, one rank:
#                                   the gated CUDA exchange, forward + backward
#                                   (saved and stateless) vs the host reference,
#                                   fp32 within 1e-5 and bf16 within 1.6e-2; the
#                                   memory table's dK/dV conversions vs the host
#                                   table, bit for bit; with 2+ GPUs, two ranks,
#                                   bf16 backward with replicated KV heads
# and prints a PASS/FAIL summary; the exit status is non-zero if any step
# failed (a test that skips for want of a GPU counts as a failure here).
# Without a usable GPU it still builds everything (so the build is checked),
# says so, and exits 77 (skip) without running the GPU steps.
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_HOME (default: found
# under CUDA_HOME, /usr or /usr/local), NSP_GPU_CHECK_DIR, and $OUT: when
# set, the logs are copied there.
set -u -o pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
t_start=$(date +%s)
quick=0
[ "${1:-}" = "--quick" ] && quick=1
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
build=${NSP_GPU_CHECK_DIR:-$top/_build-gpucheck}
logs=$build/logs
jobs=$(nproc 2>/dev/null || echo 4)
results=()
failed=0

step() { echo; echo "== [$(( $(date +%s) - t_start )) s] $*"; }
record() { # name rc
    if [ "$2" -eq 0 ]; then results+=("PASS  $1"); else results+=("FAIL  $1 (exit $2)"); failed=1; fi
}
finish() {
    echo
    echo "== summary ($(( $(date +%s) - t_start )) s)"
    for r in "${results[@]}"; do echo "  $r"; done
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && [ -d "$logs" ]; then cp -r "$logs" "$OUT/" 2>/dev/null; fi
    if [ "$failed" -eq 0 ]; then echo "gpu_check.sh: PASS"; exit 0; fi
    echo "gpu_check.sh: FAIL"; exit 1
}

# ---------------------------------------------------------------------------
step "environment"
mkdir -p "$build/obj" "$logs"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,mig.mode.current --format=csv 2>&1 | head -5
else
    echo "nvidia-smi: not found"
fi
NVCC=$CUDA_HOME/bin/nvcc
if [ ! -x "$NVCC" ]; then NVCC=$(command -v nvcc || true); fi
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
    echo "no nvcc under $CUDA_HOME/bin or on PATH: set CUDA_HOME"; record "find nvcc" 1; finish
fi
"$NVCC" --version | tail -2
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
    record "find NCCL" 1; finish
fi
echo "NCCL: $(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$nccl_inc/nccl.h" | awk '{printf "%s ", $3}')(header $nccl_inc, library $nccl_lib)"
cc=${CC:-gcc}
$cc --version | head -1
echo "build dir: $build ($jobs jobs)"

# ---------------------------------------------------------------------------
step "build: library sources with $cc, kernels with nvcc (no UCX, hwloc or autotools)"
cat > "$build/config.h" <<'EOF'
/* Written by perf/gpu_check.sh: the standalone GPU check build. */
#define NSP_HAVE_COMM 1
#define NSP_HAVE_CUDA 1
#define NSP_HAVE_NCCL 1
EOF
# The standalone build has no UCX: its registry entry answers "unsupported".
cat > "$build/ucx_absent.c" <<'EOF'
/* Written by perf/gpu_check.sh: the "ucx" entry of the backend registry in a
 * build without UCX. Every op says so; nothing in the GPU checks calls it. */
#include "transport/transport.h"
#include "common/log.h"
static nsp_status_t absent(void) { return nsp_error(NSP_ERR_UNSUPPORTED, "ucx: not in the standalone GPU check build"); }
static nsp_status_t w_create(nsp_bootstrap_t *b, const nsp_tp_params_t *p, nsp_tp_comm_t **w) { (void)b; (void)p; (void)w; return absent(); }
static nsp_status_t w_wrap(void *n, const nsp_tp_params_t *p, nsp_tp_comm_t **w) { (void)n; (void)p; (void)w; return absent(); }
static nsp_status_t split(nsp_tp_comm_t *c, int r, int s, nsp_tp_comm_t **o) { (void)c; (void)r; (void)s; (void)o; return absent(); }
static nsp_status_t destroy(nsp_tp_comm_t *c) { (void)c; return absent(); }
static nsp_status_t a2av(nsp_tp_comm_t *c, const nsp_tp_alltoallv_t *a, uint32_t t, void *s, nsp_request_t **r) { (void)c; (void)a; (void)t; (void)s; (void)r; return absent(); }
static nsp_status_t sr(nsp_tp_comm_t *c, const void *sb, size_t sn, int d, void *rb, size_t rn, int s, uint32_t t, void *st, nsp_request_t **r) { (void)c; (void)sb; (void)sn; (void)d; (void)rb; (void)rn; (void)s; (void)t; (void)st; (void)r; return absent(); }
static nsp_status_t progress(nsp_tp_comm_t *c, int *i) { (void)c; (void)i; return absent(); }
static nsp_status_t ag(nsp_tp_comm_t *c, const void *s, void *r, size_t b) { (void)c; (void)s; (void)r; (void)b; return absent(); }
static nsp_status_t barrier(nsp_tp_comm_t *c) { (void)c; return absent(); }
const nsp_tp_ops_t nsp_tp_ucx_ops = {"ucx", NSP_MEM_HOST, w_create, w_wrap, split, destroy, a2av, sr, progress, ag, barrier};
EOF
# The rendezvous authenticates with OpenSSL's libcrypto: its headers from
# OPENSSL_INC (e.g. a carried libssl-dev include folder) or the system.
ssl_inc=${OPENSSL_INC:+-I$OPENSSL_INC}
CFLAGS_COMMON="-std=gnu11 -O2 -g -pthread -DHAVE_CONFIG_H -I$build -I$top/include -I$top/src -I$top/tools -I$CUDA_HOME/include -I$nccl_inc $ssl_inc"
srcs=$(ls src/common/*.c src/planner/*.c src/attn_sp/*.c src/nested_groups/*.c src/streams/*.c \
          src/transport/*.c src/topology/place.c src/topology/levels.c 2>/dev/null | grep -v '^src/transport/ucx.c$' \
          | grep -v 'nocuda\.c$'; echo tools/nsp_opt.c)
rm -f "$build"/obj/*.o "$build"/obj/*.err
compile_one() { # src
    local o; o=$build/obj/$(echo "$1" | tr '/' '_' | sed 's/\.c$/.o/')
    $cc $CFLAGS_COMMON -c "$1" -o "$o" 2> "${o%.o}.err" || echo "  skipped $1 (did not compile: $(head -1 "${o%.o}.err"))"
}
export -f compile_one
export cc CFLAGS_COMMON build
printf '%s\n' $srcs "$build/ucx_absent.c" | xargs -P "$jobs" -I{} bash -c 'compile_one {}'
echo "  compiled $(ls "$build"/obj/*.o | wc -l) C files"
nvcc_one() { # source object flags...
    local src=$1 obj=$2; shift 2
    "$NVCC" -std=c++17 -O3 "$@" --compiler-options=-fPIC,-fno-exceptions,-fno-threadsafe-statics,-fno-rtti \
        -DHAVE_CONFIG_H -I"$build" -Iinclude -Isrc -c "$src" -o "$obj"
}
arch_flags="-arch=native"
if ! nvcc_one src/attn_sp/pack_cuda_kernels.cu "$build/obj/pack_cuda_kernels.o" $arch_flags 2> "$logs/nvcc.err"; then
    echo "  nvcc -arch=native failed ($(head -1 "$logs/nvcc.err")); retrying for sm_80 and sm_90"
    arch_flags="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
    nvcc_one src/attn_sp/pack_cuda_kernels.cu "$build/obj/pack_cuda_kernels.o" $arch_flags 2>&1 | tee -a "$logs/nvcc.err"
fi
nvcc_one src/attn_sp/attn_reduce_kernels.cu "$build/obj/attn_reduce_kernels.o" $arch_flags 2>&1 | tee -a "$logs/nvcc.err"
echo "  kernels: nvcc $arch_flags"
rm -f "$build/libnsp_gpucheck.a"
ar rcs "$build/libnsp_gpucheck.a" "$build"/obj/*.o
nccl_link=-lnccl
[ -e "$nccl_lib/libnccl.so" ] || nccl_link=$nccl_lib/libnccl.so.2 # wheels ship only the .so.2
crypto_link=-lcrypto # a machine with libcrypto.so.3 but no dev symlink: the .so.3 itself
for l in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
    if [ ! -e "$l/libcrypto.so" ] && [ -e "$l/libcrypto.so.3" ]; then crypto_link=$l/libcrypto.so.3; break; fi
    [ -e "$l/libcrypto.so" ] && break
done
LIBS="$build/libnsp_gpucheck.a -L$CUDA_HOME/lib64 -L$nccl_lib -Wl,-rpath,$CUDA_HOME/lib64 -Wl,-rpath,$nccl_lib $nccl_link $crypto_link -lcudart -lm -lpthread -ldl -lrt"
build_rc=0
for t in test_pack_map test_pack_cuda test_streams_cuda test_nccl_backend test_reduce_map \
         test_reduce_cuda test_nattn_cuda; do
    extra=""
    case $t in
        test_pack_map|test_pack_cuda) extra=tests/gpu/gpu_views.c ;;
        # its two-rank case forks ranks (tests/mp.c on the tools' launcher)
        test_nattn_cuda) extra="tests/mp.c tests/mp_uid.c tools/nsp_launch.c tools/nsp_launch_uid.c tools/nc_enter.c tests/nested_attn/nattn_test.c" ;;
    esac
    if ! $cc $CFLAGS_COMMON -Itests "tests/gpu/$t.c" $extra tests/tap.c -o "$build/$t" $LIBS 2> "$logs/$t.link.err"; then
        echo "  could not build $t:"; head -20 "$logs/$t.link.err"; build_rc=1
    fi
done
if ! $cc $CFLAGS_COMMON perf/gpu_check.c -o "$build/gpu_check" $LIBS 2> "$logs/gpu_check.link.err"; then
    echo "  could not build perf/gpu_check:"; head -20 "$logs/gpu_check.link.err"; build_rc=1
fi
record "build (standalone)" $build_rc

# ---------------------------------------------------------------------------
step "device"
# The device probe: test_streams_cuda's plan line (cudaGetDeviceCount), or
# without it nvidia-smi.
reason=""
if [ -x "$build/test_streams_cuda" ]; then
    reason=$("$build/test_streams_cuda" 2>/dev/null | grep '^1\.\.0 # SKIP' | sed 's/^1\.\.0 # SKIP //')
elif ! nvidia-smi -L >/dev/null 2>&1; then
    reason="nvidia-smi lists no GPU (and test_streams_cuda did not build)"
fi
if [ -n "$reason" ]; then
    echo "no usable CUDA device here: $reason"
    echo "gpu_check.sh: SKIP (built everything; nothing was run on a GPU)"
    for r in "${results[@]}"; do echo "  $r"; done
    [ "$build_rc" -eq 0 ] || { echo "gpu_check.sh: FAIL (the build failed)"; exit 1; }
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

step "1/8 tests/gpu/test_pack_map: the kernels' index maps vs pack.c, on the CPU"
run_tap test_pack_map 120 "$build/test_pack_map"

step "2/8 tests/gpu/test_pack_cuda: CUDA kernels vs pack.c, bit-exact, 300 random views"
run_tap test_pack_cuda 180 "$build/test_pack_cuda"

step "3/8 tests/gpu/test_streams_cuda: one stream per level, completing separately"
run_tap test_streams_cuda 60 "$build/test_streams_cuda"

step "4/8 tests/gpu/test_nccl_backend: one-rank NCCL world and tree, nsp_comm_from_nccl, CUDA all-to-all"
run_tap test_nccl_backend 180 "$build/test_nccl_backend"

step "5/8 perf/gpu_check: kernels on realistic shapes, bit-exact and timed"
perf_args=()
[ $quick -eq 1 ] && perf_args=(--quick)
if [ -x "$build/gpu_check" ]; then
    timeout 180 "$build/gpu_check" "${perf_args[@]}" 2>&1 | tee "$logs/gpu_check.log"
    record "perf/gpu_check" "${PIPESTATUS[0]}"
else
    record "perf/gpu_check" 127
fi

step "6/8 tests/gpu/test_reduce_map: the reductions' element math and nested attention's memory tables, on the CPU"
run_tap test_reduce_map 60 "$build/test_reduce_map"

step "7/8 tests/gpu/test_reduce_cuda: replica-sum and merge kernels vs their host twins"
run_tap test_reduce_cuda 60 "$build/test_reduce_cuda"

step "8/8 tests/gpu/test_nattn_cuda: nested attention on device memory (one rank; two with 2+ GPUs) vs the host reference"
run_tap test_nattn_cuda 240 "$build/test_nattn_cuda"

finish

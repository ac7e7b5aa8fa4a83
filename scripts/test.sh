#!/usr/bin/env bash
# README command 2: build (if needed) and run the whole test suite (TAP, via
# `make check`), then the suite again in a separate ASan/UBSan build, then
# the threaded tests in a ThreadSanitizer build (build-tsan/, without CUDA).
# Set NSP_SKIP_SANITIZERS=1 to skip the sanitizer passes.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# configured DIR OPTION: a build tree DIR configured with OPTION (once).
configured() {
    mkdir -p "$1"
    if [ ! -f "$1/Makefile" ]; then
        (cd "$1" && ../configure "$2" >/dev/null)
    fi
}
bash scripts/build.sh
echo "== make check (build/)"
make -C build -j"$jobs" check
if [ "${NSP_SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== make check under ASan/UBSan (build-asan/)"
    configured build-asan --enable-sanitizers
    # UCX's malloc/mmap hooks do not mix with ASan's allocator.
    UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        make -C build-asan -j"$jobs" check
fi
if [ "${NSP_SKIP_SANITIZERS:-0}" != 1 ]; then
    # Threads with a world each (tests/a2a/test_a2a_worlds), the emulated
    # device alone and under nested attention over UCX; UCX itself is
    # not instrumented and needs no suppressions (UCX 1.13). UCX_TLS=^sysv:
    # TSan does not intercept SysV shmat/shmdt, so when one thread's world
    # detaches a segment (its FIFOs, a region) and the other's attaches a
    # new one at the same address, the shadow keeps the old accesses and
    # the first touch reports a race that never was. UCX's POSIX shared
    # memory (shm_open + mmap/munmap, which TSan sees) carries the same
    # traffic and the same mapped regions.
    tsan_tests="tests/a2a/test_a2a_worlds tests/emu/test_emu_device tests/emu/test_emu_attn"
    echo "== $tsan_tests under ThreadSanitizer (build-tsan/)"
    configured build-tsan --enable-tsan
    UCX_TLS=^sysv UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        make -C build-tsan -j"$jobs" check TESTS="$tsan_tests"
fi

#!/usr/bin/env bash
# README command 2: run the test suite (TAP, `make check`), then the
# planner and status tests again under ASan/UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
make -C build -j"$jobs" check

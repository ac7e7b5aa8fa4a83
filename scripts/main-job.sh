#!/usr/bin/env bash
# The main job on its embedded default (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "main job: not yet wired"

#!/usr/bin/env bash
# Install the Debian 12 packages nspcomm needs (root or sudo). Idempotent.
set -euo pipefail
pkgs=(build-essential autoconf automake libtool pkg-config
      libucx-dev ucx-utils libhwloc-dev hwloc
      libopenmpi-dev openmpi-bin
      libglpk-dev coinor-libcbc-dev python3)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present"
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null

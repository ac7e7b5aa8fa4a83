#!/usr/bin/env bash
# Install the Debian 12 packages nspcomm needs (root or sudo). Idempotent.
set -euo pipefail
pkgs=(build-essential autoconf automake libtool pkg-config
      libucx-dev ucx-utils libhwloc-dev hwloc
      libopenmpi-dev openmpi-bin
      libglpk-dev coinor-libcbc-dev python3 python3-venv locales
      libssl-dev clang-14 libclang-rt-14-dev
      iproute2)   # ip, tc: the namespace cluster (scripts/netcluster.sh)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# A locale whose decimal separator is a comma, so the test that plan JSON is
# written with '.' whatever LC_NUMERIC says runs instead of skipping.
ensure_comma_locale() {
    locale -a 2>/dev/null | grep -qi '^de_DE\.utf-\{0,1\}8$' && return 0
    command -v localedef >/dev/null || return 0
    $sudo localedef -i de_DE -f UTF-8 de_DE.UTF-8 ||
        echo "setup: could not generate de_DE.UTF-8 (one JSON locale test will skip)" >&2
}

if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present"
    ensure_comma_locale
    exit 0
fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
ensure_comma_locale

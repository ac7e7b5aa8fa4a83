# Sourced by scripts/planner-results.sh and scripts/ring-results.sh: the
# options both take, the checks before simulating, and the work directory.
# The sourcing script sets `script` (its name, for messages) first; after
# sourcing, it may change the defaults below and set json_out.

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${NSP_BUILD_DIR:-$top/build}"
batches=10
seed=1
keep=""
from=""

# results_option OPTION VALUE: one of the options both scripts take (each
# takes a value: the caller shifts 2), or --help (the caller's header
# comment), or an error for an unknown option.
results_option() {
    case "$1" in
    --build) build="$2" ;;
    --json) json_out="$2" ;;
    --batches) batches="$2" ;;
    --seed) seed="$2" ;;
    --keep) keep="$2" ;;
    --from) from="$2" ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "$script: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
}

# results_prepare: the simulator $sim must exist (unless --from) and python3;
# makes $work (removed on exit) holding --from's nsp_sim JSON files, and
# --keep's directory.
results_prepare() {
    sim="$build/perf/nsp_sim"
    if [ -z "$from" ] && [ ! -x "$sim" ]; then
        echo "$script: $sim not found: build first (scripts/build.sh) or pass --build DIR" >&2
        exit 1
    fi
    command -v python3 >/dev/null || { echo "$script: python3 is needed" >&2; exit 1; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    if [ -n "$keep" ]; then
        mkdir -p "$keep"
    fi
    if [ -n "$from" ]; then
        cp "$from"/*.json "$work/"
    fi
}

#!/bin/sh
# The structure of src/ (scripts/check-structure.py): no call cycle among
# its objects (read with nm from this build), no function over 120 lines,
# the median function at most 15 lines. src/planner is left out while it is
# being split into files without cycles; drop the --except once it is.
. "$NSP_TOP_SRCDIR/tests/tap.sh"

py=${PYTHON3:-python3}
script=$top_srcdir/scripts/check-structure.py
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT

structure() { # structure WHAT [--except FILE]: one check, its report as TAP comments
    what=$1
    shift
    "$py" "$script" --build "$top_builddir" --only "$what" "$@" >"$out" 2>&1
    rc=$?
    sed 's/^/# /' "$out"
    return $rc
}
check "no call cycle among the objects of src/" structure cycles
check "no function of src/ over 120 lines, median at most 15" structure functions
echo "1..$n"
exit $fail

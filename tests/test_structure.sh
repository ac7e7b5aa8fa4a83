#!/bin/sh
# The structure of src/ (scripts/check-structure.py): no call cycle among
# its objects (read with nm from this build), no function over 120 lines,
# the median function at most 15 lines; and examples/ on the public header
# alone.
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
# public_includes: every #include of the C files under examples/ is
# nspcomm.h or a system header (one the compiler finds without the
# project's -I flags); the report lists each other one as FILE: INCLUDE.
public_includes() {
    cc=${CC:-cc}
    files=$(find "$top_srcdir/examples" -name '*.[ch]' | sort)
    [ -n "$files" ] || { echo "no C file under examples/"; return 1; }
    : >"$out"
    for f in $files; do
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*\([<"][^>"]*[>"]\).*/\1/p' "$f" |
        while read -r inc; do
            case $inc in
            '"nspcomm.h"' | '<nspcomm.h>') ;;
            '<'*) printf '#include %s\n' "$inc" | (cd / && "$cc" -E -x c - >/dev/null 2>&1) ||
                  echo "${f#"$top_srcdir"/}: $inc is not a system header" >>"$out" ;;
            *) echo "${f#"$top_srcdir"/}: $inc (only \"nspcomm.h\" may be quoted)" >>"$out" ;;
            esac
        done
    done
    sed 's/^/# /' "$out"
    echo "# $(echo "$files" | wc -l) file(s) under examples/ read"
    test ! -s "$out"
}
check "no call cycle among the objects of src/" structure cycles
check "no function of src/ over 120 lines, median at most 15" structure functions
check "examples/ includes only nspcomm.h and system headers" public_includes
echo "1..$n"
exit $fail

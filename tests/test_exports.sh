#!/bin/sh
# The installed libraries export exactly the functions include/nspcomm.h
# declares (NSP_EXPORT): libnspcomm all of them, libnspcomm_planner those of
# sections 1-3 (before "4. Communicators"). Reads `nm -D --defined-only` of
# the built shared libraries; any symbol missing or extra fails.
. "$NSP_TOP_SRCDIR/tests/tap.sh"

header=$top_srcdir/include/nspcomm.h
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# declared [LAST_LINE]: the function names after each NSP_EXPORT line.
declared() {
    awk -v last="${1:-0}" 'last > 0 && NR > last { exit }
        /^NSP_EXPORT$/ { getline
                         if (match($0, /nsp_[a-z0-9_]+\(/)) print substr($0, RSTART, RLENGTH - 1) }' \
        "$header" | sort
}

# same_symbols NAME LIB EXPECTED: nm -D of LIB equals the EXPECTED list.
same_symbols() {
    nm -D --defined-only "$2" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u \
        >"$tmp/$1.nm"
    if ! diff "$3" "$tmp/$1.nm" >"$tmp/$1.diff"; then
        sed 's/^/# /' "$tmp/$1.diff"
        return 1
    fi
}

if ! command -v nm >/dev/null 2>&1; then
    echo "1..0 # SKIP nm (binutils) not found"
    exit 0
fi
section4=$(grep -n '^/\* 4\. Communicators' "$header" | cut -d: -f1)
declared >"$tmp/all"
declared "$section4" >"$tmp/planner"
check "the header marks functions NSP_EXPORT ($(wc -l <"$tmp/all") in all)" test -s "$tmp/all"
check "sections 1-3 hold the planner's functions ($(wc -l <"$tmp/planner"))" \
    test -s "$tmp/planner" -a -n "$section4"
check "no function declared without NSP_EXPORT" \
    test "$(grep -cE '^(const char \*|nsp_status_t |void |size_t )[ ]*\**nsp_[a-z0-9_]+\(' "$header")" \
    -eq "$(wc -l <"$tmp/all")"

planner_so=$top_builddir/lib/.libs/libnspcomm_planner.so
check "libnspcomm_planner.so exports exactly sections 1-3" \
    same_symbols planner "$planner_so" "$tmp/planner"
comm_so=$top_builddir/lib/.libs/libnspcomm.so
if [ -f "$top_builddir/lib/libnspcomm.la" ]; then
    check "libnspcomm.so exports exactly the header" same_symbols comm "$comm_so" "$tmp/all"
else
    echo "ok $((n + 1)) # SKIP libnspcomm not built (configured without UCX or hwloc)"
    n=$((n + 1))
fi
echo "1..$n"
exit $fail

#!/bin/sh
# A method of perf/nsp_a2a_perf is one file and one table line: the build
# made tests/perf/nsp_a2a_perf_dummy from tests/perf/a2a_dummy.c and a copy
# of perf/a2a_methods.c with one line added (perf/a2a.mk). This test checks
# that the copy differs by exactly that line, and that the method is then
# listed by --help, accepted by --methods, runs, and appears in the table and
# the JSON; and that its wrong elements reach #wrong and the exit status.
# TAP output.
top_build=${NSP_TOP_BUILDDIR:-.}
top_src=${NSP_TOP_SRCDIR:-..}
prog="$top_build/tests/perf/nsp_a2a_perf_dummy"
table="$top_build/tests/perf/a2a_methods_dummy.c"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "1..7"
if [ ! -x "$prog" ]; then
    echo "not ok 1 - $prog is built (make check builds it)"; exit 0
fi
export UCX_LOG_FILE=stderr

diff "$top_src/perf/a2a_methods.c" "$table" >"$dir/diff"
changed=$(grep -c '^[<>]' "$dir/diff")
added=$(grep -c '^> *X(a2a_method_dummy) *\\$' "$dir/diff")
[ "$changed" -eq 1 ] && [ "$added" -eq 1 ] && echo "ok 1 - the table differs by one line, X(a2a_method_dummy)" ||
    { echo "not ok 1 - the table differs by $changed lines"; sed 's/^/# /' "$dir/diff"; }

"$prog" --help >"$dir/help" 2>&1
grep -qE "^  dummy +a local copy" "$dir/help" && echo "ok 2 - --help lists the method" ||
    { echo "not ok 2 - --help"; sed 's/^/# /' "$dir/help"; }

"$prog" --ranks 2 -b 64K -e 128K -f 2 -n 2 -w 1 --methods nested,dummy -J "$dir/ok.json" \
    >"$dir/ok.txt" 2>&1
rc=$?
rows=$(awk '$1 == "dummy" && $2 ~ /^[0-9]+$/ && $8 == "0"' "$dir/ok.txt" | wc -l)
[ $rc -eq 0 ] && [ "$rows" -eq 2 ] && echo "ok 3 - --methods nested,dummy: a dummy row per size, 0 wrong" ||
    { echo "not ok 3 - exit $rc, $rows dummy rows"; sed 's/^/# /' "$dir/ok.txt"; }

if [ -n "$PYTHON3" ] && [ "$PYTHON3" != no ]; then
    "$PYTHON3" - "$dir/ok.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]), parse_constant=lambda x: (_ for _ in ()).throw(ValueError(x)))
rows = [r for r in d["results"] if r["method"] == "dummy"]
assert [r["size"] for r in rows] == [65536, 131072], rows
assert all(r["wrong"] == 0 and r["busbw"] == 0 and r["time_us"] > 0 for r in rows)
assert {r["method"] for r in d["results"]} == {"nested", "dummy"}
PY
    [ $? -eq 0 ] && echo "ok 4 - the JSON has the dummy rows beside nested" || echo "not ok 4 - JSON"
else
    echo "ok 4 # SKIP python3 not found"
fi

NSP_DUMMY_CORRUPT=1 "$prog" --ranks 2 -b 64K -e 128K -f 2 -n 2 -w 0 --methods dummy \
    -J "$dir/bad.json" >"$dir/bad.txt" 2>&1
rc=$?
bad=$(awk '$1 == "dummy" && $8 == "2"' "$dir/bad.txt" | wc -l)
[ $rc -eq 2 ] && [ "$bad" -eq 2 ] && grep -q "^# Out of bounds values : 4 WRONG" "$dir/bad.txt" &&
    echo "ok 5 - a wrong element per rank: #wrong 2 per size, 4 in all, exit status 2" ||
    { echo "not ok 5 - exit $rc, $bad rows with #wrong 2"; sed 's/^/# /' "$dir/bad.txt"; }

"$prog" --ranks 2 -b 64K -e 64K -n 1 -w 0 --methods dummy,nope >"$dir/nope.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "nope" "$dir/nope.txt" && echo "ok 6 - an unknown method is a usage error naming it" ||
    { echo "not ok 6 - exit $rc"; sed 's/^/# /' "$dir/nope.txt"; }

# The real tool has no such method: the table line is what adds it.
"$top_build/perf/nsp_a2a_perf" --ranks 2 -b 64K -e 64K -n 1 -w 0 --methods dummy \
    >"$dir/real.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && ! grep -q "^  dummy " "$dir/real.txt" && echo "ok 7 - nsp_a2a_perf itself does not know dummy" ||
    { echo "not ok 7 - exit $rc"; sed 's/^/# /' "$dir/real.txt"; }

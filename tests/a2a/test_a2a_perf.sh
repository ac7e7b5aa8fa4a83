#!/bin/sh
# Smoke test of perf/nsp_a2a_perf: 4 forked ranks, two small sizes, data
# checked; the run must succeed with no wrong element, print every nested
# row, and write JSON that parses with the same numbers. TAP output.
top_build=${NSP_TOP_BUILDDIR:-.}
perf="$top_build/perf/nsp_a2a_perf"
out=$(mktemp) json=$(mktemp)
trap 'rm -f "$out" "$json"' EXIT
echo "1..6"
if [ ! -x "$perf" ]; then
    echo "not ok 1 - $perf is built"; exit 0
fi
UCX_LOG_FILE=stderr "$perf" --ranks 4 -b 256K -e 512K -f 2 -n 3 -w 1 -c 1 -J "$json" >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && echo "ok 1 - nsp_a2a_perf --ranks 4 exits 0" || { echo "not ok 1 - exit code $rc"; sed 's/^/# /' "$out"; }
grep -q "^# Out of bounds values : 0 OK" "$out" && echo "ok 2 - no wrong element" || echo "not ok 2 - wrong elements reported"
n=$(grep -cE "^  (nested|serial|flat|tp-same|nested-mapped|flat-mapped) " "$out")
[ "$n" -eq 12 ] && echo "ok 3 - nested, serial, flat, tp-same, nested-mapped and flat-mapped rows for both sizes" || echo "not ok 3 - $n rows"
if [ -n "$PYTHON3" ] && [ "$PYTHON3" != no ]; then
    "$PYTHON3" - "$json" <<'PY' && echo "ok 4 - JSON parses, format nspcomm-a2a-perf-v2, 0 wrong" || echo "not ok 4 - JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "nspcomm-a2a-perf-v2"
assert d["summary"]["wrong"] == 0
assert {r["method"] for r in d["results"]} >= {"nested", "serial", "flat", "tp-same", "nested-mapped", "flat-mapped"}
assert all(r["time_us"] > 0 and r["busbw"] >= 0 for r in d["results"])
PY
else
    echo "ok 4 # SKIP python3 not found"
fi
grep -qE "^# serial/nested +time: mean [0-9.]+x, worst [0-9.]+x" "$out" &&
    echo "ok 5 - footer with the pipelining ratio" || echo "not ok 5 - footer"
# The plan has several levels: the levels row (each level as its own call,
# in turn) and one row per level under it, for both sizes, none wrong
# (#wrong is the 8th column).
nl=$(awk '$1 == "levels" && $8 == "0"' "$out" | wc -l)
nd=$(awk '$1 ~ /^level-d[0-9]+$/ && $8 == "0"' "$out" | wc -l)
[ "$nl" -eq 2 ] && [ "$nd" -ge 4 ] && echo "ok 6 - levels row and per-level rows, 0 wrong ($nd level rows)" ||
    echo "not ok 6 - $nl levels rows, $nd level-dN rows with 0 wrong"

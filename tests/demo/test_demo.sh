#!/bin/sh
# Smoke test of the main demo (tools/nsp_demo, docs/guide/demo.md): 4 ranks over
# UCX on loopback, tiny sizes. It must exit 0 with every correctness check
# passed, write the JSON with the fields docs/guide/demo.md promises, a picture that
# parses as XML and a calibrated cluster description nspcomm can load; and a
# corrupted output (--inject-error) must make it fail with exit status 1.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
demo="$top_builddir/tools/nsp_demo"
py=${PYTHON3:-python3}

if [ ! -x "$demo" ]; then
    echo "1..0 # SKIP $demo not built (configured without the communication layer)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsp_demo_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
UCX_LOG_FILE=stderr
export UCX_LOG_FILE

small="--ranks 4 --heads 4/2 --head-dim 16 --tokens-per-rank 256 --max-len 1024 --scale 4
       --batches 1 --reps 1 --time-limit 0.2 --quiet"
# shellcheck disable=SC2086
"$demo" $small --json "$tmp/demo.json" --svg "$tmp/demo.svg" \
    --cluster-out "$tmp/cluster.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "nsp_demo with 4 ranks exits 0 (got $rc)" test $rc -eq 0
check "the table has a row per planner" sh -c \
    'grep -Eq "^  static " "$1" && grep -Eq "^  disjoint " "$1" && grep -Eq "^  nested " "$1" &&
     grep -Eq "^  megatron " "$1"' _ "$tmp/out"
check "every run matched the reference (16 of 16: 1 batch x 4 planners x 2 modes x 2 transports)" \
    grep -q "check: 16 of 16 runs match the single-process reference" "$tmp/out"
check "real compute: the table says so" grep -q "levels pipelined, real compute" "$tmp/out"
check "the JSON has the expected fields and passed checks" \
    "$py" "$top_srcdir/tests/demo/check_demo_json.py" "$tmp/demo.json" 4
check "the SVG parses as XML and names every planner" "$py" -c '
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
texts = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
sys.exit(0 if all(p in texts for p in ("static", "disjoint", "nested", "megatron", "predicted",
                                        "measured", "real compute")) else 1)
' "$tmp/demo.svg"
check "the calibrated cluster description has measured rates" "$py" -c '
import json, sys
c = json.load(open(sys.argv[1]))
ok = c["ranks"] == 4 and all(c[k] > 0 for k in ("attn_flops", "gemm_flops", "bw_intra", "mem_bytes"))
sys.exit(0 if ok else 1)
' "$tmp/cluster.json"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/cluster.json" --json "" --svg "" \
    --inject-error >"$tmp/out2" 2>"$tmp/err2"
rc=$?
check "--inject-error: exit status 1 (got $rc)" test $rc -eq 1
check "--inject-error: the table names the failed check" grep -q "CHECK FAILED" "$tmp/out2"
check "--cluster-file: no calibration, rates from the file" \
    grep -q "rates    : from --cluster-file" "$tmp/out2"
# A cluster file of 2 nodes x 2 ranks (a namespace cluster's): the plans keep
# its nodes, so the degree-4 level is priced at bw_inter.
sed 's/"ranks_per_node": [0-9][0-9]*/"ranks_per_node": 2/' "$tmp/cluster.json" >"$tmp/nodes.json"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/nodes.json" --json "$tmp/nodes-demo.json" \
    --svg "" >"$tmp/out3" 2>"$tmp/err3"
check "--cluster-file of 2 nodes x 2: the plans keep 2 ranks per node" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
b = next(iter(d["sessions"].values()))["batches"][0]
rpn = [p["plan"]["cluster"]["ranks_per_node"] for p in b["plans"].values()]
sys.exit(0 if d["checks"]["all_passed"] and rpn == [2, 2, 2, 2] else 1)
' "$tmp/nodes-demo.json"
# --lengths: one batch of exactly these lengths; --mem-from-ratio: a rank holds
# 1.25 x 256 = 320 tokens whatever the file says, so the 400-token sequence
# needs a group of ranks in every plan; checked as any batch.
sed 's/"mem_bytes": [-0-9.e+]*/"mem_bytes": 1e12/' "$tmp/cluster.json" >"$tmp/bigmem.json"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/bigmem.json" --mem-from-ratio \
    --lengths 400,60,30,20,20,10 --json "$tmp/lengths.json" --svg "" >"$tmp/out4" 2>"$tmp/err4"
check "--lengths, --mem-from-ratio: the batch as given, the long sequence on a group in every plan, every run matched the reference" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
b = d["batches"]
plans = next(iter(d["sessions"].values()))["batches"][0]["plans"].values()
split = all(any(0 in g["seqs"] and g["size"] > 1 for r in p["plan"]["rounds"] for g in r["groups"])
            for p in plans)
sys.exit(0 if d["checks"]["all_passed"] and len(b) == 1 and b[0]["nseqs"] == 6 and
         b[0]["tokens"] == 540 and b[0]["longest"] == 400 and d["config"]["lengths"] and
         d["config"]["mem_from_ratio"] and split else 1)
' "$tmp/lengths.json"
# --nested-plan: a plan file in the nested planner's place (here the static
# plan of the same batch, written out), priced again and checked as any plan.
"$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
json.dump(next(iter(d["sessions"].values()))["batches"][0]["plans"]["static"]["plan"],
          open(sys.argv[2], "w"))
' "$tmp/lengths.json" "$tmp/plan.json"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/bigmem.json" --mem-from-ratio --nested-plan \
    "$tmp/plan.json" --lengths 400,60,30,20,20,10 --json "$tmp/given.json" --svg "" \
    >"$tmp/out5" 2>"$tmp/err5"
check "--nested-plan: the file's rounds run in the nested slot, every run matched the reference" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
plans = next(iter(d["sessions"].values()))["batches"][0]["plans"]
sys.exit(0 if d["checks"]["all_passed"] and d["config"]["nested_plan"] and
         plans["nested"]["plan"]["rounds"] == plans["static"]["plan"]["rounds"] else 1)
' "$tmp/given.json"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/bigmem.json" --nested-plan "$tmp/plan.json" \
    --lengths 400,60,30 --json "" --svg "" >"$tmp/out6" 2>"$tmp/err6"
rc=$?
check "--nested-plan of another batch: exit status 1, the message says so (got $rc)" sh -c \
    'test "$1" -eq 1 && grep -q "not those of batch" "$2"' _ $rc "$tmp/err6"
# --device emu:FILE: emulated compute (docs/design/emulated-device.md). In
# math mode every run is still checked against the reference; the table
# header, the JSON and the SVG title say the compute is emulated.
printf '{"target": "h100", "here": "cluster.json", "math": true}\n' >"$tmp/emu-math.json"
printf '{"target": "h100", "here": "cluster.json"}\n' >"$tmp/emu-timing.json"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/cluster.json" --device "emu:$tmp/emu-math.json" \
    --json "$tmp/emu.json" --svg "$tmp/emu.svg" >"$tmp/out7" 2>"$tmp/err7"
rc=$?
check "--device emu:FILE (math): exit 0, every run checked and matched (got $rc)" sh -c \
    'test "$1" -eq 0 && grep -q "check: 8 of 8 runs match" "$2" &&
     grep -q "levels pipelined, EMULATED COMPUTE (h100 x" "$2"' _ $rc "$tmp/out7"
check "--device emu:FILE: the JSON's compute is emulated, with target, scale, link, math" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
c = d["compute"]
sys.exit(0 if c["kind"] == "emulated" and c["target"] == "h100" and c["scale"] > 0 and
         c["link"] == "inter" and c["math"] is True and d["checks"]["runs"] == 8 and
         d["checks"]["all_passed"] else 1)
' "$tmp/emu.json"
check "--device emu:FILE: the SVG title says emulated compute" grep -q "EMULATED COMPUTE" \
    "$tmp/emu.svg"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/cluster.json" --device "emu:$tmp/emu-timing.json" \
    --json "$tmp/emu-t.json" --svg "" >"$tmp/out8" 2>"$tmp/err8"
rc=$?
check "--device emu:FILE (timing only): exit 0, no check claimed (got $rc)" sh -c \
    'test "$1" -eq 0 && grep -q "check: not run: emulated compute in timing mode" "$2"' \
    _ $rc "$tmp/out8"
printf '{"target": "h100", "here": "cluster.json", "maths": true}\n' >"$tmp/emu-bad.json"
# shellcheck disable=SC2086
"$demo" $small --no-tcp --cluster-file "$tmp/cluster.json" --device "emu:$tmp/emu-bad.json" \
    --json "" --svg "" >"$tmp/out9" 2>"$tmp/err9"
rc=$?
check "--device emu:FILE with a typo in FILE: exit 1, the key named (got $rc)" sh -c \
    'test "$1" -eq 1 && grep -q "unknown key \"maths\"" "$2"' _ $rc "$tmp/err9"
"$demo" --ranks 1 >/dev/null 2>&1
rc=$?
check "bad flag value (--ranks 1): exit status 2 (got $rc)" test $rc -eq 2
"$demo" --ranks 4 --lengths 400,x --quiet --json "" --svg "" >/dev/null 2>&1
rc=$?
check "--lengths 400,x: exit status 2 (got $rc)" test $rc -eq 2
sed 's/^/# /' "$tmp/out"
if [ $fail -ne 0 ]; then
    sed 's/^/# stderr: /' "$tmp/err" | tail -40
fi
echo "1..$n"
exit $fail

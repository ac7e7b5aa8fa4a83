#!/bin/sh
# perf/nsp_calibrate on 4 forked local ranks: it writes a cluster file that
# nsp_cluster_load reads back (the tool loads it and says so) and that holds
# every key with where it came from; bad options exit 2.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
tool="$top_builddir/perf/nsp_calibrate"
export UCX_MEM_EVENTS=no UCX_LOG_FILE=stderr
unset NSP_NETCLUSTER
if [ ! -x "$tool" ]; then
    echo "1..0 # SKIP $tool not built"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tool" --ranks 4 --bytes 65536 --reps 2 --kernel-tokens 2048 --out "$tmp/c.json" --name t4 >"$tmp/out" 2>"$tmp/err"
rc=$?
sed 's/^/# /' "$tmp/out"
[ $rc -eq 0 ] || grep -v WARN "$tmp/err" | tail -5 | sed 's/^/# stderr: /'
check "nsp_calibrate --ranks 4 succeeds (exit $rc)" test $rc -eq 0
check "it loads its file back with nsp_cluster_load" grep -q "nsp_cluster_load reads it back: t4, 4 ranks, 4 per node" "$tmp/out"
check "the file: every key, its _from, levels 2 and 4 inside the node" \
    python3 "$top_srcdir/tests/netcluster/check_cluster.py" "$tmp/c.json" 4 4
# The kernel fit of all ranks at once (the file's) and rank 0 alone (kept);
# the exchange CPU per level (executor's in the keys, bare kept), re-derived
# from the raw figures.
check "attn_flops from the all-ranks fit, the alone fit kept; cpu_byte/cpu_call from _levels" \
    python3 - "$tmp/c.json" <<'PY'
import json, math, sys
c = json.load(open(sys.argv[1]))
k = c["_kernel"]
assert k["ranks_at_once"] == 4 and len(k["slowest_fwd_bwd_s"]) == 4, k
assert all(s >= m for s, m in zip(k["slowest_fwd_bwd_s"], k["fwd_bwd_s"])), k
assert math.isclose(c["attn_flops"], 7 * 8 * 64 / k["b_s_per_token2"], rel_tol=1e-9)
assert k["alone"]["b_s_per_token2"] > 0 and "alone" in c["_from"]["attn_flops"], k
lv = max((l for l in c["_levels"] if l["where"] == "inside a node"), key=lambda l: l["degree"])
# the bare blocking all-to-all: recorded in _levels, named in the notes
want = max(0.0, lv["cpu_large_s"] - lv["cpu_small_s"]) / (2 * (lv["degree"] - 1) * (65536 - 64))
assert math.isclose(lv["cpu_byte"], want, rel_tol=1e-9), (lv["cpu_byte"], want)
assert lv["cpu_call"] == lv["cpu_small_s"] > 0, lv
# the file's keys: through the executor (nested attention fwd + bwd, 64 and
# 2048 tokens per group), the line X = cpu_byte 2 A + 4 cpu_call in the
# model's bytes A, x E/4 = 2/4 (the executor moves float32, the file is bf16)
for l in c["_levels"]:
    d = l["degree"]
    assert l["executor_measured"], l  # degrees 2 and 4 shard 8/2 heads
    for s, key in ((64, "xmodel_small_bytes"), (2048, "xmodel_large_bytes")):
        a = 2 * (d - 1) / d * (s / d) * (2 * 8 + 2 * max(2, d)) * 64 * 2
        assert math.isclose(l[key], a, rel_tol=1e-9), (key, l[key], a)
    # what the executor sent is the model's bytes in float32 (x 4/2), within 2%
    for s in ("small", "large"):
        sent, model = l["xsent_%s_bytes" % s], l["xmodel_%s_bytes" % s]
        assert abs(sent / (2 * model) - 1) < 0.02, (s, sent, model)
    k = (l["xcpu_large_s"] - l["xcpu_small_s"]) / (l["xmodel_large_bytes"] - l["xmodel_small_bytes"])
    x0 = l["xcpu_small_s"] - k * l["xmodel_small_bytes"]
    assert math.isclose(l["xcpu_byte"], max(0.0, k) / 2 * 2 / 4, rel_tol=1e-9, abs_tol=1e-30), l
    assert math.isclose(l["xcpu_call"], max(0.0, x0) / 4, rel_tol=1e-9, abs_tol=1e-30), l
    assert l["xcpu_large_s"] > 0 and l["xcpu_many_s"] > 0, l  # the same bytes as 32 sequences: recorded
assert c["cpu_byte_intra"] == lv["xcpu_byte"] and c["cpu_call_intra"] == lv["xcpu_call"], lv
assert c["cpu_byte_inter"] == c["cpu_byte_intra"]  # one node: inter copies intra
for key in ("cpu_byte_intra", "cpu_byte_inter", "cpu_call_intra", "cpu_call_inter"):
    note = c["_from"][key]
    assert note.startswith("executor:") and "nested attention" in note and "bare" in note, note
ov = c["_overlap"]  # the top level's exchange CPU beside the kernel, recorded
assert ov["exchange_cpu_beside_kernel_s"] >= 0 and ov["exchange_cpu_alone_s"] == lv["cpu_large_s"], ov
PY
# The per-round fixed cost: the key the planner reads, with its _from note
# and the raw figures under _round, and re-derived from them here.
check "round_fixed_s: measured, noted, and (1 - eta) x 3 x collective + layers x launches x launch" \
    python3 - "$tmp/c.json" <<'PY'
import json, math, sys
c = json.load(open(sys.argv[1]), parse_constant=lambda x: sys.exit("constant %s" % x))
r = c["_round"]
want = (1 - c["overlap"]) * 3 * r["collective_s"] + r["layers"] * r["launches_per_layer"] * r["launch_s"]
assert c["round_fixed_s"] > 0 and "round_fixed_s" in c["_from"], c
assert math.isclose(c["round_fixed_s"], want, rel_tol=1e-9), (c["round_fixed_s"], want)
assert r["weights_counted"] and r["launches_per_layer"] == 2 and r["layers"] == 1
assert r["measured_bytes_per_rank"] == r["weight_bytes_per_rank"] == 983040  # 8/2 heads x 64: (3/4) x 2 x 655360
PY
# A model larger than --round-max-bytes: measured at the cap, scaled up; the
# kernel-only runs (--gemm kernel) count the launches alone.
"$tool" --ranks 2 --bytes 65536 --reps 2 --kernel-tokens 2048 --model llama3-8b --round-max-bytes 1M \
    --launch-s 4e-6 --gemm kernel --out "$tmp/m.json" >"$tmp/mout" 2>"$tmp/merr"
rc=$?
sed 's/^/# /' "$tmp/mout" | grep round
check "--model llama3-8b --round-max-bytes 1M --gemm kernel succeeds (exit $rc)" test $rc -eq 0
check "its weights are scaled from the cap; the key holds launches only (32 x 100 x 4 us)" \
    python3 - "$tmp/m.json" <<'PY'
import json, math, sys
c = json.load(open(sys.argv[1]))
r = c["_round"]
assert r["weight_bytes_per_rank"] > 1e9 and r["measured_bytes_per_rank"] <= (1 << 20), r
assert r["collective_s"] > r["measured_s"] and not r["weights_counted"], r
assert math.isclose(c["round_fixed_s"], 32 * 100 * 4e-6, rel_tol=1e-9), c["round_fixed_s"]
PY
"$tool" --launches 0 >/dev/null 2>&1
rc=$?
check "--launches 0 is refused with exit 2 (got $rc)" test $rc -eq 2
"$tool" --model no-such-model >/dev/null 2>&1
rc=$?
check "--model no-such-model is refused with exit 2 (got $rc)" test $rc -eq 2
"$tool" --reps 0 >/dev/null 2>&1
rc=$?
check "--reps 0 is refused with exit 2 (got $rc)" test $rc -eq 2
echo "1..$n"
exit $fail

#!/usr/bin/env python3
"""check_cluster.py FILE RANKS PER_NODE: a cluster file written by nsp_calibrate
is plain JSON (no inf/nan), has every key of the planner's cluster with its
_from note where it was measured (the exchange CPU keys too), and its levels
say inside/across nodes and carry their exchange CPU: the bare all-to-all's
and, where the executor measured the level, the executor's (the file's keys
then; the _from notes say which measurement each came from)."""
import json
import math
import sys

path, ranks, per_node = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path) as f:
    c = json.load(f, parse_constant=lambda x: sys.exit("non-JSON constant %s" % x))
keys = ["ranks", "ranks_per_node", "mem_bytes", "gemm_flops", "attn_flops", "bw_intra",
        "bw_inter", "lat_intra", "lat_inter", "overlap", "cpu_byte_intra", "cpu_byte_inter",
        "cpu_call_intra", "cpu_call_inter"]
bad = [k for k in keys if k not in c or not math.isfinite(c[k])]
bad += [k for k in keys[4:] if k not in c.get("_from", {}) and k != "gemm_flops"]
if c["ranks"] != ranks or c["ranks_per_node"] != per_node:
    bad.append("ranks %s/%s" % (c["ranks"], c["ranks_per_node"]))
for lv in c["_levels"]:
    if (lv["degree"] > per_node) != (lv["where"] == "across nodes") or not lv["bw"] > 0:
        bad.append("level %s" % lv)
    if not (lv["cpu_small_s"] > 0 and lv["cpu_large_s"] >= 0 and lv["cpu_byte"] >= 0):
        bad.append("level cpu %s" % lv)
    xkeys = ["xcpu_small_s", "xcpu_large_s", "xsent_small_bytes", "xsent_large_bytes",
             "xmodel_small_bytes", "xmodel_large_bytes", "xcpu_byte", "xcpu_call", "xcpu_many_s"]
    if lv.get("executor_measured") and not all(
            k in lv and math.isfinite(lv[k]) and lv[k] >= 0 for k in xkeys):
        bad.append("level executor cpu %s" % lv)
    if lv.get("executor_measured") and not lv["xsent_large_bytes"] > lv["xsent_small_bytes"] > 0:
        bad.append("level executor bytes %s" % lv)
for k in keys[-4:]:
    note = c.get("_from", {}).get(k, "")
    if not (note.startswith("executor:") or note.startswith("bare")) or "bare" not in note:
        bad.append("_from %s does not name its measurement: %r" % (k, note[:60]))
if not all(c[k] >= 0 for k in keys[-4:]) or not c["cpu_call_intra"] > 0:
    bad.append("exchange cpu")
if not 0 <= c["overlap"] <= 1:
    bad.append("overlap %s" % c["overlap"])
print("# %s: %d levels, bw_intra %.3g bw_inter %.3g, eta %.2f; problems: %s" % (
    path, len(c["_levels"]), c["bw_intra"], c["bw_inter"], c["overlap"], bad or "none"))
sys.exit(1 if bad else 0)

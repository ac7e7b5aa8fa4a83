#!/usr/bin/env python3
"""Tables of scripts/netcluster-results.sh from its JSON files:
netcluster_table.py DIR KEY...  (DIR/cal-KEY.json, DIR/demo-KEY.json; a KEY is
RATE[-KxG][-nothread], e.g. 1gbit, 1gbit-2x1, 250mbit-nothread)."""
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def session(demo):
    return next(iter(demo["sessions"].values()))


def reps_ratio(plan):
    """serial/pipelined wall per repetition (paired), and of the means."""
    m = plan["measured"]
    p, s = m["pipelined"]["wall_s_reps"], m["serial"]["wall_s_reps"]
    return [b / a for a, b in zip(p, s)], sum(s) / sum(p)


def cpu_columns(m, cores):
    """pipelined CPU / serial CPU (all ranks' process CPU: kernel, copies,
    tcp stack, progress thread), the cores serial used of the host's, and
    the most pipelining could gain: serial wall / (pipelined CPU / cores)."""
    p, s = m["pipelined"], m["serial"]
    return p["cpu_s"] / s["cpu_s"], s["cpu_s"] / s["wall_s"], s["wall_s"] * cores / p["cpu_s"]


def main():
    out, keys = sys.argv[1], sys.argv[2:]
    print("| link | calibrated: inter-node bw (GB/s), eta | planner | pipelined wall ms | "
          "serial wall ms | serial / pipelined (reps) | cpu pipelined / serial | "
          "serial cores used | bound on serial / pipelined | predicted ms | "
          "measured crit ms | pred / crit |")
    print("|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for key in keys:
        path = os.path.join(out, "demo-%s.json" % key)
        if not os.path.exists(path):
            continue
        cal = load(os.path.join(out, "cal-%s.json" % key))
        demo = load(path)
        cores = demo["config"].get("host_cores", 2)
        for name, plan in session(demo)["batches"][0]["plans"].items():
            per, mean = reps_ratio(plan)
            m = plan["measured"]
            pred = plan["predicted"]["step_s"]
            crit = m["pipelined"]["crit_s"]
            cpu, used, bound = cpu_columns(m, cores)
            print("| %s | %.3f, %.2f | %s | %.0f | %.0f | %.2fx (%s) | %.2f | %.2f | %.2fx | "
                  "%.0f | %.0f | %.2f |" % (
                      key, cal["bw_inter"] / 1e9, cal["overlap"], name,
                      1e3 * m["pipelined"]["wall_s"], 1e3 * m["serial"]["wall_s"], mean,
                      " ".join("%.2f" % x for x in per), cpu, used, bound, 1e3 * pred,
                      1e3 * crit, pred / crit))
    print()
    print("| link | nested vs static (wall) | nested vs disjoint (wall) | predicted vs static | "
          "predicted vs disjoint |")
    print("|---|---:|---:|---:|---:|")
    for key in keys:
        path = os.path.join(out, "demo-%s.json" % key)
        if os.path.exists(path) and not key.endswith("-nothread"):
            sp = session(load(path))["summary"]["speedup_of_nested"]
            print("| %s | %.2fx | %.2fx | %.2fx | %.2fx |" % (
                key, sp["over_static"]["wall"], sp["over_disjoint"]["wall"],
                sp["over_static"]["predicted"], sp["over_disjoint"]["predicted"]))


if __name__ == "__main__":
    main()

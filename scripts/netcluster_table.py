#!/usr/bin/env python3
"""Tables of scripts/netcluster-results.sh from its JSON files:
netcluster_table.py DIR RATE...  (DIR/cal-RATE.json, DIR/demo-RATE[-nothread].json)."""
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


def main():
    out, rates = sys.argv[1], sys.argv[2:]
    print("| link | calibrated: inter-node bw (GB/s), eta | planner | pipelined wall ms | "
          "serial wall ms | serial / pipelined (reps) | predicted ms | measured crit ms | "
          "pred / crit |")
    print("|---|---|---|---:|---:|---|---:|---:|---:|")
    for rate in rates + [rates[-1] + "-nothread"]:
        path = os.path.join(out, "demo-%s.json" % rate)
        if not os.path.exists(path):
            continue
        cal = load(os.path.join(out, "cal-%s.json" % rate))
        ses = session(load(path))
        for name, plan in ses["batches"][0]["plans"].items():
            per, mean = reps_ratio(plan)
            m = plan["measured"]
            pred = plan["predicted"]["step_s"]
            crit = m["pipelined"]["crit_s"]
            print("| %s | %.3f, %.2f | %s | %.0f | %.0f | %.2fx (%s) | %.0f | %.0f | %.2f |" % (
                rate, cal["bw_inter"] / 1e9, cal["overlap"], name,
                1e3 * m["pipelined"]["wall_s"], 1e3 * m["serial"]["wall_s"], mean,
                " ".join("%.2f" % x for x in per), 1e3 * pred, 1e3 * crit, pred / crit))
    print()
    print("| link | nested vs static (wall) | nested vs disjoint (wall) | predicted vs static | "
          "predicted vs disjoint |")
    print("|---|---:|---:|---:|---:|")
    for rate in rates:
        path = os.path.join(out, "demo-%s.json" % rate)
        if os.path.exists(path):
            sp = session(load(path))["summary"]["speedup_of_nested"]
            print("| %s | %.2fx | %.2fx | %.2fx | %.2fx |" % (
                rate, sp["over_static"]["wall"], sp["over_disjoint"]["wall"],
                sp["over_static"]["predicted"], sp["over_disjoint"]["predicted"]))


if __name__ == "__main__":
    main()

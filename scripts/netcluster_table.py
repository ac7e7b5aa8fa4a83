#!/usr/bin/env python3
"""Tables of scripts/netcluster-results.sh from its JSON files:
netcluster_table.py DIR KEY...  (DIR/cal-KEY.json, DIR/demo-KEY.json; a KEY is
RATE[-KxG][-nothread], e.g. 1gbit, 1gbit-2x1, 250mbit-nothread)."""
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def demos(out, keys):
    """(key, demo JSON) for every key whose DIR/demo-KEY.json exists."""
    for key in keys:
        path = os.path.join(out, "demo-%s.json" % key)
        if os.path.exists(path):
            yield key, load(path)


def session(demo):
    return next(iter(demo["sessions"].values()))


def reps_ratio(plan):
    """serial/pipelined wall per repetition (paired), and their median (one
    repetition disturbed by the machine's other jobs moves it least)."""
    m = plan["measured"]
    p, s = m["pipelined"]["wall_s_reps"], m["serial"]["wall_s_reps"]
    per = [b / a for a, b in zip(p, s)]
    return per, statistics.median(per)


def cpu_columns(m, cores):
    """pipelined CPU / serial CPU (all ranks' process CPU: kernel, copies,
    tcp stack, progress thread), the cores serial used of the host's, and
    the most pipelining could gain: serial wall / (pipelined CPU / cores)."""
    p, s = m["pipelined"], m["serial"]
    return p["cpu_s"] / s["cpu_s"], s["cpu_s"] / s["wall_s"], s["wall_s"] * cores / p["cpu_s"]


def main():
    out, keys = sys.argv[1], sys.argv[2:]
    print("| link | calibrated: inter-node bw (GB/s), eta | planner | pipelined wall ms | "
          "serial wall ms | serial / pipelined: median (reps) | cpu pipelined / serial | "
          "serial cores used | bound on serial / pipelined | predicted ms | "
          "measured crit ms | pred / crit |")
    print("|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for key, demo in demos(out, keys):
        cal = load(os.path.join(out, "cal-%s.json" % key))
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
    for key, demo in demos(out, keys):
        if not key.endswith("-nothread"):
            sp = session(demo)["summary"]["speedup_of_nested"]
            print("| %s | %.2fx | %.2fx | %.2fx | %.2fx |" % (
                key, sp["over_static"]["wall"], sp["over_disjoint"]["wall"],
                sp["over_static"]["predicted"], sp["over_disjoint"]["predicted"]))

    where_time_goes(out, keys)
    before_after(out, keys)


def progress_cpu(path):
    """Mean CPU of the ranks' progress threads over the demo run (its INFO
    lines: 'ucx: progress thread: X ms CPU, ...'), or None."""
    if not os.path.exists(path):
        return None
    ms = []
    with open(path) as f:
        for line in f:
            if "progress thread:" in line and " ms CPU" in line:
                ms.append(float(line.split("progress thread:")[1].split("ms CPU")[0]))
    return sum(ms) / len(ms) if ms else None


def where_time_goes(out, keys):
    """Per planner, the busiest rank's model terms against what it measured
    (levels pipelined): the kernel's thread CPU against the fitted kernel
    cost, and the CPU the exchanges took beside the kernel (process CPU in
    the calls minus the kernel's thread CPU: copies, tcp, progress)."""
    print()
    print("| link | planner | predicted kernel max ms | kernel CPU max ms | kernel / predicted | "
          "predicted exchange CPU max ms | exchange CPU max ms | predicted comm max ms | "
          "progress thread CPU per rank, whole run ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key, demo in demos(out, keys):
        thread = progress_cpu(os.path.join(out, "demo-%s.err" % key))
        for name, plan in session(demo)["batches"][0]["plans"].items():
            pr, m = plan["predicted"], plan["measured"]["pipelined"]
            xchg = max(b - k for b, k in zip(m["rank_busy_s"], m["rank_kernel_s"]))
            # rank_comp_s includes the exchange CPU (rank_xcpu_s, absent before it existed)
            xcpu = pr.get("rank_xcpu_s", [0.0] * len(pr["rank_comp_s"]))
            kern = max(c - x for c, x in zip(pr["rank_comp_s"], xcpu))
            print("| %s | %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f | %s |" % (
                key, name, 1e3 * kern, 1e3 * m["comp_max_s"], m["comp_max_s"] / kern,
                1e3 * max(xcpu), 1e3 * xchg, 1e3 * max(pr["rank_comm_s"]),
                "-" if thread is None else "%.0f" % thread))


def groups_of(plan):
    """The plan's groups that exchange: 'dDEGREE@RANK0 x SEQS', one round after another."""
    return " ".join("d%d@%d x%d" % (g["size"], g["rank0"], len(g["seqs"]))
                    for r in plan["plan"]["rounds"] for g in r["groups"]
                    if g["size"] > 1 and g["seqs"]) or "none"


def before_after(out, keys):
    """Where KEY-before (another build, netcluster-results.sh --before) ran
    beside KEY: per planner the prediction against crit of both, and the
    groups each plan exchanges in."""
    rows = [(k[:-len("-before")], k) for k in keys if k.endswith("-before")]
    if not rows:
        return
    print()
    print("| link | planner | before: pred ms | crit ms | pred / crit | after: pred ms | crit ms | "
          "pred / crit | groups before | groups after |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    within = {}  # planner -> [before within 15%, after within 15%, rows]
    for key, bkey in rows:
        got = dict(demos(out, [key, bkey]))
        if len(got) < 2:
            continue
        b, a = (session(got[k])["batches"][0]["plans"] for k in (bkey, key))
        for name in a:
            pb, pa = b[name], a[name]
            cb, ca = (p["measured"]["pipelined"]["crit_s"] for p in (pb, pa))
            sb, sa = (p["predicted"]["step_s"] for p in (pb, pa))
            print("| %s | %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %s | %s |" % (
                key, name, 1e3 * sb, 1e3 * cb, sb / cb, 1e3 * sa, 1e3 * ca, sa / ca,
                groups_of(pb), groups_of(pa)))
            w = within.setdefault(name, [0, 0, 0])
            w[0] += abs(sb / cb - 1) <= 0.15
            w[1] += abs(sa / ca - 1) <= 0.15
            w[2] += 1
    print()
    print("| planner | pred / crit within 15%: before | after |")
    print("|---|---:|---:|")
    for name, (wb, wa, n) in within.items():
        print("| %s | %d of %d | %d of %d |" % (name, wb, n, wa, n))


if __name__ == "__main__":
    main()

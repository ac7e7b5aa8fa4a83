#!/usr/bin/env python3
"""Are two builds' plans the same? Runs perf/nsp_sim of both builds on the
three shipped workloads (data/workloads/) for every planner, and compares
the plans batch by batch and group by group (round, rank0, size, ring,
recompute, pipelined, the sequences in order), with the flags and the
predicted step and bound. Planning time is not compared.

  scripts/compare-plans.py --base DIR --new DIR [--ranks 64,256]
                           [--batches 10] [--milp-batches 3] [--no-milp]
                           [--json FILE]

Two kinds of runs per workload and rank count, each without and with rings
(nsp_sim --ring):
  greedy  NSPCOMM_MILP=none: every planner, the disjoint one on its greedy
          alone; deterministic, so every plan must be identical;
  milp    the disjoint planner with its MILP solver (the build's default,
          time limit 1 s a round). A round that hits the limit
          (flag solver-timeout) depends on the machine's speed at that
          moment, so such plans are counted apart: identical or not.
Prints a table, writes JSON (default compare-plans.json) that always parses.
Exit status: 0 when every deterministic plan is identical, 1 otherwise,
2 on bad usage or a run that failed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ["wikipedia-flexsp", "prolong-distca", "wlbllm-distca"]
PLANNERS = "static,disjoint,nested,megatron"
FLAG_SOLVER_TIMEOUT = 2


def group_key(g):
    return (g["rank0"], g["size"], g.get("ring", 1), g["recompute"], g["pipelined"],
            tuple(g["seqs"]))


def plan_key(p):
    """What must be equal: everything but the planning time."""
    pred = p["predicted"]
    return (p["planner"], p["flags"], tuple(p["seq_lens"]),
            tuple(tuple(group_key(g) for g in r["groups"]) for r in p["rounds"]),
            pred["step_s"], pred["lower_bound_s"], tuple(pred.get("rank_s", [])),
            tuple(pred.get("rank_mem_bytes", [])))


def run_sim(build, workload, ranks, batches, planners, ring, milp, out):
    cmd = [os.path.join(build, "perf", "nsp_sim"),
           "--workload", os.path.join(TOP, "data", "workloads", workload + ".txt"),
           "--model", "qwen3-30b-a3b", "--cluster", "h100", "--ranks", str(ranks),
           "--batches", str(batches), "--planners", planners, "--json", out, "--quiet"]
    if ring:
        cmd.append("--ring")
    env = dict(os.environ)
    env.pop("NSPCOMM_MILP", None)
    if not milp:
        env["NSPCOMM_MILP"] = "none"
    env.setdefault("NSPCOMM_LOG_LEVEL", "ERROR")
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        sys.stderr.write("compare-plans: %s failed (%d): %s\n"
                         % (" ".join(cmd), r.returncode, r.stderr.strip()))
        sys.exit(2)
    with open(out) as f:
        return json.load(f)


def compare(base, new, row):
    """Fills row[planner] with counts: plans, identical, differ, timeout_*."""
    for bb, nb in zip(base["batches"], new["batches"]):
        for name, bp in bb["plans"].items():
            np_ = nb["plans"].get(name)
            c = row.setdefault(name, {"plans": 0, "identical": 0, "differ": 0,
                                      "timeout_identical": 0, "timeout_differ": 0})
            c["plans"] += 1
            same = np_ is not None and plan_key(bp) == plan_key(np_)
            timed_out = bool((bp["flags"] | (np_ or {"flags": 0})["flags"])
                             & FLAG_SOLVER_TIMEOUT)
            key = ("timeout_" if timed_out else "") + ("identical" if same else "differ")
            c[key] += 1
    if len(base["batches"]) != len(new["batches"]):
        row.setdefault("_batches_differ", True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the build to compare against")
    ap.add_argument("--new", required=True, help="the build under test")
    ap.add_argument("--ranks", default="64,256")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--milp-batches", type=int, default=3)
    ap.add_argument("--no-milp", action="store_true", help="skip the MILP runs")
    ap.add_argument("--json", default="compare-plans.json")
    a = ap.parse_args()
    for b in (a.base, a.new):
        if not os.access(os.path.join(b, "perf", "nsp_sim"), os.X_OK):
            sys.stderr.write("compare-plans: %s/perf/nsp_sim is not built\n" % b)
            return 2
    ranks = [int(r) for r in a.ranks.split(",")]
    kinds = [("greedy", False, PLANNERS, a.batches)]
    if not a.no_milp:
        kinds.append(("milp", True, "disjoint", a.milp_batches))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, milp, planners, batches in kinds:
            for w in WORKLOADS:
                for n in ranks:
                    for ring in (False, True):
                        tag = "%s %s %d%s" % (kind, w, n, " ring" if ring else "")
                        sys.stderr.write("compare-plans: %s\n" % tag)
                        out = [os.path.join(tmp, "%s.json" % s) for s in ("base", "new")]
                        base = run_sim(a.base, w, n, batches, planners, ring, milp, out[0])
                        new = run_sim(a.new, w, n, batches, planners, ring, milp, out[1])
                        row = {}
                        compare(base, new, row)
                        rows.append({"kind": kind, "workload": w, "ranks": n, "ring": ring,
                                     "planners": row})
    print("| run | workload | ranks | ring | planner | plans | identical | differ | "
          "timed out: identical | timed out: differ |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    bad = 0
    total = {"plans": 0, "identical": 0, "differ": 0, "timeout_identical": 0,
             "timeout_differ": 0}
    for r in rows:
        for name, c in r["planners"].items():
            if name.startswith("_"):
                bad += 1
                continue
            print("| %s | %s | %d | %s | %s | %d | %d | %d | %d | %d |"
                  % (r["kind"], r["workload"], r["ranks"], "yes" if r["ring"] else "no", name,
                     c["plans"], c["identical"], c["differ"], c["timeout_identical"],
                     c["timeout_differ"]))
            bad += c["differ"]
            for k in total:
                total[k] += c[k]
    print("\n%d plans compared: %d identical, %d differ; solver time limit hit: %d identical, "
          "%d differ (timing-dependent)" % (total["plans"], total["identical"], total["differ"],
                                          total["timeout_identical"], total["timeout_differ"]))
    with open(a.json, "w") as f:
        json.dump({"format": "nspcomm-compare-plans-v1", "base": a.base, "new": a.new,
                   "loadavg": open("/proc/loadavg").read().split()[:3]
                   if os.path.exists("/proc/loadavg") else None,
                   "rows": rows, "total": total, "deterministic_identical": bad == 0},
                  f, indent=1)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Check an nsp_demo JSON file (docs/guide/demo.md section 5): the fields are there,
numbers are finite and consistent, and every correctness check passed.
Usage: check_demo_json.py FILE RANKS. Exit 0 when all holds, 1 otherwise (the
first problem is printed)."""
import json
import math
import sys


def fail(msg):
    print("# check_demo_json: " + msg)
    sys.exit(1)


def need(obj, path):
    cur = obj
    for key in path.split("."):
        if isinstance(cur, list):
            cur = cur[int(key)]
        elif key not in cur:
            fail("missing field " + path)
        else:
            cur = cur[key]
    return cur


def positive(obj, path):
    v = need(obj, path)
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        fail("%s = %r, expected a positive number" % (path, v))
    return v


def check_pipelined_bound(doc, pred, ranks):
    """rank_serial_s and rank_pipelined_lb_s: one entry per rank, and per rank the
    least pipelined step lies between the serial step over the number of degrees
    (a max over sums of levels) and the serial step itself."""
    ser = need(doc, pred + ".rank_serial_s")
    lb = need(doc, pred + ".rank_pipelined_lb_s")
    if len(ser) != ranks or len(lb) != ranks:
        fail(pred + ": rank_serial_s / rank_pipelined_lb_s have not %d entries" % ranks)
    rounds = need(doc, pred.rsplit(".", 1)[0] + ".plan.rounds")
    nlevels = len({g["size"] for r in rounds for g in r["groups"]}) or 1  # degrees
    for g, (s, b) in enumerate(zip(ser, lb)):
        if not (math.isfinite(s) and math.isfinite(b)):
            fail("%s: rank %d: serial %r, pipelined bound %r not finite" % (pred, g, s, b))
        if b > s * (1 + 1e-9) or b < s / nlevels * (1 - 1e-9):
            fail("%s: rank %d: pipelined bound %g outside [serial / %d, serial] = [%g, %g]"
                 % (pred, g, b, nlevels, s / nlevels, s))


def main():
    doc = json.load(open(sys.argv[1]))
    ranks = int(sys.argv[2])
    if need(doc, "format") != "nspcomm-demo-v1":
        fail("format is not nspcomm-demo-v1")
    if need(doc, "config.ranks") != ranks:
        fail("config.ranks is not %d" % ranks)
    need(doc, "model.q_heads")
    nbatches = len(need(doc, "batches"))
    if nbatches < 1:
        fail("no batches")
    sessions = need(doc, "config.sessions")
    for s in sessions:
        base = "sessions." + s
        positive(doc, base + ".cluster.attn_flops")
        if need(doc, base + ".calibration.calibrated"):
            positive(doc, base + ".calibration.attn_flops")
            positive(doc, base + ".calibration.bw_fp32_bytes_s")
        if len(need(doc, base + ".batches")) != nbatches:
            fail(base + ".batches has not %d entries" % nbatches)
        for b in range(nbatches):
            for planner in ("static", "disjoint", "nested", "megatron"):
                pb = "%s.batches.%d.plans.%s" % (base, b, planner)
                if need(doc, pb + ".plan.format") != "nspcomm-plan-v1":
                    fail(pb + ".plan is not a plan")
                positive(doc, pb + ".predicted.step_s")
                if len(need(doc, pb + ".predicted.rank_s")) != ranks:
                    fail(pb + ".predicted.rank_s has not %d entries" % ranks)
                check_pipelined_bound(doc, pb + ".predicted", ranks)
                for mode in ("pipelined", "serial"):
                    m = "%s.measured.%s" % (pb, mode)
                    positive(doc, m + ".wall_s")
                    positive(doc, m + ".crit_s")
                    positive(doc, m + ".cpu_s")
                    positive(doc, m + ".comp_max_s")
                    if len(need(doc, m + ".rank_kernel_s")) != ranks:
                        fail(m + ".rank_kernel_s has not %d entries" % ranks)
                    if need(doc, m + ".check.passed") is not True:
                        fail(m + ".check did not pass")
                    need(doc, m + ".bytes_per_degree")
        for planner in ("static", "disjoint", "nested", "megatron"):
            p = "%s.summary.planners.%s" % (base, planner)
            for k in ("crit_s", "wall_s", "cpu_s", "crit_serial_s", "wall_serial_s",
                      "predicted_step_s", "imbalance", "predicted_imbalance"):
                positive(doc, p + "." + k)
            positive(doc, "%s.summary.pipelining.%s.wall_serial_over_pipelined" % (base, planner))
        for other in ("static", "disjoint", "megatron"):
            for k in ("predicted", "crit", "wall", "cpu"):
                positive(doc, "%s.summary.speedup_of_nested.over_%s.%s" % (base, other, k))
        need(doc, base + ".summary.targets.nested_imbalance_below_static")
    checks = need(doc, "checks")
    if not checks.get("all_passed") or checks.get("runs") != checks.get("passed"):
        fail("checks: %r" % checks)
    if checks.get("runs") != nbatches * len(sessions) * 8:
        fail("checks.runs = %r, expected %d" % (checks.get("runs"), nbatches * len(sessions) * 8))
    if need(doc, "compute.kind") not in ("real", "emulated"):
        fail("compute.kind is %r" % need(doc, "compute.kind"))
    positive(doc, "timings.total_s")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The one-core-per-rank table of scripts/netcluster-onecore.sh:

  onecore_table.py DIR RATE...
  onecore_table.py --one-round-plan DEMO.json PLAN.json CAP_TOKENS

reads DIR/cal-RATE.json, DIR/demo-RATE-{demo,longtail}-N.json and
DIR/load-RATE.txt, prints one Markdown table per rate (wall time: medians
and [min-max] over every repetition of every run) and writes
DIR/onecore.json (nspcomm-onecore-v1; null for what did not run, never
NaN). Ratios are paired: the two sides of a ratio come from the same
repetition of the same run (planners and modes of a repetition run back to
back in the demo)."""
import glob
import json
import os
import re
import statistics
import sys

PLANNERS = ("static", "disjoint", "nested")
WORKLOADS = ("demo", "longtail", "longtail1")
PROGRESS = re.compile(r"progress thread: ([0-9.]+) ms CPU")


def load(path):
    with open(path) as f:
        return json.load(f)


def spread(values):
    """{median, min, max, n} of a list, None when empty."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def fmt(s, scale=1.0, digits=0, unit=""):
    if s is None:
        return "n/a"
    f = "%%.%df" % digits
    return (f + "%s [" + f + "-" + f + "]") % (s["median"] * scale, unit, s["min"] * scale,
                                               s["max"] * scale)


def session(demo):
    return next(iter(demo["sessions"].values()))


def plan_of(demo, planner):
    return session(demo)["batches"][0]["plans"][planner]


def walls(plan, mode):
    return plan["measured"][mode]["wall_s_reps"]


def progress_ms(err_path):
    """The progress threads' CPU (ms) per rank over one demo run."""
    if not os.path.exists(err_path):
        return []
    with open(err_path, errors="replace") as f:
        return [float(m.group(1)) for m in PROGRESS.finditer(f.read())]


def planner_row(runs, planner):
    """Everything the table says of one planner over the runs of a workload."""
    pipe, ser, ratio, over = [], [], [], []
    for demo in runs:
        p = plan_of(demo, planner)
        n = plan_of(demo, "nested")
        pw, sw = walls(p, "pipelined"), walls(p, "serial")
        pipe += pw
        ser += sw
        ratio += [b / a for a, b in zip(pw, sw) if a > 0]
        over += [a / b for a, b in zip(pw, walls(n, "pipelined")) if b > 0]
    first = plan_of(runs[0], planner)
    pred = first["predicted"]
    across = first["measured"]["pipelined"]["bytes_per_degree"]
    busiest = max(range(len(pred["rank_s"])), key=lambda r: pred["rank_s"][r])
    comp = pred["rank_comp_s"][busiest]
    return {
        "rounds": len(first["plan"]["rounds"]),
        "bytes_across_per_step": sum(v for d, v in across.items() if int(d) > 1),
        "predicted_step_s": pred["step_s"],
        "predicted_comm_over_comp": pred["rank_comm_s"][busiest] / comp if comp > 0 else None,
        "wall_pipelined_s": spread(pipe),
        "wall_serial_s": spread(ser),
        "serial_over_pipelined": spread(ratio),
        "planner_over_nested": spread(over) if planner != "nested" else None,
        "predicted_over_wall": (pred["step_s"] / statistics.median(pipe)) if pipe else None,
    }


def workload_block(out, rate, wl):
    paths = sorted(glob.glob(os.path.join(out, "demo-%s-%s-*.json" % (rate, wl))))
    runs = [load(p) for p in paths]
    if not runs:
        return None
    prog = []
    for p in paths:
        prog += progress_ms(p[:-len(".json")] + ".err")
    b = runs[0]["batches"][0]
    return {
        "name": wl,
        "runs": len(runs),
        "reps_per_run": runs[0]["config"]["reps"],
        "sequences": b.get("nseqs"), "tokens": b.get("tokens"), "longest": b.get("longest"),
        "checks_passed": all(r["checks"]["all_passed"] for r in runs),
        "checks": sum(r["checks"]["passed"] for r in runs),
        "check_runs": sum(r["checks"]["runs"] for r in runs),
        "progress_thread_ms_per_rank_run": spread(prog),
        "planners": {p: planner_row(runs, p) for p in PLANNERS},
    }


def loads(out, rate):
    vals = []
    path = os.path.join(out, "load-%s.txt" % rate)
    if os.path.exists(path):
        for line in open(path):
            vals += [float(x) for x in line.split()[1:3]]
    return spread(vals)


def rate_block(out, rate):
    cal_path = os.path.join(out, "cal-%s.json" % rate)
    cal = load(cal_path) if os.path.exists(cal_path) else {}
    return {
        "rate": rate,
        "calibration": {k: cal.get(k) for k in ("bw_inter", "lat_inter", "attn_flops",
                                                "gemm_flops", "overlap", "cpu_byte_inter")},
        "load_average": loads(out, rate),
        "workloads": [w for w in (workload_block(out, rate, wl) for wl in WORKLOADS) if w],
    }


def print_rate(rb):
    c, ld = rb["calibration"], rb["load_average"]
    print("### %s: 2 nodes x 1 rank, one core each (load average %s)" % (
        rb["rate"], fmt(ld, digits=1)))
    print()
    if c.get("bw_inter") is not None:
        print("calibrated: bw_inter %.4f GB/s (bf16 model bytes per rank), attn %.3g FLOP/s, "
              "eta %.2f" % (c["bw_inter"] / 1e9, c["attn_flops"], c["overlap"]))
        print()
    print("| workload | planner | rounds | MB across / step | predicted ms | pred exchange / "
          "compute | wall pipelined ms | wall serial ms | serial / pipelined | planner / "
          "nested (pipelined wall) | pred / wall |")
    print("|---|---|---:|---:|---:|---:|---|---|---|---|---:|")
    for w in rb["workloads"]:
        for name in PLANNERS:
            r = w["planners"][name]
            ratio = r["predicted_comm_over_comp"]
            pw = r["predicted_over_wall"]
            print("| %s | %s | %d | %.1f | %.0f | %s | %s | %s | %s | %s | %s |" % (
                w["name"], name, r["rounds"], r["bytes_across_per_step"] / 1e6,
                1e3 * r["predicted_step_s"], "%.2f" % ratio if ratio is not None else "n/a",
                fmt(r["wall_pipelined_s"], 1e3), fmt(r["wall_serial_s"], 1e3),
                fmt(r["serial_over_pipelined"], digits=2, unit="x"),
                fmt(r["planner_over_nested"], digits=2, unit="x") if name != "nested" else "",
                "%.2f" % pw if pw is not None else "n/a"))
    print()
    for w in rb["workloads"]:
        print("%s: %d runs x %d reps; %d sequences, %d tokens, longest %d; checks %d of %d "
              "runs match the reference; progress thread CPU per rank and run: %s ms" % (
                  w["name"], w["runs"], w["reps_per_run"], w["sequences"] or 0, w["tokens"] or 0,
                  w["longest"] or 0, w["checks"], w["check_runs"],
                  fmt(w["progress_thread_ms_per_rank_run"])))
    print()


def one_round_plan(demo_json, out_path, cap_tokens):
    """A one-round nested plan for the batch of demo_json (its nested plan as
    the template: model, cluster, lengths): the longest sequence on both
    ranks (degree 2), every other one on one rank, longest-processing-time
    first by s^2 to the rank with less work that still holds it (cap_tokens
    per rank), every group pipelined (each rank holds both levels). The
    demo prices it again (--nested-plan) and validates its memory."""
    plan = plan_of(load(demo_json), "nested")["plan"]
    lens = plan["seq_lens"]
    order = sorted(range(len(lens)), key=lambda i: -lens[i])
    longest, rest = order[0], order[1:]
    work, tokens, seqs = [0.0, 0.0], [lens[longest] / 2] * 2, [[], []]
    for i in rest:
        ranks = sorted((0, 1), key=lambda r: work[r])
        r = next((q for q in ranks if tokens[q] + lens[i] <= cap_tokens), ranks[0])
        work[r] += lens[i] ** 2
        tokens[r] += lens[i]
        seqs[r].append(i)
    groups = [{"rank0": 0, "size": 2, "seqs": [longest], "recompute": False, "pipelined": True}]
    groups += [{"rank0": r, "size": 1, "seqs": seqs[r], "recompute": False, "pipelined": True}
               for r in (0, 1) if seqs[r]]
    plan = dict(plan, planner="nested", rounds=[{"groups": groups}])
    with open(out_path, "w") as f:
        json.dump(plan, f, indent=1, allow_nan=False)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--one-round-plan":
        one_round_plan(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        return 0
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, rates = sys.argv[1], sys.argv[2:]
    blocks = [rate_block(out, r) for r in rates]
    for rb in blocks:
        print_rate(rb)
    doc = {"format": "nspcomm-onecore-v1",
           "about": "2 nodes x 1 rank on the namespace cluster, each rank pinned to its own "
                    "core; real kernels (the reference kernel), real wire (tcp over a shaped "
                    "veth); wall time per step (first rank's start to last rank's end)",
           "rates": blocks}
    path = os.path.join(out, "onecore.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
    print("# wrote %s" % path)
    return 0 if all(w["checks_passed"] for rb in blocks for w in rb["workloads"]) else 1


if __name__ == "__main__":
    sys.exit(main())

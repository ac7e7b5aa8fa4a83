#!/usr/bin/env python3
"""The table, JSON and SVG of scripts/emu-results.sh (emulated compute).

  scripts/emu_table.py OUT [--shapes 2x4,4x4] RATE...

Reads OUT/demo-SHAPE-RATE-{demo,longtail,math}.json (nsp_demo --json with
--device emu:FILE), OUT/load.txt and OUT/load-all.txt; writes OUT/emu.txt
(printed too), OUT/emu.json (nspcomm-emu-results-v1) and OUT/emu.svg.

Per shape, rate and workload, per planner: the wall time of a step
(median over the demo's repetitions, levels pipelined; spread min..max),
serial / pipelined (median of the per-repetition ratios; the model's bound
beside it: 1 when no rank holds two levels of a round, else the busiest
rank's predicted compute + exchange over the larger of the two, what
hiding every exchange behind the compute could give at most; and the
dependency bound "dep", which also keeps a level's kernel after its own
exchange and before its outputs': per round max(sum compute, sum exchange,
max over levels of compute + exchange), dependency_bound()), nested
over static, megatron and disjoint (median of the per-repetition ratios,
min..max), and predicted / measured. Targets (issue 18): pipelined >= 1.2x
serial where the model's bound is >= 1.2, nested >= 1.2x static and >=
1.1x megatron, predicted within 15 % for every planner.
"""
import argparse
import json
import math
import os
import statistics
import sys

PLANNERS = ("static", "disjoint", "nested", "megatron")
WORKLOADS = ("demo", "longtail")


def med(v):
    return statistics.median(v) if v else float("nan")


def load_avg(out):
    """(mean, max) of the 1-minute load average over the run."""
    vals = []
    try:
        for line in open(os.path.join(out, "load-all.txt")):
            parts = line.split()
            if len(parts) >= 2:
                vals.append(float(parts[1]))
    except OSError:
        pass
    return (statistics.mean(vals), max(vals)) if vals else (float("nan"), float("nan"))


def levels_overlap(plan):
    """Does some rank hold two levels of one round, one with an exchange (degree > 1)?
    Only then can a level's exchange run behind another level's kernels; a level's
    own exchange must land before its kernel."""
    for rnd in plan["rounds"]:
        per_rank = {}
        for g in rnd["groups"]:
            if not g["seqs"]:
                continue
            for r in range(g["rank0"], g["rank0"] + g["size"]):
                per_rank.setdefault(r, set()).add(g["size"])
        if any(len(v) >= 2 and max(v) > 1 for v in per_rank.values()):
            return True
    return False


def model_hide(pred, plan):
    """At most what pipelining levels can give as the model sees it: 1 when no
    rank has two levels in a round, else max_r(comp + comm) / max_r max(comp, comm)
    (every exchange hidden: an upper bound)."""
    if not levels_overlap(plan):
        return 1.0
    comp, comm = pred["rank_comp_s"], pred["rank_comm_s"]
    serial = max(c + x for c, x in zip(comp, comm))
    best = max(max(c, x) for c, x in zip(comp, comm))
    return serial / best if best > 0 else 1.0


def dependency_bound(pred):
    """At most what pipelining levels can give when a level's kernel must wait for
    its own exchange (and its outputs' exchange for the kernel): the busiest rank's
    serial step over the busiest rank's least pipelined step, max(sum compute, sum
    exchange, longest level's compute + exchange) per round (nsp_demo's
    rank_serial_s, rank_pipelined_lb_s). None for a demo that does not write them."""
    ser, lb = pred.get("rank_serial_s"), pred.get("rank_pipelined_lb_s")
    if not ser or not lb or max(lb) <= 0:
        return None
    return max(ser) / max(lb)


def host_share(measured):
    """Share of this host's cores a step used: the demo's cpu_s (median over
    repetitions of the sum over ranks of process CPU) over cores x wall_s."""
    cores = os.cpu_count() or 1
    w, c = measured.get("wall_s"), measured.get("cpu_s")
    return c / (cores * w) if w and c is not None else None


def busiest(pred):
    """(compute, exchange) predicted for the rank with the longest time."""
    r = max(range(len(pred["rank_s"])), key=lambda i: pred["rank_s"][i])
    return pred["rank_comp_s"][r], pred["rank_comm_s"][r]


def one_run(doc):
    sess = next(iter(doc["sessions"].values()))
    plans = sess["batches"][0]["plans"]
    res = {"compute": doc["compute"], "planners": {}}
    for p in PLANNERS:
        m = plans[p]["measured"]
        pw, sw = m["pipelined"]["wall_s_reps"], m["serial"]["wall_s_reps"]
        res["planners"][p] = {
            "rounds": len(plans[p]["plan"]["rounds"]),
            "wall_s": med(pw),
            "wall_min_s": min(pw),
            "wall_max_s": max(pw),
            "wall_serial_s": med(sw),
            # the host's cores the step kept busy (every rank's process CPU, its
            # progress thread and host-op threads included, over cores x wall)
            "host_cpu_share": host_share(m["pipelined"]),
            "host_cpu_share_serial": host_share(m["serial"]),
            "serial_over_pipelined": med([s / q for s, q in zip(sw, pw)]),
            "model_serial_over_pipelined": model_hide(plans[p]["predicted"], plans[p]["plan"]),
            "dependency_serial_over_pipelined": dependency_bound(plans[p]["predicted"]),
            "predicted_s": plans[p]["predicted"]["step_s"],
            "model_comp_s": busiest(plans[p]["predicted"])[0],
            "model_comm_s": busiest(plans[p]["predicted"])[1],
            "wall_reps_s": pw,
        }
    res["predicted_over_measured"] = {
        p: res["planners"][p]["predicted_s"] / res["planners"][p]["wall_s"] for p in PLANNERS}
    nested = res["planners"]["nested"]["wall_reps_s"]
    res["nested_over"] = {}
    for p in ("static", "megatron", "disjoint"):
        r = [o / n for o, n in zip(res["planners"][p]["wall_reps_s"], nested)]
        res["nested_over"][p] = {"median": med(r), "min": min(r), "max": max(r)}
    res["reps"] = len(nested)
    return res


def targets(res):
    t = {}
    n = res["planners"]["nested"]
    t["pipelining"] = []
    for p in PLANNERS:
        x = res["planners"][p]
        if x["model_serial_over_pipelined"] >= 1.2:
            t["pipelining"].append({"planner": p, "measured": x["serial_over_pipelined"],
                                    "model": x["model_serial_over_pipelined"],
                                    "dependency": x["dependency_serial_over_pipelined"],
                                    "met": x["serial_over_pipelined"] >= 1.2})
    t["nested_over_static"] = {"value": res["nested_over"]["static"]["median"],
                               "met": res["nested_over"]["static"]["median"] >= 1.2}
    t["nested_over_megatron"] = {"value": res["nested_over"]["megatron"]["median"],
                                 "met": res["nested_over"]["megatron"]["median"] >= 1.1}
    t["predicted_within_15pct"] = {p: abs(v - 1.0) <= 0.15
                                   for p, v in res["predicted_over_measured"].items()}
    del n
    return t


def fmt_ms(s):
    return "%.1f" % (1e3 * s)


def text_block(key, wl, res):
    c = res["compute"]
    lines = ["", "## %s, %s workload: EMULATED COMPUTE (%s x %.4g, %s link, %s), %d reps"
             % (key, wl, c["target"], c["scale"], c["link"],
                "math" if c["math"] else "timing only", res["reps"]),
             "%-9s %6s %9s %17s %9s %8s %7s %7s %9s %10s %7s" % (
                 "planner", "rounds", "wall_ms", "spread_ms", "serial_ms", "ser/pip", "model",
                 "dep", "host_cpu", "predicted", "pred/m")]
    for p in PLANNERS:
        x = res["planners"][p]
        dep = x["dependency_serial_over_pipelined"]
        hs = x["host_cpu_share"]
        lines.append("%-9s %6d %9s %8s..%-8s %9s %7.3fx %6.3fx %7s %9s %10s %7.3f" % (
            p, x["rounds"], fmt_ms(x["wall_s"]), fmt_ms(x["wall_min_s"]), fmt_ms(x["wall_max_s"]),
            fmt_ms(x["wall_serial_s"]), x["serial_over_pipelined"],
            x["model_serial_over_pipelined"], "-" if dep is None else "%.3fx" % dep,
            "-" if hs is None else "%.0f%%" % (100 * hs),
            fmt_ms(x["predicted_s"]), res["predicted_over_measured"][p]))
    lines.append("(model: every exchange hidden behind the rank's whole compute; dep: a "
                 "level's kernel between its own exchanges, one compute, one wire; "
                 "host_cpu: all ranks' CPU over the host's cores x wall, pipelined)")
    no = res["nested_over"]
    lines.append("nested over static %.3fx (%.3f..%.3f), over megatron %.3fx (%.3f..%.3f), "
                 "over disjoint %.3fx (%.3f..%.3f)" % (
                     no["static"]["median"], no["static"]["min"], no["static"]["max"],
                     no["megatron"]["median"], no["megatron"]["min"], no["megatron"]["max"],
                     no["disjoint"]["median"], no["disjoint"]["min"], no["disjoint"]["max"]))
    t = res["targets"]
    pip = ", ".join("%s %.3fx (model %.2fx, dep %s) %s" % (
                        x["planner"], x["measured"], x["model"],
                        "-" if x["dependency"] is None else "%.2fx" % x["dependency"],
                        "met" if x["met"] else "MISSED")
                    for x in t["pipelining"]) or "none: the model says no level can hide 20 %"
    n = res["planners"]["nested"]
    lines.append("model, nested, busiest rank: compute %s ms, exchange %s ms" % (
        fmt_ms(n["model_comp_s"]), fmt_ms(n["model_comm_s"])))
    lines.append("targets: pipelined >= 1.2x serial where the model allows it: " + pip)
    lines.append("         nested >= 1.2x static: %s; >= 1.1x megatron: %s; predicted within "
                 "15 %%: %s" % (
                     "met" if t["nested_over_static"]["met"] else "MISSED",
                     "met" if t["nested_over_megatron"]["met"] else "MISSED",
                     ", ".join("%s %s" % (p, "yes" if ok else "NO")
                               for p, ok in t["predicted_within_15pct"].items())))
    return lines


def svg(groups, path, title):
    """One bar group per (shape, rate, workload): the four planners' pipelined
    wall (bars, whiskers min..max) and their predictions (ticks)."""
    colors = {"static": "#888", "disjoint": "#6a9", "nested": "#c53", "megatron": "#46b"}
    gw, bw, h, top, left = 150, 28, 260, 60, 60
    width = left + gw * max(1, len(groups)) + 20
    ymax = max([x["wall_max_s"] for _, _, r in groups for x in r["planners"].values()] +
               [x["predicted_s"] for _, _, r in groups for x in r["planners"].values()] + [1e-3])
    ymax *= 1.1
    y = lambda s: top + h - h * s / ymax
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">'
           % (width, top + h + 70),
           '<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>' % (left, title),
           '<text x="%d" y="42" font-size="11" fill="#444">wall time of one step, levels '
           'pipelined (bars: median, whiskers: min..max over repetitions; black ticks: '
           'predicted)</text>' % left,
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>' % (left, top, left, top + h)]
    for k in range(5):
        v = ymax * k / 4
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%.0f ms</text>'
                   % (left - 4, y(v) + 3, 1e3 * v))
    for g, (key, wl, r) in enumerate(groups):
        x0 = left + 10 + g * gw
        for i, p in enumerate(PLANNERS):
            x = r["planners"][p]
            bx = x0 + i * bw
            out.append('<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"/>'
                       % (bx, y(x["wall_s"]), bw - 4, top + h - y(x["wall_s"]), colors[p]))
            out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>'
                       % (bx + bw / 2 - 2, y(x["wall_min_s"]), bx + bw / 2 - 2, y(x["wall_max_s"])))
            out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" '
                       'stroke-width="2"/>' % (bx - 1, y(x["predicted_s"]), bx + bw - 3,
                                               y(x["predicted_s"])))
        out.append('<text x="%.1f" y="%d" font-size="10">%s</text>' % (x0, top + h + 14, key))
        out.append('<text x="%.1f" y="%d" font-size="10">%s</text>' % (x0, top + h + 26, wl))
    for i, p in enumerate(PLANNERS):
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" '
                   'font-size="11">%s</text>' % (left + i * 90, top + h + 40, colors[p],
                                                 left + 14 + i * 90, top + h + 49, p))
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shapes", default="2x4,4x4")
    ap.add_argument("rates", nargs="+")
    a = ap.parse_args()
    mean_load, max_load = load_avg(a.out)
    title = "nspcomm: EMULATED COMPUTE on the namespace cluster (kernels timed, bytes over UCX)"
    lines = ["# " + title,
             "# load average (1 min) during the run: mean %.2f, max %.2f; host cores: %d"
             % (mean_load, max_load, os.cpu_count() or 0)]
    doc = {"format": "nspcomm-emu-results-v1", "title": title,
           "load_mean": mean_load, "load_max": max_load, "runs": []}
    groups = []
    for shape in a.shapes.split(","):
        for rate in a.rates:
            key = "%s-%s" % (shape, rate)
            mpath = os.path.join(a.out, "demo-%s-math.json" % key)
            if os.path.exists(mpath):
                m = json.load(open(mpath))
                ch = m["checks"]
                lines.append("")
                lines.append("## %s math check (\"math\": true, tiny sizes): %d of %d runs match "
                             "the single-process reference%s" % (
                                 key, ch["passed"], ch["runs"],
                                 "" if ch["all_passed"] and ch["runs"] > 0 else "  FAILED"))
                doc["runs"].append({"shape": shape, "rate": rate, "workload": "math",
                                    "checks": ch})
            for wl in WORKLOADS:
                path = os.path.join(a.out, "demo-%s-%s.json" % (key, wl))
                if not os.path.exists(path):
                    lines.append("")
                    lines.append("## %s, %s workload: missing (%s)" % (key, wl, path))
                    continue
                res = one_run(json.load(open(path)))
                res["targets"] = targets(res)
                lines += text_block(key, wl, res)
                for p in res["planners"].values():
                    del p["wall_reps_s"]
                doc["runs"].append(dict(shape=shape, rate=rate, workload=wl, **res))
                groups.append((key, wl, res))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    open(os.path.join(a.out, "emu.txt"), "w").write(text)
    json.dump(doc, open(os.path.join(a.out, "emu.json"), "w"), indent=1,
              default=lambda v: None if isinstance(v, float) and math.isnan(v) else v)
    svg(groups, os.path.join(a.out, "emu.svg"), title)


if __name__ == "__main__":
    main()

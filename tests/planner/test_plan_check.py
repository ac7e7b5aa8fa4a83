#!/usr/bin/env python3
"""TAP test: tools/plan_check.py re-derives every predicted number of plans
written by the C code (random plans from tests/planner/gen_plans, and the
simulator's output when perf/nsp_sim is built), agrees with the reference
vectors, and catches corrupted plans."""

import copy
import json
import os
import subprocess
import sys
import shutil
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("NSP_TOP_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("NSP_TOP_BUILDDIR") or SRC
CHECKER = os.path.join(SRC, "tools", "plan_check.py")
DATA = os.path.join(SRC, "tests", "planner", "data")

count = 0
failed = 0


def ok(cond, desc, diag=""):
    global count, failed
    count += 1
    print("%sok %d - %s" % ("" if cond else "not ", count, desc))
    if not cond:
        failed += 1
        for line in str(diag).splitlines()[-20:]:
            print("# " + line)
    sys.stdout.flush()
    return cond


def skip(desc, reason):
    global count
    count += 1
    print("ok %d - %s # SKIP %s" % (count, desc, reason))


def check(*args):
    """Run the checker; return (exit status, combined output)."""
    p = subprocess.run([sys.executable, CHECKER, "-q"] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def program(rel):
    """A built program: libtool wrapper in the build dir."""
    path = os.path.join(BUILD, rel)
    return path if os.access(path, os.X_OK) else None


def corrupt(tmp, plan, name, edit):
    doc = copy.deepcopy(plan)
    edit(doc)
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def main():
    tmp = tempfile.mkdtemp(prefix="nsp_plan_check_")

    rc, out = check("--vectors", os.path.join(DATA, "costmodel-vectors.json"),
                    "--example", os.path.join(DATA, "design-example-plan.json"))
    ok(rc == 0, "the checker's own formulas reproduce all reference vectors and the "
       "DESIGN example plan", out)

    gen = program("tests/planner/gen_plans")
    if not ok(gen is not None, "tests/planner/gen_plans is built", BUILD):
        print("1..%d" % count)
        shutil.rmtree(tmp, ignore_errors=True)
        return 1
    p = subprocess.run([gen, tmp, "4", "7"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    ok(p.returncode == 0, "gen_plans writes random valid plans", p.stdout)
    singles = sorted(os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("plan-"))
    ok(len(singles) == 9, "9 single plans (3 models x nested/static/disjoint)")
    rc, out = check(*singles)
    ok(rc == 0, "every predicted number of %d C plans re-derived (rel tol 1e-9)"
       % len(singles), out)
    rc, out = check(os.path.join(tmp, "sim.json"))
    ok(rc == 0, "every plan of an nspcomm-sim-v1 file checks, with its batch lower bound "
       "and summary", out)

    # Corrupted copies must fail, each with a message naming the problem.
    with open(os.path.join(tmp, "plan-qwen3-30b-a3b-nested-0.json")) as f:
        nested = json.load(f)
    with open(os.path.join(tmp, "plan-qwen3-30b-a3b-static-0.json")) as f:
        static = json.load(f)

    def bump_step(d):
        d["predicted"]["step_s"] *= 1 + 1e-7

    def bump_mem(d):
        d["predicted"]["rank_mem_bytes"][3] += 1e3

    def bump_rank(d):
        d["predicted"]["rank_s"][-1] *= 1.01

    def bump_lb(d):
        d["predicted"]["lower_bound_s"] *= 0.999

    def twice(d):
        groups = d["rounds"][0]["groups"]
        groups[-1]["seqs"].append(groups[0]["seqs"][0])

    def missing(d):
        groups = [g for g in d["rounds"][0]["groups"] if g["seqs"]]
        groups[0]["seqs"].pop()

    def unaligned(d):
        g = next(g for g in d["rounds"][0]["groups"] if g["size"] > 1)
        g["rank0"] += 1 if g["rank0"] + g["size"] < d["cluster"]["ranks"] else -1

    def overlap(d):
        groups = d["rounds"][0]["groups"]
        extra = dict(groups[0])
        extra["seqs"] = []
        extra["rank0"] = groups[0]["rank0"]
        groups.append(extra)

    def small_memory(d):
        d["cluster"]["mem_bytes"] = 1.3e10

    def bad_degree(d):
        g = d["rounds"][0]["groups"][0]
        g["size"], g["rank0"] = 3, 0

    cases = [
        (nested, "step", bump_step, "predicted.step_s"),
        (nested, "mem", bump_mem, "rank_mem_bytes[3]"),
        (static, "rank", bump_rank, "predicted.rank_s"),
        (static, "lb", bump_lb, "lower_bound_s"),
        (nested, "twice", twice, "exactly once"),
        (static, "missing", missing, "in no group"),
        (nested, "unaligned", unaligned, "not aligned"),
        (static, "overlap", overlap, "overlap"),
        (nested, "memory", small_memory, "over mem_bytes"),
        (nested, "degree", bad_degree, "Ulysses degree"),
    ]
    for plan, name, edit, words in cases:
        path = corrupt(tmp, plan, name, edit)
        rc, out = check(path)
        ok(rc == 1 and words in out, "a corrupted plan (%s) fails naming '%s'" % (name, words),
           out)
    rc, out = check(os.path.join(DATA, "design-example-plan.json"))
    ok(rc == 1 and "17.226203645" in out,
       "the DESIGN example's rounded stored step_s (17.226) is flagged with the exact value")
    rc, out = check(os.path.join(tmp, "nonexistent.json"))
    ok(rc == 2, "an unreadable file exits 2", out)

    sim = program("perf/nsp_sim")
    if sim is None:
        skip("plans of perf/nsp_sim --json re-derived", "perf/nsp_sim not built")
    else:
        out_json = os.path.join(tmp, "nsp_sim.json")
        out_svg = os.path.join(tmp, "nsp_sim.svg")
        p = subprocess.run([sim, "--workload", os.path.join(SRC, "data", "workloads",
                                                            "wlbllm-distca.txt"),
                            "--model", "qwen3-30b-a3b", "--cluster", "h100", "--ranks", "16",
                            "--tokens-per-rank", "16384", "--max-len", "131072",
                            "--batches", "2", "--seed", "3", "--time-limit", "0.2",
                            "--planners", "static,disjoint,nested", "--json", out_json,
                            "--svg", out_svg, "--svg-batch", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if ok(p.returncode == 0, "perf/nsp_sim writes --json and --svg", p.stdout + p.stderr):
            rc, out = check(out_json)
            ok(rc == 0, "every plan of perf/nsp_sim --json re-derived independently", out)
            rows = [l.split()[0] for l in p.stdout.splitlines()
                    if l.strip() and not l.startswith("#")]
            ok(rows == ["static", "disjoint", "nested"], "one table row per planner", p.stdout)
            ok("batch 2/2" in p.stderr, "progress goes to stderr", p.stderr)
            with open(out_svg) as f:
                svg = f.read()
            ok(svg.startswith("<?xml") and svg.rstrip().endswith("</svg>") and
               svg.count("planned in") == 3 and "lower bound" in svg and "batch 1 of" in svg,
               "the SVG has one panel per planner, a legend and the chosen batch")
        p = subprocess.run([sim, "--planners", "static,bogus"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        ok(p.returncode == 2 and "bogus" in p.stderr, "an unknown planner is a usage error",
           p.stderr)
        p = subprocess.run([sim, "--help"], stdout=subprocess.PIPE, text=True)
        ok(p.returncode == 0 and "--tokens-per-rank" in p.stdout and "--svg" in p.stdout,
           "--help lists the options")
        p = subprocess.run([sim, "--workload", "no-such-workload", "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ok(p.returncode == 1 and "no-such-workload" in p.stderr,
           "a missing workload fails naming it", p.stderr)

    print("1..%d" % count)
    if not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("# inputs kept in %s" % tmp)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

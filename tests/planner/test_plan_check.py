#!/usr/bin/env python3
"""TAP test: tools/plan_check.py re-derives every predicted number of plans
written by the C code (random plans from tests/planner/gen_plans, with and
without ring groups, and the simulator's output when perf/nsp_sim is built,
with and without --ring), agrees with the reference vectors and with ring
plans computed by hand from docs/reference/cost-model.md, and catches corrupted
plans."""

import copy
import json
import os
import subprocess
import sys
import shutil
import tempfile

import taplib as tap  # tests/planner/taplib.py, beside this script
from taplib import ok, skip

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("NSP_TOP_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("NSP_TOP_BUILDDIR") or SRC
CHECKER = os.path.join(SRC, "tools", "plan_check.py")
DATA = os.path.join(SRC, "tests", "planner", "data")


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


# Hand-computed ring plans (docs/reference/cost-model.md section 2): the numbers below
# were worked out from the formulas of the doc, not by the checker or the C
# code; tests/planner/test_ring_cost.c checks the same ones against C.
WORKED_T = 0.46588031288950943          # C + 0.2 R + A, seconds per layer
WORKED_MEM = 34850349600.0              # 16P/N + W + 8192 * (3244032 + 20480)
WORKED_LB_V1 = 87.85797595147915        # the sequence alone at degree 32
WORKED_LB_RING = 21.964493987869787     # ... at degree 128 (rings allowed)
RC_T0, RC_T5 = 0.3169196278014448, 0.31951890471780847
RC_MEM0, RC_MEM5 = 14755316800.0, 21243380800.0
RC_LB_RING = 11.219217062059286


def hand_plan(ranks, lens, groups, flags, step, rank_s, rank_mem, lb, round_fixed=0):
    return {"format": "nspcomm-plan-v1", "planner": "hand", "flags": flags,
            "model": {"name": "qwen3-30b-a3b", "layers": 48, "hidden": 2048, "q_heads": 32,
                      "kv_heads": 4, "head_dim": 128, "ffn": 6144, "topk": 8,
                      "experts": 128, "params": 30.5e9},
            "cluster": {"name": "h100", "ranks": ranks, "ranks_per_node": 8,
                        "mem_bytes": 85899345920, "workspace_bytes": 4294967296,
                        "gemm_flops": 4.5e14, "attn_flops": 5.5e14, "bw_intra": 3e11,
                        "bw_inter": 4.5e10, "lat_intra": 2e-05, "lat_inter": 4e-05,
                        "overlap": 0.8, "round_fixed_s": round_fixed},
            "seq_lens": lens, "rounds": [{"groups": groups}],
            "predicted": {"step_s": step, "rank_s": rank_s, "rank_mem_bytes": rank_mem,
                          "lower_bound_s": lb, "plan_ms": 0.0}}


def check_hand_ring_plans(tmp):
    worked = hand_plan(128, [1048576],
                       [{"rank0": 0, "size": 128, "ring": 16, "seqs": [0], "recompute": False,
                         "pipelined": False}], 0, 48 * WORKED_T, [48 * WORKED_T] * 128,
                       [WORKED_MEM] * 128, WORKED_LB_V1)
    flagged = copy.deepcopy(worked)
    flagged["flags"] = 4
    flagged["predicted"]["lower_bound_s"] = WORKED_LB_RING
    rs = [48 * RC_T0] * 64
    rs[5] = 48 * RC_T5
    rm = [RC_MEM0] * 64
    rm[5] = RC_MEM5
    recomputed = hand_plan(64, [524288, 2000],
                           [{"rank0": 0, "size": 64, "ring": 2, "seqs": [0], "recompute": True,
                             "pipelined": True},
                            {"rank0": 5, "size": 1, "seqs": [1], "recompute": False,
                             "pipelined": True}], 4, 48 * RC_T5, rs, rm, RC_LB_RING)
    paths = []
    for name, doc in (("worked", worked), ("worked-flag", flagged), ("recomputed", recomputed)):
        path = os.path.join(tmp, "hand-%s.json" % name)
        with open(path, "w") as f:
            json.dump(doc, f)
        paths.append(path)
    rc, out = check("--tol", "1e-12", *paths)
    ok(rc == 0, "hand-computed ring plans (the worked example with and without the ring "
       "flag; a recomputed 32 x 2 group with KV replication beside a leaf) re-derived "
       "within 1e-12", out)
    # the same numbers with the ring ignored (a Ulysses group of 128) must fail
    wrong = copy.deepcopy(recomputed)
    wrong["rounds"][0]["groups"][0]["ring"] = 1
    wrong["rounds"][0]["groups"][0]["size"] = 32
    path = os.path.join(tmp, "hand-wrong.json")
    with open(path, "w") as f:
        json.dump(wrong, f)
    rc, out = check(path)
    ok(rc == 1 and "predicted.step_s" in out, "the hand plan as a Ulysses group fails", out)
    # the ring bound without the ring flag must fail
    wrong = copy.deepcopy(flagged)
    wrong["flags"] = 0
    path = os.path.join(tmp, "hand-noflag.json")
    with open(path, "w") as f:
        json.dump(wrong, f)
    rc, out = check(path)
    ok(rc == 1 and "lower_bound_s" in out, "the ring bound on a plan without the ring flag "
       "fails", out)


# docs/reference/cost-model.md section 8 by hand, qwen3-30b-a3b on 128 h100:
# 0.2 * 3 * 127/128 * 2 * 1,508,970,752 / 45e9 + 48 * 4e-4
ROUND128 = 0.2 * 3 * 127.0 / 128 * 2 * 1508970752.0 / 45e9 + 48 * 4e-4


def check_hand_round_plans(tmp):
    """The worked example with the derived fixed cost of its one round."""
    plan = hand_plan(128, [1048576],
                     [{"rank0": 0, "size": 128, "ring": 16, "seqs": [0], "recompute": False,
                       "pipelined": False}], 0, 48 * WORKED_T + ROUND128,
                     [48 * WORKED_T + ROUND128] * 128, [WORKED_MEM] * 128,
                     WORKED_LB_V1 + ROUND128, round_fixed=-1)
    plan["predicted"]["round_s"] = ROUND128
    path = corrupt(tmp, plan, "hand-round", lambda d: None)
    rc, out = check("--tol", "1e-12", path)
    ok(rc == 0, "a hand plan with the derived round cost (%.9f s: step, rank_s, bound, "
       "round_s) re-derived within 1e-12" % ROUND128, out)
    path = corrupt(tmp, plan, "hand-round-free",
                   lambda d: d["predicted"].update(step_s=48 * WORKED_T))
    rc, out = check(path)
    ok(rc == 1 and "predicted.step_s" in out, "the same step without the round's cost fails",
       out)
    path = corrupt(tmp, plan, "hand-round-wrong",
                   lambda d: d["predicted"].update(round_s=0.5))
    rc, out = check(path)
    ok(rc == 1 and "predicted.round_s" in out, "a wrong predicted.round_s fails", out)


def check_sim_xfer_cpu(sim, tmp):
    """The exchange CPU (docs/reference/cost-model.md section 9): every planner's plans
    on a cluster that sets it re-derive, the plans carry the keys, and the
    same plan priced without them fails."""
    cluster = os.path.join(tmp, "h100-xcpu.json")
    with open(cluster, "w") as f:
        json.dump({"base": "h100", "ranks": 16, "cpu_byte_intra": 2e-12,
                   "cpu_byte_inter": 1e-11, "cpu_call_intra": 5e-6, "cpu_call_inter": 1e-5}, f)
    out_json = os.path.join(tmp, "nsp_sim_xcpu.json")
    p = subprocess.run([sim, "--workload", os.path.join(SRC, "data", "workloads",
                                                        "wlbllm-distca.txt"),
                        "--cluster-file", cluster, "--tokens-per-rank", "16384", "--max-len",
                        "131072", "--batches", "2", "--seed", "3", "--time-limit", "0.2",
                        "--planners", "static,disjoint,nested,megatron", "--json", out_json,
                        "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not ok(p.returncode == 0, "perf/nsp_sim on a cluster with exchange CPU writes --json",
              p.stdout + p.stderr):
        return
    rc, out = check(out_json)
    ok(rc == 0, "every plan with the exchange CPU re-derived independently", out)
    with open(out_json) as f:
        doc = json.load(f)
    plan = doc["batches"][0]["plans"]["nested"]
    ok(plan["cluster"].get("cpu_byte_inter") == 1e-11, "the plan's cluster carries the keys")
    path = corrupt(tmp, plan, "xcpu-dropped", lambda d: d["cluster"].update(cpu_byte_intra=0.0,
                                                                             cpu_call_intra=0.0))
    rc, out = check(path)
    ok(rc == 1 and "predicted" in out, "the same plan priced without the intra-node exchange "
       "CPU fails", out)


def main():
    tmp = tempfile.mkdtemp(prefix="nsp_plan_check_")

    rc, out = check("--vectors", os.path.join(DATA, "costmodel-vectors.json"),
                    "--example", os.path.join(DATA, "design-example-plan.json"))
    ok(rc == 0, "the checker's own formulas reproduce all reference vectors and the "
       "design-document example plan", out)

    gen = program("tests/planner/gen_plans")
    if not ok(gen is not None, "tests/planner/gen_plans is built", BUILD):
        tap.plan()
        shutil.rmtree(tmp, ignore_errors=True)
        return 1
    p = subprocess.run([gen, tmp, "4", "7"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    ok(p.returncode == 0, "gen_plans writes random valid plans", p.stdout)
    singles = sorted(os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("plan-"))
    rings = sorted(os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("ring-"))
    ok(len(singles) == 9, "9 single plans (3 models x nested/static/disjoint)")
    rc, out = check(*singles)
    ok(rc == 0, "every predicted number of %d C plans re-derived (rel tol 1e-9)"
       % len(singles), out)
    rc, out = check(os.path.join(tmp, "sim.json"))
    ok(rc == 0, "every plan of an nspcomm-sim-v1 file checks, with its batch lower bound "
       "and summary", out)
    ring_groups = 0
    for path in rings:
        with open(path) as f:
            doc = json.load(f)
        ring_groups += sum(1 for r in doc["rounds"] for g in r["groups"] if g.get("ring", 1) > 1)
    ok(len(rings) == 27 and ring_groups > 150,
       "27 random ring plans (3 models x 3 kinds x 3, %d ring groups)" % ring_groups)
    rc, out = check(*rings)
    ok(rc == 0, "every predicted number of %d C ring plans re-derived (Ulysses x ring groups "
       "above the head count, ring buffers, the ring lower bound)" % len(rings), out)
    check_hand_ring_plans(tmp)
    check_hand_round_plans(tmp)

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

    with open(os.path.join(tmp, "ring-qwen3-30b-a3b-nested-0.json")) as f:
        ring_nested = json.load(f)

    def drop_ring(d):
        g = next(g for r in d["rounds"] for g in r["groups"] if g["size"] > 32)
        del g["ring"]

    def ring_as_ulysses(d):
        # same group sizes, but ring 2 on a group whose ring was larger: the
        # all-to-all and ring terms change
        g = next(g for r in d["rounds"] for g in r["groups"]
                 if g.get("ring", 1) > 2 and g["size"] // 2 <= 32 and 32 % (g["size"] // 2) == 0)
        g["ring"] = 2

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
        (ring_nested, "ring-dropped", drop_ring, "Ulysses degree"),
        (ring_nested, "ring-shape", ring_as_ulysses, "predicted.rank_s"),
    ]
    for plan, name, edit, words in cases:
        path = corrupt(tmp, plan, name, edit)
        rc, out = check(path)
        ok(rc == 1 and words in out, "a corrupted plan (%s) fails naming '%s'" % (name, words),
           out)
    rc, out = check(os.path.join(DATA, "design-example-plan.json"))
    ok(rc == 1 and "17.226203645" in out,
       "the design document's example's rounded stored step_s (17.226) is flagged with the exact value")
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
                            "--planners", "static,disjoint,nested,megatron", "--json", out_json,
                            "--svg", out_svg, "--svg-batch", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if ok(p.returncode == 0, "perf/nsp_sim writes --json and --svg", p.stdout + p.stderr):
            rc, out = check(out_json)
            ok(rc == 0, "every plan of perf/nsp_sim --json re-derived independently", out)
            rows = [l.split()[0] for l in p.stdout.splitlines()
                    if l.strip() and not l.startswith("#")]
            ok(rows == ["static", "disjoint", "nested", "megatron"], "one table row per planner",
               p.stdout)
            ok("batch 2/2" in p.stderr, "progress goes to stderr", p.stderr)
            with open(out_svg) as f:
                svg = f.read()
            ok(svg.startswith("<?xml") and svg.rstrip().endswith("</svg>") and
               svg.count("planned in") == 4 and "lower bound" in svg and "batch 1 of" in svg,
               "the SVG has one panel per planner, a legend and the chosen batch")
        out_ring = os.path.join(tmp, "nsp_sim_ring.json")
        p = subprocess.run([sim, "--workload", os.path.join(SRC, "data", "workloads",
                                                            "prolong-distca.txt"),
                            "--ranks", "128", "--tokens-per-rank", "16384", "--max-len",
                            "1048576", "--batches", "3", "--seed", "2", "--planners",
                            "static,nested", "--ring", "--json", out_ring, "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if ok(p.returncode == 0, "perf/nsp_sim --ring writes --json", p.stdout + p.stderr):
            rc, out = check(out_ring)
            ok(rc == 0, "every plan of perf/nsp_sim --ring re-derived independently", out)
            with open(out_ring) as f:
                doc = json.load(f)
            ok(doc["config"].get("enable_ring") is True and
               all(pl["flags"] & 4 for b in doc["batches"] for pl in b["plans"].values()),
               "the sim config records enable_ring and every plan carries the ring flag")
        check_sim_xfer_cpu(sim, tmp)
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

    tap.plan()
    if not tap.failed:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("# inputs kept in %s" % tmp)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())

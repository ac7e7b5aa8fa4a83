#!/usr/bin/env python3
"""Independent checker of nspcomm plans (Python 3, standard library only).

Re-derives every predicted number of a plan -- step_s, rank_s, rank_mem_bytes,
lower_bound_s, round_s (the fixed cost of a round) -- from the plan's JSON alone, with the formulas of docs/design.md
section 5.1 and, for groups with a ring degree ("ring" > 1) and plans made
with rings allowed (flag 4), of docs/reference/cost-model.md, written out here from the
text (not ported from the C code), and checks the plan's invariants (docs/design.md
section 8):

  * every sequence appears in exactly one group of one round;
  * every group lies inside [0, ranks) and its Ulysses degree size/ring
    divides the query heads;
  * static, disjoint and megatron plans: the groups of a round are disjoint;
    any other plan (nested): groups are aligned (rank0 % size == 0), nest
    (two overlapping groups: one contains the other), and no tree node
    appears twice in a round;
  * no rank exceeds mem_bytes in any round.

Usage:
  plan_check.py [--tol 1e-9] [-q] FILE...      FILE: an nspcomm-plan-v1 plan or
                                               an nspcomm-sim-v1 file (every plan)
  plan_check.py --vectors costmodel-vectors.json [--example plan.json]
                                               the cost model against the
                                               reference values

Exit status: 0 all checks pass, 1 a mismatch or broken invariant (each one is
printed), 2 unreadable input or bad usage.
"""

import argparse
import json
import math
import sys

B = 2.0  # bytes per activation element (bf16)
FLAG_RING = 4  # plan flag: planned with rings allowed (docs/reference/cost-model.md section 4)
RING_BUFFERS = 5  # KV-block buffers a ring rank holds at peak (docs/reference/cost-model.md)

# docs/design.md §5.1 preset tables, used only for the reference vectors (a plan
# carries its own model and cluster numbers).
MODEL_PRESETS = {
    #                   L   h     n_q n_kv d_h  f          E    k  P
    "qwen3-30b-a3b":   (48, 2048, 32, 4, 128, 8 * 768, 128, 8, 30.5e9),
    "qwen3-235b-a22b": (94, 4096, 64, 4, 128, 8 * 1536, 128, 8, 235e9),
    "llama3-8b":       (32, 4096, 32, 8, 128, 14336, 0, 0, 8.0e9),
}
GIB = 1024.0 ** 3
CLUSTER_PRESETS = {
    #         G  M         W        R_gemm  R_attn  B_intra B_inter a_intra a_inter eta
    "h100": (8, 80 * GIB, 4 * GIB, 450e12, 550e12, 300e9, 45e9, 20e-6, 40e-6, 0.8),
    "h800": (8, 80 * GIB, 4 * GIB, 450e12, 550e12, 150e9, 45e9, 20e-6, 40e-6, 0.8),
}


class Model:
    """The cost model of docs/design.md §5.1 for one (model, cluster) pair."""

    def __init__(self, m, c):
        self.L = m["layers"]
        self.h = m["hidden"]
        self.nq = m["q_heads"]
        self.nkv = m["kv_heads"]
        self.dh = m["head_dim"]
        self.f = m["ffn"]
        self.E = m["experts"]
        self.k = m["topk"]
        self.P = m["params"]
        self.N = c["ranks"]
        self.G = c["ranks_per_node"]
        self.M = c["mem_bytes"]
        self.W = c["workspace_bytes"]
        self.r_gemm = c["gemm_flops"]
        self.r_attn = c["attn_flops"]
        self.b_intra = c["bw_intra"]
        self.b_inter = c["bw_inter"]
        self.a_intra = c["lat_intra"]
        self.a_inter = c["lat_inter"]
        self.eta = c["overlap"]
        # absent (plans written before it existed) or negative: derived
        self.round_fixed = c.get("round_fixed_s", -1.0)
        # the exchange CPU of a rank (docs/reference/cost-model.md section 9); absent: 0
        self.cpu_byte = (c.get("cpu_byte_intra", 0.0), c.get("cpu_byte_inter", 0.0))
        self.cpu_call = (c.get("cpu_call_intra", 0.0), c.get("cpu_call_inter", 0.0))

    # lin_flops(s) = 3 * s * (2h*(2*n_q*d_h + 2*n_kv*d_h) + 6*h*f + 2*h*E)
    def lin_flops(self, s):
        h = self.h
        return 3 * s * (2 * h * (2 * self.nq * self.dh + 2 * self.nkv * self.dh)
                        + 6 * h * self.f + 2 * h * self.E)

    # attn_flops(s) = 3.5 * 2 * s^2 * n_q * d_h  (causal)
    def attn_flops(self, s):
        return 3.5 * 2 * s * s * self.nq * self.dh

    # comp(s, d) = (lin_flops(s)/R_gemm + attn_flops(s)/R_attn) / d
    def comp(self, s, d):
        return (self.lin_flops(s) / self.r_gemm + self.attn_flops(s) / self.r_attn) / d

    # a2a_bytes(s,d) = 2 * (d-1)/d * (s/d) * (2*n_q + 2*max(n_kv, d)) * d_h * b  (0 if d=1)
    def a2a_bytes(self, s, d):
        if d == 1:
            return 0.0
        return 2 * (d - 1) / d * (s / d) * (2 * self.nq + 2 * max(self.nkv, d)) * self.dh * B

    # ep_bytes(t) = t * 4 * k * h * b, sent at B_intra
    def ep_time(self, t):
        return t * 4 * self.k * self.h * B / self.b_intra

    def bw(self, d):
        return self.b_intra if d <= self.G else self.b_inter

    def lat(self, d):
        return self.a_intra if d <= self.G else self.a_inter

    # xcpu = cpu_byte(x) * 2 * bytes + calls * cpu_call(x): the rank sends
    # `bytes` and receives as many; rank CPU seconds, part of its compute
    def xfer_cpu(self, nbytes, x, calls):
        i = 0 if x <= self.G else 1
        return self.cpu_byte[i] * 2 * nbytes + calls * self.cpu_call[i]

    # a_tok = L * 2 * (5h + (n_q + 2*n_kv)*d_h + 3f)         activations kept
    def act_kept(self):
        return self.L * 2 * (5 * self.h + (self.nq + 2 * self.nkv) * self.dh + 3 * self.f)

    # L * h * b + a_tok / L                                  layers recomputed
    def act_recompute(self):
        return self.L * self.h * B + self.act_kept() / self.L

    def model_states(self):
        return 16 * self.P / self.N

    def degree_ok(self, d):
        # the KV heads shard too: n_kv a multiple of d, or d of n_kv (replicated)
        return (1 <= d <= self.N and d <= self.nq and self.nq % d == 0
                and (self.nkv % d == 0 or d % self.nkv == 0))

    def max_degree(self):
        return max(d for d in range(1, min(self.N, self.nq) + 1) if self.degree_ok(d))

    # --- ring groups (docs/reference/cost-model.md section 2): d = u * r ---------------

    def kv_per_rank(self, u):
        """KV heads a rank holds after its subgroup's all-to-all."""
        return max(self.nkv, u) / u

    @staticmethod
    def ring_messages(r, rc):
        """KV block messages per rank per layer: forward r-1, backward r-1 KV
        plus r dK/dV; a recomputed forward adds r-1. None for r = 1."""
        if r == 1:
            return 0
        return (r - 1) * (2 if rc else 1) + (r - 1) + r

    def ring_bytes(self, s, d, r, rc):
        """Bytes a rank sends around its ring for a sequence of s tokens."""
        u = d // r
        return self.ring_messages(r, rc) * (s / r) * 2 * self.kv_per_rank(u) * self.dh * B

    def ring_mem(self, d, r):
        """Transient ring buffers, bytes per token the rank holds."""
        if r == 1:
            return 0.0
        u = d // r
        return RING_BUFFERS * u * 2 * self.kv_per_rank(u) * self.dh * B

    def round_cost(self):
        """docs/reference/cost-model.md section 8: seconds each round (micro-batch) adds
        to a step. Unless the cluster fixes it: (1 - eta) x the ZeRO-3 weight
        traffic of one micro-batch (all-gather of the dense weights for the
        forward and again for the backward, reduce-scatter of their gradients:
        3 x (N-1)/N x b x P_dense bytes per rank at B(N)) + L x 100 kernel
        launches x 4 us. P_dense = P less the experts' 3 x h x (f/k) weights of
        each of E experts in each layer."""
        if self.round_fixed >= 0:
            return self.round_fixed
        dense = self.P
        if self.E > 0 and self.k > 0:
            dense -= self.L * self.E * 3 * self.h * (self.f / self.k)
        dense = max(dense, 0.0)
        weights = 3 * (self.N - 1) / self.N * B * dense / self.bw(self.N)
        return (1 - self.eta) * weights + self.L * 100 * 4e-6

    def lower_bound(self, lens, ring=False):
        """max of (a) all compute with its MoE term over N, (b) the longest
        sequence alone at the largest degree a plan may use (the largest
        valid Ulysses degree; every rank when rings are allowed); both
        times L."""
        total = sum(self.comp(s, 1) for s in lens) + self.ep_time(sum(lens))
        a = total / self.N
        if not lens:
            return self.L * a
        s_max = max(lens)
        dmax = self.N if ring else self.max_degree()
        b = self.comp(s_max, dmax) + self.ep_time(s_max / dmax)
        # every plan of a nonempty batch has one round at least: its fixed cost
        return self.L * max(a, b) + self.round_cost()


def preset_model(case):
    """The Model of a reference case: its model and cluster presets at its ranks."""
    L, h, nq, nkv, dh, ffn, E, k, P = MODEL_PRESETS[case["model"]]
    G, M, W, rg, ra, bi, be, ai, ae, eta = CLUSTER_PRESETS[case["cluster"]]
    return Model(dict(layers=L, hidden=h, q_heads=nq, kv_heads=nkv, head_dim=dh,
                      ffn=ffn, experts=E, topk=k, params=P),
                 dict(ranks=case["ranks"], ranks_per_node=G, mem_bytes=M,
                      workspace_bytes=W, gemm_flops=rg, attn_flops=ra, bw_intra=bi,
                      bw_inter=be, lat_intra=ai, lat_inter=ae, overlap=eta))


class Checker:
    def __init__(self, tol, quiet):
        self.tol = tol
        self.quiet = quiet
        self.errors = 0
        self.checks = 0

    def fail(self, where, msg):
        self.errors += 1
        if self.errors <= 50:
            print("plan_check: %s: %s" % (where, msg), file=sys.stderr)
        elif self.errors == 51:
            print("plan_check: (more errors not shown)", file=sys.stderr)

    def close(self, where, what, stored, derived):
        self.checks += 1
        if not isinstance(stored, (int, float)) or isinstance(stored, bool):
            self.fail(where, "%s is not a number: %r" % (what, stored))
            return
        if abs(stored - derived) > self.tol * max(abs(stored), abs(derived)) + 1e-300:
            rel = abs(stored - derived) / max(abs(stored), abs(derived), 1e-300)
            self.fail(where, "%s: stored %.17g, re-derived %.17g (relative error %.3g > %g)"
                      % (what, stored, derived, rel, self.tol))

    # -- invariants ---------------------------------------------------------

    def check_shape(self, where, plan, cm):
        """Group ranges, degrees, placement and nesting; returns True if the
        plan is sound enough to evaluate."""
        n = len(plan["seq_lens"])
        seen = {}
        ok = True
        for i, s in enumerate(plan["seq_lens"]):
            if not isinstance(s, int) or s <= 0:
                self.fail(where, "seq_lens[%d] = %r is not a positive integer" % (i, s))
                ok = False
        disjoint = plan["planner"] in ("static", "disjoint", "megatron")
        for r, rnd in enumerate(plan["rounds"]):
            spans = []
            for g, grp in enumerate(rnd["groups"]):
                at = "%s round %d group %d" % (where, r, g)
                rank0, size, ring = grp["rank0"], grp["size"], grp.get("ring", 1)
                self.checks += 1
                if size < 1 or rank0 < 0 or rank0 + size > cm.N:
                    self.fail(at, "ranks [%d, %d) are not inside [0, %d)"
                              % (rank0, rank0 + size, cm.N))
                    ok = False
                    continue
                if ring < 1 or size % ring != 0 or not cm.degree_ok(size // ring):
                    self.fail(at, "size %d with ring %d: Ulysses degree must divide q_heads=%d "
                              "and shard kv_heads=%d" % (size, ring, cm.nq, cm.nkv))
                    ok = False
                if not disjoint and rank0 % size != 0:
                    self.fail(at, "nested group [%d, %d) is not aligned (rank0 %% size != 0)"
                              % (rank0, rank0 + size))
                    ok = False
                spans.append((rank0, rank0 + size, g))
                for idx in grp["seqs"]:
                    if not isinstance(idx, int) or idx < 0 or idx >= n:
                        self.fail(at, "sequence index %r is not in [0, %d)" % (idx, n))
                        ok = False
                    elif idx in seen:
                        self.fail(at, "sequence %d already in round %d group %d "
                                  "(must appear exactly once)" % ((idx,) + seen[idx]))
                        ok = False
                    else:
                        seen[idx] = (r, g)
            ok &= self.check_round_spans("%s round %d" % (where, r), spans, disjoint)
        self.checks += 1
        missing = [i for i in range(n) if i not in seen]
        if missing:
            self.fail(where, "%d sequences in no group (first: %d)" % (len(missing), missing[0]))
            ok = False
        return ok

    def check_round_spans(self, where, spans, disjoint):
        ok = True
        self.checks += 1
        # Pairwise on sorted spans: O(n log n) for disjoint, a stack for nesting.
        spans.sort(key=lambda x: (x[0], -(x[1] - x[0])))
        stack = []
        for lo, hi, g in spans:
            while stack and stack[-1][1] <= lo:
                stack.pop()
            if stack:
                plo, phi, pg = stack[-1]
                if disjoint:
                    self.fail(where, "groups %d [%d, %d) and %d [%d, %d) overlap in a "
                              "static/disjoint plan" % (pg, plo, phi, g, lo, hi))
                    ok = False
                elif (plo, phi) == (lo, hi):
                    self.fail(where, "groups %d and %d are the same tree node [%d, %d)"
                              % (pg, g, lo, hi))
                    ok = False
                elif hi > phi:
                    self.fail(where, "groups %d [%d, %d) and %d [%d, %d) overlap without "
                              "nesting" % (pg, plo, phi, g, lo, hi))
                    ok = False
            stack.append((lo, hi, g))
        return ok

    # -- the cost model -----------------------------------------------------

    def evaluate(self, where, plan, cm):
        """Per docs/design.md §5.1: per round, per rank g: C_g (compute, x4/3 where
        recomputed, plus ep_bytes(tokens_g)/B_intra), K_g (per group with
        d > 1 that holds sequences: bytes (x3/2 where recomputed) / B(d)
        + 4*a(d)); pipelined groups overlap compute: max(C, K) + (1-eta)
        min(C, K), the others add. Memory 16P/N + W + tokens x bytes/token.
        A group with ring r > 1 (docs/reference/cost-model.md): its all-to-all is that
        of its subgroups (degree u = d/r over s/r tokens, at B(u), 4*a(u)),
        its ring (messages x KV blocks at B(d), plus messages x a(d)) always
        counts as overlapping, and its ring buffers add to memory. The
        exchanges' CPU (docs/reference/cost-model.md section 9: cpu_byte x 2 x bytes +
        calls x cpu_call, 0 unless the cluster sets it) adds to C."""
        N, L = cm.N, cm.L
        lens = plan["seq_lens"]
        rank_s = [0.0] * N
        rank_mem = [0.0] * N
        step = 0.0
        fixed = cm.model_states() + cm.W
        per_round = cm.round_cost()   # every rank pays it in every round
        for r, rnd in enumerate(plan["rounds"]):
            comp = [0.0] * N
            tokens = [0.0] * N
            k_pipe = [0.0] * N
            k_seq = [0.0] * N
            mem = [fixed] * N
            for grp in rnd["groups"]:
                d = grp["size"]
                r = grp.get("ring", 1)
                u = d // r  # the Ulysses subgroup: u consecutive ranks
                rc = bool(grp["recompute"])
                g_comp = sum(cm.comp(lens[i], d) for i in grp["seqs"])
                g_tok = sum(lens[i] / d for i in grp["seqs"])
                # the subgroup is a Ulysses group of degree u over s/r tokens
                g_bytes = sum(cm.a2a_bytes(lens[i] / r, u) for i in grp["seqs"])
                if rc:
                    g_comp *= 4.0 / 3.0
                    g_bytes *= 3.0 / 2.0
                g_k = 0.0
                g_x = 0.0  # the exchanges' CPU: compute of every rank of the group
                if u > 1 and grp["seqs"]:
                    g_k = g_bytes / cm.bw(u) + 4 * cm.lat(u)
                    g_x += cm.xfer_cpu(g_bytes, u, 4)
                # the ring spans the group (B(d), a(d)) and always overlaps
                g_ring = 0.0
                if r > 1 and grp["seqs"]:
                    g_rbytes = sum(cm.ring_bytes(lens[i], d, r, rc) for i in grp["seqs"])
                    g_ring = (g_rbytes / cm.bw(d) + cm.ring_messages(r, rc) * cm.lat(d))
                    g_x += cm.xfer_cpu(g_rbytes, d, cm.ring_messages(r, rc))
                per_tok = (cm.act_recompute() if rc else cm.act_kept()) + cm.ring_mem(d, r)
                for g in range(grp["rank0"], grp["rank0"] + d):
                    comp[g] += g_comp + g_x
                    tokens[g] += g_tok
                    mem[g] += g_tok * per_tok
                    if grp["pipelined"]:
                        k_pipe[g] += g_k
                    else:
                        k_seq[g] += g_k
                    k_pipe[g] += g_ring
            worst = 0.0
            for g in range(N):
                c = comp[g] + cm.ep_time(tokens[g])
                t = max(c, k_pipe[g]) + (1 - cm.eta) * min(c, k_pipe[g]) + k_seq[g]
                worst = max(worst, t)
                rank_s[g] += L * t + per_round
                rank_mem[g] = max(rank_mem[g], mem[g])
                self.checks += 1
                if mem[g] > cm.M * (1 + 1e-12):
                    self.fail(where, "rank %d needs %.6g bytes in round %d, over mem_bytes %.6g"
                              % (g, mem[g], r, cm.M))
            step += L * worst + per_round
        return step, rank_s, rank_mem

    def check_plan(self, where, plan):
        try:
            if plan.get("format") != "nspcomm-plan-v1":
                self.fail(where, "format is %r, not \"nspcomm-plan-v1\"" % plan.get("format"))
                return None
            cm = Model(plan["model"], plan["cluster"])
            if not self.check_shape(where, plan, cm):
                return None
            step, rank_s, rank_mem = self.evaluate(where, plan, cm)
            lb = cm.lower_bound(plan["seq_lens"], ring=bool(plan.get("flags", 0) & FLAG_RING))
            pred = plan.get("predicted")
            if pred is None:
                self.fail(where, "no \"predicted\" block to check")
                return None
            self.close(where, "predicted.step_s", pred["step_s"], step)
            self.close(where, "predicted.lower_bound_s", pred["lower_bound_s"], lb)
            if "round_s" in pred:
                self.close(where, "predicted.round_s", pred["round_s"], cm.round_cost())
            for key, derived in (("rank_s", rank_s), ("rank_mem_bytes", rank_mem)):
                stored = pred.get(key, [])
                if len(stored) != len(derived):
                    self.fail(where, "predicted.%s has %d entries, the cluster %d ranks"
                              % (key, len(stored), len(derived)))
                    continue
                for g, (a, b) in enumerate(zip(stored, derived)):
                    self.close(where, "predicted.%s[%d]" % (key, g), a, b)
            return step, lb
        except (KeyError, TypeError, ValueError) as e:
            self.fail(where, "malformed plan: %s: %s" % (type(e).__name__, e))
            return None

    def check_sim(self, where, sim):
        steps = {}
        gaps = {}
        for bi, batch in enumerate(sim.get("batches", [])):
            lens = None
            for name, plan in batch.get("plans", {}).items():
                at = "%s batch %d %s" % (where, bi, name)
                res = self.check_plan(at, plan)
                self.checks += 1
                if lens is None:
                    lens = plan.get("seq_lens")
                elif plan.get("seq_lens") != lens:
                    self.fail(at, "seq_lens differ from the other planners' of this batch")
                if res is None:
                    continue
                step, lb = res
                self.close(at, "batch lower_bound_s", batch.get("lower_bound_s"), lb)
                steps.setdefault(name, []).append(step)
                gaps.setdefault(name, []).append(step / lb)
        for name, row in sim.get("summary", {}).get("planners", {}).items():
            at = "%s summary %s" % (where, name)
            if name not in steps:
                continue
            if "mean_step_s" in row:
                self.close(at, "mean_step_s", row["mean_step_s"],
                           sum(steps[name]) / len(steps[name]))
            if "mean_gap" in row:
                self.close(at, "mean_gap", row["mean_gap"], sum(gaps[name]) / len(gaps[name]))
        return sum(len(v) for v in steps.values())

    # -- reference vectors --------------------------------------------------

    def check_vectors(self, path, example):
        with open(path) as f:
            vec = json.load(f)
        for i, case in enumerate(vec["cases"]):
            cm = preset_model(case)
            s, d = case["seq_len"], case["degree"]
            at = "%s case %d" % (path, i)
            nbytes = cm.a2a_bytes(s, d)
            a2a_s = nbytes / cm.bw(d) + 4 * cm.lat(d) if d > 1 else 0.0
            self.close(at, "comp_s", case["comp_s"], cm.comp(s, d))
            self.close(at, "a2a_bytes", case["a2a_bytes"], nbytes)
            self.close(at, "a2a_s", case["a2a_s"], a2a_s)
            self.close(at, "ep_s_for_chunk", case["ep_s_for_chunk"], cm.ep_time(s / d))
            self.close(at, "mem_bytes_per_token_kept", case["mem_bytes_per_token_kept"],
                       cm.act_kept())
            self.close(at, "mem_bytes_per_token_recompute",
                       case["mem_bytes_per_token_recompute"], cm.act_recompute())
            self.close(at, "model_states_bytes_per_rank", case["model_states_bytes_per_rank"],
                       cm.model_states())
        for i, case in enumerate(vec.get("round_cost_cases", [])):
            cm = preset_model(case)
            self.close("%s round case %d" % (path, i), "round_s", case["round_s"],
                       cm.round_cost())
        if example:
            with open(example) as f:
                plan = json.load(f)
            cm = Model(plan["model"], plan["cluster"])
            at = "%s (design example)" % example
            if self.check_shape(at, plan, cm):
                step, _, _ = self.evaluate(at, plan, cm)
                ref = vec["design_example_plan"]
                self.close(at, "step_s vs reference", ref["step_s"], step)
                self.close(at, "lower_bound_s vs reference", ref["lower_bound_s"],
                           cm.lower_bound(plan["seq_lens"]))
        return len(vec["cases"])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="nspcomm-plan-v1 or nspcomm-sim-v1 JSON files")
    ap.add_argument("--tol", type=float, default=1e-9, help="relative tolerance (1e-9)")
    ap.add_argument("--vectors", help="check the cost model against costmodel-vectors.json")
    ap.add_argument("--example", help="with --vectors: the docs/design.md §8 example plan to evaluate")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    args = ap.parse_args(argv)
    if not args.files and not args.vectors:
        ap.print_usage(sys.stderr)
        return 2
    ck = Checker(args.tol, args.quiet)
    try:
        if args.vectors:
            n = ck.check_vectors(args.vectors, args.example)
            if not args.quiet:
                print("plan_check: %s: %d reference cases%s" % (
                    args.vectors, n, " and the design example" if args.example else ""))
        for path in args.files:
            with open(path) as f:
                doc = json.load(f)
            before = ck.errors
            fmt = doc.get("format") if isinstance(doc, dict) else None
            if fmt == "nspcomm-sim-v1":
                n = ck.check_sim(path, doc)
                what = "%d plans" % n
            elif fmt == "nspcomm-plan-v1":
                ck.check_plan(path, doc)
                what = "1 plan"
            else:
                ck.fail(path, "format %r is neither nspcomm-plan-v1 nor nspcomm-sim-v1" % fmt)
                continue
            if not args.quiet and ck.errors == before:
                print("plan_check: %s: OK (%s)" % (path, what))
    except (OSError, ValueError, KeyError) as e:
        print("plan_check: cannot read input: %s" % e, file=sys.stderr)
        return 2
    if ck.errors:
        print("plan_check: FAILED: %d of %d checks" % (ck.errors, ck.checks), file=sys.stderr)
        return 1
    if not args.quiet:
        print("plan_check: all %d checks passed (relative tolerance %g)" % (ck.checks, args.tol))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env bash
# Regenerate the planner results table of the README (issue 2) with
# perf/nsp_sim: the three shipped workloads, qwen3-30b-a3b on h100, 64 and 128
# ranks, 32768 and 65536 tokens per rank, max length 393216, 10 batches each,
# planners static, megatron, disjoint and nested.
#
#   scripts/planner-results.sh [--build DIR] [--json FILE] [--batches B]
#                              [--seed K] [--time-limit S] [--round-fixed S]
#                              [--keep DIR] [--from DIR]
#
# --round-fixed S sets every round's fixed cost (cluster round_fixed_s;
# default: derived, docs/reference/cost-model.md; 0 gives the model without it).
#
# Prints a markdown table on stdout (one row per configuration and a
# geometric-mean row), writes the same numbers as JSON (default
# planner-results.json in the current directory) and keeps every nsp_sim
# JSON (all plans) under --keep DIR if given; --from DIR aggregates such a
# directory again without simulating. Progress goes to stderr.
# Needs python3 (standard library only) to aggregate.
#
# Besides the lower bound of docs/design.md §5.2 (LB), the table gives nested's gap to
# a tighter bound LB* = max(LB', LB'') derived here from each batch alone
# (docs/reference/planners.md): LB' counts the exchange no plan avoids and the
# recomputation or splitting a sequence too large for one rank needs; LB''
# (computed where nested is over 1.10 x LB') adds that the round holding the
# longest sequence can hold only so much of the rest within its memory.
set -euo pipefail

script=planner-results.sh
. "$(dirname "$0")/results-lib.sh"
json_out="planner-results.json"
time_limit=""
round_fixed=""

while [ $# -gt 0 ]; do
    case "$1" in
    --time-limit) time_limit="$2"; shift 2 ;;
    --round-fixed) round_fixed="$2"; shift 2 ;;
    *) results_option "$@"; shift 2 ;;
    esac
done
results_prepare

workloads="wikipedia-flexsp prolong-distca wlbllm-distca"
n=0
if [ -n "$from" ]; then
    workloads=""
fi
for w in $workloads; do
    for ranks in 64 128; do
        for tpr in 32768 65536; do
            n=$((n + 1))
            out="$work/$w-$ranks-$tpr.json"
            echo "[$n/12] $w, $ranks ranks, $tpr tokens per rank, $batches batches" >&2
            "$sim" --workload "$top/data/workloads/$w.txt" --model qwen3-30b-a3b --cluster h100 \
                --ranks "$ranks" --tokens-per-rank "$tpr" --max-len 393216 \
                --batches "$batches" --seed "$seed" --planners static,disjoint,nested,megatron \
                ${time_limit:+--time-limit "$time_limit"} ${round_fixed:+--round-fixed "$round_fixed"} --json "$out" --quiet >/dev/null
            [ -n "$keep" ] && cp "$out" "$keep/"
        done
    done
done

python3 - "$work" "$json_out" "$batches" "$seed" <<'EOF'
import glob, json, math, os, sys

work, json_out, batches, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
order = {"wikipedia-flexsp": 0, "prolong-distca": 1, "wlbllm-distca": 2}


def round_cost(m, c):
    """The fixed cost of one round, seconds (docs/reference/cost-model.md section 8),
    re-derived here: cluster round_fixed_s, or when negative (1 - eta) x the
    dense weights' all-gather x 2 + gradient reduce-scatter at B(N), plus L x
    100 launches x 4 us."""
    if c.get("round_fixed_s", -1.0) >= 0:
        return c["round_fixed_s"]
    n = c["ranks"]
    dense = m["params"]
    if m["experts"] > 0 and m["topk"] > 0:
        dense -= m["layers"] * m["experts"] * 3.0 * m["hidden"] * (m["ffn"] / m["topk"])
    bw = c["bw_intra"] if n <= c["ranks_per_node"] else c["bw_inter"]
    return ((1.0 - c["overlap"]) * 3.0 * (n - 1.0) / n * 2.0 * max(dense, 0.0) / bw
            + m["layers"] * 4e-4)


def model_terms(m, c):
    """Per-token constants of docs/design.md §5.1 (per layer)."""
    h, nq, nkv, dh = m["hidden"], m["q_heads"], m["kv_heads"], m["head_dim"]
    n = c["ranks"]
    lin = 3.0 * (2 * h * (2 * nq * dh + 2 * nkv * dh) + 6 * h * m["ffn"] + 2 * h * m["experts"])
    t = dict(n=n, cpt=lin / c["gemm_flops"], cpt2=3.5 * 2 * nq * dh / c["attn_flops"],
             ep=4.0 * m["topk"] * h * 2.0 / c["bw_intra"],
             a_keep=m["layers"] * 2.0 * (5 * h + (nq + 2 * nkv) * dh + 3 * m["ffn"]),
             degrees=[d for d in range(1, min(n, nq) + 1) if nq % d == 0])
    t["a_rc"] = m["layers"] * h * 2.0 + t["a_keep"] / m["layers"]
    t["cap"] = c["mem_bytes"] - 16.0 * m["params"] / n - c["workspace_bytes"]
    return t


def seq_items(m, c, lens):
    """For each sequence, over the (degree, recompute) choices that fit one
    rank's memory: the least area (ranks x per-rank time, with compute +
    (1 - eta) x exchange, a lower bound of what it adds to its ranks), the
    least per-rank time, the least area kept and recomputed, and its
    activation bytes kept and recomputed."""
    t = model_terms(m, c)
    h, nq, nkv, dh = m["hidden"], m["q_heads"], m["kv_heads"], m["head_dim"]
    items = []
    for s in lens:
        best = {0: (math.inf, math.inf), 1: (math.inf, math.inf)}
        for d in t["degrees"]:
            bw = c["bw_intra"] if d <= c["ranks_per_node"] else c["bw_inter"]
            a2a = 0.0 if d == 1 else 2.0 * (d - 1) / d * (s / d) * (2 * nq + 2 * max(nkv, d)) * dh * 2.0
            for rc in (0, 1):
                if s / d * (t["a_rc"] if rc else t["a_keep"]) > t["cap"]:
                    continue
                comp = (4.0 / 3.0 if rc else 1.0) * (t["cpt"] * s + t["cpt2"] * s * s) / d + t["ep"] * s / d
                per_rank = comp + (1.0 - c["overlap"]) * (1.5 if rc else 1.0) * a2a / bw
                best[rc] = (min(best[rc][0], d * per_rank), min(best[rc][1], per_rank))
        items.append(dict(w=min(best[0][0], best[1][0]), t=min(best[0][1], best[1][1]),
                          wk=best[0][0], wr=best[1][0], k=s * t["a_keep"], r=s * t["a_rc"]))
    return t, items


def bound_prime(m, c, items):
    """LB': each sequence costs at least its least area; the step is at least
    (sum of areas) / N and the longest per-rank time (seconds per step), plus
    the fixed cost of the one round every plan has."""
    return m["layers"] * max(sum(it["w"] for it in items) / c["ranks"],
                             max(it["t"] for it in items)) + round_cost(m, c)


def bound_round(m, c, t, items):
    """LB'': the round holding the sequence with the longest per-rank time t*
    lasts T0 >= t*; besides it, it holds work W0 of the others within area
    N*T0 and memory N*cap (kept or recomputed, fractional); the rest waits
    for other rounds: step >= T0 + (W - W0)/N. W0 is bounded above by weak
    duality of that fractional packing, U(A) = min over (lam, mu) of
    lam*A + mu*M + sum_i max(0, w - lam*wk - mu*k, w - lam*wr - mu*r),
    concave in A, so T0 + (W - U)/N is convex in T0: golden section, and the
    final bracket [a, b] is bounded below by a + (W - U(b))/N."""
    n = c["ranks"]
    star = max(range(len(items)), key=lambda i: items[i]["t"])
    st = items[star]
    others = [it for i, it in enumerate(items) if i != star]
    Wo = sum(it["w"] for it in others)
    M = n * t["cap"] - st["r"]

    def g(lam, mu, A):
        v = lam * A + mu * M
        for it in others:
            v += max(0.0, it["w"] - lam * it["wk"] - mu * it["k"], it["w"] - lam * it["wr"] - mu * it["r"])
        return v

    def slope(lam, mu):
        s = M
        for it in others:
            a1 = it["w"] - lam * it["wk"] - mu * it["k"]
            a2 = it["w"] - lam * it["wr"] - mu * it["r"]
            if a1 > 0 and a1 >= a2:
                s -= it["k"]
            elif a2 > 0:
                s -= it["r"]
        return s

    def upper(A):
        if A <= 0:
            return 0.0
        best = Wo
        for lam in (0.0, 0.5, 0.8, 0.9, 0.95, 1.0):
            lo, hi = 0.0, 1e-15
            while slope(lam, hi) < 0:
                hi *= 4
            for _ in range(50):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if slope(lam, mid) < 0 else (lo, mid)
            best = min(best, g(lam, hi, A))
        return best

    def f(T0):
        return T0 + (Wo - upper(n * T0 - st["w"])) / n

    lo = hi = st["t"]
    while upper(n * hi - st["w"]) < Wo:
        hi *= 1.25
    a, b, phi = lo, hi, (math.sqrt(5) - 1) / 2
    for _ in range(40):
        x, y = b - phi * (b - a), a + phi * (b - a)
        a, b = (a, y) if f(x) <= f(y) else (x, b)
    return m["layers"] * min(a + (Wo - upper(n * b - st["w"])) / n, hi) + round_cost(m, c)


rows = []
for path in glob.glob(os.path.join(work, "*.json")):
    sim = json.load(open(path))
    cfg = sim["config"]
    name = os.path.basename(cfg["workload"]).rsplit(".", 1)[0]
    steps = {k: [] for k in ("static", "megatron", "disjoint", "nested")}
    rounds = {k: [] for k in steps}
    ms = {k: [] for k in steps}
    gaps, bounds, tgaps = [], [], []
    for b in sim["batches"]:
        lb = b["lower_bound_s"]
        bounds.append(lb)
        nested = b["plans"]["nested"]
        step = nested["predicted"]["step_s"]
        terms, items = seq_items(nested["model"], nested["cluster"], nested["seq_lens"])
        tight = bound_prime(nested["model"], nested["cluster"], items)
        if step > 1.10 * tight:   # slow: only where the round structure may matter
            tight = max(tight, bound_round(nested["model"], nested["cluster"], terms, items))
        tgaps.append(step / tight)
        for k in steps:
            if k not in b["plans"]:
                continue   # a run without this planner (--planners): its columns show -
            p = b["plans"][k]
            steps[k].append(p["predicted"]["step_s"])
            rounds[k].append(len(p["rounds"]))
            ms[k].append(p["predicted"]["plan_ms"])
        gaps.append(b["plans"]["nested"]["predicted"]["step_s"] / lb)
    mean = {k: sum(v) / len(v) if v else None for k, v in steps.items()}
    ratio = lambda k: mean[k] / mean["nested"] if mean[k] is not None else None
    rows.append({
        "workload": name, "ranks": cfg["ranks"], "tokens_per_rank": cfg["tokens_per_rank"],
        "batches": len(sim["batches"]),
        "lower_bound_s": sum(bounds) / len(bounds),
        "static_s": mean["static"], "megatron_s": mean["megatron"],
        "disjoint_s": mean["disjoint"], "nested_s": mean["nested"],
        "round_s": b["plans"]["nested"]["predicted"].get("round_s", 0.0),
        "rounds_mean": {k: sum(v) / len(v) if v else None for k, v in rounds.items()},
        "nested_vs_static": ratio("static"),
        "nested_vs_megatron": ratio("megatron"),
        "nested_vs_megatron_batch_min": min((x / y for x, y in zip(steps["megatron"], steps["nested"])),
                                            default=None),
        "nested_vs_disjoint": ratio("disjoint"),
        "nested_over_lb_mean": sum(gaps) / len(gaps), "nested_over_lb_max": max(gaps),
        "nested_over_tight_lb_mean": sum(tgaps) / len(tgaps),
        "nested_over_tight_lb_max": max(tgaps),
        "plan_ms_mean": {k: sum(v) / len(v) if v else None for k, v in ms.items()},
        "plan_ms_max": {k: max(v) if v else None for k, v in ms.items()},
        "disjoint_timeout_batches": sim["summary"]["planners"].get("disjoint", {}).get("solver_timeout_plans", 0),
        "disjoint_greedy_fallback_batches": sim["summary"]["planners"].get("disjoint", {}).get("greedy_fallback_plans", 0),
    })
rows.sort(key=lambda r: (order.get(r["workload"], 9), r["ranks"], r["tokens_per_rank"]))

def geo(key):
    """Geometric mean over the rows that have the column (None if none)."""
    vals = [r[key] for r in rows if r[key] is not None]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def fmt(v, spec, suffix=""):
    return "-" if v is None else format(v, spec) + suffix


def low(key):
    vals = [r[key] for r in rows if r[key] is not None]
    return min(vals) if vals else None

summary = {
    "geomean_nested_vs_static": geo("nested_vs_static"),
    "geomean_nested_vs_disjoint": geo("nested_vs_disjoint"),
    "geomean_nested_vs_megatron": geo("nested_vs_megatron"),
    "min_nested_vs_megatron": low("nested_vs_megatron"),
    "min_nested_vs_megatron_batch": low("nested_vs_megatron_batch_min"),
    "min_nested_vs_static": low("nested_vs_static"),
    "min_nested_vs_disjoint": low("nested_vs_disjoint"),
    "disjoint_rows": sum(r["nested_vs_disjoint"] is not None for r in rows),
    "max_nested_over_lb": max(r["nested_over_lb_max"] for r in rows),
    "max_nested_over_tight_lb": max(r["nested_over_tight_lb_max"] for r in rows),
}
json.dump({"format": "nspcomm-planner-results-v1",
           "config": {"model": "qwen3-30b-a3b", "cluster": "h100", "max_len": 393216,
                      "batches": batches, "seed": seed},
           "rows": rows, "summary": summary}, open(json_out, "w"), indent=1)

print("| workload | ranks | tokens/rank | static (s) | megatron (s) | disjoint (s) | nested (s) "
      "| nested vs static | nested vs megatron | nested vs disjoint | nested / LB (mean, worst) "
      "| nested / LB* (mean, worst) | rounds: megatron, nested | plan ms: nested, megatron, disjoint |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    print(f"| {r['workload']} | {r['ranks']} | {r['tokens_per_rank']} | {fmt(r['static_s'], '.3f')} "
          f"| {fmt(r['megatron_s'], '.3f')} | {fmt(r['disjoint_s'], '.3f')} | {r['nested_s']:.3f} "
          f"| {fmt(r['nested_vs_static'], '.3f', 'x')} | {fmt(r['nested_vs_megatron'], '.3f', 'x')} "
          f"| {fmt(r['nested_vs_disjoint'], '.3f', 'x')} | {r['nested_over_lb_mean']:.3f}, {r['nested_over_lb_max']:.3f} "
          f"| {r['nested_over_tight_lb_mean']:.3f}, {r['nested_over_tight_lb_max']:.3f} "
          f"| {fmt(r['rounds_mean']['megatron'], '.1f')}, {r['rounds_mean']['nested']:.1f} "
          f"| {r['plan_ms_mean']['nested']:.2f}, {fmt(r['plan_ms_mean']['megatron'], '.1f')}, "
          f"{fmt(r['plan_ms_mean']['disjoint'], '.0f')} |")
print(f"| **geometric mean** | | | | | | | **{fmt(summary['geomean_nested_vs_static'], '.3f', 'x')}** "
      f"| **{fmt(summary['geomean_nested_vs_megatron'], '.3f', 'x')}** "
      f"| **{fmt(summary['geomean_nested_vs_disjoint'], '.3f', 'x')}** "
      f"| worst {summary['max_nested_over_lb']:.3f} "
      f"| worst {summary['max_nested_over_tight_lb']:.3f} | | |")
print()
print(f"Step times are seconds per training step (mean of {batches} batches, seed {seed}), "
      f"predicted by cost model v1 (docs/design.md §5.1) with a fixed cost of {rows[0]['round_s']:.4f} s "
      "per round (64 ranks; docs/reference/cost-model.md); nested vs megatron is worst "
      f"{fmt(summary['min_nested_vs_megatron_batch'], '.3f', 'x')} on a single batch; a row "
      "without a planner's run shows -; LB is the lower bound of docs/design.md §5.2, LB* the "
      "tighter bound of docs/reference/planners.md (unavoidable exchange, memory-forced "
      "recomputation or splitting, and the memory of the round that holds the longest sequence); plan ms is the "
      "mean wall time of one nsp_plan_create on one core.")
EOF

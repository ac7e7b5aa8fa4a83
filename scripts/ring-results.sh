#!/usr/bin/env bash
# Regenerate the ring results table of docs/results.md (issue 4): nested
# with rings (Ulysses x ring levels above the head count) against the
# Ulysses-only tree, and static with rings against static, with perf/nsp_sim
# on the three shipped workloads, qwen3-30b-a3b on 128 h100, 32768 and 65536
# tokens per rank, max length 393216 and 1048576, 10 batches each; and,
# because documents above 393216 tokens are rare (2 of the 1,000,000
# Wikipedia lengths, about one batch in 60-120), Wikipedia at max length
# 1048576 over 100 batches (--tail-batches).
#
#   scripts/ring-results.sh [--build DIR] [--json FILE] [--batches B]
#                           [--tail-batches B] [--seed K] [--ranks N]
#                           [--keep DIR] [--from DIR]
#
# Prints a markdown table on stdout, writes the same numbers as JSON
# (default ring-results.json in the current directory) and keeps every
# nsp_sim JSON (all plans) under --keep DIR if given; --from DIR aggregates
# such a directory again without simulating. Progress goes to stderr.
# Needs python3 (standard library only) to aggregate.
#
# Per row: the mean step time of each planner with and without rings, the
# speedups (mean without / mean with), how many batches have a sequence
# whose best degree is above 32 (the nested plan with rings puts it on more
# than 32 ranks), and the speedup of nested on exactly those batches (sum of
# their steps without / with rings).
set -euo pipefail

script=ring-results.sh
. "$(dirname "$0")/results-lib.sh"
json_out="ring-results.json"
tail_batches=100
ranks=128

while [ $# -gt 0 ]; do
    case "$1" in
    --tail-batches) tail_batches="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    *) results_option "$@"; shift 2 ;;
    esac
done
results_prepare

# workload:max_len:tokens_per_rank:batches
configs=""
for w in wikipedia-flexsp prolong-distca wlbllm-distca; do
    for maxlen in 393216 1048576; do
        for tpr in 32768 65536; do
            configs="$configs $w:$maxlen:$tpr:$batches"
        done
    done
done
if [ "$tail_batches" -gt 0 ]; then
    configs="$configs wikipedia-flexsp:1048576:32768:$tail_batches"
    configs="$configs wikipedia-flexsp:1048576:65536:$tail_batches"
fi
if [ -n "$from" ]; then
    configs=""
fi
total=$(echo $configs | wc -w)
n=0
for cf in $configs; do
    IFS=: read -r w maxlen tpr nb <<<"$cf"
    n=$((n + 1))
    for mode in ulysses ring; do
        out="$work/$w-$ranks-$tpr-$maxlen-$nb-$mode.json"
        echo "[$n/$total] $w, $ranks ranks, $tpr tokens per rank, max length $maxlen," \
             "$mode, $nb batches" >&2
        "$sim" --workload "$top/data/workloads/$w.txt" --model qwen3-30b-a3b \
            --cluster h100 --ranks "$ranks" --tokens-per-rank "$tpr" \
            --max-len "$maxlen" --batches "$nb" --seed "$seed" \
            --planners static,nested $([ "$mode" = ring ] && echo --ring) \
            --json "$out" --quiet >/dev/null
        [ -n "$keep" ] && cp "$out" "$keep/"
    done
done

python3 - "$work" "$json_out" <<'EOF'
import glob, json, math, os, sys

work, json_out = sys.argv[1], sys.argv[2]
order = {"wikipedia-flexsp": 0, "prolong-distca": 1, "wlbllm-distca": 2}


def top_degree(plan):
    return max(g["size"] for r in plan["rounds"] for g in r["groups"])


def longest_needs_more(plan):
    """The v1 bound is set by the longest sequence alone at the largest
    Ulysses degree (term (b) of docs/design.md §5.2 above term (a)): no Ulysses plan
    can balance that batch."""
    m, c, lens = plan["model"], plan["cluster"], plan["seq_lens"]
    h, nq, nkv, dh = m["hidden"], m["q_heads"], m["kv_heads"], m["head_dim"]
    lin = 3.0 * (2 * h * (2 * nq * dh + 2 * nkv * dh) + 6 * h * m["ffn"] + 2 * h * m["experts"])
    ep = 4.0 * m["topk"] * h * 2.0 / c["bw_intra"]

    def comp(s, d):
        return (lin * s / c["gemm_flops"] + 3.5 * 2 * s * s * nq * dh / c["attn_flops"]) / d

    du = max(d for d in range(1, min(c["ranks"], nq) + 1) if nq % d == 0)
    a = (sum(comp(s, 1) for s in lens) + ep * sum(lens)) / c["ranks"]
    s = max(lens)
    return comp(s, du) + ep * s / du > a


pairs = {}
for path in glob.glob(os.path.join(work, "*.json")):
    sim = json.load(open(path))
    cfg = sim["config"]
    name = os.path.basename(cfg["workload"]).rsplit(".", 1)[0]
    key = (name, cfg["ranks"], cfg["tokens_per_rank"], cfg["max_len"], cfg["batches"])
    pairs.setdefault(key, {})["ring" if cfg.get("enable_ring") else "ulysses"] = sim

rows = []
for key, sims in pairs.items():
    if set(sims) != {"ring", "ulysses"}:
        print("ring-results.sh: %s lacks a run with or without rings" % (key,), file=sys.stderr)
        sys.exit(1)
    u, r = sims["ulysses"]["batches"], sims["ring"]["batches"]
    if len(u) != len(r) or any(a["plans"]["nested"]["seq_lens"] != b["plans"]["nested"]["seq_lens"]
                               for a, b in zip(u, r)):
        print("ring-results.sh: %s: the two runs planned different batches" % (key,),
              file=sys.stderr)
        sys.exit(1)
    step = {(k, m): [b["plans"][k]["predicted"]["step_s"] for b in sims[m]["batches"]]
            for k in ("static", "nested") for m in ("ulysses", "ring")}
    ms = [b["plans"]["nested"]["predicted"]["plan_ms"] for b in r]
    above = [i for i, b in enumerate(r) if top_degree(b["plans"]["nested"]) > 32]
    binds = [i for i, b in enumerate(u) if longest_needs_more(b["plans"]["nested"])]
    mean = {k: sum(v) / len(v) for k, v in step.items()}
    on = lambda m, idx: sum(step[("nested", m)][i] for i in idx)
    rows.append({
        "workload": key[0], "ranks": key[1], "tokens_per_rank": key[2], "max_len": key[3],
        "batches": len(r), "seed": sims["ring"]["config"]["seed"],
        "longest_per_batch": [max(b["plans"]["nested"]["seq_lens"]) for b in r],
        "nested_ulysses_s": mean[("nested", "ulysses")], "nested_ring_s": mean[("nested", "ring")],
        "nested_speedup": mean[("nested", "ulysses")] / mean[("nested", "ring")],
        "static_ulysses_s": mean[("static", "ulysses")], "static_ring_s": mean[("static", "ring")],
        "static_speedup": mean[("static", "ulysses")] / mean[("static", "ring")],
        "batches_above_32": len(above), "above_32_batch_indices": above,
        "nested_speedup_above_32": on("ulysses", above) / on("ring", above) if above else None,
        "batches_ulysses_bound_set_by_longest": len(binds),
        "nested_ring_over_ring_lb_mean": sum(b["plans"]["nested"]["predicted"]["step_s"] /
                                             b["lower_bound_s"] for b in r) / len(r),
        "nested_ring_never_slower": all(step[("nested", "ring")][i] <=
                                        step[("nested", "ulysses")][i] * (1 + 1e-12)
                                        for i in range(len(r))),
        "nested_ring_plan_ms_mean": sum(ms) / len(ms),
        "nested_ulysses_plan_ms_mean": sum(b["plans"]["nested"]["predicted"]["plan_ms"]
                                           for b in u) / len(u),
    })
rows.sort(key=lambda x: (x["batches"], order.get(x["workload"], 9), x["max_len"],
                         x["tokens_per_rank"]))


def geo(key):
    return math.exp(sum(math.log(x[key]) for x in rows) / len(rows))


summary = {"geomean_nested_speedup": geo("nested_speedup"),
           "geomean_static_speedup": geo("static_speedup"),
           "batches_above_32": sum(x["batches_above_32"] for x in rows),
           "batches": sum(x["batches"] for x in rows)}


def above_sum(x, mode):
    k = (x["workload"], x["ranks"], x["tokens_per_rank"], x["max_len"], x["batches"])
    return sum(b["plans"]["nested"]["predicted"]["step_s"]
               for i, b in enumerate(pairs[k][mode]["batches"]) if i in x["above_32_batch_indices"])


above_u = sum(above_sum(x, "ulysses") for x in rows)
above_r = sum(above_sum(x, "ring") for x in rows)
summary["nested_speedup_on_batches_above_32"] = above_u / above_r if above_r > 0 else None
json.dump({"format": "nspcomm-ring-results-v1",
           "config": {"model": "qwen3-30b-a3b", "cluster": "h100",
                      "batches": rows[0]["batches"] if rows else 0},
           "rows": rows, "summary": summary}, open(json_out, "w"), indent=1)

print("| workload | max len | tokens/rank | batches | nested, Ulysses (s) | nested, rings (s) | speedup "
      "| batches above 32 | speedup on them | Ulysses bound set by the longest | nested rings / LB "
      "| static, Ulysses (s) | static, rings (s) | speedup | plan ms: nested Ulysses, rings |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for x in rows:
    sa = "%.3fx" % x["nested_speedup_above_32"] if x["nested_speedup_above_32"] else "-"
    print(f"| {x['workload']} | {x['max_len']} | {x['tokens_per_rank']} | {x['batches']} "
          f"| {x['nested_ulysses_s']:.3f} | {x['nested_ring_s']:.3f} | {x['nested_speedup']:.3f}x "
          f"| {x['batches_above_32']}/{x['batches']} | {sa} "
          f"| {x['batches_ulysses_bound_set_by_longest']}/{x['batches']} "
          f"| {x['nested_ring_over_ring_lb_mean']:.3f} "
          f"| {x['static_ulysses_s']:.3f} | {x['static_ring_s']:.3f} | {x['static_speedup']:.3f}x "
          f"| {x['nested_ulysses_plan_ms_mean']:.1f}, {x['nested_ring_plan_ms_mean']:.1f} |")
sa = summary["nested_speedup_on_batches_above_32"]
print(f"| **all rows** | | | | | | **{summary['geomean_nested_speedup']:.3f}x** (geo. mean) "
      f"| {summary['batches_above_32']}/{summary['batches']} | **{sa:.3f}x** | | | | "
      f"| {summary['geomean_static_speedup']:.3f}x | |" if sa else "")
EOF

"""Hand-built and planned plans for the tests (nspcomm-plan-v1 JSON)."""

import json
import random

MODEL = {"name": "tiny-gqa", "layers": 4, "hidden": 256, "q_heads": 8, "kv_heads": 2,
         "head_dim": 16, "ffn": 512, "topk": 0, "experts": 0, "params": 3e6}


def cluster(ranks):
    return {"name": "cpu", "ranks": ranks, "ranks_per_node": ranks, "mem_bytes": 8e9,
            "workspace_bytes": 1e8, "gemm_flops": 5e10, "attn_flops": 2e10, "bw_intra": 5e9,
            "bw_inter": 5e9, "lat_intra": 2e-5, "lat_inter": 2e-5, "overlap": 0.0}


def long_tailed(rng, n, lo, hi):
    """n lengths, log-uniform in [lo, hi] (many short, few long)."""
    import math
    return [int(math.exp(rng.uniform(math.log(lo), math.log(hi)))) for _ in range(n)]


def plan_json(ranks, seq_lens, rounds, model=MODEL):
    """rounds: [[(rank0, size, [seqs], ring), ...], ...]"""
    return json.dumps({
        "format": "nspcomm-plan-v1", "planner": "nested", "flags": 0, "model": model,
        "cluster": cluster(ranks), "seq_lens": seq_lens,
        "rounds": [{"groups": [dict({"rank0": r0, "size": d, "seqs": s, "recompute": False,
                                     "pipelined": True}, **({"ring": ring} if ring > 1 else {}))
                               for (r0, d, s, ring) in rnd]} for rnd in rounds],
        "predicted": {"step_s": 0.0, "rank_s": [0.0] * ranks, "rank_mem_bytes": [0.0] * ranks,
                      "lower_bound_s": 0.0, "plan_ms": 0.0}})


def random_nested(ranks, seed, degrees=(1, 2, 4, 8), ring=False, nrounds=1):
    """A random nested plan: each round cuts the ranks into aligned groups of
    random degree from `degrees` (skipped degrees make empty levels), with
    long-tailed sequences, some shorter than their degree (empty chunks);
    ring=True makes groups of degree 4 and 8 Ulysses x ring."""
    rng = random.Random(seed)
    lens, rounds = [], []
    for _ in range(nrounds):
        groups, r0 = [], 0
        while r0 < ranks:
            choices = [d for d in degrees if d <= ranks - r0 and r0 % d == 0]
            d = rng.choice(choices)
            n = rng.randint(1, 3)
            seqs = list(range(len(lens), len(lens) + n))
            lens += long_tailed(rng, n, 2, 60 * d)
            rg = 1
            if ring and d >= 4:
                rg = rng.choice([r for r in (2, 4, 8) if r <= d and d % r == 0])
            groups.append((r0, d, seqs, rg))
            # sometimes a second, nested group of smaller degree on the same ranks
            if d > 1 and rng.random() < 0.5:
                sub = d // 2
                m = list(range(len(lens), len(lens) + 2))
                lens += long_tailed(rng, 2, 1, 40 * sub)
                groups.append((r0, sub, m, 1))
            r0 += d
        rounds.append(groups)
    return plan_json(ranks, lens, rounds)

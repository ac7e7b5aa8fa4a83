#!/usr/bin/env python3
"""Bytes the torch op sends per dtype on Ulysses groups that replicate KV
heads, with replicated dK/dV summed on the wire in 16 bits (the default)
and in float32 (dkv_float32=True): one command.

    .venv/bin/python perf/torch_wire_bytes.py [--json out/torch_wire_bytes.json]

For 4 and 8 ranks (real processes over UCX, tests/python's harness), a plan
of two rounds whose largest group spans every rank (degree 4 or 8 above
n_kv = 2: each KV head replicated 2 or 4 times) beside level-0 and degree-2
groups, GQA 8/2, head_dim 16: forward and backward (from the saved state)
of nspcomm.torch.nested_attention in float32, bfloat16 and float16; the
bytes every rank sent, summed over ranks and rounds (the op's stats). In a
16-bit call the replicated dK/dV go back in the call's dtype
(NSP_A2A_REPLICAS_SUM_BF16/FP16); with dkv_float32 in float32
(NSP_A2A_REPLICAS_SUM_F32). Byte counts are exact and do not depend on the
machine's load.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(TOP, "tests", "python"))
sys.path.insert(0, os.path.join(TOP, "python"))

ATTN = {"nq": 8, "nkv": 2, "D": 16}
LENS = [300, 120, 45, 1, 77, 64, 33, 20, 9]
DTYPES = ["float32", "bfloat16", "float16"]


def plan_for(ranks):
    import plans
    rounds = [[(0, ranks, [0, 1, 2, 3], 1), (0, 1, [4], 1), (1, 1, [5], 1)],
              [(0, ranks, [6, 7], 1), (0, 2, [8], 1)]]
    return plans.plan_json(ranks, LENS, rounds)


def measure(ranks):
    """{dtype: [forward bytes, backward bytes]} summed over ranks and rounds."""
    import mp
    tmp = tempfile.mkdtemp(prefix="nsp_bytes_")
    path = os.path.join(tmp, "plan.json")
    with open(path, "w") as f:
        f.write(plan_for(ranks))
    res = mp.run(ranks, [["u", "attn", dict(ATTN, plan=path, dtypes=DTYPES, seed=1)],
                         ["w", "attn", dict(ATTN, plan=path, dtypes=DTYPES[1:], seed=1,
                                            dkv_float32=True)]],
                 timeout=600, nsp_timeout=60)
    out = {}
    for r, x in enumerate(res):
        for case, suffix in (("u", ""), ("w", "+dkv_float32")):
            if case not in x or "raised" in x[case]:
                raise SystemExit("rank %d failed: %s" % (r, str(x)[-2000:]))
            for dt, rounds in x[case]["bytes"].items():
                acc = out.setdefault(dt + suffix, [0, 0])
                for fwd, bwd in rounds:
                    acc[0] += fwd
                    acc[1] += bwd
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(TOP, "out", "torch_wire_bytes.json"))
    args = ap.parse_args()
    rows = []
    print("# ranks  replicas  dtype                   fwd_B   (x fp32)   bwd_B   (x fp32)")
    for ranks in (4, 8):
        b = measure(ranks)
        f32 = b["float32"]
        for dt in DTYPES + [d + "+dkv_float32" for d in DTYPES[1:]]:
            fwd, bwd = b[dt]
            rows.append({"ranks": ranks, "replicas": ranks // ATTN["nkv"], "dtype": dt,
                         "forward_bytes": fwd, "backward_bytes": bwd,
                         "forward_x_fp32": fwd / f32[0], "backward_x_fp32": bwd / f32[1]})
            print("  %5d  %8d  %-22s %8d  (%.3f)  %8d  (%.3f)" % (
                ranks, ranks // ATTN["nkv"], dt, fwd, fwd / f32[0], bwd, bwd / f32[1]))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"attn": ATTN, "seq_lens": LENS, "rows": rows}, f, indent=1)
    print("# wrote %s" % args.json)


if __name__ == "__main__":
    main()

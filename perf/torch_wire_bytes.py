#!/usr/bin/env python3
"""Bytes the torch op sends per dtype on Ulysses groups that replicate KV
heads: what a 2-byte replica sum would save (one command).

    .venv/bin/python perf/torch_wire_bytes.py [--json out/torch_wire_bytes.json]

For 4 and 8 ranks (real processes over UCX, tests/python's harness), a plan
of two rounds whose largest group spans every rank (degree 4 or 8 above
n_kv = 2: each KV head replicated 2 or 4 times) beside level-0 and degree-2
groups, GQA 8/2, head_dim 16: forward and backward (from the saved state)
of nspcomm.torch.nested_attention in float32, bfloat16 and float16; the
bytes every rank sent, summed over ranks and rounds (the op's stats). In a
16-bit call the replicated dK/dV still go back in float32 (summed over the
replicas in float32, NSP_A2A_REPLICAS_SUM_F32); the column "2-byte replica
sum" is what the backward would send with them in the call's dtype:
exactly half of float32's, as every tensor of the backward would then be 2
bytes wide (computed, not measured: the library has no such mode yet).
Byte counts are exact and do not depend on the machine's load.
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
    res = mp.run(ranks, [["u", "attn", dict(ATTN, plan=path, dtypes=DTYPES, seed=1)]],
                 timeout=600, nsp_timeout=60)
    out = {dt: [0, 0] for dt in DTYPES}
    for r, x in enumerate(res):
        if "u" not in x or "raised" in x["u"]:
            raise SystemExit("rank %d failed: %s" % (r, str(x)[-2000:]))
        for dt in DTYPES:
            for fwd, bwd in x["u"]["bytes"][dt]:
                out[dt][0] += fwd
                out[dt][1] += bwd
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(TOP, "out", "torch_wire_bytes.json"))
    args = ap.parse_args()
    rows = []
    print("# ranks  replicas  dtype      fwd_B     (x fp32)  bwd_B     (x fp32)  "
          "bwd_B with a 2-byte replica sum (x fp32)")
    for ranks in (4, 8):
        b = measure(ranks)
        f32 = b["float32"]
        for dt in DTYPES:
            fwd, bwd = b[dt]
            after = bwd if dt == "float32" else f32[1] // 2
            rows.append({"ranks": ranks, "replicas": ranks // ATTN["nkv"], "dtype": dt,
                         "forward_bytes": fwd, "backward_bytes": bwd,
                         "backward_bytes_2byte_replica_sum": after})
            print("  %5d  %8d  %-9s  %8d  (%.3f)   %8d  (%.3f)   %8d (%.3f)" % (
                ranks, ranks // ATTN["nkv"], dt, fwd, fwd / f32[0], bwd, bwd / f32[1], after,
                after / f32[1]))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"attn": ATTN, "seq_lens": LENS, "rows": rows,
                   "note": "backward_bytes_2byte_replica_sum is computed (float32 / 2)"}, f,
                  indent=1)
    print("# wrote %s" % args.json)


if __name__ == "__main__":
    main()

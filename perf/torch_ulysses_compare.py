#!/usr/bin/env python3
"""The Ulysses exchange the way yunchang and DeepSpeed do it against nspcomm,
side by side in one run, on the same tensors and plan.

    torchrun --nproc-per-node 8 perf/torch_ulysses_compare.py [--sizes 1,2,4,8] [--iters 10]

For each size (MiB of q per rank, float32 [T_local, heads, head_dim]) the
batch is one Ulysses group of all ranks (a static plan of degree N over
long-tailed sequences; every rank holds T_local = T / N tokens):

  gloo   DeepSpeed-Ulysses/yunchang's SeqAllToAll4D: [T/N, H, D] -> reshape
         [T/N, N, H/N, D] -> permute to [N, T/N, H/N, D] (contiguous) ->
         torch.distributed.all_to_all_single over gloo -> [T, H/N, D]
  nspcomm the nested all-to-all of the same plan (nspcomm.all_to_all,
         sequence-to-head), host pack/unpack inside, UCX underneath

Both move the same bytes: (N-1)/N of each rank's tensor. Times are the
median over --iters calls of the slowest rank (barrier before each call);
ratio = gloo / nspcomm (above 1: nspcomm faster). Writes a JSON with every
number (--json). Ratios come from one run, alternating the two methods.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "python"))
import nspcomm  # noqa: E402


def gloo_seq_to_head(x, world):
    """yunchang/DeepSpeed: permute, all_to_all_single, permute back."""
    T, H, D = x.shape
    send = x.reshape(T, world, H // world, D).transpose(0, 1).contiguous()  # [N, T/N, H/N, D]
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    return recv.reshape(world * T, H // world, D)  # [T, H/N, D]: chunks in rank order


def timed(fn, comm, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        comm.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    every = [list(x) for x in zip(*[__import__("struct").unpack("<%dd" % iters, r) for r in
                                    comm.allgather(__import__("struct").pack("<%dd" % iters,
                                                                             *times))])]
    worst = sorted(max(t) for t in every)
    return worst[len(worst) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,2,4,8,16")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = nspcomm.init(store=dist.distributed_c10d._get_default_store())
    tree = comm.tree()
    H, D = args.heads, args.head_dim
    model = {"name": "compare", "layers": 1, "hidden": H * D, "q_heads": H, "kv_heads": H,
             "head_dim": D, "ffn": 4 * H * D, "topk": 0, "experts": 0, "params": 1e6}
    cluster = {"name": "cpu", "ranks": world, "ranks_per_node": world, "mem_bytes": 1e12,
               "workspace_bytes": 0, "gemm_flops": 1e12, "attn_flops": 1e11, "bw_intra": 1e9,
               "bw_inter": 1e9, "lat_intra": 1e-5, "lat_inter": 1e-5, "overlap": 0}
    planner = nspcomm.Planner(model, cluster)
    rows = []
    g = torch.Generator().manual_seed(0)
    for mib in [float(s) for s in args.sizes.split(",")]:
        t_local = max(1, int(mib * 2 ** 20 / (H * D * 4)))
        total = t_local * world
        lens, left = [], total                      # long-tailed lengths summing to total
        while left > 0:
            n = min(left, int(torch.exp(torch.empty(1).uniform_(2, 9, generator=g)).item()))
            lens.append(max(1, n))
            left -= lens[-1]
        plan = planner.plan(lens, kind="static", static_degree=world)
        lay = nspcomm.Layout(plan, 0, rank)
        x = torch.randn(lay.local_tokens, H, D)
        xg = torch.randn(t_local, H, D)
        out = torch.empty(lay.head_rows(H), D)
        nsp = lambda: nspcomm.all_to_all(tree, lay, x, out=out, check_agree=False)  # noqa
        glo = lambda: gloo_seq_to_head(xg, world)  # noqa: E731
        t_g, t_n = [], []
        for _ in range(2):                          # alternate, twice
            t_g.append(timed(glo, comm, args.iters, args.warmup))
            t_n.append(timed(nsp, comm, args.iters, args.warmup))
        tg, tn = min(t_g), min(t_n)
        rows.append({"mib_per_rank": mib, "tokens_per_rank": t_local, "nseqs": len(lens),
                     "gloo_ms": tg * 1e3, "nspcomm_ms": tn * 1e3, "ratio": tg / tn,
                     "bytes_per_rank": x.numel() * 4})
    if rank == 0:
        print("# Ulysses sequence-to-head, %d ranks, q [T_local, %d, %d] float32, "
              "median of %d calls (slowest rank)" % (world, H, D, args.iters))
        print("| MiB per rank | tokens/rank | sequences | gloo (permute + all_to_all_single) ms "
              "| nspcomm ms | gloo / nspcomm |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print("| %g | %d | %d | %.2f | %.2f | %.2fx |" % (
                r["mib_per_rank"], r["tokens_per_rank"], r["nseqs"], r["gloo_ms"],
                r["nspcomm_ms"], r["ratio"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": world, "heads": H, "head_dim": D, "rows": rows}, f, indent=1)
    tree.destroy()
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""End-to-end training with nested sequence parallelism on nspcomm (CPU).

    torchrun --nproc-per-node 8 examples/torch/train_nsp.py --steps 50
    mpirun -np 8 -x MASTER_PORT=29500 .venv/bin/python examples/torch/train_nsp.py
    torchrun ... train_nsp.py --preset long --steps 8     # long-context training
    python train_nsp.py --predict-only --preset long --cluster FILE   # cost model only
    torchrun ... train_nsp.py --device emu:FILE           # emulated compute (below)

A small decoder-only GQA transformer (RoPE, SwiGLU, 4 layers, hidden 256,
8 query / 2 KV heads of 32) trains on batches drawn by token budget from a
shipped workload (lengths divided by --scale to CPU sizes). Every step, for
each planner (static, disjoint, nested, megatron), on every rank:

  plan the batch (rank 0 plans, the plan is broadcast as JSON), and per
  round (micro-batch): the layout, gather the rank's tokens
  (index_select), forward (attention = nspcomm.torch.nested_attention, the
  rest per token), backward (the MLP of recomputed groups under
  torch.utils.checkpoint); then all-reduce the gradients (gloo) and step
  AdamW.

Checks (exit 1 if one fails): at step 0 the loss and every parameter's
gradient equal a single-process run of the same model on the same batch
(float32; tolerance --grad-tol relative to the gradient's largest entry),
and the planners' loss curves coincide within --loss-tol. Prints per
planner: step time as critical-path CPU time (per round, the busiest rank's
thread CPU time, summed; as the nsp_demo measures it) and wall time,
tokens/s, bytes per level, and the cost model's predicted step time; writes
JSON and an SVG (loss curves, per-rank step time) to --out.

--device emu:FILE (or NSPCOMM_DEVICE=emu:FILE in the environment; never
the default): the attention runs on nspcomm's emulated device
(docs/design/emulated-device.md): each per-level kernel takes the time
FILE's target GPU would take, scaled to this wire, and the exchanges move
for real over UCX; the planner prices attention at that emulated rate (the
rest of the model is real CPU work at its measured rate). In timing mode
(FILE's "math": false, the default) the kernels do no math, so the loss is
not meaningful and no correctness check runs: every output says "EMULATED
COMPUTE", the JSON's "compute" is {"kind": "emulated", ...}. Check
correctness with math mode ("math": true: the kernels also compute, every
check runs) or the plain CPU run.

--timed-linear (with --device emu:FILE in timing mode only): the linear
layers are emulated too. Each nn.Linear does no math (zeros out, zero
gradients) and its rank's thread sleeps what the target GPU's GEMMs would
take: 2 T in out FLOPs forward, twice that backward, at the target's
R_gemm / scale (the attention's scale), and the planner prices them at that
rate. What stays real CPU work: norms, RoPE, SwiGLU's product, the loss,
AdamW and the gloo all-reduce. Without it 8 ranks' real projections and MLP
share the machine's cores and hide what the planners change in the
attention (docs/results-cluster.md, "Training on emulated compute").
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "python"))
import nspcomm  # noqa: E402
import nspcomm.torch as nt  # noqa: E402

VOCAB = 512


# ---- the model ------------------------------------------------------------------

def rope(x, pos, base=10000.0):
    """x [T, H, D] rotated by position ids pos [T] (the rows' positions in
    their own sequences, from the layout)."""
    D = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = pos.float()[:, None] * inv[None, :]                  # [T, D/2]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


class TimedLinear(torch.autograd.Function):
    """A linear layer in timing-only emulated compute (--timed-linear): no
    math, the time the target's GEMMs would take. x [..., in], w [out, in];
    forward sleeps 2 N in out / rate seconds (N = rows of x, rate in FLOP/s)
    and returns zeros [..., out]; backward (dx and dw, twice the FLOPs)
    sleeps 4 N in out / rate and returns zeros shaped as x and w."""

    @staticmethod
    def forward(ctx, x, w, rate):
        flops = 2.0 * x.numel() * w.shape[0]                # 2 N in out
        ctx.shapes, ctx.seconds = (x.shape, w.shape), 2.0 * flops / rate
        if flops > 0:
            time.sleep(flops / rate)
        return x.new_zeros(x.shape[:-1] + (w.shape[0],))

    @staticmethod
    def backward(ctx, grad):
        if ctx.seconds > 0:
            time.sleep(ctx.seconds)
        return grad.new_zeros(ctx.shapes[0]), grad.new_zeros(ctx.shapes[1]), None


def time_linears(model, rate):
    """Every nn.Linear of `model` becomes a TimedLinear at `rate` FLOP/s
    (its weights stay, for AdamW and the all-reduce)."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.forward = lambda x, _m=m: TimedLinear.apply(x, _m.weight, rate)
    return model


class Block(nn.Module):
    def __init__(self, hidden, nq, nkv, ffn):
        super().__init__()
        self.nq, self.nkv, self.D = nq, nkv, hidden // nq
        self.n1, self.n2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
        self.wq = nn.Linear(hidden, nq * self.D, bias=False)
        self.wkv = nn.Linear(hidden, 2 * nkv * self.D, bias=False)
        self.wo = nn.Linear(nq * self.D, hidden, bias=False)
        self.w13 = nn.Linear(hidden, 2 * ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    def mlp(self, x):
        a, b = self.w13(self.n2(x)).chunk(2, -1)
        return self.w2(F.silu(a) * b)

    def forward(self, x, pos, attend, recompute=None):
        T = x.shape[0]
        h = self.n1(x)
        q = rope(self.wq(h).view(T, self.nq, self.D), pos)
        k, v = self.wkv(h).view(T, 2, self.nkv, self.D).unbind(1)
        k = rope(k, pos)
        o = attend(q.contiguous(), k.contiguous(), v.contiguous())
        x = x + self.wo(o.reshape(T, self.nq * self.D))      # T may be 0: a rank with no tokens
        if recompute is None or not recompute.any():
            return x + self.mlp(x)
        # the plan's recompute flags: rows of recomputed groups keep no MLP activations
        keep, rec = (~recompute).nonzero().squeeze(1), recompute.nonzero().squeeze(1)
        out = torch.empty_like(x)
        out[keep] = self.mlp(x[keep])
        out[rec] = checkpoint(self.mlp, x[rec], use_reentrant=False)
        return x + out


class Decoder(nn.Module):
    def __init__(self, layers=4, hidden=256, nq=8, nkv=2, ffn=704):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, hidden)
        self.blocks = nn.ModuleList(Block(hidden, nq, nkv, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(hidden)
        self.head = nn.Linear(hidden, VOCAB, bias=False)

    def forward(self, tokens, pos, attend, recompute=None):
        x = self.emb(tokens)
        for b in self.blocks:
            x = b(x, pos, attend, recompute)
        return self.head(self.norm(x))


def model_spec(m, args):
    params = sum(p.numel() for p in m.parameters())
    return {"name": "train-nsp-gqa", "layers": args.layers, "hidden": 256, "q_heads": 8,
            "kv_heads": 2, "head_dim": 32, "ffn": 704, "topk": 0, "experts": 0,
            "params": float(params)}


# ---- data -----------------------------------------------------------------

def scaled_workload(path, scale, out):
    """Every length of the workload file divided by `scale` (rounded up)."""
    with open(path) as f, open(out + ".tmp", "w") as g:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                g.write("%d\n" % max(1, -(-int(line) // scale)))
    os.replace(out + ".tmp", out)
    return out


def batch_tokens(lens, step):
    """The global batch: tokens [T] and next-token targets [T] (-100 at each
    sequence's last token). A learnable synthetic language: a fixed random
    bigram map (token t is followed by NEXT[t]), 20% of tokens replaced by
    noise; the loss can fall from ln(512) = 6.24 towards about 1.9."""
    g = torch.Generator().manual_seed(1000 + step)
    nxt = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(7))
    toks, tgts = [], []
    for n in lens:
        s = torch.empty(n, dtype=torch.long)
        s[0] = torch.randint(0, VOCAB, (1,), generator=g)
        noise = torch.rand(n, generator=g) < 0.2
        rnd = torch.randint(0, VOCAB, (n,), generator=g)
        for i in range(1, n):
            s[i] = rnd[i] if noise[i] else nxt[s[i - 1]]
        toks.append(s)
        t = torch.full((n,), -100, dtype=torch.long)
        t[:-1] = s[1:]
        tgts.append(t)
    return torch.cat(toks), torch.cat(tgts)


# ---- single-process reference ------------------------------------------------

def reference_attend(lens):
    """Causal attention of every sequence of the whole batch (torch SDPA)."""
    def attend(q, k, v):
        out, s0 = torch.empty_like(q), 0
        g = q.shape[1] // k.shape[1]
        for n in lens:
            qs = q[s0:s0 + n].transpose(0, 1)
            ks = k[s0:s0 + n].transpose(0, 1).repeat_interleave(g, 0)
            vs = v[s0:s0 + n].transpose(0, 1).repeat_interleave(g, 0)
            out[s0:s0 + n] = F.scaled_dot_product_attention(qs, ks, vs,
                                                            is_causal=True).transpose(0, 1)
            s0 += n
        return out
    return attend


def reference_step(model, lens, tokens, targets):
    pos = torch.cat([torch.arange(n) for n in lens])
    logits = model(tokens, pos, reference_attend(lens))
    loss = F.cross_entropy(logits, targets, ignore_index=-100, reduction="sum") / \
        (targets != -100).sum()
    model.zero_grad()
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


# ---- one distributed step -----------------------------------------------------

def tally_attention(attn, stats, bytes_by_degree):
    """Add every forward and backward call of `attn` (every layer) to
    stats {"attn_wall_s", "attn_compute_s", "attn_wait_s"} (seconds on this
    rank, from the op's nsp_nested_attn_stats_t) and bytes_by_degree
    {degree: bytes this rank sent}."""
    for name, key in (("forward", "last_fwd_stats"), ("backward", "last_bwd_stats")):
        call = getattr(attn, name)

        def counted(*a, _call=call, _key=key, **kw):
            out = _call(*a, **kw)
            st = getattr(attn, _key, None)
            if st:
                stats["attn_wall_s"] = stats.get("attn_wall_s", 0.0) + st["wall_s"]
                stats["attn_compute_s"] = stats.get("attn_compute_s", 0.0) + st["compute_s"]
                stats["attn_wait_s"] = stats.get("attn_wait_s", 0.0) + st["wait_s"]
                for lv in st["levels"]:
                    bytes_by_degree[lv["degree"]] = bytes_by_degree.get(lv["degree"], 0) + \
                        lv["a2a_bytes"] + lv["ring_bytes"]
            return out
        setattr(attn, name, counted)


def nsp_step(model, opt, comm, tree, plan, tokens, targets, stats, honour_recompute=True):
    """Forward/backward of every round on this rank, all-reduce, AdamW.
    Returns (global loss, per-round CPU seconds of this rank, bytes by degree);
    stats (a dict) gets the attention op's wall, kernel and wait seconds and
    the gradient all-reduce's wall seconds ("allreduce_wall_s")."""
    ntgt = (targets != -100).sum()
    model.zero_grad()
    loss_sum = torch.zeros(())
    cpu, bytes_by_degree = [], {}
    for rnd in range(plan.nrounds):
        c0 = time.thread_time()
        lay = nspcomm.Layout(plan, rnd, comm.rank)
        idx, pos = lay.token_index(), lay.position_ids()
        attn = nt.NestedAttention(tree, lay, 8, 2, 32)
        tally_attention(attn, stats, bytes_by_degree)

        def attend(q, k, v):
            return nt.nested_attention(q, k, v, attn)
        rec = lay.recompute_rows() if honour_recompute else None
        logits = model(tokens.index_select(0, idx), pos, attend, rec)
        loss = F.cross_entropy(logits, targets.index_select(0, idx), ignore_index=-100,
                               reduction="sum") / ntgt
        loss.backward()
        attn.destroy()
        loss_sum += loss.detach()
        cpu.append(time.thread_time() - c0)
    c0 = time.thread_time()
    # straight into gloo: an nspcomm call returns owing its peers nothing
    # (docs/design/transport.md, "Owing peers nothing"), so no barrier is
    # needed between the libraries
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    a0 = time.time()
    dist.all_reduce(flat)                                   # gloo, sum over ranks
    stats["allreduce_wall_s"] = time.time() - a0
    off = 0
    for p in model.parameters():
        p.grad.copy_(flat[off:off + p.numel()].view_as(p))
        off += p.numel()
    lsum = loss_sum.clone()
    dist.all_reduce(lsum)
    opt.step()
    cpu.append(time.thread_time() - c0)
    return lsum.item(), cpu, bytes_by_degree


def allgather_floats(comm, values):
    import struct
    raw = comm.allgather(struct.pack("<%dd" % len(values), *values))
    return [list(struct.unpack("<%dd" % len(values), r)) for r in raw]


def gemm_rate(tokens=1024, hidden=256, ffn=704, reps=5):
    """FLOP/s of forward + backward matmuls like the model's (one thread)."""
    x = torch.randn(tokens, hidden, requires_grad=True)
    w = torch.randn(hidden, 2 * ffn, requires_grad=True)
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()
        (x @ w).sum().backward()
        best = min(best, time.thread_time() - t0)
    return 3 * 2 * tokens * hidden * 2 * ffn / max(best, 1e-9)


def attn_rate(s=512, nq=8, nkv=2, D=32, reps=3):
    """FLOP/s of the default per-level kernel, forward + backward of one
    causal sequence, counted as the cost model does (3.5 * 2 * s^2 * n_q * D)."""
    k = nt.SdpaKernel()
    q, kv = torch.randn(s, nq, D), torch.randn(s, nkv, D)
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()
        o, lse = k.fwd(q, kv, kv, [0, s], [0, s], True, D ** -0.5)
        k.bwd(q, kv, kv, o, lse, o, [0, s], [0, s], True, D ** -0.5)
        best = min(best, time.thread_time() - t0)
    return 3.5 * 2 * s * s * nq * D / max(best, 1e-9)


def memory_for(planner_model, cluster, tokens_per_rank):
    """The cluster's mem_bytes so one rank holds about 1.25 x tokens_per_rank
    tokens alone (as nsp_demo sizes it), from the planner's own memory
    model: what the rank holding one such sequence at degree 1 needs."""
    c = dict(cluster, mem_bytes=1e15)
    p = nspcomm.Planner(planner_model, c).plan([int(1.25 * tokens_per_rank)], kind="static",
                                               static_degree=1, static_recompute=0)
    return max(p.predicted["rank_mem_bytes"])


def train_step(args, comm, tree, planner, run, rec, kind, step, lens, tokens, targets, ref,
               failed, step_fn=None):
    """One step of one planner on every rank; appends its figures to rec.
    ref: (loss, grads) of the single-process run (rank 0, step 0), else None.
    kind: a planner, or "planner+variant" (examples/hf: "nested+ckpt");
    step_fn: nsp_step's signature and results (default nsp_step)."""
    model, opt = run
    # rank 0 plans, every rank gets its plan (gloo: no nspcomm timeout while
    # rank 0 solves the disjoint planner's MILP)
    blob = [planner.plan(lens, kind=kind.split("+")[0], time_limit_s=0.5).to_json()
            if comm.rank == 0 else None]
    dist.broadcast_object_list(blob, 0)
    plan = nspcomm.Plan.from_json(blob[0])
    comm.barrier()
    w0 = time.time()
    st = {}
    loss, cpu, nbytes = (step_fn or nsp_step)(model, opt, comm, tree, plan, tokens, targets, st)
    wall = time.time() - w0
    if ref is not None:
        # the optimizer already stepped: compare the all-reduced grads it used
        worst = max((p.grad - ref[1][n]).abs().max().item() /
                    max(ref[1][n].abs().max().item(), 1e-30)
                    for n, p in model.named_parameters())
        rec["step0"] = {"loss": loss, "ref_loss": ref[0],
                        "loss_err": abs(loss - ref[0]) / abs(ref[0]), "worst_grad_err": worst}
        if worst > args.grad_tol or rec["step0"]["loss_err"] > args.grad_tol:
            failed.append("%s step 0: loss %.6g vs %.6g, worst grad error %.3g" % (
                kind, loss, ref[0], worst))
    extra = [st.get(k, 0.0) for k in ("attn_wall_s", "attn_compute_s", "attn_wait_s",
                                      "allreduce_wall_s")]
    extra += [float(nbytes.get(d, 0)) for d in tree.degrees]
    every = allgather_floats(comm, cpu + extra + [wall])
    n = len(cpu)
    crit = sum(max(r[i] for r in every) for i in range(n))
    rec["loss"].append(loss)
    rec["crit_s"].append(crit)
    rec["wall_s"].append(max(r[-1] for r in every))
    rec["pred_s"].append(plan.predicted["step_s"])
    rec["rank_cpu_s"].append([sum(r[:n]) for r in every])
    for j, k in enumerate(("attn_wall_s", "attn_compute_s", "attn_wait_s", "allreduce_wall_s")):
        rec[k].append([r[n + j] for r in every])          # per rank
    rec["rounds"].append(plan.nrounds)
    for j, d in enumerate(tree.degrees):        # bytes sent by all ranks, per level
        rec["bytes"][d] = rec["bytes"].get(d, 0) + sum(r[n + 4 + j] for r in every)
    if comm.rank == 0:
        print("%-8s step %3d loss %.4f crit %.3f s wall %.3f s rounds %d%s" % (
            kind, step, loss, crit, rec["wall_s"][-1], plan.nrounds,
            " [emulated compute%s]" % (", loss not meaningful" if timing_only(args) else "")
            if getattr(args, "compute", {"kind": "real"})["kind"] == "emulated" else ""),
            flush=True)


# ---- the run ----------------------------------------------------------------

# The configurations the docs measure (docs/results.md, "Training"): "default" is the
# CPU-sized run; "long" is long-context training, where the longest
# sequences need more ranks than a node has (memory holds 1.25 x
# tokens_per_rank tokens per rank, so a sequence above 5 x 512 = 2560 tokens
# needs degree 8 on 2 nodes of 4) beside many short ones: a long-tailed
# shipped workload (wikipedia-flexsp, median 347 tokens) divided by 4.
PRESETS = {
    "default": {"workload": "wlbllm-distca.txt", "scale": 32, "tokens_per_rank": 256,
                "max_len": 1024},
    "long": {"workload": "wikipedia-flexsp.txt", "scale": 4, "tokens_per_rank": 512,
             "max_len": 4096},
}


def add_run_args(ap):
    """The options every training example shares (examples/hf too): the
    optimizer's rate, the checks' tolerances, the cluster file, the output
    folder, the seed, fixed kernel rates."""
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--loss-tol", type=float, default=2e-3)
    ap.add_argument("--cluster", default=os.path.join(TOP, "data", "clusters",
                                                      "demo-cpu-shm.json"))
    ap.add_argument("--out", default=os.path.join(TOP, "out"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rates", default=None, metavar="GEMM,ATTN",
                    help="the model's GEMM and attention-kernel FLOP/s per rank for the cost "
                    "model instead of measuring them at start (reproducible predictions)")


def new_record():
    """What train_step and summarize keep per planner, empty."""
    return {"loss": [], "crit_s": [], "wall_s": [], "pred_s": [], "rank_cpu_s": [], "bytes": {},
            "rounds": [], "attn_wall_s": [], "attn_compute_s": [], "attn_wait_s": [],
            "allreduce_wall_s": []}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="default",
                    help="workload, --scale, --tokens-per-rank, --max-len (each option "
                    "given explicitly wins)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--planners", default="static,disjoint,nested,megatron")
    ap.add_argument("--workload", default=None, help="a length file (default: the preset's, "
                    "in data/workloads)")
    ap.add_argument("--scale", type=int, default=None)
    ap.add_argument("--tokens-per-rank", type=int, default=None)
    ap.add_argument("--max-len", type=int, default=None)
    ap.add_argument("--layers", type=int, default=4)
    add_run_args(ap)
    ap.add_argument("--predict-only", action="store_true",
                    help="one process, no training: the cost model's step time per planner "
                    "on the run's batches (--ranks, --ranks-per-node)")
    ap.add_argument("--ranks", type=int, default=8, help="with --predict-only")
    ap.add_argument("--ranks-per-node", type=int, default=4, help="with --predict-only")
    ap.add_argument("--device", default=None, metavar="emu:FILE",
                    help="emulated compute: the attention kernels take the time FILE's target "
                    "GPU would (docs/design/emulated-device.md), the exchanges move over UCX; "
                    "timing mode does no math (no checks), math mode checks as usual; also "
                    "taken from NSPCOMM_DEVICE")
    ap.add_argument("--timed-linear", action="store_true",
                    help="with emulated compute in timing mode: the linear layers take the "
                    "target's GEMM time too (no math; the thread sleeps it) instead of real CPU "
                    "work")
    args = ap.parse_args(argv)
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    shipped = os.path.join(TOP, "data", "workloads", args.workload)
    if not os.path.exists(args.workload) and os.path.exists(shipped):
        args.workload = shipped
    return args


def measured_rates(args):
    """[gemm_flops, attn_flops] for the cost model: --rates, else measured
    now on this thread (gemm_rate, attn_rate). With emulated compute the
    attention rate is the emulated kernels' (emulated_compute)."""
    if args.rates:
        rates = [float(x) for x in args.rates.split(",")]
    else:
        timed = args.compute.get("linear") == "timed"
        rates = [0.0 if timed else gemm_rate(),
                 attn_rate() if args.compute["kind"] == "real" else 0.0]
    if args.compute["kind"] == "emulated":
        rates[1] = args.compute["attn_flops"]
    if args.compute.get("linear") == "timed":
        rates[0] = args.compute["gemm_flops"]
    return rates


def emulated_compute(device):
    """What the run's attention computes on: {"kind": "real"} (device None),
    or for "emu:FILE" the emulated device FILE describes (src/streams/
    emu_config.h: target, here, link, math): {"kind": "emulated", "file",
    "target", "here", "link", "math", "scale" (dimensionless: B_target /
    B_here of the link, as nsp_emu_timing_init), "attn_flops" (FLOP/s per
    rank the emulated kernels run at: the target's R_attn / scale),
    "gemm_flops" (the target's R_gemm / scale: --timed-linear's rate),
    "linear" ("real"; use_device makes it "timed" with --timed-linear)}.
    The library reads FILE again when the world's first exchange makes the
    device, and refuses what this does not check."""
    if not device:
        return {"kind": "real"}
    if not device.startswith("emu:") or len(device) == 4:
        raise SystemExit("train_nsp: --device %s: use emu:FILE (the emulated device)" % device)
    path = os.path.abspath(device[4:])
    with open(path) as f:
        cfg = json.load(f)
    if "target" not in cfg or "here" not in cfg:
        raise SystemExit("train_nsp: %s: the emulated device's file needs target and here" % path)
    link = cfg.get("link", "inter")
    if link not in ("inter", "intra"):
        raise SystemExit("train_nsp: %s: link %r is not inter or intra" % (path, link))
    from nspcomm.planner import _load_spec
    rel = lambda x: x if os.path.isabs(x) else os.path.join(os.path.dirname(path), x)  # noqa
    t = cfg["target"]
    is_file = "/" in t or t.endswith(".json")
    target = _load_spec(rel(t) if is_file else t, "cluster", None if is_file else 1024)
    here = _load_spec(rel(cfg["here"]), "cluster")
    bw = "bw_" + link
    scale = getattr(target, bw) / getattr(here, bw)     # B_target / B_here, dimensionless
    return {"kind": "emulated", "file": path, "target": t, "here": rel(cfg["here"]),
            "link": link, "math": bool(cfg.get("math", False)), "scale": scale,
            "attn_flops": target.attn_flops / scale, "gemm_flops": target.gemm_flops / scale,
            "linear": "real"}


def compute_label(compute):
    """'' for real compute, else what every output of the run says."""
    if compute["kind"] == "real":
        return ""
    return "EMULATED COMPUTE (%s x %.0f, link %s, %s%s)" % (
        compute["target"], compute["scale"], compute["link"],
        "math mode" if compute["math"] else "timing only",
        ", linear layers timed" if compute.get("linear") == "timed" else "")


def use_device(args):
    """--device, or NSPCOMM_DEVICE already set (so a run that used the
    emulated device always says so): args.compute, and the environment the
    nspcomm world reads (NSPCOMM_DEVICE; UCX's progress thread on unless
    set, as nsp_demo --device: the rank's thread waits while the emulated
    kernels run on the device's stream threads)."""
    dev = args.device or os.environ.get("NSPCOMM_DEVICE") or None
    args.compute = emulated_compute(dev)
    if getattr(args, "timed_linear", False):
        if args.compute["kind"] != "emulated" or args.compute["math"]:
            raise SystemExit("train_nsp: --timed-linear needs emulated compute in timing mode "
                             "(--device emu:FILE, FILE without \"math\": true): its linear "
                             "layers do no math")
        args.compute["linear"] = "timed"
    if args.compute["kind"] == "emulated":
        os.environ["NSPCOMM_DEVICE"] = "emu:" + args.compute["file"]
        os.environ.setdefault("NSPCOMM_PROGRESS_THREAD", "on")


def timing_only(args):
    """Emulated compute without math: the loss means nothing, nothing to check."""
    c = getattr(args, "compute", {"kind": "real"})
    return c["kind"] == "emulated" and not c["math"]


def make_planner(args, model, world, local, rates):
    """The planner of a run of `model`: --cluster with world/local ranks, the
    measured (gemm_flops, attn_flops) rates, memory for 1.25 x
    tokens_per_rank tokens alone. Returns (planner, cluster dict)."""
    with open(args.cluster) as f:
        cluster = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    cluster.update(ranks=world, ranks_per_node=local if world % local == 0 else world)
    cluster["gemm_flops"], cluster["attn_flops"] = rates
    spec = model_spec(model, args)
    cluster["mem_bytes"] = memory_for(spec, cluster, args.tokens_per_rank)
    return nspcomm.Planner(spec, cluster), cluster


def batch_lengths(args, world, write=True):
    """Every step's global batch (lengths) from the scaled workload; only
    the caller with write=True writes the scaled file (rank 0)."""
    wl = os.path.join(args.out, "workload-scaled-%s-%d.txt" % (
        os.path.splitext(os.path.basename(args.workload))[0], args.scale))
    if write:
        scaled_workload(args.workload, args.scale, wl)
    if dist.is_initialized():
        dist.barrier()
    budget = args.tokens_per_rank * world
    return [nspcomm.sample_batch(wl, args.seed, s, budget, args.max_len)
            for s in range(args.steps)]


def predict_only(args):
    """The cost model alone on the run's batches: per planner, the mean
    predicted step over the warm steps (as the training table), rounds, the
    largest degree, how many batches put a group across nodes; nested
    against the others. Writes predict.json to --out."""
    planner, cluster = make_planner(args, Decoder(layers=args.layers), args.ranks,
                                    args.ranks_per_node, measured_rates(args))
    lens_of = batch_lengths(args, args.ranks)
    kinds = args.planners.split(",")
    rpn = cluster["ranks_per_node"]
    res = {k: {"pred_s": [], "rounds": [], "max_degree": 0, "cross_node_batches": 0}
           for k in kinds}
    for lens in lens_of:
        for k in kinds:
            p = planner.plan(lens, kind=k, time_limit_s=0.5)
            sizes = [g.size for r in p.rounds for g in r if g.seqs]
            r = res[k]
            r["pred_s"].append(p.predicted["step_s"])
            r["rounds"].append(p.nrounds)
            r["max_degree"] = max([r["max_degree"]] + sizes)
            r["cross_node_batches"] += any(d > rpn for d in sizes)
    warm = slice(1, None) if args.steps > 1 else slice(0, None)
    mean = lambda xs: sum(xs) / max(1, len(xs))  # noqa: E731
    long_seq = int(1.25 * args.tokens_per_rank * rpn)   # memory_for: > rpn ranks
    print("# predict-only: %s, scale %d, %d tokens/rank, max-len %d, %d ranks (%d per node), "
          "gemm %.3g attn %.3g FLOP/s, %d steps; a sequence > %d tokens (more than a node "
          "holds without recomputation) in %d of %d batches, %.0f%% of tokens; %.1f sequences "
          "per batch" % (
              os.path.basename(args.workload), args.scale, args.tokens_per_rank, args.max_len,
              args.ranks, rpn, cluster["gemm_flops"], cluster["attn_flops"], args.steps,
              long_seq, sum(any(n > long_seq for n in ls) for ls in lens_of), len(lens_of),
              100 * mean([sum(n for n in ls if n > long_seq) / sum(ls) for ls in lens_of]),
              mean([len(ls) for ls in lens_of])))
    if args.compute["kind"] == "emulated":
        print("# compute: %s (attention priced at %.3g FLOP/s per rank)" % (
            compute_label(args.compute), args.compute["attn_flops"]))
    print("# planner   predicted_s  rounds  max_degree  batches_across_nodes")
    for k in kinds:
        r = res[k]
        r["mean_pred_s"] = mean(r["pred_s"][warm])
        print("  %-9s %11.4f  %6.2f  %10d  %d/%d" % (k, r["mean_pred_s"], mean(r["rounds"]),
                                                   r["max_degree"], r["cross_node_batches"],
                                                   args.steps))
    if "nested" in kinds:
        for k in kinds:
            if k != "nested":
                print("# nested vs %s: %.3fx predicted" % (
                    k, res[k]["mean_pred_s"] / res["nested"]["mean_pred_s"]))
    with open(os.path.join(args.out, "predict.json"), "w") as f:
        json.dump({"args": vars(args), "planners": res, "compute": args.compute}, f, indent=1)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    use_device(args)
    if args.predict_only:
        predict_only(args)
        return

    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        # mpirun -np 8 -x MASTER_ADDR -x MASTER_PORT: torch's env:// from Open MPI's
        os.environ.update(RANK=os.environ["OMPI_COMM_WORLD_RANK"],
                          WORLD_SIZE=os.environ["OMPI_COMM_WORLD_SIZE"],
                          LOCAL_RANK=os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo")              # env:// (torchrun's variables)
    rank, world = dist.get_rank(), dist.get_world_size()
    # nspcomm bootstraps through torch's own store (the OOB callbacks, as torch-ucc does)
    comm = nspcomm.init(store=dist.distributed_c10d._get_default_store())
    tree = comm.tree()
    torch.manual_seed(args.seed)
    init = Decoder(layers=args.layers)
    # ranks per node from torchrun (LOCAL_WORLD_SIZE); one node without it
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    # the GEMM rate of this machine for this model's shapes (one thread per
    # rank), measured by rank 0 and shared: the file's rates are nsp_demo's
    # attention-only calibration
    rate = torch.tensor(measured_rates(args) if rank == 0 else [0.0, 0.0],
                        dtype=torch.float64)
    dist.broadcast(rate, 0)
    planner, cluster = make_planner(args, init, world, local, rate.tolist())
    lens_of = batch_lengths(args, world, write=rank == 0)

    failed = []
    report = {"args": vars(args), "ranks": world, "ranks_per_node": cluster["ranks_per_node"],
              "tree_degrees": tree.degrees, "planners": {}, "compute": args.compute}
    if rank == 0 and args.compute["kind"] == "emulated":
        print("# compute: %s: the attention kernels%s take %s's time x %.0f (emulated rate "
              "%.3g FLOP/s per rank)%s" % (
                  compute_label(args.compute),
                  " and the linear layers (%.3g FLOP/s)" % args.compute["gemm_flops"]
                  if args.compute.get("linear") == "timed" else "",
                  args.compute["target"], args.compute["scale"], args.compute["attn_flops"],
                  "; timing only: no math, the loss is not meaningful, no check" if
                  timing_only(args) else ""), flush=True)
    kinds = args.planners.split(",")
    runs = {}
    for kind in kinds:
        model = Decoder(layers=args.layers)
        model.load_state_dict(init.state_dict())
        if args.compute.get("linear") == "timed":
            time_linears(model, args.compute["gemm_flops"])
        runs[kind] = (model, torch.optim.AdamW(model.parameters(), lr=args.lr))
        report["planners"][kind] = new_record()
    # planners alternate step by step (each trains its own copy of the model),
    # so a change of the machine's load falls on all of them alike; the order
    # rotates each step, so no planner always runs first
    for step in range(args.steps):
        lens = lens_of[step]
        tokens, targets = batch_tokens(lens, step)
        if step == 0 and rank == 0 and not timing_only(args):   # the single-process run
            ref = Decoder(layers=args.layers)
            ref.load_state_dict(init.state_dict())
            ref_loss, ref_grads = reference_step(ref, lens, tokens, targets)
        for kind in kinds[step % len(kinds):] + kinds[:step % len(kinds)]:
            train_step(args, comm, tree, planner, runs[kind], report["planners"][kind], kind,
                       step, lens, tokens, targets,
                       (ref_loss, ref_grads) if step == 0 and rank == 0 and
                       not timing_only(args) else None, failed)
    finish(report, args, failed, comm, tree)


def finish(report, args, failed, comm, tree, name="train_nsp"):
    """Rank 0 summarizes; every rank exits 1 if any check failed anywhere."""
    if comm.rank == 0:
        summarize(report, args, failed, name)
    ok = torch.tensor([0 if failed else 1])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    tree.destroy()
    comm.destroy()
    dist.destroy_process_group()
    sys.exit(0 if ok.item() == 1 else 1)


def summarize(report, args, failed, name="train_nsp"):
    """The tables, the checks across planners, and name.json / name.svg in --out."""
    kinds = list(report["planners"])
    base = report["planners"][kinds[0]]["loss"]
    nocheck = timing_only(args)      # the loss is not meaningful: nothing to compare
    label = compute_label(report.get("compute", {"kind": "real"}))
    tag = ", " + label if label else ""
    for k in kinds[1:] if not nocheck else []:
        cur = report["planners"][k]["loss"]
        diff = max(abs(a - b) / abs(b) for a, b in zip(cur, base))
        report["planners"][k]["loss_vs_%s" % kinds[0]] = diff
        if diff > args.loss_tol:
            failed.append("%s loss curve differs from %s by %.3g" % (k, kinds[0], diff))
    warm = slice(1, None) if args.steps > 1 else slice(0, None)
    tokens = args.tokens_per_rank * report["ranks"]
    if label:
        print("\n# compute: %s" % label)
    print("\n# planner   rounds  crit_s  wall_s  tokens/s(crit)  predicted_s  loss[0] "
          "loss[-1]  step0 grad err  MiB sent per level (all ranks, per step)%s" % tag)
    mean = lambda xs: sum(xs) / max(1, len(xs))  # noqa: E731
    for k in kinds:
        r = report["planners"][k]
        crit, wall = mean(r["crit_s"][warm]), mean(r["wall_s"][warm])
        pred = mean(r["pred_s"][warm])
        # per step, the mean over ranks of the attention op's wall, kernel and wait time
        per = {f: mean([mean(x) for x in r[f][warm]]) for f in
               ("attn_wall_s", "attn_compute_s", "attn_wait_s", "allreduce_wall_s")}
        r["summary"] = dict(per, crit_s=crit, wall_s=wall, pred_s=pred,
                            tokens_per_s_crit=tokens / crit,
                            exchange_share_of_wall=(per["attn_wall_s"] - per["attn_compute_s"]) /
                            max(wall, 1e-9))
        mib = " ".join("d%d:%.1f" % (d, b / 2 ** 20 / args.steps)
                       for d, b in sorted(r["bytes"].items(), key=lambda x: int(x[0]))
                       if int(d) > 1)
        print("  %-9s %6.2f  %6.3f  %6.3f  %14.0f  %11.4f  %.4f  %.4f  %14.2e  %s" % (
            k, mean(r["rounds"]), crit, wall, tokens / crit, pred,
            r["loss"][0], r["loss"][-1],
            r["step0"]["worst_grad_err"] if "step0" in r else float("nan"), mib))
    print("\n# where a step's wall time goes (per rank, mean over ranks and steps): the "
          "attention op (its kernels; exchange and waiting = the rest), the gloo all-reduce")
    print("# planner   wall_s  attn_op_s  attn_kernel_s  attn_exchange+wait_s  allreduce_s  "
          "exchange share of wall%s" % tag)
    for k in kinds:
        m = report["planners"][k]["summary"]
        print("  %-9s %6.3f  %9.3f  %13.3f  %20.3f  %11.3f  %5.1f%%" % (
            k, m["wall_s"], m["attn_wall_s"], m["attn_compute_s"],
            m["attn_wall_s"] - m["attn_compute_s"], m["allreduce_wall_s"],
            100 * m["exchange_share_of_wall"]))
    if "nested" in kinds:
        n = report["planners"]["nested"]["summary"]
        for k in kinds:
            if k != "nested":
                o = report["planners"][k]["summary"]
                print("# nested vs %s: %.3fx crit, %.3fx wall measured; %.3fx predicted%s" % (
                    k, o["crit_s"] / n["crit_s"], o["wall_s"] / n["wall_s"],
                    o["pred_s"] / n["pred_s"], tag))
    for k in kinds[1:] if not nocheck else []:
        print("# loss curve of %s vs %s: max relative difference %.2e (tolerance %.0e)" % (
            k, kinds[0], report["planners"][k]["loss_vs_%s" % kinds[0]], args.loss_tol))
    if nocheck and not failed:
        print("# check: not run: emulated compute in timing mode (the kernels do no math, the "
              "loss is not meaningful; check correctness with math mode or the CPU run)")
    else:
        print("# check: %s" % ("FAILED: " + "; ".join(failed) if failed else
                               "step-0 loss and every gradient match the single-process run "
                               "(tolerance %.0e), loss curves coincide%s" % (args.grad_tol, tag)))
    report["failed"] = failed
    if nocheck:   # the kernels did no math: a NaN loss is noise, written as null (strict JSON)
        for r in report["planners"].values():
            r["loss"] = [x if x == x and abs(x) != float("inf") else None for x in r["loss"]]
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(args.out, name + ".svg"), "w") as f:
        f.write(svg(report))
    print("# wrote %s/%s.json and %s.svg" % (args.out, name, name))


def svg(report):
    """Loss curves (left) and per-rank CPU time per step (right), by planner."""
    colors = {"static": "#d62728", "disjoint": "#1f77b4", "nested": "#2ca02c",
              "megatron": "#9467bd"}
    W, H, pad = 900, 360, 50
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>']
    kinds = list(report["planners"])
    # None: a timing-only emulated run's NaN (no curve to draw)
    losses = [x for k in kinds for x in report["planners"][k]["loss"] if x is not None]
    lo, hi = (min(losses), max(losses)) if losses else (0.0, 1.0)
    n = max(len(report["planners"][k]["loss"]) for k in kinds)
    pw = W / 2 - 1.5 * pad
    label = compute_label(report.get("compute", {"kind": "real"}))
    if label:
        out.append('<text x="%d" y="%d" fill="#d62728">%s</text>' % (pad, H - 28, label))
    out.append('<text x="%d" y="20">loss per step (curves should coincide)</text>' % pad)
    for k in kinds:
        ys = report["planners"][k]["loss"]
        pts = " ".join("%.1f,%.1f" % (pad + pw * i / max(1, n - 1),
                                      H - pad - (H - 2 * pad) * (y - lo) / max(hi - lo, 1e-9))
                       for i, y in enumerate(ys) if y is not None)
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            colors.get(k, "black"), pts))
    out.append('<text x="%d" y="%d">%.3f</text><text x="%d" y="%d">%.3f</text>' % (
        5, H - pad, lo, 5, pad, hi))
    x0 = W / 2 + pad / 2
    out.append('<text x="%d" y="20">per-rank CPU s per step (mean), by planner</text>' % x0)
    ranks = report["ranks"]
    means = {k: [sum(s[r] for s in report["planners"][k]["rank_cpu_s"]) /
                 len(report["planners"][k]["rank_cpu_s"]) for r in range(ranks)] for k in kinds}
    top = max(max(v) for v in means.values()) or 1
    bw = pw / (ranks * (len(kinds) + 1))
    for r in range(ranks):
        for j, k in enumerate(kinds):
            h = (H - 2 * pad) * means[k][r] / top
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' % (
                x0 + (r * (len(kinds) + 1) + j) * bw, H - pad - h, bw, h,
                colors.get(k, "black")))
        out.append('<text x="%.1f" y="%d">%d</text>' % (
            x0 + r * (len(kinds) + 1) * bw, H - pad + 15, r))
    for j, k in enumerate(kinds):
        out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (
            pad + 80 * j, H - 10, colors.get(k, "black"), k))
    out.append("</svg>")
    return "\n".join(out)


if __name__ == "__main__":
    main()

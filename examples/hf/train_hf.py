#!/usr/bin/env python3
"""A Hugging Face transformers model trained with nested sequence parallelism on nspcomm (CPU).

    torchrun --nproc-per-node 4 examples/hf/train_hf.py --steps 10
    torchrun --nproc-per-node 2 examples/hf/train_hf.py --steps 2 \
        --planners static,nested,nested+ckpt --self-test          # make check's short form

The model is transformers' own Qwen3-MoE (Qwen3MoeForCausalLM) from a small
Qwen3MoeConfig with random weights (nothing is downloaded; HF_HUB_OFFLINE=1):
its attention layers run nspcomm's nested attention, registered with
transformers' AttentionInterface as "nspcomm" (nspcomm.hf). Every step, for
each planner, on every rank: rank 0 plans the batch and broadcasts the
plan; per round, the rank's rows of the packed batch (input_ids and
position_ids from the layout) go through the model with the round's
NestedAttention passed as `nsp_attention`; the gradients are all-reduced
(gloo) and AdamW steps. A planner name "P+ckpt" trains with planner P and
every decoder layer under activation checkpointing (non-reentrant: the
nested attention is recomputed in the backward, on every rank).

Checks (exit 1 if one fails): at step 0 the loss and every parameter's
gradient equal a single-process run of the same model on the whole packed
batch with transformers' own SDPA attention (its packed-sequence mask from
position_ids; float32; --grad-tol relative to each gradient's largest
entry); the planners' loss curves coincide (--loss-tol). --self-test then
replays step 0 with one rank's attention output off by 1% and fails unless
that check catches it, and with a plan that leaves every rank but 0 without
tokens (they pass a padding row, nspcomm.hf.inputs), which must pass it.
Output: the tables of examples/torch/train_nsp.py (rounds, critical-path
CPU and wall time per step, predicted step time, bytes per level, where a
step's time goes) and train_hf.json / .svg in --out.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "python"))
sys.path.insert(0, os.path.join(TOP, "examples", "torch"))
import nspcomm  # noqa: E402
import nspcomm.hf  # noqa: E402
import train_nsp as tn  # noqa: E402  the toy example's data, sizing, timing and tables

from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: E402


def hf_config(args, impl):
    """The small Qwen3-MoE of this example, attention implementation `impl`."""
    return Qwen3MoeConfig(
        vocab_size=tn.VOCAB, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
        moe_intermediate_size=args.expert_ffn, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim, num_experts=args.experts, num_experts_per_tok=args.topk,
        decoder_sparse_step=1, max_position_embeddings=max(4096, args.max_len),
        output_router_logits=False, tie_word_embeddings=False, attn_implementation=impl)


def build(args, init, impl, ckpt=False):
    """A copy of the model `init` (its own config) with attention `impl`."""
    m = Qwen3MoeForCausalLM(hf_config(args, impl))
    m.load_state_dict(init.state_dict())
    m.train()
    if ckpt:
        kw = {"use_reentrant": False}
        if hasattr(m, "activation_checkpointing_enable"):   # its name from transformers 5.x on
            m.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        else:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
    return m


def reference_step(model, lens, tokens, targets):
    """Loss and gradients of the whole packed batch in one process
    (transformers' SDPA: position_ids restart per sequence, no cache, so
    transformers masks each sequence off from the others)."""
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    logits = model(input_ids=tokens[None], position_ids=pos, use_cache=False).logits[0]
    loss = F.cross_entropy(logits, targets, ignore_index=-100, reduction="sum") / \
        (targets != -100).sum()
    model.zero_grad()
    loss.backward()
    return loss.item(), {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                         for n, p in model.named_parameters()}


class _Perturbed:
    """--self-test: this rank's attention outputs scaled by `factor`."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, attn):
        fwd = attn.forward

        def scaled(q, k, v, keep=False):
            o, lse, saved = fwd(q, k, v, keep)
            return o * self.factor, lse, saved
        attn.forward = scaled


def hf_rounds(model, comm, tree, plan, tokens, targets, stats, perturb=None):
    """Forward and backward of every round of `plan` on this rank (the
    gradients accumulate); (loss of this rank, per-round thread CPU seconds,
    bytes sent by degree)."""
    ntgt = (targets != -100).sum()
    loss_sum, cpu, nbytes = torch.zeros(()), [], {}
    for rnd in range(plan.nrounds):
        c0 = time.thread_time()
        lay = nspcomm.Layout(plan, rnd, comm.rank)
        attn = nspcomm.hf.attention(model.config, tree, lay)
        tn.tally_attention(attn, stats, nbytes)
        if perturb:
            perturb(attn)
        ids, pos = nspcomm.hf.inputs(lay, tokens)
        logits = model(input_ids=ids, position_ids=pos, use_cache=False,
                       nsp_attention=attn).logits[0]
        T = lay.local_tokens
        loss = F.cross_entropy(logits[:T], targets.index_select(0, lay.token_index()),
                               ignore_index=-100, reduction="sum") / ntgt
        # + 0 x the padding row of a rank without tokens: its backward still
        # reaches every layer's attention (a collective call)
        (loss + 0.0 * logits.sum()).backward()
        attn.destroy()
        loss_sum += loss.detach()
        cpu.append(time.thread_time() - c0)
    return loss_sum, cpu, nbytes


def allreduce_grads(model, stats):
    """Sum every gradient over the ranks (gloo; a parameter no token of this
    rank reached, e.g. an unrouted expert, counts as zero)."""
    params = list(model.parameters())
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    a0 = time.time()
    dist.all_reduce(flat)
    stats["allreduce_wall_s"] = time.time() - a0
    off = 0
    for p in params:
        p.grad.copy_(flat[off:off + p.numel()].view_as(p))
        off += p.numel()


def hf_step(model, opt, comm, tree, plan, tokens, targets, stats):
    """train_nsp.nsp_step for the transformers model: every round, the
    all-reduce, AdamW. (global loss, per-round CPU seconds, bytes by degree)."""
    model.zero_grad()
    loss_sum, cpu, nbytes = hf_rounds(model, comm, tree, plan, tokens, targets, stats)
    c0 = time.thread_time()
    allreduce_grads(model, stats)
    dist.all_reduce(loss_sum)
    opt.step()
    cpu.append(time.thread_time() - c0)
    return loss_sum.item(), cpu, nbytes


def step0_error(model, ref):
    """(worst gradient error relative to each gradient's largest entry, the
    parameter) against the reference gradients."""
    worst, name = 0.0, None
    for n, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        e = (g - ref[n]).abs().max().item() / max(ref[n].abs().max().item(), 1e-30)
        if e > worst:
            worst, name = e, n
    return worst, name


def _replay(args, comm, tree, init, plan_json, tokens, targets, ref, perturb=None):
    """Step 0 again on a fresh copy of the model with the plan `plan_json`
    (rank 0's, broadcast): (worst gradient error, its parameter, loss) on
    rank 0 against the reference, None elsewhere."""
    model = build(args, init, nspcomm.hf.NAME)
    blob = [plan_json if comm.rank == 0 else None]
    dist.broadcast_object_list(blob, 0)
    plan = nspcomm.Plan.from_json(blob[0])
    loss, _, _ = hf_rounds(model, comm, tree, plan, tokens, targets, {}, perturb)
    allreduce_grads(model, {})
    dist.all_reduce(loss)
    if comm.rank != 0:
        return None
    worst, name = step0_error(model, ref[1])
    return worst, name, loss.item()


def _all_on_rank0(plan):
    """The plan's JSON with every sequence on rank 0 alone (the other ranks
    hold nothing: they pass padding rows and make every collective call)."""
    import json
    d = json.loads(plan.to_json())
    d["rounds"] = [{"groups": [{"rank0": 0, "size": 1, "seqs": list(range(len(d["seq_lens"]))),
                                "recompute": False, "pipelined": True}]}]
    return json.dumps(d).encode()


def self_test(args, comm, tree, planner, init, lens, tokens, targets, ref):
    """Step 0 replayed twice: with the last rank's attention outputs 1% off
    (nested's plan), which the step-0 check must catch; and with a plan that
    leaves every rank but 0 without tokens, which must pass it. Returns the
    failures (rank 0; [] elsewhere)."""
    plan = planner.plan(lens, kind="nested", time_limit_s=0.5) if comm.rank == 0 else None
    off = _replay(args, comm, tree, init, plan.to_json() if plan else None, tokens, targets,
                  ref, _Perturbed(1.01) if comm.rank == comm.size - 1 else None)
    empty = _replay(args, comm, tree, init, _all_on_rank0(plan) if plan else None, tokens,
                    targets, ref)
    if comm.rank != 0:
        return []
    failed = []
    worst, name, loss = off
    caught = worst > args.grad_tol or abs(loss - ref[0]) / abs(ref[0]) > args.grad_tol
    print("# self-test: one rank's attention 1%% off gives a step-0 gradient error of %.2e "
          "(%s), loss %.6g vs %.6g: %s" % (worst, name, loss, ref[0],
                                           "caught" if caught else "NOT caught"))
    if not caught:
        failed.append("the step-0 check did not catch a 1% error in one rank's attention")
    worst, name, loss = empty
    ok = worst <= args.grad_tol and abs(loss - ref[0]) / abs(ref[0]) <= args.grad_tol
    print("# self-test: every sequence on rank 0, the other ranks without tokens: step-0 "
          "gradient error %.2e (%s), loss %.6g vs %.6g: %s" % (worst, name, loss, ref[0],
                                                             "pass" if ok else "FAIL"))
    if not ok:
        failed.append("a plan with ranks holding no tokens: step-0 gradient error %.3g" % worst)
    return failed


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--planners", default="static,disjoint,nested,megatron",
                    help="planners to train with, each its own copy of the model; P+ckpt: "
                    "planner P with every decoder layer checkpointed")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--expert-ffn", type=int, default=64)
    ap.add_argument("--workload", default="wikipedia-flexsp.txt",
                    help="a length file (default: the shipped Wikipedia lengths, long-tailed)")
    ap.add_argument("--scale", type=int, default=8, help="lengths divided by this")
    ap.add_argument("--tokens-per-rank", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=2048)
    tn.add_run_args(ap)
    ap.add_argument("--self-test", action="store_true",
                    help="after step 0, check that the step-0 check catches a 1%% error and "
                    "that ranks without tokens work")
    args = ap.parse_args(argv)
    shipped = os.path.join(TOP, "data", "workloads", args.workload)
    if not os.path.exists(args.workload) and os.path.exists(shipped):
        args.workload = shipped
    return args


def make_planner(args, model, world, local):
    """The planner of this run: the model from its config (nspcomm.hf.planner_model),
    --cluster with world/local ranks, rates measured on rank 0 for this
    model's shapes (or --rates), memory for 1.25 x tokens_per_rank alone."""
    import json
    cfg = model.config
    if args.rates:
        rates = [float(x) for x in args.rates.split(",")]
    else:
        rates = [tn.gemm_rate(hidden=cfg.hidden_size, ffn=cfg.num_experts_per_tok *
                              cfg.moe_intermediate_size),
                 tn.attn_rate(nq=cfg.num_attention_heads, nkv=cfg.num_key_value_heads,
                              D=cfg.head_dim)] if dist.get_rank() == 0 else [0.0, 0.0]
    rates = torch.tensor(rates, dtype=torch.float64)
    dist.broadcast(rates, 0)
    with open(args.cluster) as f:
        cluster = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    cluster.update(ranks=world, ranks_per_node=local if world % local == 0 else world)
    cluster["gemm_flops"], cluster["attn_flops"] = rates.tolist()
    spec = nspcomm.hf.planner_model(cfg, sum(p.numel() for p in model.parameters()),
                                    name="qwen3-moe-small")
    cluster["mem_bytes"] = tn.memory_for(spec, cluster, args.tokens_per_rank)
    return nspcomm.Planner(spec, cluster), cluster, spec


def main():
    args = parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    nspcomm.hf.register()
    dist.init_process_group("gloo")              # env:// (torchrun's variables)
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = nspcomm.init(store=dist.distributed_c10d._get_default_store())
    tree = comm.tree()
    torch.manual_seed(args.seed)
    init = Qwen3MoeForCausalLM(hf_config(args, "sdpa"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    planner, cluster, spec = make_planner(args, init, world, local)
    lens_of = tn.batch_lengths(args, world, write=rank == 0)

    failed = []
    report = {"args": vars(args), "ranks": world, "ranks_per_node": cluster["ranks_per_node"],
              "tree_degrees": tree.degrees, "model": spec, "planners": {}}
    kinds = args.planners.split(",")
    runs = {}
    for kind in kinds:
        model = build(args, init, nspcomm.hf.NAME, ckpt=kind.endswith("+ckpt"))
        runs[kind] = (model, torch.optim.AdamW(model.parameters(), lr=args.lr))
        report["planners"][kind] = tn.new_record()
    ref = None
    for step in range(args.steps):
        lens = lens_of[step]
        tokens, targets = tn.batch_tokens(lens, step)
        if step == 0 and rank == 0:
            ref = reference_step(build(args, init, "sdpa"), lens, tokens, targets)
        for kind in kinds[step % len(kinds):] + kinds[:step % len(kinds)]:
            tn.train_step(args, comm, tree, planner, runs[kind], report["planners"][kind], kind,
                          step, lens, tokens, targets, ref if step == 0 and rank == 0 else None,
                          failed, step_fn=hf_step)
        if step == 0 and args.self_test:
            failed += self_test(args, comm, tree, planner, init, lens, tokens, targets, ref)
    tn.finish(report, args, failed, comm, tree, name="train_hf")


if __name__ == "__main__":
    main()

"""Multi-rank cases of the op's contract (run by workers.py): every rank runs
torch.library.opcheck, torch.compile and torch.utils.checkpoint on the same
calls in the same order, as a training job would (the op is collective)."""

import gc

import torch
from torch.utils.checkpoint import checkpoint

import nspcomm
import nspcomm.torch as nt

import refs

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_dynamic")


def _batch(plan, args, seed):
    """q, k, v and a weight w [T, n_q, D] of the whole batch (every rank
    draws the same from one seed, then takes its rows)."""
    g = torch.Generator().manual_seed(seed)
    T, nq, nkv, D = sum(plan.seq_lens), args["nq"], args["nkv"], args["D"]
    return (torch.rand(T, nq, D, generator=g) * 4 - 2, torch.rand(T, nkv, D, generator=g) * 4 - 2,
            torch.rand(T, nkv, D, generator=g) * 2 - 1, torch.randn(T, nq, D, generator=g))


def _inputs(plan, lay, args, dtype, seed, grad=True):
    """This rank's rows of _batch: q, k, v (of `dtype`, requiring grad) and w."""
    idx = lay.token_index()
    q, k, v, w = (t.index_select(0, idx) for t in _batch(plan, args, seed))
    return [t.to(dtype).requires_grad_(grad) for t in (q, k, v)] + [w]


def _attention(comm, tree, args, rnd=0):
    plan = nspcomm.Plan.from_json(open(args["plan"], "rb").read())
    lay = nspcomm.Layout(plan, rnd, comm.rank)
    return nt.NestedAttention(tree, lay, args["nq"], args["nkv"], args["D"]), lay, plan


def case_opcheck(comm, args):
    """opcheck of the forward op (all four utils; inputs that require grad,
    keep=True) and of the backward op (no saved state: key [0]), float32
    and bfloat16; {dtype/op: {util: result}}."""
    tree = comm.tree()
    a, lay, plan = _attention(comm, tree, args)
    out = {}
    for dt in (torch.float32, torch.bfloat16):
        q, k, v, _ = _inputs(plan, lay, args, dt, 1)
        name = str(dt).split(".")[1]
        out[name + "/fwd"] = torch.library.opcheck(nt._fwd_op, (q, k, v, a.id, True),
                                                   test_utils=OPCHECK_UTILS)
        o, lse, _ = nt._fwd_op(q.detach(), k.detach(), v.detach(), a.id, False)
        do = torch.randn_like(o)
        key = torch.zeros(1, dtype=torch.int64)
        out[name + "/bwd"] = torch.library.opcheck(
            nt._bwd_op, (do, q.detach(), k.detach(), v.detach(), o, lse, key, a.id),
            test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    a.destroy()
    tree.destroy()
    out["saved_states_left"] = _saved_left()
    return out


def _saved_left():
    gc.collect()
    return len(nt._saved_states)


def _loss_fn(q, k, v, w, attn):
    """A layer-like function around the op: scaled queries, the op, a
    weighted sum (its gradient reaches q, k and v through the op)."""
    o = nt.nested_attention(q * 1.5, k, v, attn)
    return (o.float() * w).sum()


def _grads(fn, q, k, v, *rest):
    for t in (q, k, v):
        t.grad = None
    loss = fn(q, k, v, *rest)
    loss.backward()
    return loss.detach(), [t.grad.clone() for t in (q, k, v)]


def _max_diff(a, b):
    return max((x.double() - y.double()).abs().max().item() if x.numel() else 0.0
               for x, y in zip(a, b))


def case_compile(comm, args):
    """torch.compile(fullgraph=True) against eager, on two rounds (two
    layouts: different T_local, a second graph at most), float32 and
    bfloat16: loss and gradients, whether the compiled backward used the
    forward's saved state; with aot_eager around a layer-like function, and
    with inductor (the default backend) on the op alone."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    tree = comm.tree()
    out = {}
    compiled = torch.compile(_loss_fn, fullgraph=True, backend="aot_eager")
    for rnd in (0, 1):
        a, lay, plan = _attention(comm, tree, args, rnd)
        for dt in (torch.float32, torch.bfloat16):
            q, k, v, w = _inputs(plan, lay, args, dt, 2 + rnd)
            le, ge = _grads(_loss_fn, q, k, v, w, a)
            lc, gc_ = _grads(compiled, q, k, v, w, a)
            name = "%s/round%d" % (str(dt).split(".")[1], rnd)
            out[name] = {"loss_diff": abs(le.item() - lc.item()), "grad_diff": _max_diff(ge, gc_),
                         "bwd_saved": a.last_bwd_saved, "tokens": lay.local_tokens}
        a.destroy()
    # a graph per dtype, and one more each for the second round's shapes
    # (marked dynamic then); a new attention of the same shapes reuses them
    out["aot_eager_graphs"] = counters["stats"]["unique_graphs"]
    a, lay, plan = _attention(comm, tree, args, 0)
    q, k, v, w = _inputs(plan, lay, args, torch.float32, 2)
    _grads(compiled, q, k, v, w, a)
    a.destroy()
    out["aot_eager_graphs_after_new_attention"] = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    import torch._inductor.config as ic
    ic.compile_threads = 1  # no compile worker pool: nothing here needs C++ codegen

    def op_only(q, k, v, attn):
        return nt.nested_attention(q, k, v, attn)
    a, lay, plan = _attention(comm, tree, args, 0)
    q, k, v, do = _inputs(plan, lay, args, torch.float32, 5)
    oe = op_only(q, k, v, a)
    ge = torch.autograd.grad(oe, (q, k, v), do)
    oc = torch.compile(op_only, fullgraph=True)(q, k, v, a)
    gc_ = torch.autograd.grad(oc, (q, k, v), do)
    out["inductor"] = {"out_diff": _max_diff([oe], [oc]), "grad_diff": _max_diff(ge, gc_),
                       "bwd_saved": a.last_bwd_saved}
    a.destroy()
    tree.destroy()
    out["saved_states_left"] = _saved_left()
    return out


class _Counting:
    """Counts the attention's forward and backward calls."""

    def __init__(self, attn):
        self.fwd = self.bwd = 0
        f, b = attn.forward, attn.backward

        def fwd(*x, **kw):
            self.fwd += 1
            return f(*x, **kw)

        def bwd(*x, **kw):
            self.bwd += 1
            return b(*x, **kw)
        attn.forward, attn.backward = fwd, bwd


def case_checkpoint(comm, args):
    """The op inside torch.utils.checkpoint, reentrant and not, against the
    plain run: loss and gradients (bit for bit: the recomputed forward makes
    the same calls), calls made (the forward twice), saved states left; and
    the gradients against the float64 reference."""
    tree = comm.tree()
    a, lay, plan = _attention(comm, tree, args)
    count = _Counting(a)
    q, k, v, w = _inputs(plan, lay, args, torch.float32, 7)
    lp, gp = _grads(_loss_fn, q, k, v, w, a)
    out = {"plain": {"fwd": count.fwd, "bwd": count.bwd}}
    for reentrant in (True, False):
        count.fwd = count.bwd = 0

        def ck(q, k, v, w, attn, _r=reentrant):
            return checkpoint(_loss_fn, q, k, v, w, attn, use_reentrant=_r)
        lc, gc_ = _grads(ck, q, k, v, w, a)
        out["reentrant" if reentrant else "non_reentrant"] = {
            "loss_diff": abs(lp.item() - lc.item()), "grad_diff": _max_diff(gp, gc_),
            "fwd": count.fwd, "bwd": count.bwd, "bwd_saved": a.last_bwd_saved,
            "saved_states_left": _saved_left()}
    # the gradients of d(sum(o * w)): dout = w; q enters as 1.5 q
    qf, kf, vf, wf = _batch(plan, args, 7)
    seqs = sorted(set(lay.sequence_ids().tolist()))
    ref = refs.reference(plan.seq_lens, seqs, qf * 1.5, kf, vf, wf, args["nq"], args["nkv"])
    ref["dq"] = ref["dq"] * 1.5
    got = {"dq": gc_[0], "dk": gc_[1], "dv": gc_[2]}
    out["vs_reference"] = refs.compare(got, ref, lay.token_index())
    a.destroy()
    tree.destroy()
    return out

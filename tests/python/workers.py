"""One rank of a multi-process test (started by mp.run): workers.py OUT ARGS.

Each case writes its JSON result to OUT; an exception is written as
{"raised": class name, "message": text, "elapsed": s}. The cases of the
op's contract (opcheck, torch.compile, checkpoint) are in cases_op.py, those
of the device path on a CUDA stand-in in cases_device.py, those of mapped
host memory (Comm.empty) in cases_mem.py."""

import json
import os
import sys
import time
import traceback

import torch

import nspcomm
import nspcomm.torch as nt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refs  # noqa: E402


def load_plan(args):
    return nspcomm.Plan.from_json(open(args["plan"], "rb").read())


def attn_run(comm, plan, args, rnd, q, k, v, do, dtype, tree=None, grads=None):
    """Forward + backward of this rank's rows of round rnd; returns per-tensor
    errors (and, with grads a dict, puts dk and dv there)."""
    tree = tree or comm.tree(args.get("degrees"))
    lay = nspcomm.Layout(plan, rnd, comm.rank)
    idx = lay.token_index()
    a = nt.NestedAttention(tree, lay, args["nq"], args["nkv"], args["D"],
                           max_slices=args.get("slices"),
                           dkv_float32=args.get("dkv_float32", False))
    ql, kl, vl = (t.index_select(0, idx).to(dtype).requires_grad_() for t in (q, k, v))
    o, lse = nt.nested_attention(ql, kl, vl, a, return_lse=True)
    o.backward(do.index_select(0, idx).to(dtype))
    got = {"o": o.detach(), "lse": lse, "dq": ql.grad, "dk": kl.grad, "dv": vl.grad}
    seqs = sorted(set(lay.sequence_ids().tolist()))
    ref = refs.reference(plan.seq_lens, seqs, q, k, v, do, args["nq"], args["nkv"],
                         in_dtype=dtype)
    errs = refs.compare(got, ref, idx)
    if grads is not None:
        grads.update(dk=kl.grad.detach().clone(), dv=vl.grad.detach().clone())
    stats = dict(a.last_fwd_stats, bwd_bytes=a.last_bwd_stats["bytes_sent"],
                 bwd_saved=a.last_bwd_saved)
    a.destroy()
    return errs, stats, lay


def attn_inputs(plan, args):
    """The global q, k, v, dout [T, heads, D] of a case (seeded by args)."""
    torch.manual_seed(args.get("seed", 0))
    T = sum(plan.seq_lens)
    nq, nkv, D = args["nq"], args["nkv"], args["D"]
    q, k = torch.rand(T, nq, D) * 4 - 2, torch.rand(T, nkv, D) * 4 - 2
    v, do = torch.rand(T, nkv, D) * 2 - 1, torch.rand(T, nq, D) * 2 - 1
    return q, k, v, do


def case_attn(comm, args):
    plan = load_plan(args)
    q, k, v, do = attn_inputs(plan, args)
    out = {}
    tree = comm.tree(args.get("degrees"))
    for dt in args.get("dtypes", ["float32"]):
        for rnd in range(plan.nrounds):
            errs, stats, lay = attn_run(comm, plan, args, rnd, q, k, v, do, getattr(torch, dt),
                                        tree)
            for key, e in errs.items():
                out["%s/%s" % (dt, key)] = max(out.get("%s/%s" % (dt, key), 0.0), e)
            # bytes this rank sent per round (forward, backward) and whether
            # the backward used the forward's saved state
            out.setdefault("bytes", {}).setdefault(dt, []).append(
                [stats["bytes_sent"], stats["bwd_bytes"]])
            out["bwd_saved"] = out.get("bwd_saved", True) and stats["bwd_saved"]
    out["levels"] = [lv.degree for lv in lay.levels]
    tree.destroy()
    return out


def case_dkv(comm, args):
    """Replicated dK/dV summed on the wire in 16 bits (the default) and in
    float32 (dkv_float32): per dtype and flag the bytes this rank sent per
    round (forward, backward) and the errors against the reference; per
    16-bit dtype whether both flags gave the same dk and dv bits."""
    plan = load_plan(args)
    q, k, v, do = attn_inputs(plan, args)
    tree = comm.tree()
    out = {"bytes": {}, "same_bits": {}}
    for dt in ("float32", "bfloat16", "float16"):
        for flag in ((False,) if dt == "float32" else (False, True)):
            name = dt + ("+dkv_f32" if flag else "")
            for rnd in range(plan.nrounds):
                g = {}
                errs, stats, _ = attn_run(comm, plan, dict(args, dkv_float32=flag), rnd, q, k,
                                          v, do, getattr(torch, dt), tree, grads=g)
                for key, e in errs.items():
                    out["%s/%s" % (dt, key)] = max(out.get("%s/%s" % (dt, key), 0.0), e)
                out["bytes"].setdefault(name, []).append([stats["bytes_sent"],
                                                          stats["bwd_bytes"]])
                if flag:
                    dk0, dv0 = out.pop("_dk%d" % rnd), out.pop("_dv%d" % rnd)
                    same = bool(torch.equal(g["dk"], dk0) and torch.equal(g["dv"], dv0))
                    out["same_bits"][dt] = out["same_bits"].get(dt, True) and same
                elif dt != "float32":
                    out["_dk%d" % rnd], out["_dv%d" % rnd] = g["dk"], g["dv"]
    tree.destroy()
    return out


def case_bad(comm, args):
    """Each bad input raises on every rank; then a good call still works."""
    plan = load_plan(args)
    tree = comm.tree()
    lay = nspcomm.Layout(plan, 0, comm.rank)
    nq, nkv, D = args["nq"], args["nkv"], args["D"]
    a = nt.NestedAttention(tree, lay, nq, nkv, D)
    T = lay.local_tokens
    good = lambda: (torch.randn(T, nq, D), torch.randn(T, nkv, D), torch.randn(T, nkv, D))  # noqa
    bad_rank = args["bad_rank"]
    results = {}
    for kind in ("shape", "dtype", "noncontig", "count", "float64"):
        q, k, v = good()
        if comm.rank == bad_rank:
            if kind == "shape":
                q = torch.randn(T, nq + 1, D)
            elif kind == "dtype":
                k = k.to(torch.bfloat16)
            elif kind == "noncontig":
                v = torch.randn(nkv, T, D).transpose(0, 1)
            elif kind == "count":
                q, k, v = (torch.randn(T + 3, h, D) for h in (nq, nkv, nkv))
            elif kind == "float64":
                q, k, v = q.double(), k.double(), v.double()
        try:
            nt.nested_attention(q, k, v, a)
            results[kind] = "no exception"
        except Exception as e:  # noqa: BLE001
            results[kind] = "%s: %s" % (type(e).__name__, e)
    # still usable: one good forward on every rank
    q, k, v = good()
    o = nt.nested_attention(q, k, v, a)
    results["after"] = bool(torch.isfinite(o).all()) if o.numel() else True
    # a layout of another plan (round 1's layout on this rank, others round 0)
    if plan.nrounds > 1:
        other = nspcomm.Layout(plan, 1 if comm.rank == bad_rank else 0, comm.rank)
        b = nt.NestedAttention(tree, other, nq, nkv, D)
        Tl = other.local_tokens
        try:
            nt.nested_attention(torch.randn(Tl, nq, D), torch.randn(Tl, nkv, D),
                                torch.randn(Tl, nkv, D), b)
            results["other_plan"] = "no exception"
        except Exception as e:  # noqa: BLE001
            results["other_plan"] = "%s: %s" % (type(e).__name__, e)
    tree.destroy()
    return results


def case_kill(comm, args):
    """Rank `victim` exits before the forward; the others must raise."""
    plan = load_plan(args)
    tree = comm.tree()
    lay = nspcomm.Layout(plan, 0, comm.rank)
    a = nt.NestedAttention(tree, lay, args["nq"], args["nkv"], args["D"])
    T = lay.local_tokens
    q, k = torch.randn(T, args["nq"], args["D"]), torch.randn(T, args["nkv"], args["D"])
    nt.nested_attention(q, k, k, a)  # one good call first
    if comm.rank == args["victim"]:
        os._exit(3)
    t0 = time.time()
    try:
        nt.nested_attention(q, k, k, a)
        return {"raised": None, "elapsed": time.time() - t0}
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "message": str(e)[:300],
                "elapsed": time.time() - t0}


def case_store(comm, args):
    """nspcomm.init(store=TCPStore) and an allgather over the new world."""
    import torch.distributed as dist
    rank, n = comm.rank, comm.size
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), n, rank == 0,
                          timeout=__import__("datetime").timedelta(seconds=30))
    comm = nspcomm.init(store=store, rank=rank, world_size=n)  # a second world
    got = comm.allgather(bytes([rank]) * 3)
    comm.barrier()
    out = {"rank": comm.rank, "size": comm.size, "gathered": [list(x) for x in got]}
    comm.destroy()
    return out


def case_determinism(comm, args):
    """Every rank plans the same batch; the plans' layout hashes agree for the
    deterministic planners; a broadcast plan always agrees."""
    pl = nspcomm.Planner(args["model"], args["cluster"], comm.size)
    out = {}
    for kind in ("static", "nested", "disjoint"):
        p = pl.plan(args["lens"], kind=kind, time_limit_s=0.3)
        hashes = comm.allgather(nspcomm.Layout(p, 0, comm.rank).plan_hash.to_bytes(8, "little"))
        b = nspcomm.Plan.from_json(comm.broadcast_bytes(p.to_json() if comm.rank == 0 else b""))
        bh = comm.allgather(nspcomm.Layout(b, 0, comm.rank).plan_hash.to_bytes(8, "little"))
        out[kind] = {"agree": len(set(hashes)) == 1, "broadcast_agree": len(set(bh)) == 1,
                     "deterministic": p.deterministic}
    return out


def find_case(case):
    """case_<case> of this file or of the case modules (cases_op.py,
    cases_device.py, cases_mem.py), imported on first use (torch.compile
    is slow to load)."""
    fn = globals().get("case_" + case)
    if fn is not None:
        return fn
    import importlib
    for mod in ("cases_mem", "cases_op", "cases_device"):
        fn = getattr(importlib.import_module(mod), "case_" + case, None)
        if fn is not None:
            return fn
    raise KeyError("no test case %r" % case)


def run_case(comm, case, args):
    t0 = time.time()
    try:
        return find_case(case)(comm, args)
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "message": str(e)[:2000],
                "trace": traceback.format_exc()[-3000:], "elapsed": time.time() - t0}


def main():
    """workers.py OUT ARGS: ARGS = {"timeout": s, "cases": [[name, case, args], ...]};
    one world (nspcomm.init from the torchrun environment) serves every case,
    in order; OUT gets {name: result} after each case."""
    out, args = sys.argv[1], json.loads(sys.argv[2])
    t0 = time.time()
    results = {}
    try:
        comm = nspcomm.init(timeout_s=args.get("timeout"))
    except Exception as e:  # noqa: BLE001
        comm = None
        results["init"] = {"raised": type(e).__name__, "message": str(e)}
    for name, case, cargs in (args["cases"] if comm else []):
        results[name] = run_case(comm, case, cargs)
        results[name + "/seconds"] = time.time() - t0
        with open(out + ".tmp", "w") as f:
            json.dump(results, f)
        os.replace(out + ".tmp", out)
    if not os.path.exists(out):
        with open(out, "w") as f:
            json.dump(results, f)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (ctypes callbacks, UCX threads)


if __name__ == "__main__":
    main()

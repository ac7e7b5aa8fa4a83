"""Multi-rank cases of the device path (run by workers.py), on the CUDA
stand-in of fakecuda.py over a real UCX world, and what a machine without a
GPU must say."""

import os
import time

import torch

import nspcomm
import nspcomm.torch as nt

import fakecuda
import refs


def _plan(args):
    return nspcomm.Plan.from_json(open(args["plan"], "rb").read())


def _kernel(name):
    """A kernel whose CUDA branch runs, its device calls replaced by the
    fakes: ("sdpa": torch's varlen flash; "flash": flash-attn's), and the
    fake that counts its calls."""
    if name == "sdpa":
        k, fake = nt.SdpaKernel(), fakecuda.FakeVarlen()
        k.varlen_fwd, k.varlen_bwd = fake.fwd, fake.bwd
        return k, fake
    fa = fakecuda.FakeFlashAttn()
    return nt.FlashAttnKernel(module=fa), fa.varlen


def _one(comm, tree, plan, rnd, args, heads, dtype, kname, rec):
    """Forward + backward of round rnd on fake CUDA tensors; errors against
    the float64 reference and what the device plumbing did."""
    nq, nkv, D = heads
    lay = nspcomm.Layout(plan, rnd, comm.rank)
    idx = lay.token_index()
    kernel, fake = _kernel(kname)
    a = nt.NestedAttention(tree, lay, nq, nkv, D, kernel=kernel)
    g = torch.Generator().manual_seed(11 + rnd)
    T = sum(plan.seq_lens)
    q, k = torch.rand(T, nq, D, generator=g) * 4 - 2, torch.rand(T, nkv, D, generator=g) * 4 - 2
    v, do = torch.rand(T, nkv, D, generator=g) * 2 - 1, torch.rand(T, nq, D, generator=g) * 2 - 1
    ql, kl, vl = (fakecuda.on_fake_cuda(t.index_select(0, idx).to(dtype)).requires_grad_()
                  for t in (q, k, v))
    n_set, n_kern = len(rec.set_stream), len(rec.kernel_calls)
    rec.set_current(0xC0DE1000 + rnd)          # the forward's current stream
    o, lse = nt.nested_attention(ql, kl, vl, a, return_lse=True)
    fwd_streams = rec.set_stream[n_set:]
    rec.set_current(0xC0DE2000 + rnd)          # another one for the backward
    o.backward(fakecuda.on_fake_cuda(do.index_select(0, idx).to(dtype)))
    bwd_streams = rec.set_stream[n_set + len(fwd_streams):]
    got = {key: fakecuda.plain(t) for key, t in
           {"o": o.detach(), "lse": lse, "dq": ql.grad, "dk": kl.grad, "dv": vl.grad}.items()}
    seqs = sorted(set(lay.sequence_ids().tolist()))
    ref = refs.reference(plan.seq_lens, seqs, q, k, v, do, nq, nkv, in_dtype=dtype)
    out = {"errors": refs.compare(got, ref, idx), "fwd_streams": fwd_streams,
           "bwd_streams": bwd_streams, "kernel_calls": len(rec.kernel_calls) - n_kern,
           "device_calls": fake.calls, "o_device": str(o.device),
           "bwd_saved": a.last_bwd_saved, "lse_dtype": str(lse.dtype)}
    a.destroy()
    return out


def case_fake_cuda(comm, args):
    """The op on fake CUDA tensors of an 'nccl' world: every dtype, both
    device kernels, two head shapes (GQA 8/2; 4/1, replicated above
    degree 1), every round."""
    rec = fakecuda.install(comm, 0)
    plan = _plan(args)
    tree = comm.tree()
    out = {}
    try:
        for heads in ((8, 2, 16), (4, 1, 16)):
            for dt in (torch.float32, torch.bfloat16, torch.float16):
                for kname in ("sdpa", "flash"):
                    for rnd in range(plan.nrounds):
                        name = "%d-%d/%s/%s/round%d" % (heads[0], heads[1],
                                                        str(dt).split(".")[1], kname, rnd)
                        out[name] = _one(comm, tree, plan, rnd, args, heads, dt, kname, rec)
    finally:
        tree.destroy()
        fakecuda.uninstall(comm)
    return out


def _try(fn):
    try:
        fn()
        return "no exception"
    except Exception as e:  # noqa: BLE001
        return "%s: %s" % (type(e).__name__, e)


def case_fake_cuda_bad(comm, args):
    """Device checks, each bad on one rank only and raised on every rank:
    a (fake) CUDA tensor on the 'ucx' world; then, on the 'nccl' world of
    cuda:0, a tensor on cuda:1 and a CPU tensor; then a good call."""
    plan = _plan(args)
    tree = comm.tree()
    lay = nspcomm.Layout(plan, 0, comm.rank)
    nq, nkv, D = args["nq"], args["nkv"], args["D"]
    T = lay.local_tokens
    bad = comm.rank == args["bad_rank"]

    def call(attn, wrap_q, wrap_rest):
        q = wrap_q(torch.randn(T, nq, D))
        k, v = (wrap_rest(torch.randn(T, nkv, D)) for _ in range(2))
        return nt.nested_attention(q, k, v, attn)
    cuda0 = fakecuda.on_fake_cuda
    out = {}
    a = nt.NestedAttention(tree, lay, nq, nkv, D)
    out["cuda_on_ucx"] = _try(lambda: call(a, cuda0 if bad else (lambda t: t), lambda t: t))
    a.destroy()
    fakecuda.install(comm, 0)
    a = nt.NestedAttention(tree, lay, nq, nkv, D)
    out["other_device"] = _try(lambda: call(
        a, (lambda t: fakecuda.on_fake_cuda(t, 1)) if bad else cuda0, cuda0))
    cpu = lambda t: t.as_subclass(fakecuda.CpuTensor)  # noqa: E731
    try:
        out["cpu_on_nccl"] = _try(lambda: call(a, cpu if bad else cuda0, cuda0))
        out["after"] = _try(lambda: call(a, cuda0, cuda0))
    finally:
        a.destroy()
        tree.destroy()
        fakecuda.uninstall(comm)
    return out


def case_nccl_without_gpu(comm, args):
    """nspcomm.init(store=..., backend='nccl') on a machine without a GPU:
    an error on every rank (no hang), saying why."""
    import datetime
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", int(args["port"]), comm.size, comm.rank == 0,
                          timeout=datetime.timedelta(seconds=30))
    t0 = time.time()
    try:
        w = nspcomm.init(store=store, rank=comm.rank, world_size=comm.size, backend="nccl",
                         timeout_s=20, prefix="nccl-test")
        w.destroy()
        out = {"raised": None, "cuda": torch.cuda.is_available()}
    except nspcomm.NspError as e:
        out = {"raised": type(e).__name__, "name": e.name, "message": str(e)[:500],
               "elapsed": time.time() - t0, "cuda": torch.cuda.is_available(),
               "pid": os.getpid()}
    # Rank 0 serves the TCPStore: it must outlive every rank's init, or a
    # rank still reading the store sees the connection reset instead of
    # its own error.
    comm.barrier()
    return out

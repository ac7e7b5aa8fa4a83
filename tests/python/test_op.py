"""The op's contract and its device path (pytest; run by
tests/python/test_python.sh under make check).

Contract, on a real 2-rank world over UCX (every rank makes the same calls,
as the op is collective): torch.library.opcheck of both ops;
torch.compile(fullgraph=True) against eager (aot_eager around a layer-like
function, inductor on the op alone), results and gradients; the op inside
torch.utils.checkpoint, reentrant and not, against the plain run and the
float64 reference. Tolerances: compiled vs eager and checkpointed vs plain
are the same calls on the same data, so equal (0); against the reference
as tests/python/test_nspcomm.py (float32 2e-5).

Device path, without a GPU: the CUDA branch of every piece (the checks,
the stream handed to the library before every call, the kernels' device
calls, device views, the saved state) on fake CUDA tensors over the real
UCX world (fakecuda.py says exactly what is faked), compared with the
float64 reference; unit tests of the kernels' CUDA branches, the device
views' __cuda_array_interface__, and the process-group communicator
lookup; and what nspcomm.init(backend="nccl") says on a machine without a
GPU.
"""

import functools
import os
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mp  # noqa: E402
import plans  # noqa: E402

torch = pytest.importorskip("torch")
import nspcomm  # noqa: E402
import nspcomm.device as device  # noqa: E402
import nspcomm.torch as nt  # noqa: E402
from nspcomm import comm as nspcomm_comm  # noqa: E402

import fakecuda  # noqa: E402

ATTN = {"nq": 8, "nkv": 2, "D": 16}
# fp16/bf16 through the device kernels: as test_nspcomm.py's tolerances
TOL = {"float32": 2e-5, "bfloat16": 1.5e-2, "float16": 2e-3}


def two_rank_plan():
    """Two rounds of different sizes: a degree-2 group (KV replicated for
    n_kv = 1), level-0 sequences on each rank, a one-token sequence; no
    ring group (a ring on device memory is checked on a GPU by
    perf/gpu_check_torch.py)."""
    lens = [37, 20, 1, 9, 14, 11, 52, 6, 13, 8]
    rounds = [[(0, 2, [0, 1, 2], 1), (0, 1, [3, 4], 1), (1, 1, [5], 1)],
              [(0, 2, [6], 1), (0, 1, [7], 1), (1, 1, [8, 9], 1)]]
    return plans.plan_json(2, lens, rounds)


@functools.lru_cache(maxsize=None)
def world():
    """One 2-rank world runs every multi-rank case of this file, in order."""
    tmp = tempfile.mkdtemp(prefix="nsp_op_")
    path = os.path.join(tmp, "plan.json")
    with open(path, "w") as f:
        f.write(two_rank_plan())
    args = dict(ATTN, plan=path)
    cases = [["opcheck", "opcheck", args], ["compile", "compile", args],
             ["checkpoint", "checkpoint", args], ["fake_cuda", "fake_cuda", args],
             ["fake_cuda_bad", "fake_cuda_bad", dict(args, bad_rank=1)],
             ["nccl_without_gpu", "nccl_without_gpu", {"port": mp.free_port()}]]
    t0 = time.time()
    res = mp.run(2, cases, timeout=900, env={"NSPCOMM_PORT": str(mp.free_port())},
                 nsp_timeout=60)
    print("2 ranks: %.1f s (the op's contract and device path)" % (time.time() - t0))
    return res


def part(name):
    out = []
    for r, res in enumerate(world()):
        assert name in res, "rank %d has no result for %s: %s" % (r, name, str(res)[-3000:])
        assert "raised" not in res[name], "rank %d: %s" % (r, res[name])
        out.append(res[name])
    return out


# ---- the contract ---------------------------------------------------------------

def test_opcheck_passes_on_both_ops():
    for r, out in enumerate(part("opcheck")):
        for name in ("float32/fwd", "bfloat16/fwd", "float32/bwd", "bfloat16/bwd"):
            assert out[name] and all(v == "SUCCESS" for v in out[name].values()), (r, name, out)
        assert len(out["float32/fwd"]) == 4, out["float32/fwd"]
        assert out["saved_states_left"] == 0, out


def test_compiled_fullgraph_equals_eager():
    for r, out in enumerate(part("compile")):
        for name in ("float32/round0", "float32/round1", "bfloat16/round0", "bfloat16/round1"):
            x = out[name]
            assert x["loss_diff"] == 0 and x["grad_diff"] == 0, (r, name, x)
            assert x["bwd_saved"], "rank %d %s: the compiled backward re-exchanged" % (r, name)
        assert out["float32/round0"]["tokens"] != out["float32/round1"]["tokens"]
        # a graph per dtype and shape regime; a new NestedAttention (another
        # handle) of the same shapes compiles nothing new
        assert out["aot_eager_graphs"] <= 4, out
        assert out["aot_eager_graphs_after_new_attention"] == out["aot_eager_graphs"], out
        ind = out["inductor"]
        assert ind["out_diff"] == 0 and ind["grad_diff"] == 0 and ind["bwd_saved"], ind
        assert out["saved_states_left"] == 0, out


def test_checkpoint_reentrant_and_not():
    for r, out in enumerate(part("checkpoint")):
        assert out["plain"] == {"fwd": 1, "bwd": 1}, out
        for mode in ("reentrant", "non_reentrant"):
            x = out[mode]
            assert x["loss_diff"] == 0 and x["grad_diff"] == 0, (r, mode, x)
            assert x["fwd"] == 2 and x["bwd"] == 1, (r, mode, x)  # the forward recomputed
            assert x["bwd_saved"], (r, mode, x)  # the recomputed forward's state
            assert x["saved_states_left"] == 0, (r, mode, x)  # the first forward's freed
        for key, e in out["vs_reference"].items():
            assert e <= TOL["float32"], (r, key, e)


# ---- the device path on the stand-in ----------------------------------------------

def test_fake_cuda_every_dtype_and_kernel_matches_the_reference():
    seen = set()
    worst = {}
    for r, out in enumerate(part("fake_cuda")):
        for name, x in out.items():
            heads, dt, kname, rnd = name.split("/")
            seen.add((heads, dt, kname))
            for key, e in x["errors"].items():
                worst[dt] = max(worst.get(dt, 0.0), e)
                assert e <= TOL[dt], (r, name, key, e)
            # the library got torch's current stream before each call
            assert x["fwd_streams"] == [0xC0DE1000 + int(rnd[-1])], (r, name, x)
            assert x["bwd_streams"] == [0xC0DE2000 + int(rnd[-1])], (r, name, x)
            assert x["kernel_calls"] > 0 and x["bwd_saved"], (r, name, x)
            assert x["o_device"] == "cuda:0", (r, name, x)
            assert x["lse_dtype"] == "torch.float32"
            if dt != "float32":  # the fused kernel's device branch ran
                assert x["device_calls"] > 0, (r, name, x)
    assert len(seen) == 2 * 3 * 2, seen
    print("fake CUDA worst errors:", worst)


def test_fake_cuda_device_checks_raise_on_every_rank():
    res = part("fake_cuda_bad")
    for r, out in enumerate(res):
        for kind in ("cuda_on_ucx", "other_device", "cpu_on_nccl"):
            assert out[kind].startswith("ValueError"), (r, kind, out[kind])
            if r != 1:
                assert "rank 1" in out[kind], out[kind]
        assert out["after"] == "no exception", out
    assert "backend='nccl'" in res[1]["cuda_on_ucx"] and "'ucx'" in res[1]["cuda_on_ucx"]
    assert "cuda:1" in res[1]["other_device"] and "device 0" in res[1]["other_device"]
    assert "'nccl' backend" in res[1]["cpu_on_nccl"] and "cpu" in res[1]["cpu_on_nccl"]


def test_nccl_world_without_a_gpu_fails_on_every_rank():
    for r, out in enumerate(world()):
        x = out["nccl_without_gpu"]
        if x.get("cuda"):
            pytest.skip("this machine has a GPU: perf/gpu_check_torch.py runs the NCCL path")
        assert x["raised"] == "NspError" and x["name"] == "NSP_ERR_UNSUPPORTED", (r, x)
        assert "CUDA device" in x["message"] or "NCCL" in x["message"], x
        assert x["elapsed"] < 20, x


# ---- unit tests (one process) -------------------------------------------------------

def _fake_inputs(dtype, cu, nq=4, nkv=2, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = cu[-1]
    q, k, v, do = (torch.randn(T, h, D, generator=g).to(dtype) for h in (nq, nkv, nkv, nq))
    return q, k, v, do


@pytest.mark.parametrize("which", ["sdpa", "flash"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_device_kernels_match_the_math_kernel(which, dtype):
    """The CUDA branches of SdpaKernel (torch's varlen flash) and
    FlashAttnKernel (flash-attn's) on fake CUDA tensors: the device call is
    made with int32 cu_seqlens, the lse comes back token-major, and the
    results equal MathKernel's on the same data."""
    cu = [0, 5, 6, 19]
    q, k, v, do = _fake_inputs(dtype, cu)
    if which == "sdpa":
        kern, fake = nt.SdpaKernel(), fakecuda.FakeVarlen()
        kern.varlen_fwd, kern.varlen_bwd = fake.fwd, fake.bwd
    else:
        fa = fakecuda.FakeFlashAttn()
        kern, fake = nt.FlashAttnKernel(module=fa), fa.varlen
    dev = [fakecuda.on_fake_cuda(t) for t in (q, k, v, do)]
    o, lse = kern.fwd(dev[0], dev[1], dev[2], cu, cu, True, 0.3)
    g = kern.bwd(dev[0], dev[1], dev[2], o, lse, dev[3], cu, cu, True, 0.3)
    assert fake.calls == 2 and lse.shape == (19, 4) and lse.dtype == torch.float32
    assert o.device.type == "cuda" and all(x.device.type == "cuda" for x in g)
    mo, ml = nt.MathKernel().fwd(q, k, v, cu, cu, True, 0.3)
    mg = nt.MathKernel().bwd(q, k, v, mo, ml, do, cu, cu, True, 0.3)
    assert torch.equal(fakecuda.plain(o), mo) and torch.equal(fakecuda.plain(lse), ml)
    for a, b in zip(g, mg):
        assert torch.equal(fakecuda.plain(a), b)
    if which == "flash":
        assert fa.bwd_kwargs == {"window": (-1, -1), "softcap": 0.0, "deterministic": False}


def test_device_kernels_refuse_unequal_causal_spans():
    fa = fakecuda.FakeFlashAttn()
    q, k, v, _ = _fake_inputs(torch.bfloat16, [0, 4])
    dev = [fakecuda.on_fake_cuda(t) for t in (q, k, v)]
    with pytest.raises(ValueError, match="equal spans"):
        nt.FlashAttnKernel(module=fa).fwd(dev[0], dev[1][:3], dev[2][:3], [0, 4], [0, 3],
                                          True, 0.3)


def test_flash_attn_backward_with_an_unknown_parameter_is_a_clear_error():
    class Newer(fakecuda.FakeFlashAttn):
        def _flash_attn_varlen_backward(self, dout, q, k, v, out, softmax_lse, dq, dk, dv,
                                        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                        dropout_p, softmax_scale, causal, sink_tokens):
            raise AssertionError("must not be called")
    cu = [0, 3]
    q, k, v, do = (fakecuda.on_fake_cuda(t) for t in _fake_inputs(torch.float16, cu))
    kern = nt.FlashAttnKernel(module=Newer())
    o, lse = kern.fwd(q, k, v, cu, cu, True, 0.3)
    with pytest.raises(RuntimeError, match="sink_tokens"):
        kern.bwd(q, k, v, o, lse, do, cu, cu, True, 0.3)


def test_flash_attn_backward_registered_as_a_torch_custom_op():
    """flash-attn 2.6+ wraps _flash_attn_varlen_backward in
    torch.library.custom_op (its signature is then *args, **kwargs): the
    kernel reads the wrapped function's parameters and calls it by name."""
    fa = fakecuda.FakeFlashAttn()
    plain_bwd = fa._flash_attn_varlen_backward

    @torch.library.custom_op("nsptest::flash_attn_varlen_backward",
                             mutates_args=("dq", "dk", "dv"))
    def wrapped(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                out: torch.Tensor, softmax_lse: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor,
                dv: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                max_seqlen_q: int, max_seqlen_k: int, dropout_p: float, softmax_scale: float,
                causal: bool, window_size_left: int = -1, window_size_right: int = -1,
                softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None,
                deterministic: bool = False, rng_state: torch.Tensor | None = None,
                zero_tensors: bool = False) -> None:
        plain_bwd(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                  max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_size_left,
                  window_size_right, softcap, alibi_slopes, deterministic, rng_state)
    fa._flash_attn_varlen_backward = wrapped
    cu = [0, 4, 9]
    q, k, v, do = _fake_inputs(torch.bfloat16, cu)
    dev = [fakecuda.on_fake_cuda(t) for t in (q, k, v, do)]
    kern = nt.FlashAttnKernel(module=fa)
    o, lse = kern.fwd(dev[0], dev[1], dev[2], cu, cu, True, 0.3)
    g = kern.bwd(dev[0], dev[1], dev[2], o, lse, dev[3], cu, cu, True, 0.3)
    mo, ml = nt.MathKernel().fwd(q, k, v, cu, cu, True, 0.3)
    for a, b in zip(g, nt.MathKernel().bwd(q, k, v, mo, ml, do, cu, cu, True, 0.3)):
        assert torch.equal(fakecuda.plain(a), b)


def test_default_kernel_by_device():
    assert type(nt.SdpaKernel()) is type(nspcomm.kernels.default_kernel("cpu"))
    try:
        import flash_attn  # noqa: F401
        want = nt.FlashAttnKernel
    except ImportError:
        want = nt.SdpaKernel
    assert type(nspcomm.kernels.default_kernel("cuda")) is want


def test_cuda_array_interface_of_device_views():
    """What CudaMemory.view gives torch.as_tensor: shape, typestr (bf16 as
    int16, viewed back), the pointer, no stream (version 2: no sync)."""
    i = device.cuda_array_interface(0x7F0000001000, (5, 4, 8), torch.bfloat16)
    assert i == {"shape": (5, 4, 8), "typestr": "<i2", "data": (0x7F0000001000, False),
                 "strides": None, "version": 2}
    assert device.cuda_array_interface(16, (3,), torch.float16)["typestr"] == "<f2"
    assert device.cuda_array_interface(16, (3,), torch.float32)["typestr"] == "<f4"
    with pytest.raises(TypeError):
        device.cuda_array_interface(16, (3,), torch.float64)


def test_memory_of_each_backend():
    class W:
        def __init__(self, backend, dev):
            self.backend, self.cuda_device = backend, dev
    assert isinstance(device.memory_of(W("ucx", None)), device.HostMemory)
    m = device.memory_of(W("nccl", 3))
    assert isinstance(m, device.CudaMemory) and m.index == 3
    with pytest.raises(ValueError, match="CUDA device"):
        device.memory_of(W("nccl", None))
    with pytest.raises(ValueError, match="'mpi'"):
        device.memory_of(W("mpi", None))


def test_process_group_communicator_lookup():
    """nccl_comm_pointer: the comm_ptr property (torch 2.15), the
    _comm_ptr() method (older), NULL (not created yet), neither."""
    class Prop:
        comm_ptr = 0x1234

    class Method:
        def _comm_ptr(self):
            return 0x5678

    class Null:
        comm_ptr = 0

    assert nspcomm_comm.nccl_comm_pointer(Prop()) == 0x1234
    assert nspcomm_comm.nccl_comm_pointer(Method()) == 0x5678
    with pytest.raises(RuntimeError, match="not created yet"):
        nspcomm_comm.nccl_comm_pointer(Null())
    with pytest.raises(NotImplementedError, match="backend='nccl'"):
        nspcomm_comm.nccl_comm_pointer(object())


def test_from_process_group_needs_an_nccl_group():
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="no NCCL backend"):
            nspcomm.from_process_group()
    finally:
        dist.destroy_process_group()

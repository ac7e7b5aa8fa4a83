"""A CUDA stand-in on the CPU for the device path's plumbing (no GPU here).

What is faked, and only that:
  - FakeCudaTensor: a CPU tensor that reports device cuda:<index> (its
    data_ptr is host memory, which the UCX world under the test moves);
  - FakeCudaMemory: nspcomm.device.CudaMemory whose views of C buffers are
    host views, and which records every kernel callback's stream context;
  - torch.cuda.current_stream: a stream object whose cuda_stream changes
    when the test says (set_current);
  - the library entry nsp_nested_attn_set_stream (a UCX world refuses a
    stream): recorded, every other entry is the real library;
  - the world's backend name and device (comm.backend = "nccl").
Everything else (the checks, dtypes, pointers, saved state, the C
exchanges on UCX, the kernels' device branches with their device calls
replaced by FakeVarlen / FakeFlashAttn) runs for real, and the results are
compared with the float64 reference.

What the stand-in cannot tell: on which device a tensor made inside the op
would be (torch hands subclasses to the op, but what the op makes from them
is a plain tensor, and so is what autograd saves of an op's outputs); the
stand-in counts every plain tensor as cuda:0 (fake_device), and a test that
means a CPU tensor marks it (CpuTensor).
"""

import contextlib

import torch

import nspcomm._lib as _lib
import nspcomm.device as device
from nspcomm.kernels import MathKernel


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor that says it lives on cuda:0."""
    index = 0

    @property
    def device(self):
        return torch.device("cuda", type(self).index)

    @property
    def is_cuda(self):
        return True


class FakeCudaTensor1(FakeCudaTensor):
    index = 1


class CpuTensor(FakeCudaTensor):
    """A tensor a test means to be on the CPU while the stand-in is installed
    (a FakeCudaTensor subclass, so torch can call an op with both kinds)."""

    @property
    def device(self):
        return torch.device("cpu")

    @property
    def is_cuda(self):
        return False


def on_fake_cuda(t, index=0):
    return t.as_subclass(FakeCudaTensor if index == 0 else FakeCudaTensor1)


def plain(t):
    return t.as_subclass(torch.Tensor)


class _Stream:
    def __init__(self, value):
        self.cuda_stream = value


class Recorder:
    """What the device path did: set_stream calls (stream values), kernel
    callbacks' (stream passed by the library, the current stream then)."""

    def __init__(self):
        self.set_stream = []
        self.kernel_calls = []
        self.current = 0xC0DE0001

    def set_current(self, value):
        self.current = value


REC = Recorder()


class _Where:
    def __init__(self, dev):
        self.device = dev


def fake_device(t):
    """Where the stand-in says `t` is: a FakeCudaTensor's device, a
    CpuTensor's cpu, and cuda:0 for a plain tensor (what autograd hands the
    backward: it saves an op's outputs as new tensor objects over the same
    storage, which a subclass does not survive; on a GPU they are CUDA
    tensors)."""
    if isinstance(t, FakeCudaTensor):  # CpuTensor too
        return t.device
    return torch.device("cuda", 0)


class FakeCudaMemory(device.CudaMemory):
    def check(self, t, name):
        return super().check(_Where(fake_device(t)), name)

    def view(self, ptr, shape, dtype):
        return on_fake_cuda(device.HostMemory.view(self, ptr, shape, dtype), self.index)

    def kernel_stream(self, stream):
        REC.kernel_calls.append((stream, REC.current))
        return contextlib.nullcontext()

    def dummy_ptr(self):
        if self._empty is None:
            self._empty = torch.zeros(16)
        return self._empty.data_ptr()


class _LibProxy:
    """The real library, but nsp_nested_attn_set_stream records its stream."""

    def __init__(self, real):
        self._real = real

    def nsp_nested_attn_set_stream(self, handle, stream):
        REC.set_stream.append(stream.value if hasattr(stream, "value") else stream)
        return 0

    def __getattr__(self, name):
        return getattr(self._real, name)


_REAL = {}


def install(comm, index=0):
    """Make `comm` (a real UCX world) look like an NCCL world on cuda:index
    to nspcomm.torch, with the fakes above. Returns the recorder. uninstall()
    puts everything back."""
    _lib.lib()
    if not _REAL:
        _REAL.update(lib=_lib._Loaded.lib, mem=device.CudaMemory,
                     stream=torch.cuda.current_stream, world=(comm.backend, comm.cuda_device))
    _lib._Loaded.lib = _LibProxy(_REAL["lib"])
    device.CudaMemory = FakeCudaMemory
    torch.cuda.current_stream = lambda dev=None: _Stream(REC.current)
    comm.backend, comm.cuda_device = "nccl", index
    return REC


def uninstall(comm):
    if _REAL:
        _lib._Loaded.lib, device.CudaMemory = _REAL["lib"], _REAL["mem"]
        torch.cuda.current_stream = _REAL["stream"]
        comm.backend, comm.cuda_device = _REAL["world"]
        _REAL.clear()


def _lists(*cus):
    return [[int(x) for x in plain(c).tolist()] for c in cus]


class FakeVarlen:
    """aten::_flash_attention_forward/_backward for SdpaKernel's CUDA
    branch: check what torch's varlen flash would be given (int32
    cu_seqlens on the device, the longest spans, no dropout), compute with
    MathKernel on the CPU and answer in flash's layout (lse [h_q, T_q])."""

    def __init__(self):
        self.calls = 0
        self.math = MathKernel()

    def _check(self, q, cq, ck, mq, mk, dropout):
        # (inside the op, tensors made there are plain: fake_device says cuda:0)
        assert fake_device(q).type == "cuda", q.device
        assert fake_device(cq) == fake_device(q) == fake_device(ck), (cq.device, ck.device)
        assert cq.dtype == torch.int32 and ck.dtype == torch.int32, (cq.dtype, ck.dtype)
        cu_q, cu_k = _lists(cq, ck)
        assert mq == max(b - a for a, b in zip(cu_q, cu_q[1:])), (mq, cu_q)
        assert mk == max(b - a for a, b in zip(cu_k, cu_k[1:])), (mk, cu_k)
        assert dropout == 0.0
        self.calls += 1
        return cu_q, cu_k

    def fwd(self, q, k, v, cq, ck, mq, mk, dropout, causal, debug, scale=None):
        cu_q, cu_k = self._check(q, cq, ck, mq, mk, dropout)
        o, lse = self.math.fwd(plain(q), plain(k), plain(v), cu_q, cu_k, causal, scale)
        return on_fake_cuda(o), on_fake_cuda(lse.t().contiguous()), None, None, None

    def bwd(self, do, q, k, v, o, lse, cq, ck, mq, mk, dropout, causal, rng, unused,
            scale=None):
        cu_q, cu_k = self._check(q, cq, ck, mq, mk, dropout)
        assert tuple(lse.shape) == (q.shape[1], q.shape[0]), lse.shape  # flash's [h_q, T_q]
        g = self.math.bwd(plain(q), plain(k), plain(v), plain(o), plain(lse).t(), plain(do),
                          cu_q, cu_k, causal, scale)
        return tuple(on_fake_cuda(x) for x in g)


class FakeFlashAttn:
    """A flash_attn.flash_attn_interface stand-in with flash-attn 2.8's
    signatures (the backward called by keyword, writing dq, dk, dv)."""

    def __init__(self):
        self.varlen = FakeVarlen()
        self.bwd_kwargs = None

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                               max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
                               window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=False, return_attn_probs=False, block_table=None):
        assert return_attn_probs, "nspcomm needs the lse (return_attn_probs=True)"
        o, lse = self.varlen.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                 max_seqlen_k, dropout_p, causal, False, scale=softmax_scale)[:2]
        return o, lse, None

    def _flash_attn_varlen_backward(self, dout, q, k, v, out, softmax_lse, dq, dk, dv,
                                    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p, softmax_scale, causal, window_size_left,
                                    window_size_right, softcap, alibi_slopes, deterministic,
                                    rng_state=None, zero_tensors=False):
        self.bwd_kwargs = {"window": (window_size_left, window_size_right), "softcap": softcap,
                           "deterministic": deterministic}
        g = self.varlen.bwd(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k,
                            max_seqlen_q, max_seqlen_k, dropout_p, causal, None, None,
                            scale=softmax_scale)
        for dst, src in zip((dq, dk, dv), g):
            dst.copy_(src)
        return dq, dk, dv

"""Where a world's tensors live, and how the op reaches them: one memory
object per backend of the world (nsp_comm_backend).

    HostMemory   "ucx": CPU tensors; C memory seen through torch.frombuffer
    CudaMemory   "nccl": CUDA tensors on the world's device; C's device
                 buffers seen through __cuda_array_interface__ (no copy);
                 every call runs on torch's current CUDA stream, which the
                 op hands to the library (nsp_nested_attn_set_stream) and
                 the kernels run on (the stream the library passes them)

Each answers: is this tensor acceptable (check), a tensor over C memory
(view), the stream of the next call (stream), the context a kernel
callback runs in (kernel_stream), and a valid address for a tensor without
elements (dummy_ptr; the library refuses NULL buffers).
"""

import contextlib
import ctypes

import torch

__all__ = ["HostMemory", "CudaMemory", "memory_of", "cuda_array_interface"]

# __cuda_array_interface__ typestr per dtype: bfloat16 has none, so it
# travels as int16 and is viewed back (same bits, same size)
_TYPESTR = {torch.float32: ("<f4", None), torch.float16: ("<f2", None),
            torch.bfloat16: ("<i2", torch.bfloat16), torch.int64: ("<i8", None)}


def cuda_array_interface(ptr, shape, dtype):
    """The __cuda_array_interface__ (version 2: no stream, so torch does not
    synchronise) of C-contiguous device memory at `ptr`."""
    if dtype not in _TYPESTR:
        raise TypeError("no device view for dtype %s" % dtype)
    return {"shape": tuple(int(s) for s in shape), "typestr": _TYPESTR[dtype][0],
            "data": (int(ptr), False), "strides": None, "version": 2}


class _DeviceArray:
    """What torch.as_tensor needs to see device memory: the interface."""

    def __init__(self, ptr, shape, dtype):
        self.__cuda_array_interface__ = cuda_array_interface(ptr, shape, dtype)


class HostMemory:
    """The UCX backend's memory: CPU tensors."""

    backend = "ucx"
    device_type = "cpu"

    def __init__(self):
        self._empty = torch.zeros(16)

    def check(self, t, name):
        """None, or (exception class, message) for a tensor this world cannot take."""
        if t.device.type == "cpu":
            return None
        if t.device.type == "cuda":
            return ValueError, (
                "%s is a CUDA tensor (%s) but the tree's world is on the 'ucx' backend, which "
                "moves host memory: create the world on the NCCL backend "
                "(nspcomm.init(..., backend='nccl') or nspcomm.from_process_group()) for CUDA "
                "tensors, or pass CPU tensors" % (name, t.device))
        return ValueError, "%s is on %s: a 'ucx' world takes CPU tensors" % (name, t.device)

    def view(self, ptr, shape, dtype):
        """A tensor over C host memory [shape] of dtype (no copy); empty if no elements."""
        n = 1
        for s in shape:
            n *= int(s)
        if n == 0 or not ptr:
            return torch.empty(shape, dtype=dtype)
        es = torch.empty((), dtype=dtype).element_size()
        buf = (ctypes.c_char * (n * es)).from_address(ptr)
        return torch.frombuffer(buf, dtype=dtype).view(shape)

    def stream(self):
        """The stream to hand the library before a call: none on the host."""
        return None

    def kernel_stream(self, stream):
        return contextlib.nullcontext()

    def dummy_ptr(self):
        return self._empty.data_ptr()


class CudaMemory:
    """The NCCL backend's memory: CUDA tensors on the world's device `index`."""

    backend = "nccl"
    device_type = "cuda"

    def __init__(self, index):
        self.index = index
        self.device = torch.device("cuda", index)
        self._empty = None

    def check(self, t, name):
        if t.device.type != "cuda":
            return ValueError, (
                "%s is on %s but the tree's world is on the 'nccl' backend (CUDA device %d): "
                "move it there (.to('cuda:%d')), or use a 'ucx' world for CPU tensors"
                % (name, t.device, self.index, self.index))
        if t.device.index != self.index:
            return ValueError, (
                "%s is on %s but this rank's world uses CUDA device %d (set at nspcomm.init "
                "with cuda_device=, or the process group's device): one GPU per rank, and "
                "the tensors on it" % (name, t.device, self.index))
        return None

    def view(self, ptr, shape, dtype):
        n = 1
        for s in shape:
            n *= int(s)
        if n == 0 or not ptr:
            return torch.empty(shape, dtype=dtype, device=self.device)
        t = torch.as_tensor(_DeviceArray(ptr, shape, dtype), device=self.device)
        cast = _TYPESTR[dtype][1]
        return t.view(cast) if cast is not None else t

    def stream(self):
        """torch's current stream on the device, as a cudaStream_t (int)."""
        return torch.cuda.current_stream(self.device).cuda_stream

    def kernel_stream(self, stream):
        """Run a kernel callback on the stream the library passes it
        (batch->stream; 0/NULL: the legacy default stream), unless it is
        already the current one."""
        if stream and stream == torch.cuda.current_stream(self.device).cuda_stream:
            return contextlib.nullcontext()
        s = torch.cuda.ExternalStream(stream, device=self.device) if stream else \
            torch.cuda.default_stream(self.device)
        return torch.cuda.stream(s)

    def dummy_ptr(self):
        if self._empty is None:
            self._empty = torch.zeros(16, device=self.device)
        return self._empty.data_ptr()


def memory_of(comm):
    """The memory object of a world's backend (comm.backend, comm.cuda_device)."""
    if comm.backend == "ucx":
        return HostMemory()
    if comm.backend == "nccl":
        if comm.cuda_device is None:
            raise ValueError("the 'nccl' world does not say its CUDA device (create it with "
                             "nspcomm.init(backend='nccl') or nspcomm.from_process_group())")
        return CudaMemory(comm.cuda_device)
    raise ValueError("nested attention: no tensor path for the '%s' backend" % comm.backend)

"""nspcomm.torch: nested sequence-parallel attention as a torch custom op.

    attn = NestedAttention(tree, layout, q_heads=8, kv_heads=2, head_dim=32)
    o = nested_attention(q, k, v, attn)        # q [T_local, 8, 32], k, v [T_local, 2, 32]
    o.sum().backward()                          # collective too: every rank calls it

q, k, v are this rank's sequence-sharded rows (the layout's order,
layout.token_index()); o has q's shape. The op is registered with
torch.library.custom_op as nspcomm::nested_attention_fwd / _bwd, with
autograd and fake (meta) kernels: it passes torch.library.opcheck, compiles
under torch.compile(fullgraph=True) and runs under torch.utils.checkpoint
(reentrant or not: every rank recomputes, so the collective calls stay in
one order). Inside, libnspcomm moves every level's sequences to head
shards (nested all-to-all, levels pipelined), calls the per-level kernel
(nspcomm.kernels), and moves the results back; ring levels run ring
attention.

Tensors: CPU tensors on a world of the UCX backend; CUDA tensors on the
world's device on the NCCL backend (nspcomm.init(backend="nccl") or
nspcomm.from_process_group()), where every call runs on torch's current
CUDA stream (nspcomm.device). Dtypes: float32, bfloat16 and float16, in and
out, exchanged in that dtype on every level (replicated dK/dV of rounds
that replicate KV heads go back in float32; lse is always float32). The
default kernels compute in float32 (or in the fused kernel's own way on
CUDA) and round their outputs once.

Saved state: the forward keeps the library's head-sharded q, k, v, o, lse
(nsp_nested_attn_saved_t) for the backward, so the backward exchanges only
dout and the gradients. The forward op's third output, a one-element int64
tensor, names it by its storage: autograd saves that tensor, the backward
takes the state, and the state is freed with the tensor's storage if no
backward runs (a graph dropped, or a checkpointed forward). A second
backward through a retained graph re-exchanges the saved sequence-sharded
tensors instead.
"""

import ctypes
import itertools
import threading
import weakref

import torch

from . import _constants as C
from . import _lib
from ._lib import check
from .device import memory_of
from .kernels import MathKernel, SdpaKernel, FlashAttnKernel, default_kernel

__all__ = ["NestedAttention", "nested_attention", "SdpaKernel", "MathKernel",
           "FlashAttnKernel"]

# torch dtype <-> nsp_attn_dtype_t
_CDTYPE = {torch.float32: C.NSP_ATTN_FP32, torch.bfloat16: C.NSP_ATTN_BF16,
           torch.float16: C.NSP_ATTN_FP16}
_TORCH_DTYPE = {v: k for k, v in _CDTYPE.items()}
_MSG_BYTES = 256


# ---- the C callbacks ------------------------------------------------------

class _Callbacks:
    """ctypes trampolines from the C driver into a Python kernel, on the
    memory of the world (host or device views of the driver's buffers). An
    exception is kept and reported as NSP_ERR_BACKEND (never unwinds
    through C)."""

    def __init__(self, kernel, mem):
        self.kernel, self.mem = kernel, mem
        self.error = None
        self.fwd = _lib.ATTN_FWD(self._fwd)
        self.bwd = _lib.ATTN_BWD(self._bwd)

    @staticmethod
    def _batch(bp):
        b = bp.contents
        n = b.nseqs
        cu_q, cu_k = list(b.q_offsets[:n + 1]), list(b.kv_offsets[:n + 1])
        base_q, base_k = cu_q[0], cu_k[0]
        cu_q = [x - base_q for x in cu_q]
        cu_k = [x - base_k for x in cu_k]
        p = b.params
        return b, cu_q, cu_k, p.q_heads, p.kv_heads, p.head_dim, _TORCH_DTYPE[b.dtype]

    def _views(self, dt, shapes, ptrs):
        return [self.mem.view(p, s, dt) for p, s in zip(ptrs, shapes)]

    def _lse(self, ptr, rows, heads):
        return self.mem.view(ctypes.cast(ptr, ctypes.c_void_p).value, (rows, heads),
                             torch.float32)

    def _fwd(self, ctx, bp, q, k, v, o, lse):
        try:
            b, cu_q, cu_k, hq, hkv, D, dt = self._batch(bp)
            Tq, Tk = cu_q[-1], cu_k[-1]
            with self.mem.kernel_stream(b.stream):
                qv, kv, vv, ov = self._views(dt, [(Tq, hq, D), (Tk, hkv, D), (Tk, hkv, D),
                                                  (Tq, hq, D)], [q, k, v, o])
                oq, olse = self.kernel.fwd(qv, kv, vv, cu_q, cu_k, bool(b.params.causal),
                                           float(b.params.scale))
                ov.copy_(oq)
                self._lse(lse, Tq, hq).copy_(olse)
            return 0
        except Exception as e:  # noqa: BLE001
            self.error = e
            return _lib.ERR_BACKEND

    def _bwd(self, ctx, bp, q, k, v, o, lse, do, dq, dk, dv):
        try:
            b, cu_q, cu_k, hq, hkv, D, dt = self._batch(bp)
            Tq, Tk = cu_q[-1], cu_k[-1]
            sq, skv = (Tq, hq, D), (Tk, hkv, D)
            with self.mem.kernel_stream(b.stream):
                qv, kv, vv, ov, dov, dqv, dkv, dvv = self._views(
                    dt, [sq, skv, skv, sq, sq, sq, skv, skv], [q, k, v, o, do, dq, dk, dv])
                g = self.kernel.bwd(qv, kv, vv, ov, self._lse(lse, Tq, hq), dov, cu_q, cu_k,
                                    bool(b.params.causal), float(b.params.scale))
                dqv.copy_(g[0])
                dkv.copy_(g[1])
                dvv.copy_(g[2])
            return 0
        except Exception as e:  # noqa: BLE001
            self.error = e
            return _lib.ERR_BACKEND


# ---- the attention context --------------------------------------------------

_registry = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def _stats_dict(s):
    return {"wall_s": s.wall_s, "compute_s": s.compute_s, "wait_s": s.wait_s,
            "bytes_sent": s.bytes_sent,
            "levels": [{"degree": lv.degree, "ring": lv.ring, "ulysses": lv.ulysses,
                        "nseqs": lv.nseqs, "tokens": lv.tokens, "compute_s": lv.compute_s,
                        "wait_s": lv.wait_s, "a2a_bytes": lv.a2a_bytes,
                        "ring_bytes": lv.ring_bytes} for lv in s.level[:s.nlevels]]}


class NestedAttention:
    """One nested attention for a round: (tree, layout, the model's heads).
    Serves every layer of the round; each forward/backward is collective over
    the tree's world (every rank calls them in the same order).

    kernel: an object with fwd/bwd as nspcomm.kernels documents (default
    kernels.default_kernel for the world's memory: SdpaKernel on CPU,
    FlashAttnKernel on CUDA when flash_attn is installed, else SdpaKernel);
    scale None: 1/sqrt(head_dim); serial: levels one after another (to
    measure pipelining); max_slices: kernel calls per Ulysses level (comm
    progresses between them); check: agree on inputs before each call (a
    bad input on one rank raises on every rank); dkv_float32: in bfloat16 and
    float16 calls, sum the dK/dV of KV heads replicated over several ranks
    in float32 (twice those tensors' bytes, one rounding) instead of on the
    wire in the call's dtype (the default: one rounding per replica added;
    with 2 replicas the same bits). Every rank passes the same."""

    def __init__(self, tree, layout, q_heads, kv_heads, head_dim, scale=None, causal=True,
                 kernel=None, serial=False, max_slices=None, check=True, dkv_float32=False):
        if q_heads % kv_heads:
            raise ValueError("q_heads %d is not a multiple of kv_heads %d" % (q_heads, kv_heads))
        self.tree, self.layout = tree, layout
        self.comm = tree.comm
        self.mem = memory_of(self.comm)
        self.q_heads, self.kv_heads, self.head_dim = int(q_heads), int(kv_heads), int(head_dim)
        self.scale = float(scale) if scale else head_dim ** -0.5
        self.causal, self.serial, self.check = bool(causal), bool(serial), bool(check)
        self.max_slices = max_slices
        self.dkv_float32 = bool(dkv_float32)
        self.kernel = kernel if kernel is not None else default_kernel(self.mem.device_type)
        self._cb = _Callbacks(self.kernel, self.mem)
        self._attn = {}            # C dtype -> nsp_nested_attn_t
        self.last_fwd_stats = None
        self.last_bwd_stats = None
        self.last_bwd_saved = False  # did the last backward use the forward's saved state
        with _lock:
            self.id = next(_ids)
            _registry[self.id] = self
        tree._users.append(self)

    def _c_attn(self, cdtype):
        if cdtype in self._attn:
            return self._attn[cdtype]
        p = _lib.NestedAttnParams()
        p.attn = _lib.AttnParams(self.q_heads, self.kv_heads, self.head_dim, self.scale,
                                 int(self.causal))
        # The sizes of every call's sequence-sharded buffers, so C checks them
        # too (NSP_ATTN_FIELD_BYTES): [T_local, heads, D] of the call's dtype;
        # lse and delta [T_local, q_heads] float32.
        T, D = self.layout.local_tokens, self.head_dim
        es = _TORCH_DTYPE[cdtype].itemsize
        qb, kb, lb = T * self.q_heads * D * es, T * self.kv_heads * D * es, T * self.q_heads * 4
        p.attn.field_mask = C.NSP_ATTN_FIELD_BYTES
        p.attn.bytes = _lib.AttnBytes(qb, kb, kb, qb, lb, qb, qb, kb, kb, lb)
        p.field_mask = (C.NSP_NESTED_ATTN_FIELD_KERNEL | C.NSP_NESTED_ATTN_FIELD_DTYPE |
                        C.NSP_NESTED_ATTN_FIELD_SERIAL | C.NSP_NESTED_ATTN_FIELD_CHECK)
        p.kernel = _lib.AttnKernel(self._cb.fwd, self._cb.bwd, None)
        p.dtype, p.serial, p.check = cdtype, int(self.serial), 1
        if self.max_slices:
            p.field_mask |= C.NSP_NESTED_ATTN_FIELD_SLICES
            p.max_slices = int(self.max_slices)
        if self.dkv_float32:
            p.field_mask |= C.NSP_NESTED_ATTN_FIELD_DKV_F32
            p.dkv_f32 = 1
        h = ctypes.c_void_p()
        check(_lib.lib().nsp_nested_attn_create(self.tree.handle, self.layout.handle,
                                                ctypes.byref(p), ctypes.byref(h)),
              "nsp_nested_attn_create")
        self._attn[cdtype] = h
        return h

    def destroy(self):
        for h in self._attn.values():
            _lib.lib().nsp_nested_attn_destroy(h)
        self._attn = {}
        with _lock:
            _registry.pop(self.id, None)

    # -- checks ---------------------------------------------------------------

    def _tensor_problem(self, t, name, heads):
        """(exception class, message) for one input this rank cannot pass, or None."""
        if not isinstance(t, torch.Tensor):
            return TypeError, "%s is %s, not a tensor" % (name, type(t).__name__)
        bad = self.mem.check(t, name)
        if bad:
            return bad
        if t.dtype not in _CDTYPE:
            return TypeError, "%s has dtype %s: need float32, bfloat16 or float16" % (name,
                                                                                     t.dtype)
        want = (self.layout.local_tokens, heads, self.head_dim)
        if tuple(t.shape) != want:
            return ValueError, ("%s has shape %s but this rank's layout (round %d) needs %s "
                                "[T_local, heads, head_dim]" % (name, tuple(t.shape),
                                                                self.layout.round, want))
        if not t.is_contiguous():
            return ValueError, "%s is not contiguous: call .contiguous() first" % name
        return None

    def _local_problem(self, tensors, names, heads):
        for t, name, h in zip(tensors, names, heads):
            bad = self._tensor_problem(t, name, h)
            if bad:
                return bad
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) > 1:
            return TypeError, "q, k, v (and dout) must share one dtype, got %s" % sorted(
                str(d) for d in dtypes)
        return None, ""

    def _agree(self, problem):
        """Every rank learns every rank's input problem before anything moves,
        so a bad input raises on all of them and nobody waits."""
        cls, msg = problem
        code = {None: 0, TypeError: 1, ValueError: 2, NotImplementedError: 3}.get(cls, 2)
        if self.check:
            raw = bytes([code]) + msg.encode()[:_MSG_BYTES - 1].ljust(_MSG_BYTES - 1, b"\0")
            every = self.comm.allgather(raw)
        else:
            every = [bytes([code]) + msg.encode()] if code else []
        bad = [(r, e) for r, e in enumerate(every) if e[0] != 0]
        if not bad:
            return
        r, e = bad[0]
        kinds = {1: TypeError, 2: ValueError, 3: NotImplementedError}
        text = e[1:].rstrip(b"\0").decode(errors="replace")
        if cls is not None:
            raise cls("nspcomm.torch.nested_attention: " + msg)
        raise kinds[e[0]]("nspcomm.torch.nested_attention: rank %d's inputs are invalid, so "
                          "no rank goes on: %s" % (r, text))

    def _raise_kernel(self, status, what):
        err, self._cb.error = self._cb.error, None
        if err is not None:
            raise RuntimeError("nspcomm.torch.nested_attention: the kernel raised in %s: %r"
                               % (what, err)) from err
        check(status, what)

    def _ptr(self, t):
        """The address of a contiguous tensor; an empty one gets a valid dummy
        address of the world's memory (the library refuses NULL buffers even
        where nothing is read)."""
        return t.data_ptr() if t.numel() else self.mem.dummy_ptr()

    def _on_stream(self, h):
        """Device memory: the library's next call runs on torch's current stream."""
        stream = self.mem.stream()
        if stream is not None:
            check(_lib.lib().nsp_nested_attn_set_stream(h, ctypes.c_void_p(stream)),
                  "nsp_nested_attn_set_stream")
        return h

    # -- calls ----------------------------------------------------------------

    def forward(self, q, k, v, keep=False):
        """(o, lse, saved): o like q, lse [T_local, q_heads] float32; with keep,
        saved is the library's saved state of this forward (a _SavedState,
        for backward()), else None. Collective."""
        self._agree(self._local_problem([q, k, v], ["q", "k", "v"],
                                        [self.q_heads, self.kv_heads, self.kv_heads]))
        cd = _CDTYPE[q.dtype]   # the wire dtype is q's
        o = torch.empty_like(q)
        lse = q.new_empty((q.shape[0], self.q_heads), dtype=torch.float32)
        st = _lib.NestedAttnStats()
        saved = ctypes.c_void_p()
        ptr = self._ptr
        h = self._on_stream(self._c_attn(cd))
        status = _lib.lib().nsp_nested_attn_fwd(h, ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse),
                                                ctypes.byref(saved) if keep else None,
                                                ctypes.byref(st))
        if status != 0:
            self._raise_kernel(status, "nsp_nested_attn_fwd")
        self.last_fwd_stats = _stats_dict(st)
        return o, lse, (_SavedState(saved.value, self, cd) if keep else None)

    def backward(self, dout, q, k, v, o, lse, saved=None):
        """(dq, dk, dv). With `saved` (forward(keep=True) of this attention,
        consumed here) only dout and the gradients are exchanged; without it
        the forward's sequence-sharded q, k, v, o, lse are exchanged again.
        Collective: every rank passes a saved state, or none."""
        self._agree(self._local_problem(
            [dout, q, k, v, o], ["dout", "q", "k", "v", "o"],
            [self.q_heads, self.q_heads, self.kv_heads, self.kv_heads, self.q_heads]))
        cd = _CDTYPE[q.dtype]
        sp = saved.take(self, cd) if saved is not None else None
        lse = lse.contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        st = _lib.NestedAttnStats()
        ptr = self._ptr
        try:
            h = self._on_stream(self._c_attn(cd))
            ins = (None,) * 5 if sp else (ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse))
            status = _lib.lib().nsp_nested_attn_bwd(h, sp, *ins, ptr(dout), ptr(dq), ptr(dk),
                                                    ptr(dv), ctypes.byref(st))
        finally:
            if sp:
                _lib.lib().nsp_nested_attn_saved_free(sp)
        if status != 0:
            self._raise_kernel(status, "nsp_nested_attn_bwd")
        self.last_bwd_stats = _stats_dict(st)
        self.last_bwd_saved = bool(sp)
        return dq, dk, dv


class _SavedState:
    """Owns one nsp_nested_attn_saved_t (the head-sharded q, k, v, o, lse of
    one forward): consumed by a backward (take), or freed when collected."""

    def __init__(self, ptr, attn, cdtype):
        self.ptr, self.attn, self.cdtype = ptr, attn, cdtype

    def take(self, attn, cdtype):
        """The pointer, now the caller's to free; None if already taken or
        from another attention or dtype (then the backward re-exchanges)."""
        if attn is not self.attn or cdtype != self.cdtype:
            return None
        p, self.ptr = self.ptr, None
        return p

    def __del__(self):
        p, self.ptr = self.ptr, None
        if p and _lib is not None:
            _lib.lib().nsp_nested_attn_saved_free(p)


# Saved states between the forward op and its backward, by the storage of
# the forward op's key output (a one-element int64 tensor: 1 when a state
# was kept, 0 when not). Its storage is what autograd saves and hands the
# backward, eagerly and in a compiled graph alike (a tensor object may be
# a new one there, a detached alias, but the storage is the same); when it
# dies without a backward (graph dropped, checkpoint discarding the first
# forward's saved tensors) the state is freed with it.
_saved_states = {}


def _key_tensor(state):
    t = torch.full((1,), 0 if state is None else 1, dtype=torch.int64)
    if state is not None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        with _lock:
            _saved_states[key] = state
        weakref.finalize(storage, _drop_saved, key)
    return t


def _drop_saved(key):
    with _lock:
        return _saved_states.pop(key, None)


def _take_saved(key_tensor):
    """The saved state the key names (removed from the table), or None."""
    if int(key_tensor.reshape(-1)[0]) == 0:
        return None
    return _drop_saved(key_tensor.untyped_storage().data_ptr())


def _get(handle):
    try:
        return _registry[handle]
    except KeyError:
        raise ValueError("nspcomm.torch: no NestedAttention with id %d (destroyed?)" % handle)


# ---- the custom ops -----------------------------------------------------------

@torch.library.custom_op("nspcomm::nested_attention_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, handle: int,
            keep: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(o, lse, key): with keep, key (int64 [1], value 1) names the saved
    state of this forward by its storage; without, key is [0]."""
    o, lse, saved = _get(handle).forward(q, k, v, keep=keep)
    return o, lse, _key_tensor(saved)


@_fwd_op.register_fake
def _fwd_fake(q, k, v, handle, keep):
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or q.shape[0] != k.shape[0]:
        raise ValueError("nspcomm.torch.nested_attention: q [T, n_q, D] and k, v [T, n_kv, D], "
                         "got %s, %s, %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    return (torch.empty_like(q), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32),
            torch.empty((1,), dtype=torch.int64))


@torch.library.custom_op("nspcomm::nested_attention_bwd", mutates_args=())
def _bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            o: torch.Tensor, lse: torch.Tensor, key: torch.Tensor,
            handle: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """key: the forward's; its saved state is taken (consumed) here, or,
    when there is none (kept nothing, or already used by a retained graph's
    first backward), the inputs are exchanged again."""
    return _get(handle).backward(dout, q, k, v, o, lse, _take_saved(key))


@_bwd_op.register_fake
def _bwd_fake(dout, q, k, v, o, lse, key, handle):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, handle, _keep = inputs
    o, lse, key = output
    # q, k, v, o, lse too: a second backward (retain_graph) has no saved state
    ctx.save_for_backward(q, k, v, o, lse, key)
    ctx.handle = handle


def _backward(ctx, do, dlse, dkey):
    q, k, v, o, lse, key = ctx.saved_tensors
    if do is None:
        do = torch.zeros_like(o)
    dq, dk, dv = _bwd_op(do.contiguous(), q, k, v, o, lse, key, ctx.handle)
    return dq, dk, dv, None, None


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def nested_attention(q, k, v, attn, return_lse=False):
    """Nested SP attention of this rank's rows: o [T_local, n_q, D] (and lse
    [T_local, n_q] float32 with return_lse; lse is not differentiated).
    Collective over attn's world, forward and backward. The forward keeps
    the library's saved state only when a backward can follow (grad mode on
    and an input requiring grad)."""
    keep = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    o, lse, _ = _fwd_op(q, k, v, attn.id, keep)
    return (o, lse) if return_lse else o

"""nspcomm.torch: nested sequence-parallel attention as a torch custom op.

    attn = NestedAttention(tree, layout, q_heads=8, kv_heads=2, head_dim=32)
    o = nested_attention(q, k, v, attn)        # q [T_local, 8, 32], k, v [T_local, 2, 32]
    o.sum().backward()                          # collective too: every rank calls it

q, k, v are this rank's sequence-sharded rows (the layout's order,
layout.token_index()); o has q's shape. The op is registered with
torch.library.custom_op as nspcomm::nested_attention_fwd / _bwd, with
autograd and fake (meta) kernels. Inside, libnspcomm moves every level's
sequences to head shards (nested all-to-all, levels pipelined), calls the
per-level kernel (default: torch's CPU scaled-dot-product flash kernel per
sequence, which returns the lse nspcomm needs), and moves the results back;
ring levels run ring attention.

Dtypes: float32 and bfloat16 in and out, and bfloat16 on the wire on every
level: the library reads ring partials and replicated dK/dV in bfloat16,
adds them in float32 and rounds once (only dK/dV of a round whose plan
replicates KV heads go back in float32). The default kernel computes in
float32 and rounds its outputs once.

Saved state: the forward keeps the library's head-sharded q, k, v, o, lse
(nsp_nested_attn_saved_t) in the autograd context, so the backward
exchanges only dout and the gradients; it is freed by the backward (or
with the graph). A second backward through a retained graph re-exchanges
the saved sequence-sharded tensors instead.
"""

import ctypes
import itertools
import threading
import weakref

import torch
import torch.nn.functional as F

from . import _lib
from ._lib import check

__all__ = ["NestedAttention", "nested_attention", "SdpaKernel", "MathKernel"]

_FP32, _BF16 = 0, 1
_F_KERNEL, _F_DTYPE, _F_SERIAL, _F_CHECK, _F_SLICES = 1, 2, 4, 8, 16
_TORCH_DTYPE = {_FP32: torch.float32, _BF16: torch.bfloat16}
_MSG_BYTES = 256


# ---- per-level kernels -----------------------------------------------------

def _expand_kv(x, groups):
    """[L, h_kv, D] -> [1, h_kv * groups, L, D] (GQA: q head i reads kv head i // groups)."""
    return x.transpose(0, 1).repeat_interleave(groups, dim=0).unsqueeze(0)


class MathKernel:
    """Per-sequence attention written out in float32 (scores, log-sum-exp,
    softmax): the fallback when torch lacks the CPU flash kernel, and the
    clearest statement of what a kernel must compute."""

    @staticmethod
    def _scores(q, k, causal, scale):
        s = torch.matmul(q, k.transpose(-1, -2)) * scale        # [1, h, Lq, Lk]
        if causal:
            lq, lk = s.shape[-2], s.shape[-1]
            mask = torch.ones(lq, lk, dtype=torch.bool).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return s

    def seq_fwd(self, q, k, v, causal, scale):
        s = self._scores(q, k, causal, scale)
        lse = torch.logsumexp(s, dim=-1)                         # [1, h, Lq]
        return torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v), lse

    def seq_bwd(self, q, k, v, o, lse, do, causal, scale):
        s = self._scores(q, k, causal, scale)
        p = torch.exp(s - lse.unsqueeze(-1))                     # the FINAL lse
        dv = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, v.transpose(-1, -2))
        delta = (do * o).sum(-1, keepdim=True)                   # rowsum(dout * o_final)
        ds = p * (dp - delta)
        return torch.matmul(ds, k) * scale, torch.matmul(ds.transpose(-1, -2), q) * scale, dv


class SdpaKernel(MathKernel):
    """torch's scaled-dot-product attention per sequence: on CPU the flash
    kernel F.scaled_dot_product_attention dispatches to, called through its
    aten op so it also returns the lse, and whose backward takes the final o
    and lse (what ring blocks need). Falls back to MathKernel without it.

    A kernel is any object with
      fwd(q, k, v, cu_q, cu_k, causal, scale) -> (o, lse)
      bwd(q, k, v, o, lse, dout, cu_q, cu_k, causal, scale) -> (dq, dk, dv)
    on packed varlen tensors: q, o, dout [Tq, h_q, D], k, v [Tk, h_kv, D]
    (float32 or bfloat16), lse [Tq, h_q] float32 (natural log; flash-attn's
    varlen lse is [h_q, Tq]: transpose it), cu_q/cu_k lists of nseqs + 1
    offsets. Query head i reads KV head i // (h_q // h_kv)."""

    def __init__(self):
        ops = torch.ops.aten
        self.flash = getattr(ops, "_scaled_dot_product_flash_attention_for_cpu", None)
        self.flash_bwd = getattr(ops, "_scaled_dot_product_flash_attention_for_cpu_backward",
                                 None)

    def seq_fwd(self, q, k, v, causal, scale):
        if self.flash is None:
            return MathKernel.seq_fwd(self, q, k, v, causal, scale)
        o, lse = self.flash(q, k, v, 0.0, causal, scale=scale)[:2]
        return o, lse

    def seq_bwd(self, q, k, v, o, lse, do, causal, scale):
        if self.flash_bwd is None:
            return MathKernel.seq_bwd(self, q, k, v, o, lse, do, causal, scale)
        return self.flash_bwd(do, q, k, v, o.contiguous(), lse.contiguous(), 0.0, causal,
                              scale=scale)[:3]

    def fwd(self, q, k, v, cu_q, cu_k, causal, scale):
        hq, hkv, D = q.shape[1], k.shape[1], q.shape[2]
        g = hq // hkv
        o = torch.zeros(q.shape, dtype=q.dtype)
        lse = torch.full((q.shape[0], hq), float("-inf"), dtype=torch.float32)
        for j in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[j], cu_q[j + 1], cu_k[j], cu_k[j + 1]
            if q1 == q0 or k1 == k0:
                continue
            qs = q[q0:q1].float().transpose(0, 1).unsqueeze(0)   # [1, h_q, Lq, D]
            ks, vs = _expand_kv(k[k0:k1].float(), g), _expand_kv(v[k0:k1].float(), g)
            os_, ls = self.seq_fwd(qs, ks, vs, causal, scale)
            o[q0:q1] = os_[0].transpose(0, 1).to(q.dtype)
            lse[q0:q1] = ls[0].transpose(0, 1)
        del D
        return o, lse

    def bwd(self, q, k, v, o, lse, do, cu_q, cu_k, causal, scale):
        hq, hkv, D = q.shape[1], k.shape[1], q.shape[2]
        g = hq // hkv
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for j in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[j], cu_q[j + 1], cu_k[j], cu_k[j + 1]
            if q1 == q0 or k1 == k0:
                continue
            t = lambda x: x.float().transpose(0, 1).unsqueeze(0).contiguous()  # noqa: E731
            ks, vs = _expand_kv(k[k0:k1].float(), g), _expand_kv(v[k0:k1].float(), g)
            ls = lse[q0:q1].transpose(0, 1).unsqueeze(0).contiguous()
            gq, gk, gv = self.seq_bwd(t(q[q0:q1]), ks.contiguous(), vs.contiguous(),
                                      t(o[q0:q1]), ls, t(do[q0:q1]), causal, scale)
            L = k1 - k0
            dq[q0:q1] = gq[0].transpose(0, 1).to(q.dtype)
            dk[k0:k1] = gk[0].reshape(hkv, g, L, D).sum(1).transpose(0, 1).to(k.dtype)
            dv[k0:k1] = gv[0].reshape(hkv, g, L, D).sum(1).transpose(0, 1).to(v.dtype)
        return dq, dk, dv


# ---- the C callbacks ------------------------------------------------------

def _view(ptr, rows, heads, dim, dtype):
    """A tensor over C memory [rows, heads, dim] (no copy); empty if no rows."""
    n = rows * heads * dim
    if n == 0 or not ptr:
        return torch.empty((rows, heads, dim), dtype=dtype)
    es = torch.tensor([], dtype=dtype).element_size()
    buf = (ctypes.c_char * (n * es)).from_address(ptr)
    return torch.frombuffer(buf, dtype=dtype).view(rows, heads, dim)


def _lse_view(ptr, rows, heads):
    if rows * heads == 0 or not ptr:
        return torch.empty((rows, heads), dtype=torch.float32)
    addr = ctypes.cast(ptr, ctypes.c_void_p).value
    buf = (ctypes.c_char * (rows * heads * 4)).from_address(addr)
    return torch.frombuffer(buf, dtype=torch.float32).view(rows, heads)


class _Callbacks:
    """ctypes trampolines from the C driver into a Python kernel. An exception
    is kept and reported as NSP_ERR_BACKEND (never unwinds through C)."""

    def __init__(self, kernel):
        self.kernel = kernel
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

    def _fwd(self, ctx, bp, q, k, v, o, lse):
        try:
            b, cu_q, cu_k, hq, hkv, D, dt = self._batch(bp)
            Tq, Tk = cu_q[-1], cu_k[-1]
            oq, olse = self.kernel.fwd(_view(q, Tq, hq, D, dt), _view(k, Tk, hkv, D, dt),
                                       _view(v, Tk, hkv, D, dt), cu_q, cu_k,
                                       bool(b.params.causal), float(b.params.scale))
            _view(o, Tq, hq, D, dt).copy_(oq)
            _lse_view(lse, Tq, hq).copy_(olse)
            return 0
        except Exception as e:  # noqa: BLE001
            self.error = e
            return _lib.ERR_BACKEND

    def _bwd(self, ctx, bp, q, k, v, o, lse, do, dq, dk, dv):
        try:
            b, cu_q, cu_k, hq, hkv, D, dt = self._batch(bp)
            Tq, Tk = cu_q[-1], cu_k[-1]
            g = self.kernel.bwd(_view(q, Tq, hq, D, dt), _view(k, Tk, hkv, D, dt),
                                _view(v, Tk, hkv, D, dt), _view(o, Tq, hq, D, dt),
                                _lse_view(lse, Tq, hq), _view(do, Tq, hq, D, dt), cu_q, cu_k,
                                bool(b.params.causal), float(b.params.scale))
            _view(dq, Tq, hq, D, dt).copy_(g[0])
            _view(dk, Tk, hkv, D, dt).copy_(g[1])
            _view(dv, Tk, hkv, D, dt).copy_(g[2])
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

    kernel: an object with fwd/bwd as SdpaKernel documents (default
    SdpaKernel()); scale None: 1/sqrt(head_dim); serial: levels one after
    another (to measure pipelining); max_slices: kernel calls per Ulysses
    level (comm progresses between them); check: agree on inputs before each
    call (a bad input on one rank raises on every rank)."""

    def __init__(self, tree, layout, q_heads, kv_heads, head_dim, scale=None, causal=True,
                 kernel=None, serial=False, max_slices=None, check=True):
        if q_heads % kv_heads:
            raise ValueError("q_heads %d is not a multiple of kv_heads %d" % (q_heads, kv_heads))
        self.tree, self.layout = tree, layout
        self.comm = tree.comm
        self.q_heads, self.kv_heads, self.head_dim = int(q_heads), int(kv_heads), int(head_dim)
        self.scale = float(scale) if scale else head_dim ** -0.5
        self.causal, self.serial, self.check = bool(causal), bool(serial), bool(check)
        self.max_slices = max_slices
        self.kernel = kernel if kernel is not None else SdpaKernel()
        self._cb = _Callbacks(self.kernel)
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
        es = 4 if cdtype == _FP32 else 2
        qb, kb, lb = T * self.q_heads * D * es, T * self.kv_heads * D * es, T * self.q_heads * 4
        p.attn.field_mask = 1  # NSP_ATTN_FIELD_BYTES
        p.attn.bytes = _lib.AttnBytes(qb, kb, kb, qb, lb, qb, qb, kb, kb, lb)
        p.field_mask = _F_KERNEL | _F_DTYPE | _F_SERIAL | _F_CHECK
        p.kernel = _lib.AttnKernel(self._cb.fwd, self._cb.bwd, None)
        p.dtype, p.serial, p.check = cdtype, int(self.serial), 1
        if self.max_slices:
            p.field_mask |= _F_SLICES
            p.max_slices = int(self.max_slices)
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

    def _local_problem(self, tensors, names, heads):
        T = self.layout.local_tokens
        dtypes = {t.dtype for t in tensors if isinstance(t, torch.Tensor)}
        for t, name, h in zip(tensors, names, heads):
            if not isinstance(t, torch.Tensor):
                return TypeError, "%s is %s, not a tensor" % (name, type(t).__name__)
            if t.device.type == "cuda":
                return NotImplementedError, (
                    "%s is a CUDA tensor: nspcomm's device path (the NCCL backend on the "
                    "current stream) is not available yet; pass CPU tensors" % name)
            if t.device.type != "cpu":
                return ValueError, "%s is on %s: only CPU tensors are supported" % (name,
                                                                                  t.device)
            if t.dtype not in (torch.float32, torch.bfloat16):
                return TypeError, "%s has dtype %s: need float32 or bfloat16" % (name, t.dtype)
            want = (T, h) if name == "lse" else (T, h, self.head_dim)
            if tuple(t.shape) != want:
                return ValueError, ("%s has shape %s but this rank's layout (round %d) needs "
                                    "%s [T_local, heads%s]" % (
                                        name, tuple(t.shape), self.layout.round, want,
                                        "" if name == "lse" else ", head_dim"))
            if not t.is_contiguous():
                return ValueError, "%s is not contiguous: call .contiguous() first" % name
        if len(dtypes) > 1 and "lse" not in names:
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

    # -- calls ----------------------------------------------------------------

    def forward(self, q, k, v, keep=False):
        """(o, lse, saved): o like q, lse [T_local, q_heads] float32; with keep,
        saved is the library's saved state of this forward (a _SavedState,
        for backward()), else None. Collective."""
        self._agree(self._local_problem([q, k, v], ["q", "k", "v"],
                                        [self.q_heads, self.kv_heads, self.kv_heads]))
        cd = _FP32 if q.dtype == torch.float32 else _BF16   # the wire dtype is q's
        o = torch.empty_like(q)
        lse = torch.empty((q.shape[0], self.q_heads), dtype=torch.float32)
        st = _lib.NestedAttnStats()
        saved = ctypes.c_void_p()
        ptr = _ptr
        status = _lib.lib().nsp_nested_attn_fwd(self._c_attn(cd), ptr(q), ptr(k), ptr(v),
                                                ptr(o), ptr(lse),
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
        cd = _FP32 if q.dtype == torch.float32 else _BF16
        sp = saved.take(self, cd) if saved is not None else None
        lse = lse.contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        st = _lib.NestedAttnStats()
        ptr = _ptr
        try:
            ins = (None,) * 5 if sp else (ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse))
            status = _lib.lib().nsp_nested_attn_bwd(self._c_attn(cd), sp, *ins, ptr(dout),
                                                    ptr(dq), ptr(dk), ptr(dv),
                                                    ctypes.byref(st))
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


# Saved states between the forward op and its autograd context, by key: the
# op's third output (an int64 scalar) names one; setup_context takes it into
# ctx, and a key tensor collected before that (no autograd) drops it.
_saved_states = {}
_saved_keys = itertools.count(1)


def _keep_saved(state):
    key = next(_saved_keys)
    with _lock:
        _saved_states[key] = state
    t = torch.tensor(key, dtype=torch.int64)
    weakref.finalize(t, _drop_saved, key)
    return t


def _drop_saved(key):
    with _lock:
        return _saved_states.pop(key, None)


_EMPTY = torch.zeros(16)  # a valid address for tensors without elements


def _ptr(t):
    """The address of a contiguous tensor; an empty one gets a valid dummy
    address (the library refuses NULL buffers even where nothing is read)."""
    return t.data_ptr() if t.numel() else _EMPTY.data_ptr()


def _get(handle):
    try:
        return _registry[handle]
    except KeyError:
        raise ValueError("nspcomm.torch: no NestedAttention with id %d (destroyed?)" % handle)


# ---- the custom ops -----------------------------------------------------------

@torch.library.custom_op("nspcomm::nested_attention_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            handle: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(o, lse, key): key (int64 scalar) names the saved state of this
    forward, which its autograd context takes (_setup_context)."""
    # autograd records this call only if an input requires grad (inside the
    # op grad mode reads off either way); otherwise keep nothing
    keep = q.requires_grad or k.requires_grad or v.requires_grad
    o, lse, saved = _get(handle).forward(q, k, v, keep=keep)
    return o, lse, (_keep_saved(saved) if keep else torch.tensor(0, dtype=torch.int64))


@_fwd_op.register_fake
def _fwd_fake(q, k, v, handle):
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or q.shape[0] != k.shape[0]:
        raise ValueError("nspcomm.torch.nested_attention: q [T, n_q, D] and k, v [T, n_kv, D], "
                         "got %s, %s, %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    return (torch.empty_like(q), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32),
            q.new_empty((), dtype=torch.int64))


@torch.library.custom_op("nspcomm::nested_attention_bwd", mutates_args=())
def _bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            o: torch.Tensor, lse: torch.Tensor, key: torch.Tensor,
            handle: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """key: the forward's saved state (taken: consumed by this backward), or
    one already used (a retained graph's second backward: re-exchanged)."""
    return _get(handle).backward(dout, q, k, v, o, lse, _drop_saved(int(key)))


@_bwd_op.register_fake
def _bwd_fake(dout, q, k, v, o, lse, key, handle):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, handle = inputs
    o, lse, key = output
    # q, k, v, o, lse too: a second backward (retain_graph) has no saved state
    ctx.save_for_backward(q, k, v, o, lse, key)
    ctx.handle = handle


def _backward(ctx, do, dlse, dkey):
    q, k, v, o, lse, key = ctx.saved_tensors
    if do is None:
        do = torch.zeros_like(o)
    dq, dk, dv = _bwd_op(do.contiguous(), q, k, v, o, lse, key, ctx.handle)
    return dq, dk, dv, None


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def nested_attention(q, k, v, attn, return_lse=False):
    """Nested SP attention of this rank's rows: o [T_local, n_q, D] (and lse
    [T_local, n_q] float32 with return_lse; lse is not differentiated).
    Collective over attn's world, forward and backward."""
    o, lse, _ = _fwd_op(q, k, v, attn.id)
    return (o, lse) if return_lse else o

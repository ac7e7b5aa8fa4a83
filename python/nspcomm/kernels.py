"""Per-level attention kernels for nspcomm.torch.NestedAttention.

A kernel is any object with

    fwd(q, k, v, cu_q, cu_k, causal, scale) -> (o, lse)
    bwd(q, k, v, o, lse, dout, cu_q, cu_k, causal, scale) -> (dq, dk, dv)

on packed varlen tensors of one device: q, o, dout [Tq, h_q, D], k, v
[Tk, h_kv, D] (float32, bfloat16 or float16), lse [Tq, h_q] float32
(natural log, token-major: flash-attn's varlen lse is [h_q, Tq], so
transpose it), cu_q/cu_k Python lists of nseqs + 1 offsets. Query head i
reads KV head i // (h_q // h_kv). The backward must use the lse and o it is
given (a ring block's are the final ones, over more keys than the call's).
The library never asks for a causal call whose query and key spans differ
in length.

    MathKernel      the math written out in float32, any device (the fallback)
    SdpaKernel      torch's own kernels: on CPU the flash kernel per sequence;
                    on CUDA torch's varlen flash-attention for bf16/fp16 (one
                    call per level), MathKernel for float32
    FlashAttnKernel flash-attn's varlen functions (CUDA, bf16/fp16; float32
                    through MathKernel)

default_kernel(device_type) picks FlashAttnKernel on CUDA when flash_attn
is installed, else SdpaKernel.
"""

import inspect

import torch

__all__ = ["MathKernel", "SdpaKernel", "FlashAttnKernel", "default_kernel"]


def _expand_kv(x, groups):
    """[L, h_kv, D] -> [1, h_kv * groups, L, D] (GQA: q head i reads kv head i // groups)."""
    return x.transpose(0, 1).repeat_interleave(groups, dim=0).unsqueeze(0)


def _heads_first(x):
    """[L, h, D] -> [1, h, L, D] float32, contiguous."""
    return x.float().transpose(0, 1).unsqueeze(0).contiguous()


def _check_causal_spans(cu_q, cu_k, causal):
    if not causal:
        return
    for j in range(len(cu_q) - 1):
        if cu_q[j + 1] - cu_q[j] != cu_k[j + 1] - cu_k[j]:
            raise ValueError("causal attention of sequence %d with %d queries and %d keys: the "
                             "kernels align causal masks at the first token and need equal "
                             "spans" % (j, cu_q[j + 1] - cu_q[j], cu_k[j + 1] - cu_k[j]))


class MathKernel:
    """Per-sequence attention written out in float32 (scores, log-sum-exp,
    softmax) on the tensors' own device: the fallback where no fused kernel
    applies, and the clearest statement of what a kernel must compute."""

    @staticmethod
    def _scores(q, k, causal, scale):
        s = torch.matmul(q, k.transpose(-1, -2)) * scale        # [1, h, Lq, Lk]
        if causal:
            lq, lk = s.shape[-2], s.shape[-1]
            mask = q.new_ones((lq, lk), dtype=torch.bool).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return s

    def seq_fwd(self, q, k, v, causal, scale):
        """One sequence, [1, h, L, D] float32 each: (o [1, h, Lq, D], lse [1, h, Lq])."""
        s = self._scores(q, k, causal, scale)
        lse = torch.logsumexp(s, dim=-1)                         # [1, h, Lq]
        return torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v), lse

    def seq_bwd(self, q, k, v, o, lse, do, causal, scale):
        """One sequence: (dq, dk, dv) [1, h, L, D] float32 (dk, dv per q head)."""
        s = self._scores(q, k, causal, scale)
        p = torch.exp(s - lse.unsqueeze(-1))                     # the FINAL lse
        dv = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, v.transpose(-1, -2))
        delta = (do * o).sum(-1, keepdim=True)                   # rowsum(dout * o_final)
        ds = p * (dp - delta)
        return torch.matmul(ds, k) * scale, torch.matmul(ds.transpose(-1, -2), q) * scale, dv

    def fwd(self, q, k, v, cu_q, cu_k, causal, scale):
        """Every sequence in turn, computed in float32, rounded once to q's dtype."""
        _check_causal_spans(cu_q, cu_k, causal)
        hq, hkv = q.shape[1], k.shape[1]
        g = hq // hkv
        o = q.new_zeros(q.shape)
        lse = q.new_full((q.shape[0], hq), float("-inf"), dtype=torch.float32)
        for j in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[j], cu_q[j + 1], cu_k[j], cu_k[j + 1]
            if q1 == q0 or k1 == k0:
                continue
            ks, vs = _expand_kv(k[k0:k1].float(), g), _expand_kv(v[k0:k1].float(), g)
            os_, ls = self.seq_fwd(_heads_first(q[q0:q1]), ks, vs, causal, scale)
            o[q0:q1] = os_[0].transpose(0, 1).to(q.dtype)
            lse[q0:q1] = ls[0].transpose(0, 1)
        return o, lse

    def bwd(self, q, k, v, o, lse, do, cu_q, cu_k, causal, scale):
        _check_causal_spans(cu_q, cu_k, causal)
        hq, hkv, D = q.shape[1], k.shape[1], q.shape[2]
        g = hq // hkv
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for j in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[j], cu_q[j + 1], cu_k[j], cu_k[j + 1]
            if q1 == q0 or k1 == k0:
                continue
            ks, vs = _expand_kv(k[k0:k1].float(), g), _expand_kv(v[k0:k1].float(), g)
            ls = lse[q0:q1].transpose(0, 1).unsqueeze(0).contiguous()
            gq, gk, gv = self.seq_bwd(_heads_first(q[q0:q1]), ks.contiguous(), vs.contiguous(),
                                      _heads_first(o[q0:q1]), ls, _heads_first(do[q0:q1]),
                                      causal, scale)
            L = k1 - k0
            dq[q0:q1] = gq[0].transpose(0, 1).to(q.dtype)
            dk[k0:k1] = gk[0].reshape(hkv, g, L, D).sum(1).transpose(0, 1).to(k.dtype)
            dv[k0:k1] = gv[0].reshape(hkv, g, L, D).sum(1).transpose(0, 1).to(v.dtype)
        return dq, dk, dv


def _varlen_args(q, cu_q, cu_k):
    """cu_seqlens as int32 tensors on q's device and the longest spans."""
    cq = q.new_tensor(cu_q, dtype=torch.int32)
    ck = q.new_tensor(cu_k, dtype=torch.int32)
    mq = max([b - a for a, b in zip(cu_q, cu_q[1:])] or [0])
    mk = max([b - a for a, b in zip(cu_k, cu_k[1:])] or [0])
    return cq, ck, mq, mk


def _token_major_lse(lse, tq, hq, who):
    """A varlen flash kernel's lse [h_q, Tq] -> nspcomm's [Tq, h_q] float32."""
    if tuple(lse.shape) != (hq, tq):
        raise RuntimeError("%s returned an lse of shape %s, expected [h_q, T_q] = %s (a "
                           "version whose varlen lse is laid out otherwise)"
                           % (who, tuple(lse.shape), (hq, tq)))
    return lse.float().transpose(0, 1).contiguous()


class SdpaKernel(MathKernel):
    """torch's scaled-dot-product kernels.

    CPU: per sequence, the flash kernel F.scaled_dot_product_attention
    dispatches to, called through its aten op so it also returns the lse,
    and whose backward takes the final o and lse (what ring blocks need);
    MathKernel without it. CUDA: bfloat16/float16 go to torch's varlen
    flash-attention (aten::_flash_attention_forward/_backward: one call per
    level on the packed tensors, GQA in the kernel); float32, which flash
    does not take, goes through MathKernel on the device."""

    def __init__(self):
        ops = torch.ops.aten
        self.flash = getattr(ops, "_scaled_dot_product_flash_attention_for_cpu", None)
        self.flash_bwd = getattr(ops, "_scaled_dot_product_flash_attention_for_cpu_backward",
                                 None)
        self.varlen_fwd = getattr(ops, "_flash_attention_forward", None)
        self.varlen_bwd = getattr(ops, "_flash_attention_backward", None)

    def _use_varlen(self, q):
        return (q.device.type == "cuda" and q.dtype in (torch.bfloat16, torch.float16) and
                self.varlen_fwd is not None and self.varlen_bwd is not None)

    def seq_fwd(self, q, k, v, causal, scale):
        if self.flash is None or q.device.type != "cpu":
            return MathKernel.seq_fwd(self, q, k, v, causal, scale)
        o, lse = self.flash(q, k, v, 0.0, causal, scale=scale)[:2]
        return o, lse

    def seq_bwd(self, q, k, v, o, lse, do, causal, scale):
        if self.flash_bwd is None or q.device.type != "cpu":
            return MathKernel.seq_bwd(self, q, k, v, o, lse, do, causal, scale)
        return self.flash_bwd(do, q, k, v, o.contiguous(), lse.contiguous(), 0.0, causal,
                              scale=scale)[:3]

    def fwd(self, q, k, v, cu_q, cu_k, causal, scale):
        if not self._use_varlen(q) or q.shape[0] == 0:
            return MathKernel.fwd(self, q, k, v, cu_q, cu_k, causal, scale)
        _check_causal_spans(cu_q, cu_k, causal)
        cq, ck, mq, mk = _varlen_args(q, cu_q, cu_k)
        out = self.varlen_fwd(q, k, v, cq, ck, mq, mk, 0.0, causal, False, scale=scale)
        return out[0], _token_major_lse(out[1], q.shape[0], q.shape[1],
                                        "aten::_flash_attention_forward")

    def bwd(self, q, k, v, o, lse, do, cu_q, cu_k, causal, scale):
        if not self._use_varlen(q) or q.shape[0] == 0:
            return MathKernel.bwd(self, q, k, v, o, lse, do, cu_q, cu_k, causal, scale)
        _check_causal_spans(cu_q, cu_k, causal)
        cq, ck, mq, mk = _varlen_args(q, cu_q, cu_k)
        # no dropout: the philox state is not read, but the schema wants tensors
        rng, unused = q.new_zeros((2,), dtype=torch.int64), q.new_zeros((0,), dtype=torch.int64)
        dq, dk, dv = self.varlen_bwd(do, q, k, v, o, lse.transpose(0, 1).contiguous(), cq, ck,
                                     mq, mk, 0.0, causal, rng, unused, scale=scale)[:3]
        return dq, dk, dv


class FlashAttnKernel(MathKernel):
    """flash-attn's varlen kernels (the flash_attn package, CUDA, bf16/fp16):
    flash_attn_varlen_func for the forward (with its lse) and
    _flash_attn_varlen_backward, called by parameter name so the signatures
    of flash-attn 2.x releases all fit; float32 goes through MathKernel.
    `module`: the flash_attn.flash_attn_interface module (tests pass a
    stand-in)."""

    def __init__(self, module=None):
        if module is None:
            from flash_attn import flash_attn_interface as module  # noqa: E402
        self.fa = module
        bwd = module._flash_attn_varlen_backward
        # flash-attn 2.6+ registers it as a torch custom op: read the
        # signature of the function it wraps
        self._bwd_params = inspect.signature(getattr(bwd, "_init_fn", bwd)).parameters

    @staticmethod
    def _usable(q):
        return q.device.type == "cuda" and q.dtype in (torch.bfloat16, torch.float16)

    def fwd(self, q, k, v, cu_q, cu_k, causal, scale):
        if not self._usable(q) or q.shape[0] == 0:
            return MathKernel.fwd(self, q, k, v, cu_q, cu_k, causal, scale)
        _check_causal_spans(cu_q, cu_k, causal)
        cq, ck, mq, mk = _varlen_args(q, cu_q, cu_k)
        out = self.fa.flash_attn_varlen_func(q, k, v, cq, ck, mq, mk, dropout_p=0.0,
                                             softmax_scale=scale, causal=causal,
                                             return_attn_probs=True)
        return out[0], _token_major_lse(out[1], q.shape[0], q.shape[1],
                                        "flash_attn_varlen_func")

    def _bwd_kwargs(self, known):
        """The backward's arguments by name; an unknown required one is an
        error naming it (a flash-attn whose backward changed)."""
        kw = {}
        for name, p in self._bwd_params.items():
            if name in known:
                kw[name] = known[name]
            elif p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            elif p.default is inspect.Parameter.empty:
                raise RuntimeError("flash_attn's _flash_attn_varlen_backward takes '%s', which "
                                   "nspcomm does not know; use SdpaKernel" % name)
        return kw

    def bwd(self, q, k, v, o, lse, do, cu_q, cu_k, causal, scale):
        if not self._usable(q) or q.shape[0] == 0:
            return MathKernel.bwd(self, q, k, v, o, lse, do, cu_q, cu_k, causal, scale)
        _check_causal_spans(cu_q, cu_k, causal)
        cq, ck, mq, mk = _varlen_args(q, cu_q, cu_k)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        known = {"dout": do, "q": q, "k": k, "v": v, "out": o,
                 "softmax_lse": lse.transpose(0, 1).contiguous(), "dq": dq, "dk": dk, "dv": dv,
                 "cu_seqlens_q": cq, "cu_seqlens_k": ck, "max_seqlen_q": mq, "max_seqlen_k": mk,
                 "dropout_p": 0.0, "softmax_scale": scale, "causal": causal,
                 "window_size": (-1, -1), "window_size_left": -1, "window_size_right": -1,
                 "softcap": 0.0, "alibi_slopes": None, "deterministic": False,
                 "rng_state": None, "zero_tensors": False}
        self.fa._flash_attn_varlen_backward(**self._bwd_kwargs(known))
        return dq, dk, dv


def default_kernel(device_type):
    """The kernel NestedAttention uses unless given one: on CUDA flash-attn's
    varlen kernels when flash_attn imports, else torch's (SdpaKernel)."""
    if device_type == "cuda":
        try:
            return FlashAttnKernel()
        except (ImportError, OSError):  # not installed, or built for another CUDA
            pass
    return SdpaKernel()

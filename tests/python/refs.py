"""The single-process reference the multi-process tests compare against:
attention of every sequence written out in float64 with torch autograd
(independent of nspcomm's kernel), and the error measure."""

import torch


def seq_attention(q, k, v, nq, nkv):
    """Causal GQA attention of one sequence, float64: q [L, nq, D], k, v [L, nkv, D]."""
    L, _, D = q.shape
    g = nq // nkv
    qh = q.transpose(0, 1)                                   # [nq, L, D]
    kh = k.transpose(0, 1).repeat_interleave(g, 0)
    vh = v.transpose(0, 1).repeat_interleave(g, 0)
    s = qh @ kh.transpose(-1, -2) / D ** 0.5
    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)                             # [nq, L]
    o = torch.softmax(s, -1) @ vh
    return o.transpose(0, 1), lse.transpose(0, 1)


def reference(seq_lens, seqs, q, k, v, do, nq, nkv, in_dtype=torch.float32):
    """o, lse, dq, dk, dv of the whole batch in float64, for the sequences
    `seqs` (other rows zero). The inputs are first rounded to in_dtype, so a
    bfloat16 run is compared with exact math on the same bfloat16 inputs."""
    starts = [0]
    for n in seq_lens:
        starts.append(starts[-1] + n)
    rnd = lambda t: t.to(in_dtype).double()  # noqa: E731
    q, k, v, do = rnd(q), rnd(k), rnd(v), rnd(do)
    out = {"o": torch.zeros_like(q), "lse": torch.zeros(q.shape[:2], dtype=torch.float64),
           "dq": torch.zeros_like(q), "dk": torch.zeros_like(k), "dv": torch.zeros_like(v)}
    for s in seqs:
        a, b = starts[s], starts[s + 1]
        qs, ks, vs = (t[a:b].clone().requires_grad_() for t in (q, k, v))
        o, lse = seq_attention(qs, ks, vs, nq, nkv)
        o.backward(do[a:b])
        out["o"][a:b], out["lse"][a:b] = o.detach(), lse.detach()
        out["dq"][a:b], out["dk"][a:b], out["dv"][a:b] = qs.grad, ks.grad, vs.grad
    return out


def compare(got, ref, idx):
    """max |got - ref| over this rank's rows / max(0.1, max |ref| there)
    (lse: / max(1, |lse|)). The floor matters where the exact gradient is 0
    (dq of a one-token sequence): there the error is absolute."""
    errs = {}
    for key, g in got.items():
        r = ref[key].index_select(0, idx)
        if r.numel() == 0:
            errs[key] = 0.0
            continue
        scale = max(1.0 if key == "lse" else 0.1, r.abs().max().item())
        errs[key] = (g.double() - r).abs().max().item() / scale
    return errs

"""Multi-rank cases of mapped host memory (run by workers.py): Comm.empty's
tensors, the nested all-to-all reading them in place (the library's
counters say which path each level took) against the ordinary exchange and
an independent head-sharded reference, and Comm.free's errors."""

import ctypes

import torch

import nspcomm

HEADS, D = 8, 16


def _raised(fn):
    """'ClassName: message' of what fn() raised, or 'no exception'."""
    try:
        fn()
        return "no exception"
    except Exception as e:  # noqa: BLE001
        return "%s: %s" % (type(e).__name__, e)


def _specs(rank):
    """(shape, dtype) of the tensors case_mem_empty allocates; sizes differ
    between ranks, as nsp_mem_alloc allows."""
    return [((rank + 2, 3, 5), torch.float32), ((7 + rank,), torch.bfloat16),
            ((0, 4), torch.float32), ((), torch.int64), ((3, 3), torch.float16)]


def case_mem_empty(comm, args):
    """Per spec: what empty() returned, whether data_ptr() is the region
    (bytes written at the region's address show in the tensor, and the
    tensor's writes at the address), then every region freed."""
    out, tensors = [], []
    for shape, dtype in _specs(comm.rank):
        t = comm.empty(shape, dtype)
        tensors.append(t)
        region = comm.region_of(t)
        nbytes = t.numel() * t.element_size()
        rec = {"shape": list(t.shape), "dtype": str(t.dtype), "device": t.device.type,
               "contiguous": t.is_contiguous(), "region": region and [region[0], region[1]],
               "address": t.untyped_storage().data_ptr(), "data_ptr": t.data_ptr(),
               "want_bytes": max(1, nbytes)}
        if nbytes:
            pattern = bytes((7 * i + comm.rank) % 251 for i in range(nbytes))
            ctypes.memmove(t.data_ptr(), pattern, nbytes)
            rec["reads_region"] = bytes(t.reshape(-1).view(torch.uint8).tolist()) == pattern
            t.reshape(-1).view(torch.uint8).fill_(0x5a)
            rec["writes_region"] = ctypes.string_at(t.data_ptr(), nbytes) == b"\x5a" * nbytes
        out.append(rec)
    view = tensors[0][1:]
    out.append({"view_region": comm.region_of(view) == comm.region_of(tensors[0]),
                "copy_region": comm.region_of(tensors[0].clone())})
    for t in tensors:
        comm.free(t)
    out.append({"after_free": [comm.region_of(t) for t in tensors]})
    return out


def _reference(plan, lay, X):
    """The head-sharded [rows, D] of X [T, HEADS, D] for this rank, written
    out from the layout rules (docs/reference/alltoall.md): level by level,
    the level's whole sequences in order, the rank's heads of the level
    (index i of degree d holds [i*H/d, (i+1)*H/d)); Ulysses groups only."""
    starts = [0]
    for n in plan.seq_lens:
        starts.append(starts[-1] + n)
    blocks = []
    for lv in lay.levels:
        h = HEADS // lv.degree
        h0 = lv.index * h
        for s in lv.seqs:
            blocks.append(X[starts[s]:starts[s + 1], h0:h0 + h, :].reshape(-1, D))
    return torch.cat(blocks) if blocks else X.new_empty((0, D))


def _delta(comm, before):
    now = comm.a2a_mapped_counts()
    return [now[0] - before[0], now[1] - before[1]]


def case_mem_a2a(comm, args):
    """Every round, float32 and bfloat16: the exchange of Comm.empty sources
    (mapped, automatically) against the ordinary one of plain tensors and
    the reference, both directions; the levels each call read in place or
    fell back (nsp_a2a_mapped_counts), and how many levels of degree > 1
    this rank has."""
    plan = nspcomm.Plan.from_json(open(args["plan"], "rb").read())
    tree = comm.tree()
    g = torch.Generator().manual_seed(5)
    T = sum(plan.seq_lens)
    out = []
    for rnd in range(plan.nrounds):
        lay = nspcomm.Layout(plan, rnd, comm.rank)
        for dt in (torch.float32, torch.bfloat16):
            X = torch.randint(-100, 100, (T, HEADS, D), generator=g).to(dt)
            src = X.index_select(0, lay.token_index()).contiguous()
            rec = {"round": rnd, "dtype": str(dt), "tokens": lay.local_tokens,
                   "levels": sum(1 for lv in lay.levels if lv.degree > 1)}
            c = comm.a2a_mapped_counts()
            plain = nspcomm.all_to_all(tree, lay, src)
            rec["plain_counts"] = _delta(comm, c)
            m = comm.empty(src.shape, dt)
            m.copy_(src)
            c = comm.a2a_mapped_counts()
            got = nspcomm.all_to_all(tree, lay, m)
            rec["s2h_counts"] = _delta(comm, c)
            rec["s2h_equal"] = bool(torch.equal(got, plain))
            rec["s2h_ref"] = bool(torch.equal(got, _reference(plan, lay, X)))
            h = comm.empty(got.shape, dt)
            h.copy_(got)
            c = comm.a2a_mapped_counts()
            back = nspcomm.all_to_all(tree, lay, h, nspcomm.HEAD_TO_SEQ, heads=HEADS,
                                      out=comm.empty(src.shape, dt))
            rec["h2s_counts"] = _delta(comm, c)
            rec["h2s_equal"] = bool(torch.equal(back, src))
            rec["h2s_plain_equal"] = bool(torch.equal(
                nspcomm.all_to_all(tree, lay, got, nspcomm.HEAD_TO_SEQ, heads=HEADS), src))
            c = comm.a2a_mapped_counts()
            off = nspcomm.all_to_all(tree, lay, m, mapped=False)
            rec["off_counts"] = _delta(comm, c)
            rec["off_equal"] = bool(torch.equal(off, plain))
            for t in (m, h, back):
                comm.free(t)
            out.append(rec)
    lay = nspcomm.Layout(plan, 0, comm.rank)
    src = torch.zeros(lay.local_tokens, HEADS, D)
    c = comm.a2a_mapped_counts()
    extra = {"forced": _raised(lambda: nspcomm.all_to_all(tree, lay, src, mapped=True))}
    # rank 0's source mapped, the others' not: the automatic choices differ
    region = comm.empty(src.shape)  # collective: every rank allocates one
    region.zero_()
    mine = region if comm.rank == 0 else src
    extra["mixed"] = _raised(lambda: nspcomm.all_to_all(tree, lay, mine))
    comm.free(region)
    extra["after_counts"] = _delta(comm, c)
    extra["after_works"] = bool(torch.equal(nspcomm.all_to_all(tree, lay, src),
                                            torch.zeros(lay.head_rows(HEADS), D)))
    out.append(extra)
    tree.destroy()
    return out


def case_mem_free(comm, args):
    """Comm.free's errors, then destroy() with one region left (the last
    case of its world: the world is destroyed)."""
    out = {}
    out["foreign"] = _raised(lambda: comm.free(torch.empty(4)))
    t = comm.empty(4)
    out["copy"] = _raised(lambda: comm.free(t.clone()))
    comm.free(t)
    out["double"] = _raised(lambda: comm.free(t))
    out["not_a_tensor"] = _raised(lambda: comm.free([1, 2]))
    # one rank passes a foreign tensor, the others their live region
    u = comm.empty((2, 2))
    out["one_foreign"] = _raised(lambda: comm.free(torch.empty(4) if comm.rank == 1 else u))
    out["kept"] = comm.region_of(u) is not None
    comm.free(u)
    out["bad_shape"] = _raised(lambda: comm.empty((3, -1) if comm.rank == 1 else (3, 1)))
    a, b = comm.empty(16), comm.empty((4, 4), torch.float64)
    comm.free(a)
    out["destroy"] = _raised(comm.destroy)  # b is left: the library frees it
    out["free_after_destroy"] = _raised(lambda: comm.free(b))
    return out

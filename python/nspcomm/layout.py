"""A rank's layout of one round as tensors: which tokens of the batch it holds,
in the order of its sequence-sharded buffer, their positions, cu_seqlens."""

import ctypes

from . import _lib
from ._lib import check


class Level:
    """One level of a layout (plain Python copies of nsp_layout_level_t)."""

    def __init__(self, lv):
        n = lv.nseqs
        self.degree, self.rank0, self.index, self.ring = lv.degree, lv.rank0, lv.index, lv.ring
        self.ulysses, self.ring_index = lv.ulysses, lv.ring_index
        self.seqs = list(lv.seqs[:n])
        self.seq_len = list(lv.seq_len[:n])
        self.chunk_start = list(lv.chunk_start[:n])
        self.chunk_len = list(lv.chunk_len[:n])
        self.chunk_offset = list(lv.chunk_offset[:n])
        self.seq_offset = list(lv.seq_offset[:n + 1])
        self.span_start = list(lv.span_start[:n])
        self.span_len = list(lv.span_len[:n])
        self.local_offset, self.local_tokens = lv.local_offset, lv.local_tokens
        self.full_tokens = lv.full_tokens

    def __repr__(self):
        return "Level(degree=%d, ring=%d, entries=%d, local_tokens=%d)" % (
            self.degree, self.ring, len(self.seqs), self.local_tokens)


class Layout:
    """Layout of `rank` in round `round` of `plan` (nsp_layout_create).

    The sequence-sharded buffer [T_local, heads, D] holds the rank's chunks
    level by level (ascending degree), inside a level entry by entry; the
    batch is the plan's sequences concatenated in plan order."""

    def __init__(self, plan, round, rank):
        self.plan, self.round, self.rank = plan, int(round), int(rank)
        L = _lib.lib()
        h = ctypes.c_void_p()
        if not 0 <= self.round < plan.nrounds:
            raise ValueError("round %d: the plan has rounds 0..%d" % (round, plan.nrounds - 1))
        check(L.nsp_layout_create(plan._ptr, self.round, self.rank, ctypes.byref(h)),
              "nsp_layout_create")
        self._h = h
        info = _lib.LayoutInfo()
        check(L.nsp_layout_query(h, ctypes.byref(info)), "nsp_layout_query")
        self.local_tokens, self.full_tokens = info.local_tokens, info.full_tokens
        self.plan_hash, self.ranks = info.plan_hash, info.ranks
        self.levels = []
        for lvl in range(info.nlevels):
            lv = _lib.LayoutLevel()
            check(L.nsp_layout_level(h, lvl, ctypes.byref(lv)), "nsp_layout_level")
            self.levels.append(Level(lv))

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and _lib._Loaded.lib is not None:
            _lib._Loaded.lib.nsp_layout_free(h)

    @property
    def handle(self):
        return self._h

    def _seq_starts(self):
        out, acc = [], 0
        for n in self.plan.seq_lens:
            out.append(acc)
            acc += n
        return out

    def _per_token(self, fn):
        import torch
        out = torch.empty(self.local_tokens, dtype=torch.long)
        for lv in self.levels:
            for j in range(len(lv.seqs)):
                n = lv.chunk_len[j]
                if n:
                    o = lv.chunk_offset[j]
                    out[o:o + n] = fn(lv, j) + torch.arange(n, dtype=torch.long)
        return out

    def token_index(self):
        """[T_local] int64: for each row of the sequence-sharded buffer, its
        token's index in the concatenated batch (the plan's sequences in plan
        order). local = batch.index_select(0, layout.token_index())."""
        starts = self._seq_starts()
        return self._per_token(lambda lv, j: starts[lv.seqs[j]] + lv.chunk_start[j])

    def position_ids(self):
        """[T_local] int64: each row's position in its own sequence (RoPE)."""
        return self._per_token(lambda lv, j: lv.chunk_start[j])

    def sequence_ids(self):
        """[T_local] int64: each row's sequence (index into plan.seq_lens)."""
        import torch
        out = torch.empty(self.local_tokens, dtype=torch.long)
        for lv in self.levels:
            for j in range(len(lv.seqs)):
                o = lv.chunk_offset[j]
                out[o:o + lv.chunk_len[j]] = lv.seqs[j]
        return out

    def cu_seqlens(self, level):
        """[entries + 1] int64 of `level`'s head-sharded block: where each
        entry (a whole sequence, or a zigzag span on a ring level) starts
        after the sequence-to-head exchange (what a varlen kernel receives)."""
        import torch
        return torch.tensor(self.levels[level].seq_offset, dtype=torch.long)

    def local_cu_seqlens(self):
        """[chunks + 1] int64: the chunks of the sequence-sharded buffer in
        order (every level, entry by entry)."""
        import torch
        ends = [0]
        for lv in self.levels:
            for j in range(len(lv.seqs)):
                ends.append(lv.chunk_offset[j] + lv.chunk_len[j])
        return torch.tensor(ends, dtype=torch.long)

    def level_slices(self):
        """[(degree, start, stop)] rows of the sequence-sharded buffer per level."""
        return [(lv.degree, lv.local_offset, lv.local_offset + lv.local_tokens)
                for lv in self.levels]

    def recompute_rows(self):
        """[T_local] bool: rows whose group the plan marks recomputed."""
        import torch
        rec = self.plan.recompute(self.round, self.rank)
        out = torch.zeros(self.local_tokens, dtype=torch.bool)
        for lv in self.levels:
            if rec.get(lv.degree, False):
                out[lv.local_offset:lv.local_offset + lv.local_tokens] = True
        return out

    def head_rows(self, heads):
        """Rows (of head_dim elements) of the head-sharded buffer of a tensor
        with `heads` heads: sum over levels of T_l * h_l."""
        rows = ctypes.c_int64()
        check(_lib.lib().nsp_layout_head_rows(self._h, int(heads), ctypes.byref(rows)),
              "nsp_layout_head_rows")
        return rows.value

    def __repr__(self):
        return "Layout(rank %d, round %d, %d tokens, levels %s)" % (
            self.rank, self.round, self.local_tokens, [lv.degree for lv in self.levels])

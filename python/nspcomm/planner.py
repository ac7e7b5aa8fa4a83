"""The planner from Python: Planner(model, cluster, ranks).plan(lengths) -> Plan."""

import ctypes
import json
import os
import tempfile

from . import _constants as C
from . import _lib
from ._lib import check

FLAG_GREEDY_FALLBACK = C.NSP_PLAN_FLAG_GREEDY_FALLBACK
FLAG_SOLVER_TIMEOUT = C.NSP_PLAN_FLAG_SOLVER_TIMEOUT
FLAG_RING = C.NSP_PLAN_FLAG_RING


def _load_spec(spec, what, ranks=None):
    """A model/cluster from a preset name, a dict (the file's keys) or a path."""
    L = _lib.lib()
    out = _lib.Model() if what == "model" else _lib.Cluster()
    if isinstance(spec, (_lib.Model, _lib.Cluster)):
        ctypes.memmove(ctypes.byref(out), ctypes.byref(spec), ctypes.sizeof(out))
        return out
    if isinstance(spec, dict):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(spec, f)
            path = f.name
        try:
            return _load_spec(path, what, ranks)
        finally:
            os.unlink(path)
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError("%s must be a preset name, a dict or a path, not %r" % (what, type(spec)))
    spec = os.fspath(spec)
    if os.path.exists(spec) or spec.endswith(".json"):
        fn = L.nsp_model_load if what == "model" else L.nsp_cluster_load
        check(fn(spec.encode(), ctypes.byref(out)), "%s %s" % (what, spec))
        if what == "cluster" and ranks is not None and out.ranks != ranks:
            raise ValueError("cluster file %s has %d ranks, not %d" % (spec, out.ranks, ranks))
    elif what == "model":
        check(L.nsp_model_preset(spec.encode(), ctypes.byref(out)), "model")
    else:
        check(L.nsp_cluster_preset(spec.encode(), int(ranks), ctypes.byref(out)), "cluster")
    return out


def _fields(struct):
    d = {}
    for name, _t in struct._fields_:
        v = getattr(struct, name)
        d[name] = v.decode() if isinstance(v, bytes) else v
    return d


class Group:
    """One group of a round: ranks [rank0, rank0 + size), its sequences."""
    __slots__ = ("rank0", "size", "seqs", "recompute", "pipelined", "ring")

    def __init__(self, g):
        self.rank0, self.size, self.ring = g.rank0, g.size, g.ring
        self.seqs = list(g.seqs[:g.nseqs])
        self.recompute, self.pipelined = bool(g.recompute), bool(g.pipelined)

    def __repr__(self):
        return "Group(rank0=%d, size=%d, ring=%d, seqs=%d%s)" % (
            self.rank0, self.size, self.ring, len(self.seqs),
            ", recompute" if self.recompute else "")


class Plan:
    """A plan (owns an nsp_plan_t). Read-only Python views: .rounds (a list of
    lists of Group), .seq_lens, .planner, .predicted (dict), .flags."""

    def __init__(self, ptr):
        self._ptr = ptr
        p = ptr.contents
        self.planner = p.planner.decode()
        self.seq_lens = list(p.seq_lens[:p.nseqs])
        self.ranks = p.cluster.ranks
        self.rounds = [[Group(r.groups[i]) for i in range(r.ngroups)]
                       for r in p.rounds[:p.nrounds]]
        self.flags = p.flags
        self.model = _fields(p.model)
        self.cluster = _fields(p.cluster)
        pr = p.predicted
        self.predicted = {"step_s": pr.step_s, "lower_bound_s": pr.lower_bound_s,
                          "plan_ms": pr.plan_ms,
                          "rank_s": list(pr.rank_s[:self.ranks]) if pr.rank_s else [],
                          "rank_mem_bytes": (list(pr.rank_mem_bytes[:self.ranks])
                                             if pr.rank_mem_bytes else [])}

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr and _lib._Loaded.lib is not None:
            _lib._Loaded.lib.nsp_plan_free(ptr)

    @property
    def nrounds(self):
        return len(self.rounds)

    @property
    def deterministic(self):
        """False when the plan may differ between ranks that planned the same
        batch (a MILP that hit its time limit): broadcast it instead."""
        return not self.flags & FLAG_SOLVER_TIMEOUT and self.planner != "disjoint"

    def recompute(self, rnd, rank):
        """Whether `rank`'s groups in round `rnd` recompute activations, per
        degree: {degree: bool} over the groups holding the rank."""
        out = {}
        for g in self.rounds[rnd]:
            if g.rank0 <= rank < g.rank0 + g.size:
                out[g.size] = out.get(g.size, False) or g.recompute
        return out

    def to_json(self):
        """The plan as "nspcomm-plan-v1" JSON bytes (broadcast them, then
        Plan.from_json on every rank)."""
        c = _lib.libc()
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            f = c.fopen(path.encode(), b"w")
            if not f:
                raise OSError("cannot open %s" % path)
            status = _lib.lib().nsp_plan_write_json(self._ptr, f)
            c.fclose(f)
            check(status, "nsp_plan_write_json")
            with open(path, "rb") as fh:
                return fh.read()
        finally:
            os.unlink(path)

    @classmethod
    def from_json(cls, data):
        """Parse what to_json() wrote (bytes or str)."""
        if isinstance(data, str):
            data = data.encode()
        ptr = ctypes.POINTER(_lib.PlanC)()
        check(_lib.lib().nsp_plan_read_json(bytes(data), ctypes.byref(ptr)), "Plan.from_json")
        return cls(ptr)

    def validate(self):
        check(_lib.lib().nsp_plan_validate(self._ptr), "nsp_plan_validate")

    def __repr__(self):
        return "Plan(%s, %d sequences, %d rounds, predicted %.4g s)" % (
            self.planner, len(self.seq_lens), self.nrounds, self.predicted["step_s"])


def planner_kind(kind):
    """The nsp_planner_kind_t of a planner name (any kind the library knows)."""
    if isinstance(kind, int):
        return kind
    k = ctypes.c_int()
    check(_lib.lib().nsp_planner_kind_from_name(str(kind).encode(), ctypes.byref(k)), "planner")
    return k.value


class Planner:
    """Plans batches for a model on a cluster of `ranks` ranks.

    model: a preset name ("llama3-8b", ...), a dict with the keys of a model
    file, or a path to one; cluster likewise ("h100", a dict, a file)."""

    def __init__(self, model, cluster, ranks=None):
        self.model = _load_spec(model, "model")
        if ranks is None and not isinstance(cluster, (str, os.PathLike)):
            ranks = cluster.get("ranks") if isinstance(cluster, dict) else None
        self.cluster = _load_spec(cluster, "cluster", ranks)
        self.ranks = self.cluster.ranks

    def plan(self, lengths, kind="nested", static_degree=None, static_recompute=None,
             time_limit_s=None, level_degrees=None, max_rounds=None, enable_ring=None):
        """Plan one batch of sequence `lengths` (tokens) with planner `kind`
        ("nested", "static", "disjoint", or another kind of the library)."""
        lens = [int(x) for x in lengths]
        arr = (ctypes.c_int64 * max(1, len(lens)))(*lens)
        p = _lib.PlannerParams(kind=planner_kind(kind))
        keep = []
        if static_degree is not None:
            p.field_mask |= C.NSP_PLANNER_FIELD_STATIC_DEGREE
            p.static_degree = int(static_degree)
        if static_recompute is not None:
            p.field_mask |= C.NSP_PLANNER_FIELD_STATIC_RECOMPUTE
            p.static_recompute = int(static_recompute)
        if time_limit_s is not None:
            p.field_mask |= C.NSP_PLANNER_FIELD_TIME_LIMIT
            p.time_limit_s = float(time_limit_s)
        if level_degrees is not None:
            degs = (ctypes.c_int * len(level_degrees))(*level_degrees)
            keep.append(degs)
            p.field_mask |= C.NSP_PLANNER_FIELD_LEVEL_DEGREES
            p.nlevels, p.level_degrees = len(level_degrees), degs
        if max_rounds is not None:
            p.field_mask |= C.NSP_PLANNER_FIELD_MAX_ROUNDS
            p.max_rounds = int(max_rounds)
        if enable_ring is not None:
            p.field_mask |= C.NSP_PLANNER_FIELD_ENABLE_RING
            p.enable_ring = int(bool(enable_ring))
        ptr = ctypes.POINTER(_lib.PlanC)()
        check(_lib.lib().nsp_plan_create(ctypes.byref(self.model), ctypes.byref(self.cluster),
                                         arr, len(lens), ctypes.byref(p), ctypes.byref(ptr)),
              "plan(%s)" % kind)
        return Plan(ptr)


def sample_batch(workload_path, seed, batch_index, token_budget, max_len):
    """One batch of lengths drawn from a workload file (nsp_workload_sample)."""
    L = _lib.lib()
    w = ctypes.c_void_p()
    check(L.nsp_workload_load(os.fspath(workload_path).encode(), ctypes.byref(w)), "workload")
    try:
        lens = ctypes.POINTER(ctypes.c_int64)()
        n = ctypes.c_int()
        check(L.nsp_workload_sample(w, seed, batch_index, token_budget, max_len,
                                    ctypes.byref(lens), ctypes.byref(n)), "workload sample")
        out = list(lens[:n.value])
        _lib.libc().free(ctypes.cast(lens, ctypes.c_void_p))
        return out
    finally:
        L.nsp_workload_free(w)

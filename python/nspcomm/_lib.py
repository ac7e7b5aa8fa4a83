"""Loading libnspcomm, the ctypes mirrors of its public structs, and errors.

The structs below mirror include/nspcomm.h field for field. At load the
library's version (nsp_version) and the size of every mirrored struct
(nsp_struct_size) are compared with these mirrors; any difference raises
NspLibraryError before a single struct crosses the boundary. Every field's
offset, and every constant of _constants.py, is checked against the header
by tests/python/test_abi.py (a probe compiled against it).
"""

import ctypes
import os
import sys
import threading

from . import _constants as C

# The header version these mirrors were written against (major, minor).
ABI_VERSION = (C.NSP_VERSION_MAJOR, C.NSP_VERSION_MINOR)

c_int, c_int64, c_uint64, c_uint32 = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint32
c_double, c_float, c_size_t, c_void_p = ctypes.c_double, ctypes.c_float, ctypes.c_size_t, ctypes.c_void_p
P = ctypes.POINTER

STATUS_NAMES = C.STATUS_NAMES
ERR_INVALID_ARG, ERR_UNSUPPORTED = C.NSP_ERR_INVALID_ARG, C.NSP_ERR_UNSUPPORTED
ERR_TIMEOUT, ERR_PEER_FAILED = C.NSP_ERR_TIMEOUT, C.NSP_ERR_PEER_FAILED
ERR_MISMATCH, ERR_BACKEND = C.NSP_ERR_MISMATCH, C.NSP_ERR_BACKEND


class NspError(RuntimeError):
    """An nspcomm call failed: .status (the nsp_status_t code), .name and the
    library's message (nsp_last_error) as the exception text."""

    def __init__(self, status, message):
        self.status = status
        self.name = STATUS_NAMES.get(status, "NSP_ERR_UNKNOWN")
        super().__init__("%s: %s" % (self.name, message))


class NspTimeoutError(NspError, TimeoutError):
    """NSP_ERR_TIMEOUT or NSP_ERR_PEER_FAILED: a peer stalled or died."""


class NspLibraryError(ImportError):
    """libnspcomm could not be found or does not match these bindings."""


# ---- struct mirrors (include/nspcomm.h) -----------------------------------

class Model(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("layers", c_int), ("hidden", c_int),
                ("q_heads", c_int), ("kv_heads", c_int), ("head_dim", c_int),
                ("ffn", c_double), ("experts", c_int), ("topk", c_int), ("params", c_double)]


class Cluster(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("ranks", c_int), ("ranks_per_node", c_int)] + [
        (k, c_double) for k in ("mem_bytes", "workspace_bytes", "gemm_flops", "attn_flops",
                                "bw_intra", "bw_inter", "lat_intra", "lat_inter", "overlap",
                                "round_fixed_s", "cpu_byte_intra", "cpu_byte_inter",
                                "cpu_call_intra", "cpu_call_inter")]


class PlanGroup(ctypes.Structure):
    _fields_ = [("rank0", c_int), ("size", c_int), ("nseqs", c_int), ("seqs", P(c_int)),
                ("recompute", c_int), ("pipelined", c_int), ("ring", c_int)]


class PlanRound(ctypes.Structure):
    _fields_ = [("ngroups", c_int), ("groups", P(PlanGroup))]


class PlanPrediction(ctypes.Structure):
    _fields_ = [("step_s", c_double), ("lower_bound_s", c_double), ("plan_ms", c_double),
                ("rank_s", P(c_double)), ("rank_mem_bytes", P(c_double)),
                ("round_s", c_double)]


class PlanC(ctypes.Structure):
    _fields_ = [("planner", ctypes.c_char * 32), ("model", Model), ("cluster", Cluster),
                ("nseqs", c_int), ("seq_lens", P(c_int64)), ("nrounds", c_int),
                ("rounds", P(PlanRound)), ("flags", ctypes.c_uint),
                ("predicted", PlanPrediction)]


class PlannerParams(ctypes.Structure):
    _fields_ = [("field_mask", c_uint64), ("kind", c_int), ("static_degree", c_int),
                ("static_recompute", c_int), ("time_limit_s", c_double), ("nlevels", c_int),
                ("level_degrees", P(c_int)), ("max_rounds", c_int), ("enable_ring", c_int),
                ("max_seqlen_per_rank", c_int64)]


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * C.NSP_UNIQUE_ID_BYTES)]


class Config(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("backend", ctypes.c_char_p), ("timeout_s", c_double), ("cuda_device", c_int)]


OOB_ALLGATHER = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p, P(c_void_p))
OOB_TEST = ctypes.CFUNCTYPE(c_int, c_void_p)
OOB_FREE = ctypes.CFUNCTYPE(c_int, c_void_p)


class OobColl(ctypes.Structure):
    _fields_ = [("allgather", OOB_ALLGATHER), ("req_test", OOB_TEST), ("req_free", OOB_FREE),
                ("coll_info", c_void_p), ("n_oob_eps", c_uint32), ("oob_ep", c_uint32)]


class LayoutInfo(ctypes.Structure):
    _fields_ = [("rank", c_int), ("round", c_int), ("ranks", c_int), ("nlevels", c_int),
                ("local_tokens", c_int64), ("full_tokens", c_int64), ("plan_hash", c_uint64)]


class LayoutLevel(ctypes.Structure):
    _fields_ = [("degree", c_int), ("rank0", c_int), ("index", c_int), ("ring", c_int),
                ("nseqs", c_int), ("seqs", P(c_int)), ("seq_len", P(c_int64)),
                ("chunk_start", P(c_int64)), ("chunk_len", P(c_int64)),
                ("chunk_offset", P(c_int64)), ("seq_offset", P(c_int64)),
                ("local_offset", c_int64), ("local_tokens", c_int64), ("full_tokens", c_int64),
                ("ulysses", c_int), ("ulysses_rank0", c_int), ("ulysses_index", c_int),
                ("ring_index", c_int), ("span_start", P(c_int64)), ("span_len", P(c_int64))]


class LayoutHeads(ctypes.Structure):
    _fields_ = [("first_head", c_int), ("nheads", c_int), ("replicas", c_int),
                ("row_offset", c_int64), ("rows", c_int64)]


class A2aParams(ctypes.Structure):
    _fields_ = [("field_mask", c_uint64), ("direction", c_int), ("heads", c_int),
                ("head_dim", c_int), ("elem_size", c_size_t), ("src", c_void_p),
                ("dst", c_void_p), ("stream", c_void_p), ("replicas", c_int),
                ("serial", c_int), ("check", c_int), ("mapped", c_int),
                ("src_bytes", c_size_t), ("dst_bytes", c_size_t)]


class AttnBytes(ctypes.Structure):
    _fields_ = [(k, c_size_t) for k in ("q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv",
                                        "delta")]


class AttnParams(ctypes.Structure):
    _fields_ = [("q_heads", c_int), ("kv_heads", c_int), ("head_dim", c_int),
                ("scale", c_float), ("causal", c_int), ("field_mask", c_uint64),
                ("bytes", AttnBytes)]


class AttnBatch(ctypes.Structure):
    _fields_ = [("params", AttnParams), ("dtype", c_int), ("q_head0", c_int),
                ("kv_head0", c_int), ("nseqs", c_int), ("q_offsets", P(c_int64)),
                ("kv_offsets", P(c_int64)), ("max_q_len", c_int64), ("max_kv_len", c_int64),
                ("level", c_int), ("stream", c_void_p)]


ATTN_FWD = ctypes.CFUNCTYPE(c_int, c_void_p, P(AttnBatch), c_void_p, c_void_p, c_void_p,
                            c_void_p, P(c_float))
ATTN_BWD = ctypes.CFUNCTYPE(c_int, c_void_p, P(AttnBatch), c_void_p, c_void_p, c_void_p,
                            c_void_p, P(c_float), c_void_p, c_void_p, c_void_p, c_void_p)


class AttnKernel(ctypes.Structure):
    _fields_ = [("fwd", ATTN_FWD), ("bwd", ATTN_BWD), ("ctx", c_void_p)]


class NestedAttnParams(ctypes.Structure):
    _fields_ = [("field_mask", c_uint64), ("attn", AttnParams), ("kernel", AttnKernel),
                ("dtype", c_int), ("serial", c_int), ("check", c_int), ("max_slices", c_int),
                ("dkv_f32", c_int)]


class LevelStats(ctypes.Structure):
    _fields_ = [("degree", c_int), ("ring", c_int), ("ulysses", c_int), ("nseqs", c_int),
                ("tokens", c_int64), ("compute_s", c_double), ("wait_s", c_double),
                ("a2a_bytes", c_uint64), ("ring_bytes", c_uint64)]


class NestedAttnStats(ctypes.Structure):
    _fields_ = [("nlevels", c_int), ("wall_s", c_double), ("compute_s", c_double),
                ("wait_s", c_double), ("bytes_sent", c_uint64),
                ("level", LevelStats * C.NSP_TREE_MAX_LEVELS)]


# Every mirror, by the typedef name nsp_struct_size() knows.
MIRRORS = {
    "nsp_model_t": Model, "nsp_cluster_t": Cluster, "nsp_plan_group_t": PlanGroup,
    "nsp_plan_round_t": PlanRound, "nsp_plan_prediction_t": PlanPrediction,
    "nsp_plan_t": PlanC, "nsp_planner_params_t": PlannerParams, "nsp_unique_id_t": UniqueId,
    "nsp_config_t": Config, "nsp_oob_coll_t": OobColl, "nsp_layout_info_t": LayoutInfo,
    "nsp_layout_level_t": LayoutLevel, "nsp_layout_heads_t": LayoutHeads,
    "nsp_a2a_params_t": A2aParams, "nsp_attn_params_t": AttnParams,
    "nsp_attn_batch_t": AttnBatch, "nsp_attn_kernel_t": AttnKernel,
    "nsp_nested_attn_params_t": NestedAttnParams, "nsp_nested_attn_level_stats_t": LevelStats,
    "nsp_nested_attn_stats_t": NestedAttnStats,
}

# ---- finding and loading the library --------------------------------------

LIB_NAME = "libnspcomm.so"


def _build_dirs():
    """Build trees to look in: NSPCOMM_BUILD_DIR, then build/ beside the
    package sources (a checkout, editable install) and above the cwd."""
    out = []
    env = os.environ.get("NSPCOMM_BUILD_DIR")
    if env:
        out.append(env)
    for start in (os.path.dirname(os.path.abspath(__file__)), os.getcwd()):
        d = start
        for _ in range(6):
            out.append(os.path.join(d, "build"))
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    return out


def candidates():
    """Every path tried, in order (NSPCOMM_LIB first)."""
    out = []
    env = os.environ.get("NSPCOMM_LIB")
    if env:
        out.append(env)
        return out  # explicit: nothing else
    for b in _build_dirs():
        out.append(os.path.join(b, "lib", ".libs", LIB_NAME))  # the installed-library build
        out.append(os.path.join(b, ".libs", LIB_NAME))
    for prefix in (sys.prefix, "/usr/local", "/usr"):
        for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            out.append(os.path.join(prefix, libdir, LIB_NAME))
    out.append(LIB_NAME + ".0")  # the loader's own path (ld.so.conf, LD_LIBRARY_PATH)
    return out


# ---- the functions the bindings call --------------------------------------

# name: (restype, argtypes), as include/nspcomm.h declares them
# (tests/python/test_abi.py checks every one against the header's prototype).
_STATUS_FUNCTIONS = {  # nsp_status_t (c_int) functions: their argtypes
    "nsp_version": [P(c_int), P(c_int), P(c_int), P(ctypes.c_uint)],
    "nsp_struct_size": [ctypes.c_char_p, P(c_size_t)],
    "nsp_model_preset": [ctypes.c_char_p, P(Model)],
    "nsp_cluster_preset": [ctypes.c_char_p, c_int, P(Cluster)],
    "nsp_model_load": [ctypes.c_char_p, P(Model)],
    "nsp_cluster_load": [ctypes.c_char_p, P(Cluster)],
    "nsp_planner_kind_from_name": [ctypes.c_char_p, P(c_int)],
    "nsp_plan_create": [P(Model), P(Cluster), P(c_int64), c_int, P(PlannerParams),
                        P(P(PlanC))],
    "nsp_plan_validate": [P(PlanC)],
    "nsp_plan_evaluate": [P(PlanC)],
    "nsp_plan_write_json": [P(PlanC), c_void_p],
    "nsp_plan_read_json": [ctypes.c_char_p, P(P(PlanC))],
    "nsp_workload_load": [ctypes.c_char_p, P(c_void_p)],
    "nsp_workload_sample": [c_void_p, c_uint64, c_int, c_int64, c_int64, P(P(c_int64)),
                            P(c_int)],
    "nsp_layout_create": [P(PlanC), c_int, c_int, P(c_void_p)],
    "nsp_layout_query": [c_void_p, P(LayoutInfo)],
    "nsp_layout_level": [c_void_p, c_int, P(LayoutLevel)],
    "nsp_layout_heads": [c_void_p, c_int, c_int, P(LayoutHeads)],
    "nsp_get_unique_id": [P(UniqueId)],
    "nsp_unique_id_to_string": [P(UniqueId), ctypes.c_char_p, c_size_t],
    "nsp_unique_id_from_string": [ctypes.c_char_p, P(UniqueId)],
    "nsp_comm_init_rank": [P(c_void_p), c_int, UniqueId, c_int, P(Config)],
    "nsp_comm_init_oob": [P(c_void_p), P(OobColl), P(Config)],
    "nsp_comm_init_env": [P(c_void_p), P(Config)],
    "nsp_comm_from_nccl": [P(c_void_p), c_void_p, P(Config)],
    "nsp_comm_backend": [c_void_p, P(ctypes.c_char_p)],
    "nsp_launcher_detect": [P(ctypes.c_char_p), P(c_int), P(c_int)],
    "nsp_comm_destroy": [c_void_p],
    "nsp_comm_rank": [c_void_p, P(c_int)],
    "nsp_comm_size": [c_void_p, P(c_int)],
    "nsp_comm_barrier": [c_void_p],
    "nsp_comm_allgather": [c_void_p, c_void_p, c_void_p, c_size_t],
    "nsp_mem_alloc": [c_void_p, c_size_t, P(c_void_p)],
    "nsp_mem_free": [c_void_p, c_void_p],
    "nsp_tree_create": [c_void_p, P(c_int), c_int, P(c_void_p)],
    "nsp_tree_destroy": [c_void_p],
    "nsp_tree_nlevels": [c_void_p, P(c_int)],
    "nsp_tree_degree": [c_void_p, c_int, P(c_int)],
    "nsp_nested_attn_create": [c_void_p, c_void_p, P(NestedAttnParams), P(c_void_p)],
    "nsp_nested_attn_fwd": [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                            P(c_void_p), P(NestedAttnStats)],
    "nsp_nested_attn_bwd": [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                            c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                            P(NestedAttnStats)],
    "nsp_nested_attn_destroy": [c_void_p],
    "nsp_nested_attn_set_stream": [c_void_p, c_void_p],
    "nsp_layout_head_rows": [c_void_p, c_int, P(c_int64)],
    "nsp_a2a_post": [c_void_p, c_void_p, P(A2aParams), P(c_void_p)],
    "nsp_a2a_mapped_counts": [c_void_p, P(c_uint64), P(c_uint64)],
    "nsp_request_wait": [c_void_p],
    "nsp_request_free": [c_void_p],
}
SIGNATURES = {name: (c_int, args) for name, args in _STATUS_FUNCTIONS.items()}
SIGNATURES.update({
    "nsp_last_error": (ctypes.c_char_p, []),
    "nsp_status_string": (ctypes.c_char_p, [c_int]),
    "nsp_plan_free": (None, [P(PlanC)]),
    "nsp_layout_free": (None, [c_void_p]),
    "nsp_workload_free": (None, [c_void_p]),
    "nsp_nested_attn_saved_free": (None, [c_void_p]),
    "nsp_workload_count": (c_size_t, [c_void_p]),
})


def _declare(lib):
    """argtypes/restype of every function the bindings call (SIGNATURES)."""
    for name, (restype, args) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = restype


def _check_abi(lib, path):
    """Version and struct sizes against the mirrors; NspLibraryError if not."""
    if not hasattr(lib, "nsp_version") or not hasattr(lib, "nsp_struct_size"):
        raise NspLibraryError("%s has no nsp_version/nsp_struct_size: it is older than these "
                              "bindings (nspcomm %d.%d); rebuild nspcomm" % ((path,) + ABI_VERSION))
    major, minor, patch, code = c_int(), c_int(), c_int(), ctypes.c_uint()
    lib.nsp_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch),
                    ctypes.byref(code))
    if (major.value, minor.value) != ABI_VERSION:
        raise NspLibraryError("%s is nspcomm %d.%d.%d but these bindings are for %d.%d: install "
                              "the matching package (pip install ./python from the same "
                              "checkout)" % (path, major.value, minor.value, patch.value,
                                             ABI_VERSION[0], ABI_VERSION[1]))
    bad = []
    for name, mirror in MIRRORS.items():
        size = c_size_t()
        if lib.nsp_struct_size(name.encode(), ctypes.byref(size)) != 0:
            bad.append("%s (unknown to the library)" % name)
        elif size.value != ctypes.sizeof(mirror):
            bad.append("%s (library %d bytes, bindings %d)" % (name, size.value,
                                                               ctypes.sizeof(mirror)))
    if bad:
        raise NspLibraryError("%s (nspcomm %d.%d.%d) does not match these bindings: %s; install "
                              "the bindings of the same checkout" %
                              (path, major.value, minor.value, patch.value, ", ".join(bad)))
    return "%d.%d.%d" % (major.value, minor.value, patch.value)


def _torch_first():
    """Import torch (when installed) before libnspcomm: a libnspcomm built with
    NCCL pulls in libnccl.so.2, and torch loaded after it would bind to that
    (older) NCCL and fail (undefined symbol ncclCommResume). Loaded in this
    order, both share torch's NCCL."""
    import importlib.util
    if "torch" not in sys.modules and os.environ.get("NSPCOMM_NO_TORCH") != "1":
        try:
            if importlib.util.find_spec("torch") is not None:
                import torch  # noqa: F401
        except ImportError:
            pass


class _Loaded:
    lib = None
    path = None
    version = None
    lock = threading.Lock()


def lib():
    """The loaded, checked library (loaded on first use)."""
    if _Loaded.lib is not None:
        return _Loaded.lib
    with _Loaded.lock:
        if _Loaded.lib is not None:
            return _Loaded.lib
        _torch_first()
        tried = []
        for path in candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(path)
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            version = _check_abi(handle, path)
            _declare(handle)
            _Loaded.lib, _Loaded.path, _Loaded.version = handle, path, version
            return handle
        raise NspLibraryError("libnspcomm not found; set NSPCOMM_LIB=/path/to/libnspcomm.so, "
                              "or NSPCOMM_BUILD_DIR to an nspcomm build tree, or install nspcomm "
                              "(make install). Tried: " + "; ".join(tried))


def last_error():
    msg = lib().nsp_last_error()
    return msg.decode(errors="replace") if msg else ""


def check(status, what=""):
    """Raise NspError (NspTimeoutError for a dead/stalled peer) unless NSP_OK."""
    if status == 0:
        return
    msg = last_error() or (lib().nsp_status_string(status) or b"").decode()
    if what:
        msg = "%s: %s" % (what, msg)
    cls = NspTimeoutError if status in (ERR_TIMEOUT, ERR_PEER_FAILED) else NspError
    raise cls(status, msg)


def libc():
    """The C library (fopen/fclose for nsp_plan_write_json)."""
    c = ctypes.CDLL(None)
    c.fopen.restype = c_void_p
    c.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    c.fclose.argtypes = [c_void_p]
    c.free.argtypes = [c_void_p]
    return c


def library_path():
    lib()
    return _Loaded.path


def library_version():
    lib()
    return _Loaded.version


__all__ = ["NspError", "NspTimeoutError", "NspLibraryError", "lib", "check", "candidates"]

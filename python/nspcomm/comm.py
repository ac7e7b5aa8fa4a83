"""Communicators and trees: bootstrap from torchrun/mpirun/srun environments or
through a torch.distributed Store (the out-of-band callbacks of
nsp_comm_init_oob, as torch-ucc does), on the UCX backend (host memory) or
the NCCL backend (CUDA memory); or a world borrowed from the job's
ProcessGroupNCCL (nsp_comm_from_nccl)."""

import ctypes
import itertools
import os

from . import _constants as C
from . import _lib
from ._lib import check

# NSP_VERSION_CODE of the header these bindings mirror (major.minor.0)
_VERSION_CODE = C.NSP_VERSION_MAJOR * 10000 + C.NSP_VERSION_MINOR * 100


def _config(timeout_s=None, backend=None, cuda_device=None):
    cfg = _lib.Config()
    cfg.size = ctypes.sizeof(_lib.Config)
    cfg.magic = C.NSP_CONFIG_MAGIC
    cfg.version = _VERSION_CODE
    cfg.backend = backend.encode() if backend else None
    cfg.timeout_s = float(timeout_s) if timeout_s else 0.0
    cfg.cuda_device = -1 if cuda_device is None else int(cuda_device)
    return cfg


def launcher():
    """(name, rank, size) of the launcher that started this process
    ("torchrun", "mpirun", "srun", "pmi", "nspcomm"), or (None, 0, 0)."""
    name, rank, size = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
    check(_lib.lib().nsp_launcher_detect(ctypes.byref(name), ctypes.byref(rank),
                                         ctypes.byref(size)), "nsp_launcher_detect")
    return (name.value.decode() if name.value else None), rank.value, size.value


class _StoreOob:
    """nsp_oob_coll_t over a torch.distributed Store: allgather = every rank
    sets its key, then reads everyone's (blocking on the store's timeout)."""

    _gen = itertools.count()

    def __init__(self, store, rank, size, prefix):
        self.store, self.rank, self.size = store, rank, size
        self.prefix = "%s/%d" % (prefix, next(self._gen))
        self.calls = 0
        self.error = None
        self.cb = (_lib.OOB_ALLGATHER(self._allgather), _lib.OOB_TEST(lambda req: 0),
                   _lib.OOB_FREE(lambda req: 0))

    def _allgather(self, sbuf, rbuf, msglen, info, req):
        try:
            k = self.calls
            self.calls += 1
            self.store.set("%s/%d/%d" % (self.prefix, k, self.rank),
                           ctypes.string_at(sbuf, msglen))
            for r in range(self.size):
                data = self.store.get("%s/%d/%d" % (self.prefix, k, r))
                if len(data) != msglen:
                    raise ValueError("rank %d gave %d bytes, not %d" % (r, len(data), msglen))
                ctypes.memmove(rbuf + r * msglen, data, msglen)
            req[0] = None
            return 0
        except Exception as e:  # never let an exception unwind through C
            self.error = e
            return _lib.ERR_BACKEND

    def coll(self):
        return _lib.OobColl(self.cb[0], self.cb[1], self.cb[2], None, self.size, self.rank)


class Comm:
    """A world communicator (nsp_comm_t). Use init() or from_process_group().

    .backend: "ucx" (host memory: CPU tensors) or "nccl" (CUDA memory);
    .cuda_device: the CUDA device index of an "nccl" world (None on "ucx")."""

    def __init__(self, handle, cuda_device=None, keep=None):
        self._h = handle
        L = _lib.lib()
        r, n = ctypes.c_int(), ctypes.c_int()
        name = ctypes.c_char_p()
        check(L.nsp_comm_rank(handle, ctypes.byref(r)))
        check(L.nsp_comm_size(handle, ctypes.byref(n)))
        check(L.nsp_comm_backend(handle, ctypes.byref(name)))
        self.rank, self.size = r.value, n.value
        self.backend = name.value.decode()
        self.cuda_device = cuda_device if self.backend == "nccl" else None
        self._keep = keep  # what the C world borrows (a process group) until destroy
        self._trees = []

    @property
    def handle(self):
        if not self._h:
            raise ValueError("the communicator was destroyed")
        return self._h

    def barrier(self):
        check(_lib.lib().nsp_comm_barrier(self.handle), "barrier")

    def allgather(self, data):
        """Every rank gives `data` (bytes of one length on every rank); returns
        the list of every rank's bytes in rank order."""
        data = bytes(data)
        out = ctypes.create_string_buffer(len(data) * self.size)
        check(_lib.lib().nsp_comm_allgather(self.handle, data, out, len(data)), "allgather")
        raw = out.raw
        return [raw[i * len(data):(i + 1) * len(data)] for i in range(self.size)]

    def broadcast_bytes(self, data, root=0):
        """`data` of rank `root` on every rank (variable length; two allgathers)."""
        import struct
        n = len(data) if self.rank == root else 0
        sizes = [struct.unpack("<q", b)[0] for b in self.allgather(struct.pack("<q", n))]
        size = sizes[root]
        mine = bytes(data) if self.rank == root else b"\0" * size
        return self.allgather(mine.ljust(size, b"\0"))[root]

    def tree(self, degrees=None):
        """The nested tree over this world (nsp_tree_create); degrees None:
        the library's default for the placement (1, 2, 4, ... per node)."""
        t = Tree(self, degrees)
        self._trees.append(t)
        return t

    def destroy(self):
        """Destroy the trees built on it, then the communicator (local)."""
        for t in self._trees:
            t.destroy()
        self._trees = []
        h, self._h = self._h, None
        if h:
            check(_lib.lib().nsp_comm_destroy(h), "nsp_comm_destroy")
        self._keep = None

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass


class Tree:
    """The nested tree of sub-communicators over a world (nsp_tree_t)."""

    def __init__(self, comm, degrees=None):
        self.comm = comm
        h = ctypes.c_void_p()
        if degrees:
            arr = (ctypes.c_int * len(degrees))(*degrees)
            check(_lib.lib().nsp_tree_create(comm.handle, arr, len(degrees), ctypes.byref(h)),
                  "nsp_tree_create")
        else:
            check(_lib.lib().nsp_tree_create(comm.handle, None, 0, ctypes.byref(h)),
                  "nsp_tree_create")
        self._h = h
        self._users = []  # nested attentions to destroy first
        n = ctypes.c_int()
        check(_lib.lib().nsp_tree_nlevels(h, ctypes.byref(n)))
        self.degrees = []
        for lvl in range(n.value):
            d = ctypes.c_int()
            check(_lib.lib().nsp_tree_degree(h, lvl, ctypes.byref(d)))
            self.degrees.append(d.value)

    @property
    def handle(self):
        if not self._h:
            raise ValueError("the tree was destroyed")
        return self._h

    def destroy(self):
        for u in self._users:
            u.destroy()
        self._users = []
        h, self._h = self._h, None
        if h:
            check(_lib.lib().nsp_tree_destroy(h), "nsp_tree_destroy")


def _nccl_device(backend, cuda_device):
    """The CUDA device an "nccl" world will use: cuda_device, else torch's
    current device (what nspcomm binds with config.cuda_device = -1); None
    for another backend (or the environment's choice, NSPCOMM_BACKEND)."""
    chosen = backend or os.environ.get("NSPCOMM_BACKEND")
    if chosen != "nccl":
        return cuda_device
    if cuda_device is not None:
        return int(cuda_device)
    import torch
    if not torch.cuda.is_available():
        return None  # nspcomm says why it cannot run (NSP_ERR_UNSUPPORTED, collective)
    return torch.cuda.current_device()


def init(store=None, rank=None, world_size=None, timeout_s=None, backend=None,
         cuda_device=None, prefix="nspcomm"):
    """Create the world communicator.

    Without a store: nsp_comm_init_env, which reads torchrun's RANK,
    WORLD_SIZE, MASTER_ADDR and meets on NSPCOMM_PORT or MASTER_PORT + 1 (or
    NSPCOMM_ROOT; or mpirun's/srun's variables). With a torch.distributed
    Store (e.g. torch.distributed.TCPStore, or dist.distributed_c10d's
    default store): nsp_comm_init_oob, the rank and size from the arguments,
    else from torch.distributed when it is initialised, else from RANK and
    WORLD_SIZE.

    backend: "ucx" (host memory, CPU tensors; the default unless
    NSPCOMM_BACKEND says otherwise) or "nccl" (CUDA tensors: one GPU per
    rank, NCCL communicators created by nspcomm through the same
    bootstrap); cuda_device: the "nccl" world's device (default: torch's
    current device; under torchrun usually LOCAL_RANK)."""
    L = _lib.lib()
    device = _nccl_device(backend, cuda_device)
    cfg = _config(timeout_s, backend, device)
    h = ctypes.c_void_p()
    if store is None:
        check(L.nsp_comm_init_env(ctypes.byref(h), ctypes.byref(cfg)), "nsp_comm_init_env")
        return Comm(h, device)
    if rank is None or world_size is None:
        try:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world_size = dist.get_world_size() if world_size is None else world_size
        except ImportError:
            pass
    if rank is None or world_size is None:
        rank = int(os.environ["RANK"]) if rank is None else rank
        world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
    oob = _StoreOob(store, int(rank), int(world_size), prefix)
    coll = oob.coll()
    status = L.nsp_comm_init_oob(ctypes.byref(h), ctypes.byref(coll), ctypes.byref(cfg))
    if status != 0 and oob.error is not None:
        raise _lib.NspError(status, "nspcomm.init(store=...): the store failed: %r (%s)" %
                            (oob.error, _lib.last_error()))
    check(status, "nsp_comm_init_oob")
    return Comm(h, device)


def nccl_comm_pointer(backend):
    """The ncclComm_t (an int) of a torch ProcessGroupNCCL backend object, for
    nsp_comm_from_nccl: the `comm_ptr` property where torch has it (2.15
    has it), else the private `_comm_ptr()` method; a clear error when the
    installed torch exposes neither, or the communicator does not exist yet
    (NULL)."""
    for name in ("comm_ptr", "_comm_ptr"):
        attr = getattr(backend, name, None)
        if attr is None:
            continue
        ptr = int(attr() if callable(attr) else attr)
        if ptr == 0:
            raise RuntimeError("nspcomm.from_process_group: the process group's NCCL "
                               "communicator is not created yet (torch creates it on the first "
                               "collective, or at init_process_group(device_id=...))")
        return ptr
    import torch
    raise NotImplementedError(
        "nspcomm.from_process_group: torch %s's ProcessGroupNCCL exposes no communicator "
        "(neither comm_ptr nor _comm_ptr); create nspcomm's own NCCL world instead: "
        "nspcomm.init(store=..., backend='nccl')" % torch.__version__)


def from_process_group(group=None, timeout_s=None):
    """Borrow the NCCL communicator of a torch.distributed process group
    (default: the default group) as nspcomm's world (nsp_comm_from_nccl;
    collective over the group). The group must have an NCCL backend and
    stays the caller's: destroy this world (comm.destroy()) before
    torch.distributed.destroy_process_group(). The world's device is the
    group's bound device (init_process_group(device_id=...)), else torch's
    current device; a tiny all-reduce on it first makes torch create the
    communicator if it has not yet."""
    import torch
    import torch.distributed as dist
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    try:
        backend = pg._get_backend(torch.device("cuda"))
    except RuntimeError as e:
        backend = e
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    if nccl is None or not isinstance(backend, nccl):
        raise ValueError("nspcomm.from_process_group: the group has no NCCL backend for CUDA "
                         "tensors (%s); init_process_group('nccl') or use "
                         "nspcomm.init(store=..., backend='nccl')" % (
                             backend if isinstance(backend, Exception) else
                             type(backend).__name__))
    bound = getattr(pg, "bound_device_id", None)
    device = bound.index if bound is not None and bound.index is not None else \
        torch.cuda.current_device()
    with torch.cuda.device(device):
        dist.all_reduce(torch.zeros(1, device="cuda"), group=pg)
        ptr = nccl_comm_pointer(backend)
    h = ctypes.c_void_p()
    cfg = _config(timeout_s, "nccl", device)
    check(_lib.lib().nsp_comm_from_nccl(ctypes.byref(h), ctypes.c_void_p(ptr),
                                        ctypes.byref(cfg)), "nsp_comm_from_nccl")
    return Comm(h, device, keep=pg)


SEQ_TO_HEAD, HEAD_TO_SEQ = C.NSP_A2A_SEQ_TO_HEAD, C.NSP_A2A_HEAD_TO_SEQ


def all_to_all(tree, layout, src, direction=SEQ_TO_HEAD, heads=None, out=None, check_agree=True):
    """The nested all-to-all of one tensor (nsp_a2a_post, every level, then
    wait). SEQ_TO_HEAD: src is the sequence-sharded [T_local, heads, D],
    returns the head-sharded [rows, D] (layout.head_rows(heads)); HEAD_TO_SEQ
    the inverse (pass heads). src must be a contiguous CPU tensor; `out`
    (optional) a preallocated result. Collective over the tree's world."""
    import torch
    if not src.is_contiguous() or src.device.type != "cpu":
        raise ValueError("all_to_all: src must be a contiguous CPU tensor")
    if direction == SEQ_TO_HEAD:
        heads, D = src.shape[1], src.shape[2]
        shape = (layout.head_rows(heads), D)
    else:
        D = src.shape[-1]
        shape = (layout.local_tokens, heads, D)
    if out is None:
        out = torch.empty(shape, dtype=src.dtype)
    p = _lib.A2aParams()
    p.field_mask = C.NSP_A2A_FIELD_CHECK | C.NSP_A2A_FIELD_BYTES  # C checks the sizes
    p.direction, p.heads, p.head_dim = direction, int(heads), int(D)
    p.elem_size = src.element_size()
    p.src_bytes = src.numel() * src.element_size()
    p.dst_bytes = out.numel() * out.element_size()
    p.src = src.data_ptr() if src.numel() else None
    p.dst = out.data_ptr() if out.numel() else None
    p.check = int(bool(check_agree))
    n = len(layout.levels)
    reqs = (ctypes.c_void_p * n)()
    L = _lib.lib()
    check(L.nsp_a2a_post(tree.handle, layout.handle, ctypes.byref(p), reqs), "nsp_a2a_post")
    status = 0
    for i in range(n):
        st = L.nsp_request_wait(reqs[i])
        status = status or st
    for i in range(n):
        L.nsp_request_free(reqs[i])
    check(status, "nested all-to-all")
    return out

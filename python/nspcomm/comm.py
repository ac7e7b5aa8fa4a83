"""Communicators and trees: bootstrap from torchrun/mpirun/srun environments or
through a torch.distributed Store (the out-of-band callbacks of
nsp_comm_init_oob, as torch-ucc does), on the UCX backend (host memory) or
the NCCL backend (CUDA memory); or a world borrowed from the job's
ProcessGroupNCCL (nsp_comm_from_nccl). Mapped host memory (Comm.empty,
nsp_mem_alloc) and the nested all-to-all of one tensor (all_to_all)."""

import ctypes
import itertools
import operator
import os
import weakref

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
        # live nsp_mem_alloc regions of empty(): address -> (bytes, weakref to the
        # tensor's storage, which names the region: a view shares it, a copy does not)
        self._regions = {}
        self._freed = weakref.WeakSet()  # storages of regions free() released

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

    # -- mapped host memory (nsp_mem_alloc) -------------------------------------

    def empty(self, shape, dtype=None):
        """A CPU tensor of `shape` (an int or a sequence of ints) and `dtype`
        (default torch.float32) whose storage is a fresh region of mapped host
        memory (nsp_mem_alloc of numel * element_size bytes, at least 1), as
        PyTorch's symm_mem.empty: no copy, data_ptr() is the region
        (page aligned; contents undefined). Same-host peers map it, so
        all_to_all() with such a source (or a contiguous view of one) reads
        it in place instead of sending it.

        Collective over the world: every rank calls it, in the same order
        (shapes may differ between ranks). A rank whose shape or dtype is
        invalid still takes part (it asks for 0 bytes, so no rank allocates)
        and raises TypeError or ValueError; the others raise NspError
        (NSP_ERR_INVALID_ARG) naming it. The nccl backend: NspError
        (NSP_ERR_UNSUPPORTED) on every rank.

        The region belongs to this world, and the tensor keeps the Comm
        object alive: free(tensor) (collective) or destroy() releases it, and
        after either the tensor and every view of it must not be used (the
        memory is unmapped)."""
        import torch
        dtype = torch.float32 if dtype is None else dtype
        shape, problem = _shape_of(shape, dtype)
        nbytes = 0 if problem else max(1, _numel(shape) * dtype.itemsize)
        ptr = ctypes.c_void_p()
        status = _lib.lib().nsp_mem_alloc(self.handle, nbytes, ctypes.byref(ptr))
        if problem:
            raise problem[0]("Comm.empty: " + problem[1])
        check(status, "Comm.empty")
        t = _tensor_over(ptr.value, nbytes, shape, dtype, owner=self)
        self._regions[ptr.value] = (nbytes, weakref.ref(t.untyped_storage()))
        return t

    def region_of(self, tensor):
        """(address, bytes) of the live region of empty() that holds `tensor`
        (a tensor empty() returned or a view of one), else None."""
        import torch
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
            return None
        storage = tensor.untyped_storage()
        rec = self._regions.get(storage.data_ptr())
        if rec is None or rec[1]() is not storage:
            return None
        return storage.data_ptr(), rec[0]

    def free(self, tensor):
        """Free the region of a tensor of empty() (or of a view of one):
        nsp_mem_free, collective over the world, after every all_to_all that
        reads it has returned on every rank. The tensor and its views must
        not be used afterwards. A tensor that is no live region of this
        world's empty() (another allocator's, another world's, or one already
        freed) raises TypeError or ValueError on its rank; that rank still
        takes part (it passes NULL), so nothing is freed on any rank and the
        others raise NspError (NSP_ERR_INVALID_ARG) naming it."""
        import torch
        problem = None
        region = self.region_of(tensor)
        if not isinstance(tensor, torch.Tensor):
            problem = TypeError("Comm.free: expected a tensor of Comm.empty, got %s" %
                                type(tensor).__name__)
        elif region is None:
            freed = tensor.device.type == "cpu" and tensor.untyped_storage() in self._freed
            problem = ValueError(
                "Comm.free: the tensor's region was already freed" if freed else
                "Comm.free: the tensor is not a region of this world's Comm.empty (another "
                "allocator's tensor, a copy, or another world's); nothing was freed")
        addr = region[0] if region else None
        status = _lib.lib().nsp_mem_free(self.handle, addr)
        if problem is not None:
            raise problem
        if status in (0, _lib.ERR_TIMEOUT, _lib.ERR_PEER_FAILED):  # freed here either way
            storage = self._regions.pop(addr)[1]()
            if storage is not None:
                self._freed.add(storage)
        check(status, "Comm.free")

    def a2a_mapped_counts(self):
        """(mapped, fell_back): levels of this rank's host all-to-alls with
        mapped on, since the world was created, that read the peers' sources
        in place, and that fell back to the ordinary exchange because some
        rank of the level's group could not (nsp_a2a_mapped_counts; local)."""
        mapped, fell_back = ctypes.c_uint64(), ctypes.c_uint64()
        check(_lib.lib().nsp_a2a_mapped_counts(self.handle, ctypes.byref(mapped),
                                               ctypes.byref(fell_back)),
              "nsp_a2a_mapped_counts")
        return mapped.value, fell_back.value

    def destroy(self):
        """Destroy the trees built on it, then the communicator (local). The
        regions of empty() not yet freed go with it (nsp_comm_destroy frees
        what is left): their tensors must not be used afterwards."""
        for t in self._trees:
            t.destroy()
        self._trees = []
        h, self._h = self._h, None
        self._regions = {}
        if h:
            check(_lib.lib().nsp_comm_destroy(h), "nsp_comm_destroy")
        self._keep = None

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _shape_of(shape, dtype):
    """(shape as a tuple of ints, None), or (None, (exception class, message))
    for a shape or dtype empty() cannot allocate."""
    import torch
    if not isinstance(dtype, torch.dtype):
        return None, (TypeError, "dtype must be a torch.dtype, got %r" % (dtype,))
    dims = list(shape) if hasattr(shape, "__iter__") else [shape]
    try:
        if any(isinstance(d, bool) for d in dims):
            raise TypeError
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        return None, (TypeError, "shape must be an int or a sequence of ints, got %r" % (shape,))
    if any(d < 0 for d in dims):
        return None, (ValueError, "shape %s has a negative size" % (dims,))
    return dims, None


def _tensor_over(ptr, nbytes, shape, dtype, owner):
    """A tensor of `shape` and `dtype` over `nbytes` at `ptr` (no copy); the
    storage holds the ctypes array, which holds `owner`."""
    import torch
    buf = (ctypes.c_char * nbytes).from_address(ptr)
    buf._nsp_owner = owner  # the world outlives every tensor of its regions
    flat = torch.frombuffer(buf, dtype=torch.uint8)
    return flat[:_numel(shape) * dtype.itemsize].view(dtype).reshape(shape)


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


def _tensor_problem(t, name, shape=None, dtype=None):
    """(exception class, message) for a tensor that cannot cross into C as
    `name` (a contiguous CPU tensor, of `shape` and `dtype` when given), or
    None."""
    import torch
    if not isinstance(t, torch.Tensor):
        return TypeError, "%s is %s, not a tensor" % (name, type(t).__name__)
    if t.device.type != "cpu":
        return ValueError, "%s is on %s: need a CPU tensor" % (name, t.device)
    if dtype is not None and t.dtype != dtype:
        return TypeError, "%s has dtype %s, not %s" % (name, t.dtype, dtype)
    if shape is not None and tuple(t.shape) != tuple(shape):
        return ValueError, "%s has shape %s, not %s" % (name, tuple(t.shape), tuple(shape))
    if not t.is_contiguous():
        return ValueError, "%s is not contiguous: call .contiguous() first" % name
    return None


def _require(problem):
    if problem is not None:
        raise problem[0]("all_to_all: " + problem[1])


def _shapes(layout, src, direction, heads):
    """(heads, D, the result's shape) of an exchange of `src`; ValueError for
    a src whose shape the layout does not fit."""
    if direction == SEQ_TO_HEAD:
        if src.dim() != 3 or src.shape[0] != layout.local_tokens:
            raise ValueError("all_to_all: src has shape %s; sequence-to-head needs "
                             "[T_local = %d, heads, D]" % (tuple(src.shape),
                                                         layout.local_tokens))
        heads, D = int(src.shape[1]), int(src.shape[2])
        return heads, D, (layout.head_rows(heads), D)
    if direction != HEAD_TO_SEQ:
        raise ValueError("all_to_all: direction %r is neither SEQ_TO_HEAD nor HEAD_TO_SEQ"
                         % (direction,))
    if heads is None:
        raise ValueError("all_to_all: head-to-sequence needs heads=")
    heads = int(heads)
    if src.dim() != 2 or src.shape[0] != layout.head_rows(heads):
        raise ValueError("all_to_all: src has shape %s; head-to-sequence of %d heads needs "
                         "[head_rows = %d, D]" % (tuple(src.shape), heads,
                                                  layout.head_rows(heads)))
    D = int(src.shape[1])
    return heads, D, (layout.local_tokens, heads, D)


def _mapped(comm, src, mapped):
    """Whether the exchange reads src in place: `mapped`, or (None) whether
    src lies in a live region of comm.empty(); ValueError for mapped=True
    with any other src."""
    live = comm.region_of(src) is not None
    if mapped is None:
        return live
    if mapped and not live:
        raise ValueError("all_to_all(mapped=True): src is not a tensor of Comm.empty on the "
                         "tree's world (or a view of one), or its region was freed; allocate "
                         "it with tree.comm.empty(shape, dtype), or pass mapped=False")
    return bool(mapped)


# What an empty tensor without storage passes: the library refuses NULL
# buffers even where it reads nothing (a rank with no token at a level).
_NOTHING = ctypes.create_string_buffer(16)


def _address(t):
    """Where a contiguous tensor's bytes start, for C: data_ptr(); for an
    empty tensor its storage's place (so an empty view of a region still
    names the region), or a valid dummy address when it has none."""
    if t.numel():
        return t.data_ptr()
    return (t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()) or \
        ctypes.addressof(_NOTHING)


def all_to_all(tree, layout, src, direction=SEQ_TO_HEAD, heads=None, out=None, check_agree=True,
               mapped=None):
    """The nested all-to-all of one tensor (nsp_a2a_post, every level, then
    wait). SEQ_TO_HEAD: src is the sequence-sharded [T_local, heads, D],
    returns the head-sharded [rows, D] (layout.head_rows(heads)); HEAD_TO_SEQ
    the inverse (src [rows, D]; pass heads). src must be a contiguous CPU
    tensor; `out` (optional) a preallocated result of that shape and src's
    dtype. Collective over the tree's world.

    mapped: True reads src in place on the levels whose group shares a host
    (params.mapped = 1: src must be a tensor of tree.comm.empty(), or a
    contiguous view of one, else ValueError); False exchanges as usual;
    None (default) is True exactly when src lies in such a region. It must
    come out the same on every rank: with check_agree, ranks that differ
    raise NspError (NSP_ERR_MISMATCH) on every rank. A check that fails
    here raises on this rank only, before anything crosses into C."""
    import torch
    _require(_tensor_problem(src, "src"))
    heads, D, shape = _shapes(layout, src, direction, heads)
    if out is None:
        out = torch.empty(shape, dtype=src.dtype)
    else:
        _require(_tensor_problem(out, "out", shape, src.dtype))
    use_mapped = _mapped(tree.comm, src, mapped)
    p = _lib.A2aParams()
    # C checks the sizes (BYTES); MAPPED: p.mapped is the caller's choice
    p.field_mask = C.NSP_A2A_FIELD_CHECK | C.NSP_A2A_FIELD_BYTES | C.NSP_A2A_FIELD_MAPPED
    p.direction, p.heads, p.head_dim = direction, heads, D
    p.elem_size = src.element_size()
    p.src_bytes = src.numel() * src.element_size()
    p.dst_bytes = out.numel() * out.element_size()
    p.src, p.dst = _address(src), _address(out)
    p.check = int(bool(check_agree))
    p.mapped = int(use_mapped)
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

"""nspcomm: nested sequence parallelism from Python (ctypes over libnspcomm).

    import nspcomm
    comm = nspcomm.init()                      # torchrun/mpirun environment, or store=
    plan = nspcomm.Planner("llama3-8b", "h100", comm.size).plan(lengths)
    lay  = nspcomm.Layout(plan, round=0, rank=comm.rank)
    idx  = lay.token_index()                   # gather this rank's tokens

The torch op is in nspcomm.torch (imported on demand, torch >= 2.4); the
Hugging Face attention in nspcomm.hf (transformers).
"""

from ._lib import NspError, NspTimeoutError, NspLibraryError, check, lib  # noqa: F401
from ._lib import library_path, library_version  # noqa: F401
from .planner import Planner, Plan, Group, planner_kind, sample_batch  # noqa: F401
from .layout import Layout  # noqa: F401
from .comm import Comm, Tree, init, launcher, all_to_all, SEQ_TO_HEAD, HEAD_TO_SEQ  # noqa: F401
from .comm import from_process_group  # noqa: F401

__version__ = "0.1.0"

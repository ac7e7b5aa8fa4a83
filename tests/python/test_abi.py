"""The bindings' struct mirrors and constants against include/nspcomm.h
(pytest; run by tests/python/test_python.sh under make check): a probe
compiled against the header gives every mirrored field's offset and size,
every constant's value and the status list (abi.py); the header's text
gives every struct's field names and the enum families' members. Any
difference fails, and so does a field moved in a mirror (tested by moving
one). Needs a C compiler ($CC or cc), as the build does; the library is
not loaded. The functions the bindings call are checked against the
header's prototypes likewise (parameter count and types, return type)."""

import ctypes
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import abi  # noqa: E402
from nspcomm import _constants as C  # noqa: E402
from nspcomm import _lib  # noqa: E402


@pytest.fixture(scope="module")
def seen():
    return abi.probe(_lib.MIRRORS, C.header_constants())


@pytest.fixture(scope="module")
def header():
    return abi.header_fields(), abi.header_families()


def test_mirrors_and_constants_match_the_header(seen, header):
    fields, families = header
    found = abi.problems(_lib.MIRRORS, C.header_constants(), C.STATUS_NAMES, seen, fields,
                         families)
    assert found == [], "\n".join(found)
    # the probe saw every mirror and constant; the families are not empty
    assert set(seen["structs"]) == set(_lib.MIRRORS) and len(_lib.MIRRORS) >= 20
    assert len(seen["status"]) == len(C.STATUS_NAMES) >= 14
    assert all(families.values()), families


def test_header_parser_reads_every_mirrored_struct(header):
    fields, _ = header
    assert fields["nsp_attn_bytes_t"] == ["q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv",
                                          "delta"]
    assert fields["nsp_oob_coll_t"][:3] == ["allgather", "req_test", "req_free"]
    assert fields["nsp_model_t"][0] == "name"
    assert set(_lib.MIRRORS) <= set(fields)


def _moved(mirror, a, b):
    """A copy of `mirror` with fields a and b swapped (same types: only the
    offsets tell)."""
    names = [f for f, _t in mirror._fields_]
    order = list(mirror._fields_)
    i, j = names.index(a), names.index(b)
    order[i], order[j] = order[j], order[i]
    return type(mirror.__name__ + "Moved", (ctypes.Structure,), {"_fields_": order})


def test_a_moved_field_fails(seen, header):
    fields, families = header
    mirrors = dict(_lib.MIRRORS, nsp_attn_batch_t=_moved(_lib.AttnBatch, "q_head0", "kv_head0"))
    assert ctypes.sizeof(mirrors["nsp_attn_batch_t"]) == ctypes.sizeof(_lib.AttnBatch)
    moved = abi.probe(mirrors, C.header_constants())
    found = abi.problems(mirrors, C.header_constants(), C.STATUS_NAMES, moved, fields, families)
    assert any("nsp_attn_batch_t.q_head0: offset" in p for p in found), found
    assert any("nsp_attn_batch_t.kv_head0: offset" in p for p in found), found


def test_a_changed_constant_a_missing_flag_and_an_unknown_name_fail(seen, header):
    fields, families = header
    consts = dict(C.header_constants(), NSP_A2A_FIELD_BYTES=1 << 9)
    found = abi.problems(_lib.MIRRORS, consts, C.STATUS_NAMES, seen, fields, families)
    assert found == ["NSP_A2A_FIELD_BYTES = 32 in the header, 512 in the bindings"], found
    consts = {k: v for k, v in C.header_constants().items() if k != "NSP_ATTN_FP16"}
    found = abi.problems(_lib.MIRRORS, consts, C.STATUS_NAMES, seen, fields, families)
    assert found == ["attention dtypes: the bindings lack ['NSP_ATTN_FP16']"], found
    with pytest.raises(AssertionError, match="does not compile"):
        abi.probe({}, {"NSP_NO_SUCH_FLAG": 1})


def test_prototypes_match_the_header():
    """Every function the bindings declare (SIGNATURES) against its NSP_EXPORT
    prototype: parameter count, each parameter's and the return's type."""
    protos, enums = abi.header_prototypes(), abi.header_enum_types()
    found = abi.prototype_problems(_lib.SIGNATURES, protos, _lib.MIRRORS, enums)
    assert found == [], "\n".join(found)
    assert len(protos) >= 90 and len(_lib.SIGNATURES) >= 50, (len(protos), len(_lib.SIGNATURES))
    assert protos["nsp_mem_alloc"] == (("nsp_status_t", 0), [("nsp_comm_t", 1), ("size_t", 0),
                                                             ("void", 2)])
    assert {"nsp_status_t", "nsp_a2a_dir_t", "nsp_planner_kind_t"} <= enums


def test_a_changed_prototype_fails():
    """A wrong parameter type, a missing parameter, a wrong return type and
    an unknown function are each found."""
    protos, enums = abi.header_prototypes(), abi.header_enum_types()
    c = ctypes
    sigs = dict(_lib.SIGNATURES)
    sigs["nsp_mem_alloc"] = (c.c_int, [c.c_void_p, c.c_int, c.POINTER(c.c_void_p)])
    sigs["nsp_mem_free"] = (c.c_int, [c.c_void_p])
    sigs["nsp_a2a_mapped_counts"] = (c.c_int, [c.c_void_p, c.POINTER(c.c_double),
                                               c.POINTER(c.c_uint64)])
    sigs["nsp_workload_count"] = (c.c_int, [c.c_void_p])
    sigs["nsp_no_such_function"] = (c.c_int, [])
    found = abi.prototype_problems(sigs, protos, _lib.MIRRORS, enums)
    assert found == [
        "nsp_a2a_mapped_counts parameter 2: uint64_t * in C, LP_c_double in the bindings",
        "nsp_mem_alloc parameter 2: size_t in C, c_int in the bindings",
        "nsp_mem_free: 2 parameters in C, 1 argtypes in the bindings",
        "nsp_no_such_function: no NSP_EXPORT function of that name in the header",
        "nsp_workload_count: returns size_t in C, restype c_int in the bindings"], found

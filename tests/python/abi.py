"""The Python bindings' copy of include/nspcomm.h against the header itself.

probe(): writes a C program from the bindings' own lists (every ctypes
mirror's fields, every constant of nspcomm._constants), compiles it against
the header with the system's C compiler and runs it: it prints, as JSON,
what the compiler says (sizeof and offsetof of every mirrored field, each
constant's value, every status of NSP_STATUS_MAP). A name the header lacks
fails to compile, which is an answer too.

header_fields() / header_families(): the field names of every struct and
the members of the enum families the bindings mirror, read from the
header's text (what a mirror could miss: a field the bindings never name
has no offsetof to print).

problems(): every difference, in words.

header_prototypes() / prototype_problems(): every function the bindings
declare (nspcomm._lib.SIGNATURES: restype, argtypes) against its NSP_EXPORT
prototype in the header's text: the same number of parameters, and each
parameter and the return type passed the way C declares it (a scalar as
its ctypes type, an enum as c_int, a struct by value as its mirror, a
pointer as c_void_p, c_char_p for char * or a POINTER to what it points
to).
"""

import ctypes
import json
import os
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
HEADER = os.path.join(TOP, "include", "nspcomm.h")

# enum families whose every member the bindings must mirror (a new flag in
# the header is a failure until _constants.py has it)
FAMILIES = {
    "plan flags": r"NSP_PLAN_FLAG_\w+",
    "planner kinds": r"NSP_PLANNER_[A-Z]+",
    "planner fields": r"NSP_PLANNER_FIELD_\w+",
    "a2a directions": r"NSP_A2A_(?:SEQ_TO_HEAD|HEAD_TO_SEQ)",
    "a2a replicas": r"NSP_A2A_REPLICAS_\w+",
    "a2a fields": r"NSP_A2A_FIELD_\w+",
    "attention fields": r"NSP_ATTN_FIELD_\w+",
    "attention dtypes": r"NSP_ATTN_(?:FP|BF)\d+",
    "nested attention fields": r"NSP_NESTED_ATTN_FIELD_\w+",
}


def _c_source(mirrors, constants):
    out = ["#include <stddef.h>", "#include <stdio.h>", '#include "nspcomm.h"', "",
           "int main(void)", "{", '    printf("{\\"structs\\": {");']
    for i, (name, mirror) in enumerate(mirrors.items()):
        out.append('    printf("%s\\"%s\\": {\\"size\\": %%zu, \\"fields\\": [", sizeof(%s));'
                   % (", " if i else "", name, name))
        for j, (field, _t) in enumerate(mirror._fields_):
            out.append('    printf("%s[\\"%s\\", %%zu, %%zu]", offsetof(%s, %s), '
                       'sizeof(((%s *)0)->%s));' % (", " if j else "", field, name, field, name,
                                                    field))
        out.append('    printf("]}");')
    out.append('    printf("}, \\"constants\\": {");')
    for i, name in enumerate(sorted(constants)):
        out.append('    printf("%s\\"%s\\": %%lld", (long long)(%s));' % (", " if i else "", name,
                                                                         name))
    out += ['    printf("}, \\"status\\": {");', "    int first = 1;",
            "#define NSP_PROBE_STATUS_(n, c, d) \\",
            '    printf("%s\\"%s\\": %d", first ? "" : ", ", #n, (int)(c)); first = 0;',
            "    NSP_STATUS_MAP(NSP_PROBE_STATUS_)", '    printf("}}\\n");', "    return 0;", "}"]
    return "\n".join(out) + "\n"


def probe(mirrors, constants, cc=None):
    """The compiler's view of `mirrors` ({typedef: ctypes class}) and
    `constants` ({name: value}): {"structs": {name: {"size", "fields":
    [[field, offset, size], ...]}}, "constants": {...}, "status": {...}}."""
    cc = cc or os.environ.get("CC") or "cc"
    with tempfile.TemporaryDirectory(prefix="nsp_abi_") as tmp:
        src, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write(_c_source(mirrors, constants))
        cmd = [cc, "-std=c11", "-Wall", "-Werror", "-I", os.path.dirname(HEADER), src, "-o", exe]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError("the probe does not compile against %s (a name the bindings "
                                 "mirror is not in the header?):\n%s" % (HEADER, p.stderr[-3000:]))
        return json.loads(subprocess.run([exe], capture_output=True, text=True,
                                         check=True).stdout)


def _strip_comments(text):
    return re.sub(r"/\*.*?\*/", " ", re.sub(r"//[^\n]*", "", text), flags=re.S)


def _declared_names(decl):
    """The names one struct member declaration declares, in order
    ("size_t q, k, v;" -> q, k, v; "int (*fn)(void *);" -> fn)."""
    decl = " ".join(decl.split())
    fn = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
    if fn:
        return [fn.group(1)]
    decl = re.sub(r"\[[^\]]*\]", "", decl)
    parts = decl.split(",")
    names = [re.findall(r"\w+", parts[0])[-1]]
    names += [re.findall(r"\w+", p)[-1] for p in parts[1:]]
    return names


def header_fields(path=HEADER):
    """{typedef: [field names in order]} of every `typedef struct ... { } name;`."""
    text = _strip_comments(open(path).read())
    out = {}
    for m in re.finditer(r"typedef\s+struct\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        body, name = m.group(1), m.group(2)
        fields = []
        for decl in body.split(";"):
            if decl.strip():
                fields += _declared_names(decl)
        out[name] = fields
    return out


def header_families(path=HEADER):
    """{family: {member names}} of FAMILIES, as the header defines them."""
    text = _strip_comments(open(path).read())
    defined = set(re.findall(r"\b(NSP_[A-Z0-9_]+)\s*=", text))
    return {fam: {n for n in defined if re.fullmatch(rx, n)} for fam, rx in FAMILIES.items()}


def problems(mirrors, constants, status_names, seen, fields, families):
    """Every way the bindings differ from the header, in words ([] if none).
    seen: probe(); fields: header_fields(); families: header_families()."""
    out = []
    for name, mirror in mirrors.items():
        c = seen["structs"][name]
        if c["size"] != _sizeof(mirror):
            out.append("%s: %d bytes in C, %d in the mirror" % (name, c["size"],
                                                                _sizeof(mirror)))
        mine = [f for f, _t in mirror._fields_]
        if fields.get(name) != mine:
            out.append("%s: the header's fields are %s, the mirror's %s" % (
                name, fields.get(name), mine))
        for field, off, size in c["fields"]:
            desc = getattr(mirror, field)
            if (desc.offset, desc.size) != (off, size):
                out.append("%s.%s: offset %d size %d in C, offset %d size %d in the mirror" % (
                    name, field, off, size, desc.offset, desc.size))
    for name, value in constants.items():
        if seen["constants"][name] != value:
            out.append("%s = %d in the header, %d in the bindings" % (
                name, seen["constants"][name], value))
    want = {v: k for k, v in seen["status"].items()}
    if dict(status_names) != want:
        out.append("status codes: the header has %s, the bindings %s" % (want,
                                                                       dict(status_names)))
    for fam, names in families.items():
        missing = sorted(names - set(constants))
        if missing or not names:
            out.append("%s: %s" % (fam, "the bindings lack %s" % missing if names else
                                   "no member found in the header (family renamed?)"))
    return out


def _sizeof(mirror):
    import ctypes
    return ctypes.sizeof(mirror)


# C scalar types and the ctypes type that passes each.
_SCALARS = {"int": ctypes.c_int, "unsigned": ctypes.c_uint, "unsigned int": ctypes.c_uint,
            "size_t": ctypes.c_size_t, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
            "uint32_t": ctypes.c_uint32, "double": ctypes.c_double, "float": ctypes.c_float,
            "char": ctypes.c_char}


def _c_type(decl, named):
    """(base type, pointer depth) of one declaration ("const nsp_plan_t *plan"
    -> ("nsp_plan_t", 1)); named: the last word is the parameter's name."""
    depth = decl.count("*") + decl.count("[")
    words = [w for w in re.findall(r"[A-Za-z_]\w*", re.sub(r"\[[^\]]*\]", "", decl))
             if w not in ("const", "struct", "enum")]
    if named and len(words) > 1:
        words = words[:-1]
    return " ".join(words), depth


def header_prototypes(path=HEADER):
    """{name: ((return base, depth), [(parameter base, depth), ...])} of every
    NSP_EXPORT function of the header."""
    text = _strip_comments(open(path).read())
    out = {}
    for ret, name, params in re.findall(
            r"NSP_EXPORT\s+([^;{}]*?)\b(nsp_\w+)\s*\(((?:[^()]|\([^()]*\))*)\)\s*;", text):
        plist = [] if params.strip() in ("", "void") else [_c_type(p, True)
                                                          for p in params.split(",")]
        out[name] = (_c_type(ret, False), plist)
    return out


def header_enum_types(path=HEADER):
    """The typedef names of the header's enums (passed as c_int)."""
    text = _strip_comments(open(path).read())
    return set(re.findall(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text))


def _passes(ct, base, depth, mirrors, enums):
    """Does ctypes type `ct` pass a C value of (base, depth)?"""
    if depth == 0:
        if base == "void":
            return ct is None
        if base in mirrors:
            return ct is mirrors[base]
        if base in enums:
            return ct is ctypes.c_int
        return ct is not None and _SCALARS.get(base) is ct
    if ct is ctypes.c_void_p:
        return True  # any pointer: opaque handles, buffers, FILE *
    if ct is ctypes.c_char_p:
        return base == "char" and depth == 1
    if isinstance(ct, type) and issubclass(ct, ctypes._Pointer):
        return _passes(ct._type_, base, depth - 1, mirrors, enums)
    return False


def _spell(base, depth):
    return base + " " + "*" * depth if depth else base


def prototype_problems(signatures, prototypes, mirrors, enums):
    """Every way `signatures` ({name: (restype, argtypes)}) differ from the
    header's `prototypes` (header_prototypes()), in words ([] if none)."""
    out = []
    for name, (restype, args) in sorted(signatures.items()):
        if name not in prototypes:
            out.append("%s: no NSP_EXPORT function of that name in the header" % name)
            continue
        (rbase, rdepth), params = prototypes[name]
        if not _passes(restype, rbase, rdepth, mirrors, enums):
            out.append("%s: returns %s in C, restype %s in the bindings" % (
                name, _spell(rbase, rdepth), getattr(restype, "__name__", restype)))
        if len(args) != len(params):
            out.append("%s: %d parameters in C, %d argtypes in the bindings" % (
                name, len(params), len(args)))
            continue
        for k, (ct, (base, depth)) in enumerate(zip(args, params), 1):
            if not _passes(ct, base, depth, mirrors, enums):
                out.append("%s parameter %d: %s in C, %s in the bindings" % (
                    name, k, _spell(base, depth), getattr(ct, "__name__", ct)))
    return out

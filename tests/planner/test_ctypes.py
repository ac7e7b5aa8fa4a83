#!/usr/bin/env python3
"""TAP test: the Python/ctypes example of docs/guide/planner.md runs against the
built libnspcomm_planner, and its struct mirrors match the C layout."""

import contextlib
import ctypes
import io
import json
import os
import subprocess
import sys

import taplib as tap  # tests/planner/taplib.py, beside this script
from taplib import ok

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("NSP_TOP_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("NSP_TOP_BUILDDIR") or SRC


def example_code():
    """The ```python block of docs/guide/planner.md that starts with the marker."""
    with open(os.path.join(SRC, "docs", "guide", "planner.md")) as f:
        text = f.read()
    start = text.index("```python\n# nspcomm ctypes example")
    start = text.index("\n", start) + 1
    return text[start:text.index("```", start)]


def main():
    lib = os.path.join(BUILD, "lib", ".libs", "libnspcomm_planner.so.0")
    if not os.path.exists(lib):
        print("1..0 # SKIP shared library not built (%s)" % lib)
        return 0
    with open(lib, "rb") as f:
        if b"libasan.so" in f.read():
            # An ASan library only loads into a process that starts with the
            # ASan runtime; python3 does not.
            print("1..0 # SKIP %s is built with AddressSanitizer" % lib)
            return 0
    os.environ["NSPCOMM_PLANNER_LIB"] = lib
    ns = {"__name__": "nspcomm_example"}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(example_code(), "docs/guide/planner.md", "exec"), ns)
        ran = True
        err = ""
    except Exception as e:  # the example itself failing is the test failing
        ran = False
        err = "%s: %s" % (type(e).__name__, e)
    ok(ran and printed.getvalue().startswith("step "),
       "the ctypes example of docs/guide/planner.md runs: %s" % printed.getvalue().strip(), err)
    if not ran:
        tap.plan()
        return 1

    groups, step_s = ns["plan_batch"]([393216, 5120, 812] + [2048] * 200)
    placed = sorted(i for _, _, _, seqs in groups for i in seqs)
    ok(placed == list(range(203)), "every sequence is placed exactly once")
    ok(step_s > 0, "a positive step time (%.4f s)" % step_s)
    ok(any(size >= 8 for _, _, size, _ in groups), "the 384K sequence goes to a large group")
    try:
        ns["plan_batch"]([100, 0, 5])
        ok(False, "a zero length is refused")
    except RuntimeError as e:
        ok("length" in str(e) or "positive" in str(e),
           "a zero length raises with the library's message: %s" % e)

    gen = os.path.join(BUILD, "tests", "planner", "gen_plans")
    p = subprocess.run([gen, "--layout"], stdout=subprocess.PIPE, text=True)
    layout = json.loads(p.stdout)
    mirrors = {"nsp_model_t": "Model", "nsp_cluster_t": "Cluster", "nsp_plan_group_t": "Group",
               "nsp_plan_round_t": "Round", "nsp_plan_prediction_t": "Prediction",
               "nsp_plan_t": "Plan", "nsp_planner_params_t": "Params"}
    for key, value in layout.items():
        if "." in key:
            cname, field = key.split(".")
            got = getattr(ns[mirrors[cname]], field).offset
            ok(got == value, "offset of %s: ctypes %d, C %d" % (key, got, value))
        else:
            got = ctypes.sizeof(ns[mirrors[key]])
            ok(got == value, "sizeof(%s): ctypes %d, C %d" % (key, got, value))
    tap.plan()
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())

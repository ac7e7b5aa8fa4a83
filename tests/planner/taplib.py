"""TAP output shared by the Python tests of tests/planner: numbered "ok" and
"not ok" lines, skips and the plan line, counted in this module."""

import sys

count = 0   # test lines printed so far
failed = 0  # of which "not ok"


def ok(cond, desc, diag=""):
    """One test line; on failure the last 20 lines of diag as comments."""
    global count, failed
    count += 1
    print("%sok %d - %s" % ("" if cond else "not ", count, desc))
    if not cond:
        failed += 1
        for line in str(diag).splitlines()[-20:]:
            print("# " + line)
    sys.stdout.flush()
    return cond


def skip(desc, reason):
    global count
    count += 1
    print("ok %d - %s # SKIP %s" % (count, desc, reason))


def plan():
    """The plan line "1..N" for the N lines so far (printed last)."""
    print("1..%d" % count)

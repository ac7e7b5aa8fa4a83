#!/bin/sh
# The Python package and its torch op (python/; tests/python/test_nspcomm.py:
# the package and the op against a float64 reference; test_op.py: the op's
# contract (opcheck, torch.compile, checkpoint) and its device path on a
# CUDA stand-in; test_abi.py: the struct mirrors and constants against the
# header, through a probe compiled with $CC or cc): runs the pytest suite
# with the checkout's .venv (scripts/setup-python.sh) or $NSP_PYTHON, and
# reports one TAP line per pytest test. Skips with a reason only when
# torch/pytest are not installed (NSP_REQUIRE_TORCH=1, as in CI, turns that
# into a failure) or when the library is an ASan build (it cannot be loaded
# into a Python that is not ASan-preloaded).
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
need="torch pytest"
. "$top_srcdir/tests/python/torch_env.sh" # py; skips without torch
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsp_py_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m pytest -q -p no:cacheprovider -s --junitxml="$tmp/junit.xml" \
    "$top_srcdir/tests/python/test_abi.py" "$top_srcdir/tests/python/test_nspcomm.py" \
    "$top_srcdir/tests/python/test_op.py" >"$tmp/log" 2>&1
rc=$?
sed 's/^/# /' "$tmp/log" | grep -E "^# (worst|fake CUDA|killed|[0-9]+ ranks:|=+ .*(passed|failed))" || true
"$py" - "$tmp/junit.xml" "$rc" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except Exception as e:  # no report: pytest itself failed
    print("1..1\nnot ok 1 - pytest ran (exit %s, %s)" % (sys.argv[2], e))
    sys.exit(1)
print("1..%d" % len(cases))
bad = 0
for i, c in enumerate(cases, 1):
    name = c.get("name")
    fail = c.find("failure") if c.find("failure") is not None else c.find("error")
    skip = c.find("skipped")
    if fail is not None:
        bad = 1
        print("not ok %d - %s" % (i, name))
        for line in (fail.get("message") or "").splitlines()[:20]:
            print("# " + line)
    elif skip is not None:
        print("ok %d - %s # SKIP %s" % (i, name, skip.get("message")))
    else:
        print("ok %d - %s" % (i, name))
sys.exit(bad or (sys.argv[2] not in ("0", "5") and not cases))
PY

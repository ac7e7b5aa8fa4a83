#!/bin/sh
# The Python package and its torch op (python/, tests/python/test_nspcomm.py):
# runs the pytest suite with the checkout's .venv (scripts/setup-python.sh)
# or $NSP_PYTHON, and reports one TAP line per pytest test. Skips with a
# reason only when torch/pytest are not installed (NSP_REQUIRE_TORCH=1, as
# in CI, turns that into a failure) or when the library is an ASan build
# (it cannot be loaded into a Python that is not ASan-preloaded).
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh" # top_srcdir, top_builddir, n, fail, check
lib="$top_builddir/lib/.libs/libnspcomm.so"
py=${NSP_PYTHON:-}
if [ -z "$py" ]; then
    if [ -x "$top_srcdir/.venv/bin/python" ]; then py="$top_srcdir/.venv/bin/python"; else
        py=${PYTHON3:-python3}; fi
fi
if [ ! -e "$lib" ]; then
    echo "1..0 # SKIP $lib not built (configured without the communication layer)"
    exit 0
fi
if ldd "$lib" 2>/dev/null | grep -q libasan; then
    echo "1..0 # SKIP libnspcomm is an ASan build; the Python tests run in the plain build"
    exit 0
fi
if ! "$py" -c "import torch, pytest" >/dev/null 2>&1; then
    if [ "${NSP_REQUIRE_TORCH:-0}" = 1 ]; then
        echo "1..1"
        echo "not ok 1 - torch and pytest importable by $py (NSP_REQUIRE_TORCH=1)"
        exit 1
    fi
    echo "1..0 # SKIP torch and pytest are not installed for $py (bash scripts/setup-python.sh installs them into .venv)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsp_py_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
NSPCOMM_BUILD_DIR="$top_builddir" PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m pytest -q -p no:cacheprovider -s --junitxml="$tmp/junit.xml" \
    "$top_srcdir/tests/python/test_nspcomm.py" >"$tmp/log" 2>&1
rc=$?
sed 's/^/# /' "$tmp/log" | grep -E "^# (worst|killed|[0-9]+ ranks:|=+ .*(passed|failed))" || true
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

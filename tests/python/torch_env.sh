# Sourced by the Python tests (test_python.sh, test_train.sh) after
# tests/tap.sh, with $need set to the modules they import (e.g. "torch
# pytest"): sets $py (the checkout's .venv, else $NSP_PYTHON, else python3)
# and skips with a reason when the library is not built, is an ASan build
# (it cannot be loaded into a Python that is not ASan-preloaded), or $need
# cannot be imported (a failure instead with NSP_REQUIRE_TORCH=1, as in CI).
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
if ! "$py" -c "import $(echo $need | tr ' ' ',')" >/dev/null 2>&1; then
    if [ "${NSP_REQUIRE_TORCH:-0}" = 1 ]; then
        echo "1..1"
        echo "not ok 1 - $need importable by $py (NSP_REQUIRE_TORCH=1)"
        exit 1
    fi
    echo "1..0 # SKIP $need not installed for $py (bash scripts/setup-python.sh installs them into .venv)"
    exit 0
fi

# Sourced by the shell tests (tests/*/test_*.sh): where the source and build
# trees are, and `check`, which prints one numbered TAP line. A test ends
# with: echo "1..$n"; exit $fail
top_srcdir=${NSP_TOP_SRCDIR:-.}
top_builddir=${NSP_TOP_BUILDDIR:-.}
n=0
fail=0

check() { # check DESCRIPTION COMMAND...: "ok" when the command succeeds
    desc=$1
    shift
    n=$((n + 1))
    if "$@"; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        fail=1
    fi
}

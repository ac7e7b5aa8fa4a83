#!/bin/sh
# Faults that leave nothing behind (tools/nsp_launch.h), on nsp_a2a_perf
# --ranks 3 with NSPCOMM_TIMEOUT=3:
#  1. one rank SIGSTOPped mid-run: the others fail within the timeout with a
#     message naming it, the launcher stops the stopped rank (SIGTERM with
#     SIGCONT, then SIGKILL) and returns; no rank process and no System V
#     segment of theirs remains;
#  2. rank 0 SIGKILLed: the others print a message naming rank 0; the
#     launcher returns; nothing remains;
#  3. the launcher itself SIGKILLed: its ranks die with it (PR_SET_PDEATHSIG).
# TAP output. The outcomes are the fault table of docs/design/reliability.md.
. "${NSP_TOP_SRCDIR:-.}/tests/tap.sh"
perf=$top_builddir/perf/nsp_a2a_perf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -x "$perf" ]; then
    echo "1..0 # SKIP $perf not built"
    exit 0
fi
export UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n NSPCOMM_TIMEOUT=3
args="--ranks 3 -b 64K -e 64K -n 1000000 -w 1 --methods serial"

now() { date +%s; }
# segments PIDS...: System V segments whose creator is one of PIDS
segments() {
    awk -v pids=" $* " 'NR > 1 && index(pids, " " $5 " ") { c++ } END { print c + 0 }' \
        /proc/sysvipc/shm
}
alive() { # alive PIDS...: how many still run (a zombie, dead but not yet reaped by
    # whoever adopted it, does not count)
    c=0
    for p in "$@"; do
        st=$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)
        [ -n "$st" ] && [ "$st" != Z ] && c=$((c + 1))
    done
    echo $c
}
# start: run nsp_a2a_perf in the background until its 3 ranks exchange
start() {
    # shellcheck disable=SC2086
    "$perf" $args >"$tmp/out" 2>"$tmp/err" &
    launcher=$!
    t=0
    while [ "$(pgrep -P $launcher | wc -l)" -lt 3 ] && [ $t -lt 100 ]; do
        sleep 0.1
        t=$((t + 1))
    done
    kids=$(pgrep -P $launcher | sort -n | tr '\n' ' ')
    sleep 4 # bootstrap, plan, warm-up: the ranks are exchanging
}
# finish: wait for the launcher (at most 60 s); rc and seconds in $rc, $took
finish() {
    t0=$1
    t=0
    while kill -0 $launcher 2>/dev/null && [ $t -lt 600 ]; do
        sleep 0.1
        t=$((t + 1))
    done
    if kill -0 $launcher 2>/dev/null; then
        rc=hung
        kill -9 $launcher
    else
        wait $launcher
        rc=$?
    fi
    took=$(($(now) - t0))
}
returned() { # the launcher returned a failure within 20 s
    [ "$rc" != hung ] && [ "$rc" != 0 ] && [ "$took" -le 20 ]
}
names() { # names R DEAD: rank R's own error, or the launcher's notice, names rank DEAD
    grep -qE "nsp_a2a_perf: rank $1: .*rank $2[^0-9]|\[rank $1\] (stopped by|the launcher reports:) .*rank $2 " \
        "$tmp/err"
}
diag() { sed 's/^/# /' "$tmp/err" | grep -v "UCX  WARN" | tail -n 12; }

# 1. a stopped rank
start
# shellcheck disable=SC2086
set -- $kids
seg_during=$(segments $kids)
echo "# ranks $kids, $seg_during System V segment(s) of theirs during the run"
t0=$(now)
kill -STOP "$2"
finish "$t0"
check "SIGSTOP rank 1: the launcher returns (exit $rc after $took s; timeout 3 s)" returned
check "rank 0 names rank 1" names 0 1
# rank 2 may be waiting on rank 0 (which failed first) rather than on rank 1
check "rank 2 says why it ended" grep -qE \
    "nsp_a2a_perf: rank 2: .*rank [01][^0-9]|\[rank 2\] (stopped by|the launcher reports:) .*rank" \
    "$tmp/err"
check "the launcher says what happened to every rank" \
    grep -q "rank 1 was killed by signal .* (stopped by the launcher)" "$tmp/err"
check "no rank process remains ($(alive $kids) of 3)" [ "$(alive $kids)" -eq 0 ]
check "no System V segment of the ranks remains ($(segments $kids))" [ "$(segments $kids)" -eq 0 ]
[ $fail -eq 0 ] || diag

# 2. rank 0 killed
start
# shellcheck disable=SC2086
set -- $kids
t0=$(now)
kill -KILL "$1"
finish "$t0"
check "SIGKILL rank 0: the launcher returns (exit $rc after $took s)" returned
check "rank 1 names rank 0" names 1 0
check "rank 2 names rank 0" names 2 0
check "no rank process remains" [ "$(alive $kids)" -eq 0 ]
check "no System V segment of the ranks remains" [ "$(segments $kids)" -eq 0 ]
[ $fail -eq 0 ] || diag

# 3. the launcher killed
start
kill -KILL $launcher
wait $launcher 2>/dev/null
# The ranks get SIGKILL at once (PR_SET_PDEATHSIG); tearing down a process
# (an ASan one maps terabytes of shadow) can take a moment on a loaded
# machine: wait up to 10 s for them to be gone.
t=0
while [ "$(alive $kids)" -gt 0 ] && [ $t -lt 100 ]; do
    sleep 0.1
    t=$((t + 1))
done
check "SIGKILL the launcher: its ranks die with it ($(alive $kids) of 3 left)" \
    [ "$(alive $kids)" -eq 0 ]
echo "1..$n"
exit $fail

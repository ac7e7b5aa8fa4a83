#!/usr/bin/env bash
# Where the nested all-to-all's time goes, per size, beside MPI_Alltoallv and
# the transport alone (the tables of docs/results.md come from its output).
#
#   perf/a2a_profile.sh [-n RANKS] [-s "1M 2M 4M 8M 16M"] [-l mpirun|fork|both]
#                       [-i ITERS] [-F HZ] [-o OUTDIR] [BUILD_DIR]
#
# Per launcher: (1) one nsp_a2a_perf run of every method over all sizes,
# interleaved repetitions (-n 20 -r 5): time, CPU per call, phases, UCX
# operations per call (eager / rendezvous sends, progress calls); (2) per
# size and method (nested, flat, tp-same, and under mpirun mpi, mpi-flat,
# mpi+pack), `perf record -e cpu-clock --call-graph dwarf` of ITERS timed
# calls at the largest size, as many more at a smaller one as keep the bytes
# the same (enough samples); the samples a rank took while it ran its timed
# calls (nsp_a2a_perf notes when, NSP_A2A_PERF_WINDOWS) perf/a2a_profile.py
# sorts by what the CPU did (pack,
# unpack, own-block and level-0 copies, the kernel's CMA copy, eager FIFO
# copies, UCX and MPI software, the scheduler, page faults). Prints a table
# per launcher and size; writes OUTDIR/profile.json and profile.txt.
# Defaults: 8 ranks, both launchers, 20 calls, 999 Hz, OUTDIR =
# BUILD_DIR/a2a-profile, BUILD_DIR = build. Needs python3, mpirun for the MPI
# rows, and perf (linux-perf) for the CPU split (without it: timing only).
set -euo pipefail
ranks=8 sizes="1M 2M 4M 8M 16M" launchers=both iters=20 hz=999 outdir=""
while getopts "n:s:l:i:F:o:" opt; do
    case $opt in
    n) ranks=$OPTARG ;;
    s) sizes=$OPTARG ;;
    l) launchers=$OPTARG ;;
    i) iters=$OPTARG ;;
    F) hz=$OPTARG ;;
    o) outdir=$OPTARG ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
perf_bin="$build/perf/nsp_a2a_perf"
outdir=${outdir:-$build/a2a-profile}
[ -x "$perf_bin" ] || { echo "a2a_profile: build $perf_bin first" >&2; exit 1; }
[ "$launchers" = both ] && launchers="mpirun fork"
if ! command -v mpirun >/dev/null; then
    echo "a2a_profile: no mpirun: the forked launcher only" >&2
    launchers=fork
fi
have_perf=1
if ! command -v perf >/dev/null || ! perf record -q -e cpu-clock -o /dev/null true 2>/dev/null; then
    echo "a2a_profile: perf record does not work here: timing only, no CPU split" >&2
    have_perf=0
fi
mkdir -p "$outdir"
rm -f "$outdir"/timing-*.json "$outdir"/cpu-*.json "$outdir"/cpu-*.win
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

export UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
first=${sizes%% *} last=${sizes##* }

# bytes SIZE: 4M -> 4194304 (K, M, G suffixes).
bytes() {
    local n=${1%[KMG]}
    case $1 in *K) echo $((n << 10)) ;; *M) echo $((n << 20)) ;; *G) echo $((n << 30)) ;; *) echo "$n" ;; esac
}

# cmd: nsp_a2a_perf under launcher $1.
set_cmd() {
    if [ "$1" = mpirun ]; then
        cmd=(mpirun -np "$ranks" "$perf_bin")
    else
        cmd=("$perf_bin" --ranks "$ranks")
    fi
}

echo "== a2a_profile: $ranks ranks, sizes $sizes, launchers $launchers, $(nproc) cores"
for l in $launchers; do
    echo "== $l: timing run, every method (load $(cut -d' ' -f1-3 /proc/loadavg))"
    set_cmd "$l"
    "${cmd[@]}" -b "$first" -e "$last" -f 2 -n 20 -r 5 -w 3 -J "$outdir/timing-$l.json" \
        >"$outdir/timing-$l.txt" 2>&1 || echo "   exit $? (see $outdir/timing-$l.txt)"
    [ $have_perf = 1 ] || continue
    methods="nested flat tp-same"
    [ "$l" = mpirun ] && methods="$methods mpi mpi-flat mpi+pack"
    for s in $sizes; do
        n=$((iters * $(bytes "$last") / $(bytes "$s")))
        for m in $methods; do
            f="$outdir/cpu-$l-$s-$m"
            rm -f "$f.win"
            NSP_A2A_PERF_WINDOWS="$f.win" perf record -q -k CLOCK_MONOTONIC -e cpu-clock -F "$hz" \
                --call-graph dwarf,8192 -o "$tmp/perf.data" -- \
                "${cmd[@]}" --methods "$m" -b "$s" -e "$s" -n "$n" -r 1 -w 2 -c 0 -J "$f.json" \
                >"$f.txt" 2>&1 || echo "   exit $? (see $f.txt)"
            perf script -i "$tmp/perf.data" -F pid,time,ip,sym 2>/dev/null |
                python3 "$here/a2a_profile.py" classify "$f.json" "$f.win" >"$f.cpu.json"
            rm -f "$tmp/perf.data"
            echo "   $l $s $m: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['timed_samples'], 'samples in the calls of', d['samples'])" "$f.cpu.json") (load $(cut -d' ' -f1 /proc/loadavg))"
        done
    done
done
python3 "$here/a2a_profile.py" report "$outdir" "$hz" | tee "$outdir/profile.txt"

#!/usr/bin/env bash
# The nested all-to-all against Open MPI's MPI_Alltoallv on this host, the
# ratios of issue 20's targets per size, for one or more builds side by side
# in one run: the builds' runs alternate (build 1, build 2, build 1, ...), so
# load drift hits them alike. Open MPI's default pml (ob1 + vader shared
# memory) and/or its UCX pml, and/or the forked launcher (no MPI rows).
#
#   perf/a2a_compare.sh [-r REPEATS] [-l mpirun|fork|both] [-p ob1|ucx|both]
#                       [-n RANKS] [-o OUTDIR] [-A] BUILD_DIR [BUILD_DIR ...]
#                       [-- nsp_a2a_perf options]
#
# -A: run nothing, analyse the runs already in OUTDIR (CONFIG-bK-I.json).
# Defaults: 3 repeats, mpirun, ob1, 8 ranks, OUTDIR = FIRST_BUILD/a2a-compare,
# nsp_a2a_perf options -b 1M -e 16M -f 2 -n 20 -w 3. Prints per build and
# configuration the median over repeats of each ratio per size, and writes
# OUTDIR/compare.json (a ratio that could not be formed, e.g. for a build
# without that method, is absent). Reads both the v1 JSON of older builds
# and v2.
# Needs python3, and mpirun (openmpi-bin) for the MPI rows.
set -euo pipefail
repeats=3 launchers=mpirun pmls=ob1 ranks=8 outdir="" analyse_only=0
while getopts "r:l:p:n:o:A" opt; do
    case $opt in
    r) repeats=$OPTARG ;;
    l) launchers=$OPTARG ;;
    p) pmls=$OPTARG ;;
    n) ranks=$OPTARG ;;
    o) outdir=$OPTARG ;;
    A) analyse_only=1 ;;
    *) sed -n '2,21p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
builds=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do builds+=("$1"); shift; done
[ $# -gt 0 ] && shift
extra=("$@")
[ ${#extra[@]} -gt 0 ] || extra=(-b 1M -e 16M -f 2 -n 20 -w 3)
[ ${#builds[@]} -gt 0 ] || builds=(build)
[ "$launchers" = both ] && launchers="mpirun fork"
[ "$pmls" = both ] && pmls="ob1 ucx"
outdir=${outdir:-${builds[0]}/a2a-compare}
mkdir -p "$outdir"
for b in "${builds[@]}"; do
    [ -x "$b/perf/nsp_a2a_perf" ] || { echo "a2a_compare: no $b/perf/nsp_a2a_perf (build it)" >&2; exit 1; }
done
case " $launchers " in *" mpirun "*)
    command -v mpirun >/dev/null || { echo "a2a_compare: mpirun not found (openmpi-bin)" >&2; exit 1; } ;;
esac

export UCX_LOG_FILE=stderr UCX_WARN_UNUSED_ENV_VARS=n
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

runs=()
if [ $analyse_only = 1 ]; then
    for f in "$outdir"/*-b[0-9]*-[0-9]*.json; do
        b=${f##*/}; b=${b%.json}
        i=${b##*-}; rest=${b%-*}; k=${rest##*-b}; cfg=${rest%-b*}
        runs+=("$cfg $k $i $f")
    done
    repeats=0
else
    echo "== load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; builds: ${builds[*]}"
    echo "== nsp_a2a_perf ${extra[*]}; $repeats repeats; launchers $launchers; pmls $pmls; $ranks ranks"
fi
for i in $(seq 1 "$repeats"); do
    for l in $launchers; do
        for p in $pmls; do
            [ "$l" = fork ] && [ "$p" != "${pmls%% *}" ] && continue  # fork: no pml
            cfg=$l; [ "$l" = mpirun ] && cfg="$l-$p"
            for k in "${!builds[@]}"; do
                perf="${builds[$k]}/perf/nsp_a2a_perf"
                f="$outdir/$cfg-b$k-$i"
                if [ "$l" = fork ]; then
                    "$perf" --ranks "$ranks" -J "$f.json" "${extra[@]}" >"$f.txt" 2>&1
                elif [ "$p" = ucx ]; then
                    env OMPI_MCA_pml=ucx OMPI_MCA_pml_ucx_devices=any OMPI_MCA_pml_ucx_tls=any \
                        mpirun -np "$ranks" "$perf" -J "$f.json" "${extra[@]}" >"$f.txt" 2>&1
                else
                    mpirun -np "$ranks" "$perf" -J "$f.json" "${extra[@]}" >"$f.txt" 2>&1
                fi || echo "   (exit $? in $f.txt)"
                echo "== $cfg build $k run $i: load $(cut -d' ' -f1 /proc/loadavg); $(grep -m1 'Out of bounds' "$f.txt" || echo 'no footer')"
                runs+=("$cfg $k $i $f.json")
            done
        done
    done
done

python3 - "$outdir" "${builds[*]}" "${runs[@]}" <<'PY'
import json, math, statistics, sys

outdir, builds = sys.argv[1], sys.argv[2].split()
runs = [r.split(" ", 3) for r in sys.argv[3:]]
# (numerator, denominator, column): the targets of issue 20 and their context
RATIOS = [("nested", "mpi", "busbw"), ("nested", "mpi+pack", "busbw"),
          ("flat", "mpi-flat", "busbw"), ("nested", "tp-same", "busbw"),
          ("flat", "tp-flat", "busbw"), ("tp-same", "mpi", "busbw"),
          ("nested-oneshot", "mpi", "busbw"), ("nested-mapped", "mpi", "busbw"),
          ("flat-mapped", "mpi-flat", "busbw"), ("nested-mapped", "tp-same", "busbw"),
          ("flat-mapped", "tp-flat", "busbw"),
          ("serial", "nested", "time_us"), ("levels", "nested", "time_us"),
          ("nested", "mpi", "cpu_us"), ("nested", "mpi+pack", "cpu_us")]  # v2 only


def load(path):
    try:
        with open(path) as f:
            return json.load(f, parse_constant=lambda x: None)
    except (OSError, ValueError):
        return None


table = {}  # (cfg, build) -> {ratio: {size: [values]}}
for cfg, k, i, path in runs:
    d = load(path)
    if d is None:
        continue
    by = {(r["method"], r["size"]): r for r in d.get("results", [])}
    sizes = sorted({s for _, s in by})
    t = table.setdefault((cfg, int(k)), {})
    for num, den, col in RATIOS:
        for s in sizes:
            a, b = by.get((num, s)), by.get((den, s))
            if a and b and a.get(col) and b.get(col):
                v = a[col] / b[col]
                if math.isfinite(v):
                    t.setdefault(f"{num}/{den} {col}", {}).setdefault(s, []).append(v)

out = {"builds": builds, "configs": {}}
for (cfg, k), t in sorted(table.items()):
    print(f"\n{cfg}, build {k} ({builds[k]}): medians over runs per size")
    res = out["configs"].setdefault(cfg, {}).setdefault(builds[k], {})
    for name, per in t.items():
        med = {s: statistics.median(v) for s, v in sorted(per.items())}
        res[name] = {str(s): m for s, m in med.items()}
        print(f"   {name:28s} " + "  ".join(f"{s >> 20}M {m:.2f}x" if s >= 1 << 20 else
                                           f"{s >> 10}K {m:.2f}x" for s, m in med.items()))
with open(f"{outdir}/compare.json", "w") as f:
    json.dump(out, f, indent=1)
print(f"\nwritten: {outdir}/compare.json")
PY

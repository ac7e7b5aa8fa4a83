#!/usr/bin/env bash
# Compare the nested all-to-all with Open MPI's MPI_Alltoallv on this host, in
# the same runs: Open MPI's default (ob1 + vader shared memory) and its UCX pml,
# each REPEATS times, plus ucx_perftest tag_bw as the physical reference.
#
#   perf/a2a_compare.sh [BUILD_DIR] [RANKS] [REPEATS] [extra nsp_a2a_perf args]
#
# Writes BUILD_DIR/a2a-compare/{ob1,ucx}-N.json and prints, per pml, the
# median over repeats of nested/mpi, nested/mpi+pack, serial/pipelined and
# sum-of-levels/pipelined. Needs mpirun (openmpi-bin) and python3.
set -euo pipefail
build=${1:-build}
ranks=${2:-8}
repeats=${3:-3}
shift $(( $# > 3 ? 3 : $# )) || true
perf="$build/perf/nsp_a2a_perf"
out="$build/a2a-compare"
mkdir -p "$out"
[ -x "$perf" ] || { echo "a2a_compare: build $perf first (make -C $build)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "a2a_compare: mpirun not found (openmpi-bin)" >&2; exit 1; }

export UCX_LOG_FILE=stderr
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

echo "== load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
if command -v ucx_perftest >/dev/null; then
    port=$((20000 + RANDOM % 20000))
    ucx_perftest -t tag_bw -s 1048576 -n 500 -p "$port" >/dev/null 2>&1 &
    srv=$!
    sleep 1
    ref=$(ucx_perftest 127.0.0.1 -t tag_bw -s 1048576 -n 500 -p "$port" 2>/dev/null |
          awk '/Final:/ {print $(NF)}') || true
    wait "$srv" 2>/dev/null || true
    echo "== ucx_perftest tag_bw 1 MiB, 2 processes: ${ref:-?} MB/s"
fi

for pml in ob1 ucx; do
    for i in $(seq 1 "$repeats"); do
        if [ "$pml" = ucx ]; then
            env OMPI_MCA_pml=ucx OMPI_MCA_pml_ucx_devices=any OMPI_MCA_pml_ucx_tls=any \
                mpirun -np "$ranks" "$perf" -J "$out/$pml-$i.json" "$@" > "$out/$pml-$i.txt" 2>&1
        else
            mpirun -np "$ranks" "$perf" -J "$out/$pml-$i.json" "$@" > "$out/$pml-$i.txt" 2>&1
        fi
        echo "== pml $pml, run $i: $(grep 'nested vs mpi' "$out/$pml-$i.txt")"
    done
done

python3 - "$out" "$repeats" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
for pml in ("ob1", "ucx"):
    runs = [json.load(open(f"{out}/{pml}-{i}.json")) for i in range(1, repeats + 1)]
    wrong = sum(r["summary"]["wrong"] for r in runs)
    def med(key):
        vals = [r["summary"][key] for r in runs if r["summary"][key] > 0]
        return statistics.median(vals) if vals else float("nan")
    # per size: nested busbw / mpi busbw, median over runs
    sizes = sorted({x["size"] for x in runs[0]["results"]})
    def per_size(num, den, key):
        out = []
        for s in sizes:
            rs = []
            for r in runs:
                b = {x["method"]: x for x in r["results"] if x["size"] == s}
                if num in b and den in b and b[den][key] > 0:
                    rs.append(b[num][key] / b[den][key])
            out.append((s, statistics.median(rs) if rs else float("nan")))
        return out
    per = per_size("nested", "mpi", "busbw")
    print(f"pml {pml}: wrong {wrong}; median over {repeats} runs: nested/mpi busbw "
          f"{med('nested_over_mpi'):.2f}x, nested/mpi+pack {med('nested_over_mpi_pack'):.2f}x, "
          f"serial/pipelined >= {med('serial_over_pipelined_min'):.2f}x, "
          f"sum-of-levels/pipelined >= {med('levels_over_pipelined_min'):.2f}x")
    print("   per size nested/mpi busbw:          " +
          ", ".join(f"{s >> 20}M {v:.2f}x" for s, v in per))
    print("   per size nested/mpi+pack busbw:     " +
          ", ".join(f"{s >> 20}M {v:.2f}x" for s, v in per_size("nested", "mpi+pack", "busbw")))
    print("   per size serial/pipelined time:     " +
          ", ".join(f"{s >> 20}M {v:.2f}x" for s, v in per_size("serial", "nested", "time_us")))
    print("   per size sum-of-levels/pipelined:   " +
          ", ".join(f"{s >> 20}M {v:.2f}x" for s, v in per_size("levels", "nested", "time_us")))
    print("   per size flat/nested time:          " +
          ", ".join(f"{s >> 20}M {v:.2f}x" for s, v in per_size("flat", "nested", "time_us")))
PY

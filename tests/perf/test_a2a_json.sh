#!/bin/sh
# perf/nsp_a2a_perf output a peer can trust: a forked run (no mpirun) where
# the MPI methods cannot run. The JSON parses with a strict parser (NaN and
# Infinity refused, duplicate keys refused); the methods that did not run
# are absent from "results" and listed under "skipped" with a reason; a
# ratio appears only when both of its rows ran; the columns follow their
# stated definitions (algbw = size / time; busbw = off-rank bytes / time, the
# same bytes for nested and tp-same); the table prints no nan or inf;
# --check 0 gives "wrong": null and N/A, never a made-up 0; the transport's
# counters add up. TAP output.
top_build=${NSP_TOP_BUILDDIR:-.}
perf="$top_build/perf/nsp_a2a_perf"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "1..11"
if [ ! -x "$perf" ]; then
    echo "not ok 1 - $perf is built"; exit 0
fi
if [ -z "$PYTHON3" ] || [ "$PYTHON3" = no ]; then
    for k in 1 2 3 4 5 6 7 8 9 10 11; do echo "ok $k # SKIP python3 not found (configure PYTHON3)"; done
    exit 0
fi
methods=nested,flat,tp-same,mpi,mpi-flat,mpi+pack
export UCX_LOG_FILE=stderr
"$perf" --ranks 2 -b 64K -e 128K -f 2 -n 4 -r 2 -w 1 -c 1 --methods "$methods" \
    -J "$dir/checked.json" >"$dir/checked.txt" 2>&1
rc1=$?
"$perf" --ranks 2 -b 64K -e 64K -n 2 -w 0 -c 0 --methods nested,tp-same,mpi \
    -J "$dir/unchecked.json" >"$dir/unchecked.txt" 2>&1
rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && echo "ok 1 - both runs exit 0" ||
    { echo "not ok 1 - exit codes $rc1, $rc2"; sed 's/^/# /' "$dir/checked.txt" "$dir/unchecked.txt"; }

"$PYTHON3" - "$dir" <<'PY'
import json, math, re, sys

d = sys.argv[1]
n = 1


def tap(ok, what):
    global n
    n += 1
    print(("ok" if ok else "not ok") + " %d - %s" % (n, what))


def refuse(name):
    raise ValueError("non-finite number %s" % name)


def no_dups(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key in %s" % keys)
    return dict(pairs)


def strict(path):
    with open(path) as f:
        return json.load(f, parse_constant=refuse, object_pairs_hook=no_dups)


try:
    c, u = strict(d + "/checked.json"), strict(d + "/unchecked.json")
    tap(c["format"] == u["format"] == "nspcomm-a2a-perf-v2",
        "both JSON files parse strictly (no NaN/Infinity, no duplicate key), format v2")
except Exception as e:  # the remaining checks need the documents
    tap(False, "strict parse: %s" % e)
    for k in range(8):
        tap(False, "skipped after the parse failed")
    sys.exit(0)

ran = {r["method"] for r in c["results"]}
skipped = {s["method"]: s["reason"] for s in c["skipped"]}
tap(ran == {"nested", "flat", "tp-same"} and
    set(skipped) == {"mpi", "mpi-flat", "mpi+pack"} and
    all("mpirun" in why or "MPI" in why for why in skipped.values()),
    "MPI methods absent from results, skipped with a reason: %s / %s" % (sorted(ran), skipped))

names = {x["name"] for x in c["ratios"]} | set(c["summary"]["ratios"])
tap(all(set(k.split("/")) <= ran for k in names) and "nested/tp-same" in names and
    "flat/nested" in names and not any("mpi" in k for k in names),
    "ratios only between rows that ran: %s" % sorted(names))


def numbers(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from numbers(v)
    elif isinstance(x, list):
        for v in x:
            yield from numbers(v)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield x


ok = all(math.isfinite(v) for v in numbers(c)) and all(
    r[k] is not None for r in c["results"] for k in ("time_us", "algbw", "busbw", "wrong"))
ok = ok and all(r["time_us_min"] <= r["time_us"] <= r["time_us_max"] and r["reps"] == 2
                and r["calls"] == 4 for r in c["results"])
tap(ok, "every number finite; time is a median within [min, max] of 2 reps of 4 calls")

by = {(r["method"], r["size"]): r for r in c["results"]}
ok = True
for (m, s), r in by.items():
    ok &= abs(r["algbw"] * r["time_us"] * 1e3 - s) <= 1e-6 * s      # algbw = size / time
for s in {s for _, s in by}:
    a, b = by[("nested", s)], by[("tp-same", s)]                     # the same off-rank bytes
    ok &= abs(a["busbw"] * a["time_us"] - b["busbw"] * b["time_us"]) <= 1e-6 * a["busbw"] * a["time_us"]
    ok &= a["busbw"] < a["algbw"]                                     # level 0 stays home
tap(ok and "busbw" in c["definitions"] and "other ranks" in c["definitions"]["busbw"],
    "algbw = size / time; busbw * time = the same off-rank bytes for nested and tp-same")

text = open(d + "/checked.txt").read() + open(d + "/unchecked.txt").read()
header = re.search(r"^#\s+method\s+size\(B\)\s+count\s+type\s+time\(us\)\s+algbw\s+busbw\s+#wrong",
                   text, re.M)
tap(header is not None and re.search(r"\b(nan|inf|-nan)\b", text, re.I) is None and
    "# busbw = B_off / time; B_off = bytes a rank sends to other ranks" in text,
    "table: the nccl-tests columns, the busbw formula stated, no nan or inf")

tap(all(r["wrong"] == 0 for r in c["results"]) and c["summary"]["wrong"] == 0 and
    "# Out of bounds values : 0 OK" in text, "--check 1: every row checked, 0 wrong")

# The transport's counters (nsp_tp_ucx_stats): on 2 ranks tp-same sends one
# message per call, nested-sized (>= 8 KiB: rendezvous by UCX's threshold on
# one host), and the bytes it sends are its off-rank bytes.
tp = [r for r in c["results"] if r["method"] == "tp-same"]
tap(tp and all(r["ucx"]["sends"] == 1 and r["ucx"]["rndv"] == 1 and r["ucx"]["eager"] == 0 and
               abs(r["ucx"]["bytes"] - r["busbw"] * r["time_us"] * 1e3) <= 1e-6 * r["ucx"]["bytes"]
               and r["ucx"]["progress"] >= 1 for r in tp),
    "ucx counters: tp-same makes 1 rendezvous send per call carrying its off-rank bytes: %s"
    % [r["ucx"] for r in tp])

# Runs (alltoallv_iov_post): the nested rows' levels move as runs (4 KiB
# head slices), copied by this rank itself where the kernel lets same-host
# processes read each other (s2h: the sender, so what it copies is exactly
# its off-rank bytes); through UCX's iov datatype otherwise (no copies).
nested = [r for r in c["results"] if r["method"] == "nested"]
tap(nested and all({"copies", "copy_bytes"} <= set(r["ucx"]) for r in c["results"]) and
    all(r["ucx"]["copies"] == 0 for r in tp) and
    all((r["ucx"]["copies"] == 0 and r["ucx"]["copy_bytes"] == 0) or
        (abs(r["ucx"]["copies"] - 1) <= 1e-9 and
         abs(r["ucx"]["copy_bytes"] - r["busbw"] * r["time_us"] * 1e3) <= 1e-6 * r["ucx"]["copy_bytes"])
        for r in nested),
    "ucx counters: nested copies its runs' off-rank bytes itself (or through UCX iov): %s"
    % [r["ucx"] for r in nested])

rows = [l.split() for l in open(d + "/unchecked.txt") if l.startswith("  ")]
tap(u["config"]["check"] is False and all(r["wrong"] is None for r in u["results"]) and
    u["summary"]["wrong"] is None and rows and all(r[7] == "N/A" for r in rows) and
    "(not checked)" in text,
    "--check 0: wrong is null in the JSON and N/A in the table")
PY

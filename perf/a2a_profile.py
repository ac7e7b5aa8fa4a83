#!/usr/bin/env python3
"""Where nsp_a2a_perf's time goes: the analysis half of perf/a2a_profile.sh.

  a2a_profile.py classify RUN.json WINDOWS < perf-script.txt > RUN.cpu.json
  a2a_profile.py report OUTDIR [HZ]

classify reads `perf script -F pid,time,ip,sym` of a `perf record -k
CLOCK_MONOTONIC -e cpu-clock --call-graph dwarf` run of nsp_a2a_perf (one
method, one size) and counts the samples a rank took while it ran its timed
calls (the WINDOWS file nsp_a2a_perf writes under NSP_A2A_PERF_WINDOWS:
"pid method size t0 t1" per block, CLOCK_MONOTONIC seconds) by what the CPU
was doing, from the leaf of the call chain up:

  pack          strided copies into send scratch (nsp_pack_*)
  unpack        copies out of receive scratch (nsp_unpack_*)
  copy-self     a rank's own block (nsp_pack_copy_self, the alltoallv's self part)
  copy-level0   level 0's local copy (step_copy_level0)
  copy-mapped   reads from mapped peers (nested-mapped)
  wire-cma      the kernel's single copy between processes (process_vm_readv: UCX
                and Open MPI rendezvous on one host)
  wire-eager    copies through shared-memory FIFOs (UCX or MPI eager)
  ucx           UCX's and nspcomm's transport software (protocol, progress, posts)
  mpi           Open MPI's software (ob1/vader progress, datatypes), not copies
  nspcomm       the request and level-queue machinery above the transport
  sched         the scheduler: yields, naps, context switches
  faults        page faults
  copy-unknown  a copy whose callers perf could not unwind (glibc's large,
                non-temporal copy path: level-0 and own-block copies of
                several MiB)
  other         anything else

report reads OUTDIR/timing-*.json (interleaved timing runs) and
OUTDIR/cpu-*.cpu.json, prints one table per launcher and size, and writes
OUTDIR/profile.json (numbers or null, never NaN) and OUTDIR/profile.md (the
tables behind docs/results.md, "The nested all-to-all against MPI": one per
launcher, a row per method and size).
"""
import glob
import json
import math
import os
import re
import sys

CATS = ["pack", "unpack", "copy-self", "copy-level0", "copy-mapped", "copy-unknown",
        "wire-cma", "wire-eager", "ucx", "mpi", "nspcomm", "sched", "faults", "other"]

KERNEL_RULES = [  # on the kernel part of the stack, leaf first
    ("wire-cma", re.compile(r"process_vm_rw")),
    ("sched", re.compile(r"^(schedule|__schedule|finish_task_switch|do_nanosleep|"
                         r"hrtimer_nanosleep|__x64_sys_sched_yield|do_sched_yield)")),
    ("faults", re.compile(r"(exc_page_fault|handle_mm_fault|do_anonymous_page)")),
]
COPY = re.compile(r"^__(memmove|memcpy|memset)_|^memcpy$|^memmove$")
USER_RULES = [  # on the user part, leaf first: the first frame that matches
    ("pack", re.compile(r"^nsp_pack_(s2h|h2s)(_sel)?$")),
    ("unpack", re.compile(r"^nsp_unpack_")),
    ("copy-self", re.compile(r"^nsp_pack_copy_self$")),
    ("copy-level0", re.compile(r"^(step_copy_level0|mpack_call)$")),  # mpi+pack copies level 0 itself
    ("copy-mapped", re.compile(r"^(copy_from|step_decide|nsp_pack_copy_peer)$")),
    ("sched", re.compile(r"sched_yield|nanosleep")),
    ("ucx", re.compile(r"^(ucp_|uct_|ucs_|ucx_)")),
    ("mpi", re.compile(r"^(mca_|ompi_|opal_|PMPI_|MPI_|pmix_)")),
    ("nspcomm", re.compile(r"^(nsp_|level_req|step_|queue_run)")),
]
ROOTS = re.compile(r"^(main|_start|__libc_start_main|__libc_start_call_main|forked_rank|run_rank)")


def sample_category(frames):
    """frames: [(is_kernel, symbol)], leaf first."""
    for kern, sym in frames:
        if not kern:
            break
        for cat, rx in KERNEL_RULES:
            if rx.search(sym):
                return cat
    user = [s for k, s in frames if not k]
    if user and re.search(r"sched_yield|nanosleep", user[0]):  # in the syscall: waiting
        return "sched"
    leaf_copy = bool(user) and COPY.search(user[0]) is not None
    for sym in user:
        if sym.startswith("ucx_alltoallv_post") and leaf_copy:
            return "copy-self"
        if leaf_copy and sym.startswith("uct_"):
            return "wire-eager"
        if leaf_copy and re.match(r"^mca_btl_", sym):
            return "wire-eager"
        if leaf_copy and re.match(r"^(ompi_datatype|opal_datatype|mca_coll|ompi_coll)", sym):
            return "copy-self"
        for cat, rx in USER_RULES:
            if rx.search(sym):
                return cat
    if leaf_copy and not any(ROOTS.match(s) for s in user):
        return "copy-unknown"
    return "other"


def parse_script(stream):
    """Yield (pid, time, frames) per sample of `perf script -F pid,time,ip,sym`."""
    pid, t, frames = None, None, []
    for line in stream:
        line = line.rstrip("\n")
        if not line.strip():
            if pid is not None:
                yield pid, t, frames
            pid, t, frames = None, None, []
            continue
        if not line.startswith("\t"):  # " PID  SECONDS: " opens a sample; frames: tab-indented
            if pid is not None:
                yield pid, t, frames
            head = line.split()
            pid, t, frames = int(head[0]), float(head[1].rstrip(":")), []
            continue
        parts = line.split(None, 1)
        if len(parts) == 2:
            ip, sym = parts
            sym = sym.replace(" (inlined)", "").split("+")[0].strip()
            frames.append((ip.startswith("ffffffff"), sym))
    if pid is not None:
        yield pid, t, frames


def read_windows(path):
    """pid -> [(t0, t1)] of the timed blocks, and the seconds they cover."""
    wins, covered = {}, 0.0
    with open(path) as f:
        for line in f:
            pid, _, _, t0, t1 = line.split()
            wins.setdefault(int(pid), []).append((float(t0), float(t1)))
            covered += float(t1) - float(t0)
    return wins, covered


def classify(run_json, windows):
    counts = {c: 0 for c in CATS}
    total = timed = 0
    wins, covered = read_windows(windows)
    for pid, t, frames in parse_script(sys.stdin):
        total += 1
        if not any(t0 <= t <= t1 for t0, t1 in wins.get(pid, ())):
            continue
        timed += 1
        counts[sample_category(frames)] += 1
    run = json.load(open(run_json), parse_constant=lambda x: None)
    res = run["results"][0] if run.get("results") else {}
    json.dump({"method": res.get("method"), "size": res.get("size"),
               "ranks": run["config"]["ranks"], "launcher": run["config"]["launcher"],
               "calls": run["config"]["iters"], "window_s": covered,
               "samples": total, "timed_samples": timed, "counts": counts},
              sys.stdout)
    print()


def fmt(v, prec=0):
    return "-" if v is None or not math.isfinite(v) else f"{v:.{prec}f}"


# The table's columns: the categories above, grouped where perf's unwinding
# cannot always tell them apart (glibc's large copies).
COARSE = [("copies", ["pack", "unpack", "copy-self", "copy-level0", "copy-mapped",
                      "copy-unknown"]),
          ("cma", ["wire-cma"]), ("eager", ["wire-eager"]), ("ucx", ["ucx"]), ("mpi", ["mpi"]),
          ("nspcomm", ["nspcomm"]), ("sched", ["sched"]), ("faults", ["faults"]),
          ("other", ["other"])]
METHODS = ["nested", "nested-oneshot", "serial", "flat", "tp-same", "mpi", "mpi-flat",
           "mpi+pack", "nested-mapped"]


def load_runs(outdir):
    timing, cpu = {}, {}
    for path in sorted(glob.glob(os.path.join(outdir, "timing-*.json"))):
        d = json.load(open(path), parse_constant=lambda x: None)
        for r in d["results"]:
            timing[(d["config"]["launcher"], r["size"], r["method"])] = r
    for path in sorted(glob.glob(os.path.join(outdir, "cpu-*.cpu.json"))):
        d = json.load(open(path))
        cpu[(d["launcher"], d["size"], d["method"])] = d
    return timing, cpu


def one_row(launcher, size, m, t, c, freq):
    row = {"launcher": launcher, "size": size, "method": m, "time_us": t.get("time_us"),
           "cpu_us": t.get("cpu_us"), "phases_us": t.get("phases_us", {}),
           "ucx": t.get("ucx", {}), "copies_bytes": t.get("copies_bytes"),
           "cpu_split_us": None, "cpu_coarse_us": None, "cpu_samples": None}
    if c and c["timed_samples"] > 0 and c["window_s"] > 0:
        per = 1e6 / freq / (c["calls"] * c["ranks"])  # us of CPU per sample, per call and rank
        row["cpu_split_us"] = {k: v * per for k, v in c["counts"].items()}
        row["cpu_coarse_us"] = {g: sum(row["cpu_split_us"][k] for k in ks) for g, ks in COARSE}
        row["cpu_samples"] = c["timed_samples"]
    return row


def print_row(row):
    t, co, cb = row, row["cpu_coarse_us"] or {}, row["copies_bytes"]
    model = "-"
    if cb:
        s = row["size"]
        model = (f"{cb['total'] / s:.2f} = {cb['level0'] / s:.2f} + {cb['self'] / s:.2f} + "
                 f"{cb['pack'] / s:.2f} + {cb['wire'] / s:.2f} + {cb['unpack'] / s:.2f}")
    u = row["ucx"] or {}
    print(f"{row['method']:15s} {fmt(t['time_us']):>8s} {fmt(t['cpu_us']):>7s} " +
          " ".join(f"{fmt(co.get(g)):>7s}" for g, _ in COARSE) +
          f"  {fmt(u.get('sends'), 1)}"
          f"({fmt(u.get('eager'), 1)}/{fmt(u.get('rndv'), 1)})  {model}")


def report(outdir, freq):
    timing, cpu = load_runs(outdir)
    out = {"format": "nspcomm-a2a-profile-v1", "cpu_sample_hz": freq, "categories": CATS,
           "coarse": {g: ks for g, ks in COARSE}, "rows": []}
    for launcher, size in sorted({(k[0], k[1]) for k in list(timing) + list(cpu)}):
        print(f"\n== {launcher}, {size >> 20} MiB per rank; us per call and rank: time and CPU "
              f"(timing run), the CPU split (perf samples of the timed calls); copies = bytes copied per call / size: level0 + self + pack + "
              f"wire + unpack")
        print(f"{'method':15s} {'time':>8s} {'cpu':>7s} " +
              " ".join(f"{g:>7s}" for g, _ in COARSE) + "  sends(eager/rndv)  copies")
        for m in METHODS:
            t, c = timing.get((launcher, size, m)), cpu.get((launcher, size, m))
            if t is None and c is None:
                continue
            row = one_row(launcher, size, m, t or {}, c, freq)
            print_row(row)
            if row["phases_us"]:
                print(f"{'':15s} phases: " +
                      ", ".join(f"{k} {fmt(v)}" for k, v in row["phases_us"].items()))
            out["rows"].append(row)
    with open(os.path.join(outdir, "profile.json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(os.path.join(outdir, "profile.md"), "w") as f:
        f.write(markdown(out["rows"]))
    print(f"\nwritten: {os.path.join(outdir, 'profile.json')}, profile.md")


# The shares of the CPU split the docs table shows: what copies bytes, what
# runs the transport, what waits.
SHARES = [("user copies", ["copies"]), ("CMA copy", ["cma"]),
          ("transport software", ["ucx", "mpi", "nspcomm", "eager"]), ("scheduler", ["sched"]),
          ("faults, other", ["faults", "other"])]


def markdown(rows):
    text = []
    for launcher in sorted({r["launcher"] for r in rows}):
        text.append(f"\n{launcher}: per call and rank; shares of the CPU samples taken in the "
                    f"timed calls\n")
        text.append("| method | size | time (us) | CPU (us) | copied / size | " +
                    " | ".join(n for n, _ in SHARES) + " |")
        text.append("| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in SHARES) +
                    " |")
        for m in ["nested", "flat", "tp-same", "mpi", "mpi-flat", "mpi+pack"]:
            for r in sorted((r for r in rows if r["launcher"] == launcher and r["method"] == m),
                            key=lambda r: r["size"]):
                co, cb = r["cpu_coarse_us"], r["copies_bytes"]
                tot = sum(co.values()) if co else 0
                shares = [f"{100 * sum(co[k] for k in ks) / tot:.0f}%" if tot else "-"
                          for _, ks in SHARES]
                text.append(f"| {m} | {r['size'] >> 20} MiB | {fmt(r['time_us'])} | "
                            f"{fmt(r['cpu_us'])} | {fmt(cb['total'] / r['size'], 2) if cb else '-'}"
                            f" | " + " | ".join(shares) + " |")
    return "\n".join(text) + "\n"


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "classify":
        classify(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "report":
        report(sys.argv[2], float(sys.argv[3]) if len(sys.argv) == 4 else 499.0)
    else:
        sys.exit(__doc__)

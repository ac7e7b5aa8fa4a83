#!/usr/bin/env python3
"""perf/nsp_a2a_perf of two builds side by side, interleaved.

  scripts/a2a_builds_compare.py BASE_BUILD NEW_BUILD [--repeats N] [--json FILE]
                                [-- nsp_a2a_perf options]

Runs BASE_BUILD/perf/nsp_a2a_perf and NEW_BUILD/perf/nsp_a2a_perf in turn
(base new, new base, base new, ...) REPEATS times each with the same options
(default: --ranks 4 -b 1M -e 16M -n 10 -w 2 and every method that needs no
MPI launcher), and prints per method and size the median time of each build,
the median and the spread (min..max) of the per-pair ratios new/base, and
the load average around each run. Ratios measured in one run, interleaved,
are what this machine can tell; absolute times drift with the load. Writes
JSON (format nspcomm-a2a-builds-v1; null where a value is missing) with
--json. Exit status 1 if any run failed or reported a wrong element.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEFAULT_ARGS = ["--ranks", "4", "-b", "1M", "-e", "16M", "-n", "10", "-w", "2",
                "--methods", "serial,levels,flat,tp-same,nested-mapped"]


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_one(build, args, tag):
    perf = os.path.join(build, "perf", "nsp_a2a_perf")
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = dict(os.environ, UCX_LOG_FILE="stderr")
    before = loadavg()
    proc = subprocess.run([perf] + args + ["-J", path], env=env, capture_output=True,
                          text=True)
    after = loadavg()
    result = {"build": tag, "rc": proc.returncode, "load_before": before,
              "load_after": after, "rows": {}, "wrong": None}
    if proc.returncode == 0:
        with open(path) as f:
            data = json.load(f)
        result["wrong"] = data["summary"]["wrong"]
        for r in data["results"]:
            result["rows"][(r["method"], r["size"])] = r["time_us"]
    else:
        sys.stderr.write(f"{tag}: {perf} exited {proc.returncode}\n{proc.stdout[-2000:]}"
                         f"{proc.stderr[-2000:]}\n")
    os.unlink(path)
    return result


def summarize(runs):
    base = [r for r in runs if r["build"] == "base"]
    new = [r for r in runs if r["build"] == "new"]
    keys = sorted({k for r in runs for k in r["rows"]}, key=lambda k: (k[1], k[0]))
    rows = []
    for key in keys:
        b = [r["rows"][key] for r in base if key in r["rows"]]
        n = [r["rows"][key] for r in new if key in r["rows"]]
        pairs = [nr["rows"][key] / br["rows"][key] for br, nr in zip(base, new)
                 if key in br["rows"] and key in nr["rows"] and br["rows"][key] > 0]
        rows.append({
            "method": key[0], "size": key[1],
            "base_us": statistics.median(b) if b else None,
            "new_us": statistics.median(n) if n else None,
            "ratio_median": statistics.median(pairs) if pairs else None,
            "ratio_min": min(pairs) if pairs else None,
            "ratio_max": max(pairs) if pairs else None,
            "pairs": len(pairs),
        })
    return rows


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    args = argv[cut + 1:] or DEFAULT_ARGS
    print(f"# nsp_a2a_perf {' '.join(args)}; {a.repeats} interleaved pairs; "
          f"{os.cpu_count()} cores; load {loadavg()}")
    runs = []
    for i in range(a.repeats):
        order = (("base", a.base), ("new", a.new))
        # alternate which goes first (base new, new base, ...) so a drifting
        # load does not favour one build
        for tag, build in (order if i % 2 == 0 else order[::-1]):
            r = run_one(build, args, tag)
            runs.append(r)
            print(f"# pair {i + 1} {tag}: exit {r['rc']}, wrong {r['wrong']}, load "
                  f"{r['load_before']} -> {r['load_after']}", flush=True)
    rows = summarize(runs)
    print(f"{'method':<15}{'size(B)':>10}{'base(us)':>12}{'new(us)':>12}"
          f"{'new/base':>10}{'min..max':>16}")
    for r in rows:
        spread = (f"{fmt(r['ratio_min'], '.2f')}..{fmt(r['ratio_max'], '.2f')}"
                  if r["pairs"] else "-")
        print(f"{r['method']:<15}{r['size']:>10}{fmt(r['base_us'], '.1f'):>12}"
              f"{fmt(r['new_us'], '.1f'):>12}{fmt(r['ratio_median'], '.3f'):>10}{spread:>16}")
    ratios = [r["ratio_median"] for r in rows if r["ratio_median"] is not None]
    overall = statistics.median(ratios) if ratios else None
    print(f"# median over rows of the median ratio new/base: {fmt(overall, '.3f')}; "
          f"load now {loadavg()}")
    ok = all(r["rc"] == 0 and r["wrong"] == 0 for r in runs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"format": "nspcomm-a2a-builds-v1", "args": args,
                       "repeats": a.repeats, "base": a.base, "new": a.new,
                       "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs],
                       "rows": rows, "median_ratio": overall, "ok": ok}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

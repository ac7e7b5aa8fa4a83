#!/usr/bin/env python3
"""Instructions of the nested all-to-all's calls in two builds (callgrind).

  scripts/a2a_builds_ir.py BASE_BUILD NEW_BUILD [--ranks N] [--sizes 1M,4M]
                           [--methods nested,serial] [--iters N] [--json FILE]

Runs BUILD/perf/nsp_a2a_perf under valgrind --tool=callgrind for both
builds, collecting only inside nsp_a2a_post() (what a post costs the
calling rank: create, every level's pack and post, the level-0 and self
copies; the agreement check is off in the tool, so no wait is inside) and
inside the unpack step (step_finish, run later from the request tests), so
the busy-waiting of the ranks is not counted. Prints, per build and rank,
the instructions per post and per unpack, and new/base: counts of
instructions, not times, so they hold on a loaded machine (UCX's progress
calls inside a post still vary a little with what has arrived). Writes JSON
(format nspcomm-a2a-ir-v1; null where a value is missing) with --json. Needs
valgrind (callgrind_annotate) and python3.
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

FUNCS = ("nsp_a2a_post", "step_finish")


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def inclusive(path, func):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*:%s\b" % func, line)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0


def run_build(build, tag, a, size, tmp):
    perf = os.path.join(build, "perf", "nsp_a2a_perf")
    prefix = os.path.join(tmp, f"{tag}-{size}")
    env = dict(os.environ, UCX_LOG_FILE="stderr", UCX_MEM_EVENTS="no",
               UCX_MEM_MALLOC_HOOKS="no", UCX_MEM_MMAP_HOOK_MODE="none",
               UCX_WARN_UNUSED_ENV_VARS="n")
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
           f"--callgrind-out-file={prefix}.%p"] + [f"--toggle-collect={f}" for f in FUNCS] + \
          [perf, "--ranks", str(a.ranks), "-b", str(size), "-e", str(size), "-n", str(a.iters),
           "-w", "1", "-c", "0", "--methods", a.methods]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    posts = (a.iters + 1) * (1 + len([m for m in a.methods.split(",")
                                      if m in ("serial", "flat", "nested-mapped")]))
    ranks = []
    for path in sorted(glob.glob(prefix + ".*")):
        post = inclusive(path, "nsp_a2a_post")
        fin = inclusive(path, "step_finish")
        if post > 0:  # the forked ranks (the parent posts nothing)
            ranks.append({"post_ir": post / posts, "finish_ir": fin / posts})
    return {"rc": proc.returncode, "posts": posts, "ranks": ranks}


def med(values):
    return statistics.median(values) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--sizes", default="1M,4M")
    ap.add_argument("--methods", default="serial")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("a2a_builds_ir: valgrind and callgrind_annotate are needed", file=sys.stderr)
        return 2
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# nsp_a2a_perf --ranks {a.ranks} --methods {a.methods} -n {a.iters} -w 1 -c 0 "
          f"under callgrind; instructions per post (nsp_a2a_post) and per unpack step; "
          f"load {load}")
    print(f"{'size(B)':>10}{'base post':>14}{'new post':>14}{'new/base':>10}"
          f"{'base unpack':>14}{'new unpack':>14}{'new/base':>10}")
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for size in (parse_size(s) for s in a.sizes.split(",")):
            res = {tag: run_build(b, tag, a, size, tmp) for tag, b in
                   (("base", a.base), ("new", a.new))}
            ok &= all(r["rc"] == 0 and len(r["ranks"]) == a.ranks for r in res.values())
            row = {"size": size}
            for tag in ("base", "new"):
                row[f"{tag}_post_ir"] = med([r["post_ir"] for r in res[tag]["ranks"]])
                row[f"{tag}_finish_ir"] = med([r["finish_ir"] for r in res[tag]["ranks"]])
                row[f"{tag}_ranks"] = res[tag]["ranks"]
            for k in ("post", "finish"):
                b, n = row[f"base_{k}_ir"], row[f"new_{k}_ir"]
                row[f"{k}_ratio"] = n / b if b and n is not None else None
            rows.append(row)

            def f(v, spec):
                return format(v, spec) if v is not None else "-"
            print(f"{size:>10}{f(row['base_post_ir'], ',.0f'):>14}"
                  f"{f(row['new_post_ir'], ',.0f'):>14}{f(row['post_ratio'], '.3f'):>10}"
                  f"{f(row['base_finish_ir'], ',.0f'):>14}{f(row['new_finish_ir'], ',.0f'):>14}"
                  f"{f(row['finish_ratio'], '.3f'):>10}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"format": "nspcomm-a2a-ir-v1", "ranks": a.ranks, "methods": a.methods,
                       "iters": a.iters, "load": load, "rows": rows, "ok": ok}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

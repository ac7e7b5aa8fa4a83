#!/usr/bin/env python3
"""The structure of src/, checked from the sources and the built objects.

  scripts/check-structure.py [--build DIR] [--only cycles|functions] [--report]
                             [--except DIR]...

cycles     which object of src/ calls which, read from `nm` of the built
           objects (DIR/src/**/*.o: an edge A -> B when A has an undefined
           symbol B defines); fails when the graph has a cycle and prints
           every strongly connected component of more than one file.
functions  the length of every function of src/*.c and src/*.cu (lines from
           its opening brace to its closing brace, both included); fails on a
           function over 120 lines or a median over 15.

Without --only, both run. --report prints the findings and exits 0 (what a
helper uses while files are being split). --except src/x leaves the files
under src/x out of both checks (an area being restructured on its own). Exit status: 0 clean, 1 findings,
2 usage or a missing build.
"""
import argparse
import glob
import os
import re
import statistics
import subprocess
import sys

MAX_FUNCTION_LINES = 120
MAX_MEDIAN_LINES = 15

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_of(obj):
    """src/attn_sp/.libs/libnspcomm_la-nested_a2a.o -> src/attn_sp/nested_a2a"""
    d, base = os.path.split(obj)
    if os.path.basename(d) == ".libs":
        d = os.path.dirname(d)
    base = os.path.splitext(base)[0]
    base = re.sub(r"^lib[a-z0-9_]+_la-", "", base)
    return os.path.join(d, base)


def read_symbols(obj):
    """(defined, undefined) global symbols of one object."""
    out = subprocess.run(["nm", "--extern-only", obj], check=True,
                         capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] not in "Uw":
            defined.add(parts[2])
    return defined, undefined


def objects(build):
    """Every object under build/src, libtool's .libs directories included."""
    out = []
    for d, _, names in os.walk(os.path.join(build, "src")):
        out += [os.path.join(d, n) for n in names if n.endswith(".o")]
    return sorted(out)


def call_graph(build):
    objs = objects(build)
    nodes, owner, needs = {}, {}, {}
    for obj in objs:
        rel = source_of(os.path.relpath(obj, build))
        defined, undefined = read_symbols(obj)
        nodes[rel] = obj
        needs[rel] = undefined
        for sym in defined:
            owner.setdefault(sym, rel)
    edges = {n: set() for n in nodes}
    for n, undefined in needs.items():
        for sym in undefined:
            m = owner.get(sym)
            if m is not None and m != n:
                edges[n].add(m)
    return edges


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def excluded(path, excepts):
    return any(path == e or path.startswith(e.rstrip("/") + "/") for e in excepts)


def check_cycles(build, excepts):
    if not objects(build):
        print("no objects under %s/src: build first (scripts/build.sh)" % build)
        return 2
    edges = {n: {m for m in e if not excluded(m, excepts)}
             for n, e in call_graph(build).items() if not excluded(n, excepts)}
    found = cycles(edges)
    nedges = sum(len(e) for e in edges.values())
    print("call graph: %d objects, %d edges, %d cycle(s)" % (len(edges), nedges, len(found)))
    for comp in found:
        inner = ["%s -> %s" % (a, b) for a in comp for b in sorted(edges[a]) if b in comp]
        print("  cycle: %s" % "  ".join(os.path.basename(c) for c in comp))
        for e in inner:
            print("    %s" % e)
    return 1 if found else 0


FUNC_START = re.compile(r"^[A-Za-z_][^;{}()]*\b([A-Za-z_][A-Za-z0-9_]*)\s*\([^;]*$")


def functions(path):
    """(name, first line, lines) of every function definition in one file:
    a line at column 0 naming it, its body from a '{' at column 0 to the next
    '}' at column 0 (the style of this code base)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out, name, start = [], None, None
    for i, line in enumerate(lines):
        if start is None:
            m = FUNC_START.match(line)
            if m and not line.startswith(("typedef", "static const", "#")):
                name = m.group(1)
            elif line.startswith("{") and name is not None:
                start = i
            elif line and not line[0].isspace() and not line.startswith("{"):
                name = None
        elif line.startswith("}"):
            out.append((name, start + 1, i - start + 1))
            name, start = None, None
    return out


def check_functions(top, excepts):
    files = sorted(glob.glob(os.path.join(top, "src", "**", "*.c"), recursive=True) +
                   glob.glob(os.path.join(top, "src", "**", "*.cu"), recursive=True))
    files = [f for f in files if not excluded(os.path.relpath(f, top), excepts)]
    allf = []
    for path in files:
        for name, line, n in functions(path):
            allf.append((n, os.path.relpath(path, top), line, name))
    if not allf:
        print("no functions found under %s/src" % top)
        return 2
    lengths = [n for n, _, _, _ in allf]
    median = statistics.median(lengths)
    long_ones = sorted((f for f in allf if f[0] > MAX_FUNCTION_LINES), reverse=True)
    print("functions: %d in %d files, median %.1f lines (at most %d), %d over %d lines"
          % (len(allf), len(files), median, MAX_MEDIAN_LINES, len(long_ones),
             MAX_FUNCTION_LINES))
    for n, path, line, name in long_ones:
        print("  %4d lines  %s:%d %s" % (n, path, line, name))
    return 1 if long_ones or median > MAX_MEDIAN_LINES else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--only", choices=["cycles", "functions"])
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--except", dest="excepts", action="append", default=[])
    args = ap.parse_args()
    status = 0
    if args.only in (None, "cycles"):
        status = max(status, check_cycles(args.build, args.excepts))
    if args.only in (None, "functions"):
        status = max(status, check_functions(TOP, args.excepts))
    for e in args.excepts:
        print("left out: %s" % e)
    if args.report and status == 1:
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The generated parts of docs/reference/, and the checks that keep them true.

  scripts/gen-docs-reference.py [--build DIR] --write     rewrite the tools' --help blocks
  scripts/gen-docs-reference.py [--build DIR] --check     exit 1 if a block differs
  scripts/gen-docs-reference.py --env                     the environment variables the code reads

docs/reference/tools.md holds, for every tool, its --help text between the
markers <!-- BEGIN GENERATED: NAME --help --> and <!-- END GENERATED: NAME -->
(a fenced block in between). --write runs each built tool with --help (argv[0]
set to its bare name, absolute source paths replaced by <srcdir>) and puts
its output there; --check compares instead. A tool that is not built keeps
its block (--check reports it as not checked).

--env lists the variables the code reads or sets, found in src/, tools/,
perf/, python/, scripts/, examples/, .ci/run and tests/fuzz/run.sh (C string literals
that look like variable names, os.environ/getenv in Python, ${NAME:-...} in
shell), the list tests/docs/test_docs_reference.py compares with the tables of
docs/reference/environment.md. Python 3, standard library only.
"""

import argparse
import difflib
import os
import re
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, path in the build tree (or source tree with "src:"), how to run it
TOOLS = [
    ("nsp_sim", "perf/nsp_sim"),
    ("nsp_plan_perf", "perf/nsp_plan_perf"),
    ("nsp_a2a_perf", "perf/nsp_a2a_perf"),
    ("nsp_calibrate", "perf/nsp_calibrate"),
    ("nsp_rdv_perf", "perf/nsp_rdv_perf"),
    ("nsp_topo", "perf/nsp_topo"),
    ("nsp_demo", "tools/nsp_demo"),
    ("gpu_check", "perf/gpu_check"),
    ("plan_check.py", "src:tools/plan_check.py"),
]

BEGIN = "<!-- BEGIN GENERATED: %s --help -->"
END = "<!-- END GENERATED: %s -->"


def tool_path(src, build, where):
    if where.startswith("src:"):
        return os.path.join(src, where[4:])
    return os.path.join(build, where)


def configured_srcdir(build):
    """abs_top_srcdir of a configured build tree (what its tools compiled in), or None."""
    try:
        with open(os.path.join(build, "Makefile"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("abs_top_srcdir = "):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def help_text(name, path, src, build=None):
    """The tool's --help output, made independent of where it was built."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NSPCOMM_") and not k.startswith("NSP_")}
    env["COLUMNS"] = "80"
    env["LC_ALL"] = "C"
    env["ASAN_OPTIONS"] = "detect_leaks=0"  # a sanitizer build: no leak report in the text
    if path.endswith(".py"):
        cmd, exe = [sys.executable, path, "--help"], sys.executable
    else:
        cmd, exe = [name, "--help"], path
    res = subprocess.run(cmd, executable=exe, env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    text = res.stdout + res.stderr
    text = text.replace("usage: %s" % os.path.basename(path), "usage: %s" % name)
    roots = {src, os.path.realpath(src), os.environ.get("NSP_TOP_SRCDIR", src)}
    built_in = configured_srcdir(build) if build else None
    if built_in:
        roots |= {built_in, os.path.realpath(built_in)}
    for root in sorted(roots, key=len, reverse=True):
        text = text.replace(root.rstrip("/"), "<srcdir>")
    text = re.sub(r"<srcdir>(/[^/\s]+)*?/\.\.(?=/)", "<srcdir>", text)
    text = text.replace("optional arguments:", "options:")  # Python < 3.10
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"


def blocks(doc):
    """{name: (start, end, text)} of the generated blocks in doc's text."""
    out = {}
    for name, _ in TOOLS:
        b, e = BEGIN % name, END % name
        i = doc.find(b)
        j = doc.find(e)
        if i < 0 or j < i:
            continue
        inner = doc[i + len(b):j]
        m = re.match(r"\n```text\n(.*)```\n\Z", inner, re.S)
        out[name] = (i + len(b), j, m.group(1) if m else None)
    return out


def regenerate(doc, src, build):
    """(new doc text, [(name, status)]) with status 'same', 'differs',
    'not built' or 'no block'."""
    found = blocks(doc)
    report = []
    for name, where in reversed(TOOLS):  # from the end, so offsets hold
        path = tool_path(src, build, where)
        if name not in found:
            report.append((name, "no block"))
            continue
        start, end, old = found[name]
        if not os.path.exists(path):
            report.append((name, "not built"))
            continue
        new = help_text(name, path, src, build)
        report.append((name, "same" if new == old else "differs"))
        doc = doc[:start] + "\n```text\n" + new + "```\n" + doc[end:]
    return doc, list(reversed(report))


# ---- environment variables ----------------------------------------------------

C_NAME = re.compile(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"')
C_GETENV = re.compile(r'\b(?:getenv|setenv)\s*\(\s*"([A-Za-z_][A-Za-z0-9_]*)"')
PY_ENV = re.compile(r'(?:environ(?:\.get)?\s*[\[(]|getenv\s*\()\s*["\']([A-Z][A-Z0-9_]*)["\']')
PY_NAME = re.compile(r'["\'](NSPCOMM_[A-Z0-9_]+)["\']')
SH_DEFAULT = re.compile(r'\$\{([A-Z][A-Z0-9_]*):?[-=+?]')
SH_NSP = re.compile(r'\$\{?((?:NSPCOMM|NSP)_[A-Z0-9_]+)')

# Strings that look like variable names and are not ones.
NOT_VARIABLES = {
    "USE_MT_MUTEX",   # a ucp_config_modify() key (UCX_USE_MT_MUTEX in the environment)
    "PYTHONPATH",     # extended for a child process, never read as a setting
    "PIPESTATUS",     # bash's own array
    "BASH_SOURCE",
}


def code_files(src):
    for d in ("src", "tools", "perf", "python", "scripts", "examples"):
        for root, _, files in os.walk(os.path.join(src, d)):
            for f in sorted(files):
                yield os.path.join(root, f)
    for f in (".ci/run", "tests/fuzz/run.sh"):
        yield os.path.join(src, f)


def env_vars(src):
    """{name: [files]} of the variables the code reads or sets."""
    found = {}
    for path in code_files(src):
        rel = os.path.relpath(path, src)
        if rel.startswith("scripts/gen-docs-reference"):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        names = set()
        if path.endswith((".c", ".h", ".cu")):
            names |= set(C_NAME.findall(text)) | set(C_GETENV.findall(text))
        elif path.endswith(".py"):
            names |= set(PY_ENV.findall(text)) | set(PY_NAME.findall(text))
        elif path.endswith(".sh") or text.startswith("#!/usr/bin/env bash") \
                or text.startswith("#!/bin/sh"):
            names |= set(SH_DEFAULT.findall(text)) | set(SH_NSP.findall(text))
        for n in names - NOT_VARIABLES:
            found.setdefault(n, []).append(rel)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--doc", default=os.path.join(TOP, "docs", "reference", "tools.md"))
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    g.add_argument("--env", action="store_true")
    args = ap.parse_args()
    if args.env:
        for name, files in sorted(env_vars(TOP).items()):
            print("%-28s %s" % (name, ", ".join(sorted(set(files)))))
        return 0
    with open(args.doc, encoding="utf-8") as f:
        doc = f.read()
    new, report = regenerate(doc, TOP, args.build)
    for name, status in report:
        print("%-14s %s" % (name, status))
    if args.write:
        if new != doc:
            with open(args.doc, "w", encoding="utf-8") as f:
                f.write(new)
        return 0
    if new != doc:
        sys.stdout.writelines(difflib.unified_diff(doc.splitlines(True), new.splitlines(True),
                                                   "committed", "generated"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
